"""Actor weights on the wire and in the control loop.

:func:`encode_actor` / :func:`decode_actor` turn an SAC actor (an MLP with ReLU, a mean head
and a log-std head, tanh-squashed) into safetensors bytes with metadata and back, checking
everything a control node must know before it lets the weights drive a motor: the format,
the architecture and every tensor shape, that all values are finite, the control rate and
the observation/action sizes. :class:`NumpyActor` runs the forward pass in numpy (no torch
in the control process); the real-time process reads the latest actor from a shared-memory
slot (:mod:`rip_control.rt.channels`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
import json
import math
from pathlib import Path
import struct

import numpy as np
from safetensors.numpy import load as st_load
from safetensors.numpy import save as st_save

from rip_control.transitions import COUNTER_MAX

TOPIC = 'policy_weights'
"""The weights' topic, relative (remapped to ``/policy_weights`` with several rigs)."""
FORMAT = 'rip_actor'
FORMAT_VERSION = '1'
LOG_STD_MIN, LOG_STD_MAX = -20.0, 2.0  # as SB3's SAC actor
MAX_HEADER_BYTES = 1 << 20
# Bounds on whatever reaches the motor, each refused by name. Versions count publishes (one
# per ``publish_every_s``, at most 100 Hz) and travel with every transition as float32,
# exact up to 2**24 (rip_control.transitions.COUNTER_MAX): 46 hours of publishing at
# 100 Hz, a year at the default 2 s. A version far above the running one would lock the
# run's own learner out until the node is configured again: a step of more than
# VERSION_STEP_MAX (23 days of a learner publishing every 2 s, resumed runs included) is
# refused.
POLICY_VERSION_MAX = COUNTER_MAX
VERSION_STEP_MAX = 10**6
# Trained actors stay far inside: the shipped ones peak at 4.4 and 8.0. With 4 hidden layers
# of at most 4096 units and this bound, no observation the task makes can overflow float32.
WEIGHT_ABS_MAX = 1000.0
HIDDEN_LAYERS_MAX = 4
HIDDEN_SIZE_MAX = 4096


class PolicyRejected(ValueError):
    """Weights that must not be used; the message names what is wrong."""


@dataclass(frozen=True)
class PolicyMeta:
    """What the weights claim about themselves (the safetensors metadata)."""

    version: int
    rate_hz: float
    obs_size: int
    action_size: int
    hidden_sizes: tuple[int, ...]
    action_history: int = 0  # k of rip_control.rig.env: files without the key have 0

    def to_metadata(self) -> dict[str, str]:
        """String-only safetensors metadata."""
        return {
            'format': FORMAT,
            'format_version': FORMAT_VERSION,
            'policy_version': str(self.version),
            'rate_hz': repr(float(self.rate_hz)),
            'obs_size': str(self.obs_size),
            'action_size': str(self.action_size),
            'hidden_sizes': ','.join(str(h) for h in self.hidden_sizes),
            'action_history': str(self.action_history),
            'activation': 'relu',
            'squash': 'tanh',
        }


