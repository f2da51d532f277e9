"""rosbag2 bags of the ``transitions`` topic, written and read with the ``rosbags`` library.

A bag written here is a standard rosbag2 directory (MCAP storage, ``metadata.yaml``), the
same thing ``ros2 bag record /transitions`` writes: CDR-serialised
``std_msgs/msg/Float32MultiArray`` messages, timestamped with their arrival time. The rate,
the sizes and the layout version go into the bag's ``custom_data``. Reading accepts any
rosbag2 directory (MCAP or sqlite3), whoever wrote it; every message goes through the same
checks as live data (:func:`rip_control.transitions.unpack` and
:func:`~rip_control.transitions.check_period`), so the learner judges dt from the recorded
measured dt, never from the recording timestamps.
"""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Iterable
from dataclasses import dataclass, field
import functools
import math
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from rip_control import transitions
from rip_control.transitions import Transition, TransitionRejected, check_period, unpack

MSGTYPE = 'std_msgs/msg/Float32MultiArray'
TOPIC = '/' + transitions.TOPIC  # the learner's topic, as the recorder bags it
LAYOUT_VERSION = '1'
KEY_RATE = 'rip_control.rate_hz'
KEY_SIZES = 'rip_control.obs_action_sizes'
KEY_LAYOUT = 'rip_control.transitions_layout'


class BagRejected(ValueError):
    """A bag that must not be imported; the message names the bag and the problem."""


@functools.cache
def _typestore() -> Any:
    from rosbags.typesys import Stores, get_typestore

    return get_typestore(Stores.ROS2_KILTED)


def transitions_qos_for_bag() -> Any:
    """The control node's ``transitions`` QoS as rosbag2 records it (reliable, volatile)."""
    from rosbags.interfaces import (
        Qos,
        QosDurability,
        QosHistory,
        QosLiveliness,
        QosReliability,
        QosTime,
    )

    zero = QosTime(0, 0)
    return Qos(
        QosHistory.KEEP_LAST,
        1000,
        QosReliability.RELIABLE,
        QosDurability.VOLATILE,
        zero,
        zero,
        QosLiveliness.AUTOMATIC,
        zero,
        False,  # noqa: FBT003 - a NamedTuple field
    )


class BagWriter:
    """Writes serialised ``transitions`` messages into a new rosbag2 directory (MCAP).

    :param path: the bag directory; it must not exist (never overwritten).
    :param rate_hz: the control rate the transitions were taken at (``custom_data``).
    """

    def __init__(self, path: str | Path, rate_hz: float, obs_size: int, action_size: int) -> None:
        from rosbags.rosbag2 import StoragePlugin, Writer

        self.path = Path(path)
        if self.path.exists():
            raise FileExistsError(f'bag {self.path} exists already; not overwriting it')
        self._writer = Writer(self.path, version=9, storage_plugin=StoragePlugin.MCAP)
        self._writer.open()
        self._writer.set_custom_data(KEY_RATE, repr(float(rate_hz)))
        self._writer.set_custom_data(KEY_SIZES, f'{obs_size},{action_size}')
        self._writer.set_custom_data(KEY_LAYOUT, LAYOUT_VERSION)
        self._conn = self._writer.add_connection(
            TOPIC,
            MSGTYPE,
            typestore=_typestore(),
            offered_qos_profiles=[transitions_qos_for_bag()],
        )
        self.count = 0

    def write(self, data: bytes, timestamp_ns: int) -> None:
        """Append one CDR-serialised message."""
        self._writer.write(self._conn, timestamp_ns, data)
        self.count += 1

    def close(self) -> None:
        """Finish the storage file and write ``metadata.yaml``."""
        self._writer.close()


def serialize(labels: list[tuple[str, int]], data: np.ndarray) -> bytes:
    """CDR bytes of a ``Float32MultiArray`` (what a bag stores), without ROS."""
    store = _typestore()
    msg_t = store.types[MSGTYPE]
    layout_t = store.types['std_msgs/msg/MultiArrayLayout']
    dim_t = store.types['std_msgs/msg/MultiArrayDimension']
    dims = []
    stride = int(sum(size for _, size in labels))
    for label, size in labels:
        dims.append(dim_t(label=label, size=int(size), stride=stride))
    msg = msg_t(layout=layout_t(dim=dims, data_offset=0), data=np.asarray(data, dtype=np.float32))
    return bytes(store.serialize_cdr(msg, MSGTYPE))


