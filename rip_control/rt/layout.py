"""The set of channels between a control node and its real-time process, and their records.

Both sides build :class:`RtChannels` over the same shared mapping from the same
:class:`ChannelSizes`; what each record holds is defined here once:

============  ===========  ====================================================
channel       direction    record
============  ===========  ====================================================
commands      node -> RT   JSON: ``activate``, ``stop``, ``quit``
events        RT -> node   JSON: ``ready``, ``stopped``, ``episode``, ``log``
transitions   RT -> node   a transition's packed float32 vector
ticks         RT -> node   :data:`TICK_RECORD`: dt, overrun, previous work, strike
status        RT -> node   :class:`RtStatus`, latest value, rewritten every tick
weights       node -> RT   :func:`encode_weights`, latest value
node_beat     node -> RT   a counter the node bumps; its silence stops the RT process
============  ===========  ====================================================
"""

from __future__ import annotations

from dataclasses import astuple, dataclass, fields
import json
import math
import struct
import typing
from typing import Any, ClassVar

import numpy as np

from rip_control.policy import NumpyActor, PolicyMeta, tensor_shapes
from rip_control.rig.env import action_history_of
from rip_control.rt.channels import CACHE_LINE, Latest, Ring, Word

TICK_RECORD = struct.Struct('<ddd?')
_WEIGHTS_HEAD = struct.Struct('<QdIII')  # version, rate_hz, obs_size, action_size, n_hidden
EVENT_MAX_BYTES = 4096
# Room for a later policy of another architecture than the initial one (1 MiB: [256, 256]
# takes 0.27 MB); a larger one is refused by name.
WEIGHTS_MIN_BYTES = 1 << 20
COMMAND_MAX_BYTES = 512


@dataclass(frozen=True)
class ChannelSizes:
    """Capacities of the channels (the node picks them; the RT process gets them verbatim)."""

    transition_bytes: int
    transitions: int
    ticks: int
    weights_bytes: int
    events: int = 256
    commands: int = 64

    @classmethod
    def for_run(cls, rate_hz: float, transition_floats: int, actor: NumpyActor) -> ChannelSizes:
        """Sizes for a run at ``rate_hz``: ~10 s of transitions, ~4 s of tick samples."""
        return cls(
            transition_bytes=4 * transition_floats,
            transitions=10 * round(rate_hz) + 100,
            ticks=4 * round(rate_hz) + 100,
            weights_bytes=max(weights_bytes_needed(actor.meta), WEIGHTS_MIN_BYTES),
        )


@dataclass
class RtStatus:
    """Counters of the RT process; the node reads the newest (diagnostics, hung check)."""

    beat: int = 0  # bumped on every write
    written_at_s: float = 0.0  # monotonic time of the write (system-wide clock)
    activation: int = 0  # activations run so far (the current one included)
    ticks: int = 0
    last_tick_s: float = 0.0  # deadline of the last tick
    missed_ticks: int = 0
    dt_n: int = 0
    dt_mean_s: float = 0.0
    dt_std_s: float = 0.0
    max_overrun_s: float = 0.0
    strikes_total: int = 0
    violations: int = 0
    serial_errors: int = 0
    episodes: int = 0
    phase: int = 0  # index into PHASES
    transitions_queued: int = 0
    transitions_dropped_full: int = 0
    transitions_withdrawn: int = 0
    transitions_dropped_late: int = 0
    ticks_dropped: int = 0
    policy_version: int = 0
    policy_swapped_at_s: float = 0.0
    swap_last_s: float = 0.0
    swap_max_s: float = 0.0
    weights_torn: int = 0
    motor_confirmed_off: int = 1
    serial_timeouts: int = 0
    serial_stale_replies: int = 0
    serial_bad_frames: int = 0
    serial_bytes_skipped: int = 0

    PHASES: ClassVar[tuple[str, ...]] = ('starting', 'idle', 'reset', 'episode', 'stopped')
    _STRUCT: ClassVar[struct.Struct]

    def pack(self) -> bytes:
        """Fixed binary record."""
        return self._STRUCT.pack(*astuple(self))

    @classmethod
    def unpack(cls, data: bytes) -> RtStatus:
        """Inverse of :meth:`pack`."""
        return cls(*cls._STRUCT.unpack(data))

    @property
    def phase_name(self) -> str:
        """The loop's phase as text."""
        return self.PHASES[self.phase] if 0 <= self.phase < len(self.PHASES) else '?'