class NumpyActor:
    """Forward pass of an SAC actor in numpy: ``tanh(mu(mlp(obs)))`` or a sample around it.

    :param meta: version, rate and sizes.
    :param tensors: ``layers.{i}.weight/bias``, ``mu.weight/bias``, ``log_std.weight/bias``
        as float32 arrays (torch ``Linear`` layout: weight is ``[out, in]``).
    :param metadata: the file's string metadata as received (informational keys included).
    """

    def __init__(
        self,
        meta: PolicyMeta,
        tensors: dict[str, np.ndarray],
        metadata: dict[str, str] | None = None,
    ) -> None:
        self.meta = meta
        self.metadata = dict(metadata or meta.to_metadata())
        self._layers = [
            (tensors[f'layers.{i}.weight'].T.copy(), tensors[f'layers.{i}.bias'].copy())
            for i in range(len(meta.hidden_sizes))
        ]
        self._mu = (tensors['mu.weight'].T.copy(), tensors['mu.bias'].copy())
        self._log_std = (tensors['log_std.weight'].T.copy(), tensors['log_std.bias'].copy())
        self.tensors = tensors

    @classmethod
    def from_prepared(
        cls,
        meta: PolicyMeta,
        layers: list[tuple[np.ndarray, np.ndarray]],
        mu: tuple[np.ndarray, np.ndarray],
        log_std: tuple[np.ndarray, np.ndarray],
    ) -> NumpyActor:
        """An actor over arrays already in forward-pass layout (weights ``[in, out]``), not copied.

        For the real-time process, which receives the arrays ready to use; the caller owns the
        memory and must not change it while the actor is in use.
        """
        actor = cls.__new__(cls)
        actor.meta = meta
        actor.metadata = meta.to_metadata()
        actor._layers = list(layers)
        actor._mu = mu
        actor._log_std = log_std
        actor.tensors = {}
        return actor

    def prepared_arrays(self) -> list[np.ndarray]:
        """The forward-pass arrays in a fixed order (layers, then mu, then log_std)."""
        out: list[np.ndarray] = []
        for w, b in [*self._layers, self._mu, self._log_std]:
            out += [w, b]
        return out

    @property
    def version(self) -> int:
        """Policy version."""
        return self.meta.version

    def act(self, obs: np.ndarray, noise: np.ndarray | None = None) -> np.ndarray:
        """Action in [-1, 1]: deterministic, or sampled with standard-normal ``noise``."""
        h = obs.astype(np.float32, copy=False)
        for w, b in self._layers:
            h = np.maximum(h @ w + b, 0.0)
        mu = h @ self._mu[0] + self._mu[1]
        if noise is not None:
            log_std = np.clip(h @ self._log_std[0] + self._log_std[1], LOG_STD_MIN, LOG_STD_MAX)
            mu = mu + np.exp(log_std) * noise
        return np.tanh(mu)


def tensor_shapes(obs_size: int, action_size: int, hidden: tuple[int, ...]) -> dict[str, tuple]:
    """The tensor names and shapes an actor of this architecture must have."""
    shapes: dict[str, tuple] = {}
    width = obs_size
    for i, h in enumerate(hidden):
        shapes[f'layers.{i}.weight'] = (h, width)
        shapes[f'layers.{i}.bias'] = (h,)
        width = h
    for head in ('mu', 'log_std'):
        shapes[f'{head}.weight'] = (action_size, width)
        shapes[f'{head}.bias'] = (action_size,)
    return shapes


def random_actor(
    obs_size: int,
    action_size: int,
    hidden: tuple[int, ...],
    rate_hz: float,
    *,
    version: int = 0,
    seed: int = 0,
    action_history: int = 0,
) -> NumpyActor:
    """An untrained actor (torch ``Linear`` default init) for runs without initial weights."""
    rng = np.random.default_rng(seed)
    tensors: dict[str, np.ndarray] = {}
    for name, shape in tensor_shapes(obs_size, action_size, hidden).items():
        fan_in = shape[1] if len(shape) == 2 else None
        if fan_in is None:
            fan_in = tensors[name.replace('bias', 'weight')].shape[1]
        bound = 1.0 / math.sqrt(fan_in)
        tensors[name] = rng.uniform(-bound, bound, size=shape).astype(np.float32)
    meta = PolicyMeta(version, rate_hz, obs_size, action_size, tuple(hidden), action_history)
    return NumpyActor(meta, tensors)


def encode_actor(
    meta: PolicyMeta, tensors: dict[str, np.ndarray], extra: dict[str, str] | None = None
) -> bytes:
    """Safetensors bytes of an actor, with :class:`PolicyMeta` (and ``extra``) as metadata.

    ``extra`` carries informational strings (e.g. the learner's training counters); it can
    not override the keys :class:`PolicyMeta` writes.
    """
    expected = tensor_shapes(meta.obs_size, meta.action_size, meta.hidden_sizes)
    arrays = {}
    for name, shape in expected.items():
        arr = np.ascontiguousarray(tensors[name], dtype=np.float32)
        if arr.shape != shape:
            raise ValueError(f'tensor {name} has shape {arr.shape}, expected {shape}')
        arrays[name] = arr
    metadata = {**(extra or {}), **meta.to_metadata()}
    return st_save(arrays, metadata=metadata)