def custom_data(path: Path) -> dict[str, str]:
    """The ``custom_data`` of a rosbag2 directory's ``metadata.yaml`` (empty if none)."""
    meta = path / 'metadata.yaml'
    try:
        doc = yaml.safe_load(meta.read_text()) or {}
    except FileNotFoundError:
        raise BagRejected(f'{path} is not a rosbag2 directory (no metadata.yaml)') from None
    except yaml.YAMLError as exc:
        raise BagRejected(f'{meta} is not valid YAML: {exc}') from exc
    info = doc.get('rosbag2_bagfile_information', {}) if isinstance(doc, dict) else {}
    return {str(k): str(v) for k, v in (info.get('custom_data') or {}).items()}


@dataclass
class BagImport:
    """What reading bags gave: accepted transitions and rejections counted by reason.

    ``transitions`` holds the newest ``keep`` accepted ones (all without ``keep``); the
    accepted ones older than those are counted in ``not_kept``.
    """

    transitions: deque[Transition] = field(default_factory=deque)
    rejected: Counter[str] = field(default_factory=Counter)
    messages: int = 0
    per_bag: dict[str, int] = field(default_factory=dict)
    accepted: int = 0
    not_kept: int = 0  # accepted, then pushed out by newer ones (``keep``)


def read_transitions(
    paths: Iterable[str | Path],
    *,
    rate_hz: float,
    obs_size: int,
    action_size: int,
    dt_tolerance_s: float,
    topic_suffix: str = transitions.TOPIC,
    keep: int | None = None,
) -> BagImport:
    """Every checked transition of the ``*transitions`` topics of the given bags, in order.

    The bags are read message by message; with ``keep``, only the newest ``keep`` accepted
    transitions are held (what a replay buffer of that size would keep), so the memory a bag
    import takes is bounded by the buffer, not by the bags.

    :raises BagRejected: a bag is missing or unreadable, or its ``custom_data`` says it was
        recorded at another rate (the message names the bag and both rates). A bag without
        that tag (e.g. from ``ros2 bag record``) is judged transition by transition.
    """
    from rosbags.rosbag2 import Reader

    store = _typestore()
    out = BagImport(transitions=deque(maxlen=keep))
    for raw_path in paths:
        path = Path(raw_path)
        if not path.exists():
            raise BagRejected(f'bag {path} does not exist')
        tags = custom_data(path)
        if KEY_RATE in tags:
            recorded = float(tags[KEY_RATE])
            if not math.isclose(recorded, rate_hz, rel_tol=1e-9):
                raise BagRejected(
                    f'bag {path} was recorded at {recorded:g} Hz but this learner runs at '
                    f'{rate_hz:g} Hz'
                )
        before = out.accepted
        try:
            with Reader(path) as reader:
                conns = [
                    c
                    for c in reader.connections
                    if c.msgtype == MSGTYPE and c.topic.rstrip('/').endswith(topic_suffix)
                ]
                for conn, _, raw in reader.messages(connections=conns):
                    out.messages += 1
                    try:
                        msg = store.deserialize_cdr(raw, conn.msgtype)
                        labels = [(d.label, int(d.size)) for d in msg.layout.dim]
                        data = np.asarray(msg.data, dtype=np.float32)
                        t = unpack(labels, data, obs_size, action_size)
                        checked = check_period(t, rate_hz, dt_tolerance_s)
                        if len(out.transitions) == keep:
                            out.not_kept += 1  # the oldest held makes room
                        out.transitions.append(checked)
                        out.accepted += 1
                    except TransitionRejected as exc:
                        out.rejected[exc.reason] += 1
                    except Exception:  # noqa: BLE001 - a message that does not even decode
                        out.rejected['undecodable'] += 1
        except BagRejected:
            raise
        except Exception as exc:  # noqa: BLE001 - rosbags raises several types for bad files
            raise BagRejected(f'bag {path} cannot be read: {type(exc).__name__}: {exc}') from exc
        out.per_bag[str(path)] = out.accepted - before
    return out