_HINTS = typing.get_type_hints(RtStatus)
RtStatus._STRUCT = struct.Struct(
    '<' + ''.join('d' if _HINTS[f.name] is float else 'q' for f in fields(RtStatus))
)


def weights_bytes_needed(meta: PolicyMeta) -> int:
    """Bytes :func:`encode_weights` takes for an actor of this architecture.

    From the metadata alone, so an actor too large for the slot is refused before its
    tensors are decoded.
    """
    shapes = tensor_shapes(meta.obs_size, meta.action_size, meta.hidden_sizes)
    arrays = sum(4 * math.prod(shape) for shape in shapes.values())
    return _WEIGHTS_HEAD.size + 4 * len(meta.hidden_sizes) + arrays


def encode_weights(actor: NumpyActor) -> bytes:
    """An actor as the RT process takes it: a small header, then its arrays, ready to use."""
    m = actor.meta
    parts = [
        _WEIGHTS_HEAD.pack(m.version, m.rate_hz, m.obs_size, m.action_size, len(m.hidden_sizes)),
        struct.pack(f'<{len(m.hidden_sizes)}I', *m.hidden_sizes),
    ]
    parts += [np.ascontiguousarray(a, dtype=np.float32).tobytes() for a in actor.prepared_arrays()]
    return b''.join(parts)


def decode_weights(data: bytes | bytearray) -> NumpyActor:
    """Inverse of :func:`encode_weights`, as views into ``data`` (which the caller keeps)."""
    version, rate_hz, obs, act, n_hidden = _WEIGHTS_HEAD.unpack_from(data, 0)
    off = _WEIGHTS_HEAD.size
    hidden = struct.unpack_from(f'<{n_hidden}I', data, off)
    off += 4 * n_hidden
    arrays = []
    width = obs
    for out_size in (*hidden, act, act):
        w = np.frombuffer(data, np.float32, width * out_size, off).reshape(width, out_size)
        off += w.nbytes
        b = np.frombuffer(data, np.float32, out_size, off)
        off += b.nbytes
        arrays.append((w, b))
        if len(arrays) <= n_hidden:
            width = out_size
    if off != len(data):
        raise ValueError(f'weights record of {len(data)} bytes, the layout needs {off}')
    k = action_history_of(int(obs))
    meta = PolicyMeta(int(version), float(rate_hz), int(obs), int(act), tuple(hidden), k)
    return NumpyActor.from_prepared(meta, arrays[:n_hidden], arrays[-2], arrays[-1])


def encode_json(obj: dict[str, Any]) -> bytes:
    """A command or event record."""
    return json.dumps(obj, separators=(',', ':')).encode()


def decode_json(data: bytes) -> dict[str, Any]:
    """Inverse of :func:`encode_json`."""
    out = json.loads(data)
    if not isinstance(out, dict):
        raise ValueError(f'a channel record must be a JSON object, got {out!r}')
    return out


class RtChannels:
    """Every channel, laid out in one mapping: :meth:`bytes_needed` bytes from offset 0."""

    def __init__(self, buf: memoryview, sizes: ChannelSizes) -> None:
        self.sizes = sizes
        off = 0

        def take(n: int) -> int:
            nonlocal off
            start = off
            off += (n + CACHE_LINE - 1) // CACHE_LINE * CACHE_LINE
            return start

        s = sizes
        self.node_beat = Word(buf, take(Word.size_bytes))
        self.status = Latest(
            buf, take(Latest.bytes_needed(RtStatus._STRUCT.size)), RtStatus._STRUCT.size
        )
        self.weights = Latest(buf, take(Latest.bytes_needed(s.weights_bytes)), s.weights_bytes)
        self.commands = Ring(
            buf,
            take(Ring.bytes_needed(s.commands, COMMAND_MAX_BYTES)),
            s.commands,
            COMMAND_MAX_BYTES,
        )
        self.events = Ring(
            buf, take(Ring.bytes_needed(s.events, EVENT_MAX_BYTES)), s.events, EVENT_MAX_BYTES
        )
        self.transitions = Ring(
            buf,
            take(Ring.bytes_needed(s.transitions, s.transition_bytes)),
            s.transitions,
            s.transition_bytes,
        )
        self.ticks = Ring(
            buf, take(Ring.bytes_needed(s.ticks, TICK_RECORD.size)), s.ticks, TICK_RECORD.size
        )
        self.size = off

    @staticmethod
    def bytes_needed(sizes: ChannelSizes) -> int:
        """Size of the mapping the channels need (laid out over nothing: no memory touched)."""
        return RtChannels(memoryview(b''), sizes).size