def read_metadata(data: bytes) -> dict[str, str]:
    """The ``__metadata__`` of safetensors bytes (the header is a length-prefixed JSON)."""
    if len(data) < 8:
        raise PolicyRejected(f'weights are {len(data)} bytes: too short for safetensors')
    (n,) = struct.unpack_from('<Q', data)
    if n > MAX_HEADER_BYTES or 8 + n > len(data):
        raise PolicyRejected(f'safetensors header length {n} is impossible for {len(data)} bytes')
    try:
        header = json.loads(data[8 : 8 + n])
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        raise PolicyRejected(f'safetensors header is not JSON: {exc!r}'[:300]) from None
    meta = header.get('__metadata__') if isinstance(header, dict) else None
    if not isinstance(meta, dict):
        raise PolicyRejected('weights carry no metadata (not a rip_actor file)')
    if not all(isinstance(k, str) and isinstance(v, str) for k, v in meta.items()):
        # safetensors metadata is strings only: anything else is not a file it wrote.
        raise PolicyRejected('weights metadata holds values that are not strings')
    return meta


def decode_actor(
    data: bytes,
    *,
    rate_hz: float,
    obs_size: int,
    action_size: int,
    action_history: int = 0,
    min_version: int | None = None,
    fits: Callable[[PolicyMeta], None] | None = None,
) -> NumpyActor:
    """Validate and load actor weights; raise :class:`PolicyRejected` naming the problem.

    :param data: safetensors bytes from :func:`encode_actor`.
    :param rate_hz: this node's control rate; weights trained at another rate are refused.
    :param obs_size: this node's observation size.
    :param action_size: this node's action size.
    :param action_history: this node's ``action_history`` (the past actions its observation
        holds); weights recording another are refused, naming both.
    :param min_version: refuse versions at or below this one, or more than
        :data:`VERSION_STEP_MAX` above it (None: any in 0..:data:`POLICY_VERSION_MAX`).
    :param fits: called with the metadata once it is valid, before any tensor is decoded;
        raises :class:`PolicyRejected` for an actor its receiver cannot hold (the real-time
        process's weights slot).
    """
    md = read_metadata(data)
    meta = _policy_meta(md)
    _check_meta(meta, rate_hz, obs_size, action_size, action_history, min_version)
    if fits is not None:
        fits(meta)
    tensors = _checked_tensors(data, tensor_shapes(obs_size, action_size, meta.hidden_sizes))
    return NumpyActor(meta, tensors, md)


def _policy_meta(md: dict[str, str]) -> PolicyMeta:
    """The metadata of a file of this format and architecture, typed."""
    if md.get('format') != FORMAT or md.get('format_version') != FORMAT_VERSION:
        raise PolicyRejected(
            f'unknown weights format {md.get("format")!r} v{md.get("format_version")!r}, '
            f'expected {FORMAT!r} v{FORMAT_VERSION}'
        )
    if md.get('activation') != 'relu' or md.get('squash') != 'tanh':
        raise PolicyRejected(
            f'unsupported architecture: activation {md.get("activation")!r}, '
            f'squash {md.get("squash")!r} (expected relu, tanh)'
        )
    try:
        meta = PolicyMeta(
            version=int(md['policy_version']),
            rate_hz=float(md['rate_hz']),
            obs_size=int(md['obs_size']),
            action_size=int(md['action_size']),
            hidden_sizes=tuple(int(h) for h in md['hidden_sizes'].split(',') if h),
            action_history=int(md.get('action_history', '0')),
        )
    except (KeyError, ValueError, OverflowError) as exc:
        raise PolicyRejected(f'malformed weights metadata: {exc!r}'[:300]) from exc
    return meta


def _check_meta(
    meta: PolicyMeta,
    rate_hz: float,
    obs_size: int,
    action_size: int,
    action_history: int,
    min_version: int | None,
) -> None:
    """Refuse weights this node cannot run: rate, action history, sizes, version, bounds."""
    if not math.isclose(meta.rate_hz, rate_hz, rel_tol=1e-9):
        raise PolicyRejected(
            f'weights were trained at {meta.rate_hz:g} Hz but this node runs at {rate_hz:g} Hz'
        )
    if meta.action_history != action_history:
        raise PolicyRejected(
            f'weights were trained with action_history {meta.action_history} (an observation '
            f'of {meta.obs_size} floats) but this node has action_history {action_history}: '
            f'set action_history:={meta.action_history} or use weights trained with '
            f'{action_history}'
        )
    if (meta.obs_size, meta.action_size) != (obs_size, action_size):
        raise PolicyRejected(
            f'weights are for obs/action sizes {meta.obs_size}/{meta.action_size}, '
            f'this node has {obs_size}/{action_size}'
        )
    if not 0 <= meta.version <= POLICY_VERSION_MAX:
        raise PolicyRejected(f'weights version {meta.version} is outside 0..{POLICY_VERSION_MAX}')
    if min_version is not None and meta.version <= min_version:
        raise PolicyRejected(
            f'weights version {meta.version} is not newer than the running {min_version}'
        )
    if min_version is not None and meta.version - min_version > VERSION_STEP_MAX:
        raise PolicyRejected(
            f'weights version {meta.version} jumps {meta.version - min_version} past the '
            f'running {min_version}; at most {VERSION_STEP_MAX} is accepted'
        )
    hidden = meta.hidden_sizes
    if not 0 < len(hidden) <= HIDDEN_LAYERS_MAX or any(
        not 0 < h <= HIDDEN_SIZE_MAX for h in hidden
    ):
        raise PolicyRejected(
            f'hidden sizes {list(hidden)} are outside the bounds: 1 to {HIDDEN_LAYERS_MAX} '
            f'layers of 1 to {HIDDEN_SIZE_MAX} units'
        )


def _checked_tensors(data: bytes, expected: dict[str, tuple]) -> dict[str, np.ndarray]:
    """The tensors, each of its expected shape, float32, finite and within the weight bound."""
    try:
        tensors = st_load(data)
    except Exception as exc:  # noqa: BLE001 - the library raises several types for bad bytes
        raise PolicyRejected(f'weights are not valid safetensors: {exc}') from exc
    if set(tensors) != set(expected):
        raise PolicyRejected(
            f'weights hold tensors {sorted(tensors)}, expected {sorted(expected)}'
        )
    for name, shape in expected.items():
        arr = tensors[name]
        if arr.dtype != np.float32:
            raise PolicyRejected(f'tensor {name} is {arr.dtype}, expected float32')
        if arr.shape != shape:
            raise PolicyRejected(f'tensor {name} has shape {arr.shape}, expected {shape}')
        if not np.isfinite(arr).all():
            raise PolicyRejected(f'tensor {name} holds non-finite values')
        peak = float(np.abs(arr).max(initial=0.0))
        if peak > WEIGHT_ABS_MAX:
            raise PolicyRejected(
                f'tensor {name} holds a weight of magnitude {peak:.3g}, beyond the bound '
                f'{WEIGHT_ABS_MAX:g}'
            )
    return tensors


def load_actor_file(
    path: str | Path, *, rate_hz: float, obs_size: int, action_size: int, action_history: int = 0
) -> NumpyActor:
    """Load initial weights from a ``.safetensors`` file (same checks as the topic)."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise PolicyRejected(f'policy file not found: {path}') from None
    try:
        return decode_actor(
            data,
            rate_hz=rate_hz,
            obs_size=obs_size,
            action_size=action_size,
            action_history=action_history,
        )
    except PolicyRejected as exc:
        raise PolicyRejected(f'{path}: {exc}') from None
