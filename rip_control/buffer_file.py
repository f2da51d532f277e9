"""Replay buffer files: safetensors (no code runs on load), tagged, checksummed, atomic.

The file format, below both packages: the control side reads and writes it (an evaluation's
transitions, the runner's checks), the learner keeps its SAC replay buffer in it
(:mod:`rip_learner.buffer_store` moves transitions between this format and SB3's buffer).

A buffer file holds the stored transitions in chronological order — ``observations``,
``next_observations``, ``actions``, ``rewards``, ``dones`` and ``timeouts`` (SB3's
``terminated``/``truncated`` split: ``dones`` is terminated *or* truncated, ``timeouts``
marks truncation, so bootstrapping stays right) — their provenance (:data:`PROVENANCE`:
the episode, step, measured dt and policy version of each, what system identification reads;
unknown for simulated data and for buffers of format version 1, which still load) — and string
metadata: format and version, control rate, observation/action sizes, count, the newest policy
version, and a SHA-256 of the tensor data (safetensors itself would load a flipped byte
silently).

Writes go to a temporary file in the same directory, are fsynced, renamed over the
destination and the directory fsynced: a crash mid-save leaves the previous file intact (and
its temporary file, which the next save removes).
"""

from __future__ import annotations

from dataclasses import dataclass
import hashlib
import json
import math
from pathlib import Path
from typing import Any

import numpy as np
from safetensors.numpy import load as st_load
from safetensors.numpy import save as st_save

from rip_control import run_files
from rip_control.files import atomic_write_bytes
from rip_control.policy import PolicyRejected, read_metadata

FORMAT = 'rip_replay_buffer'
FORMAT_VERSION = '3'
# Version 1: no provenance; versions 1 and 2: the checksum covers the arrays, not the metadata.
READABLE_VERSIONS = ('1', '2', '3')
FIELDS = ('observations', 'next_observations', 'actions', 'rewards', 'dones', 'timeouts')
#: Where each transition came from, as its ``transitions`` message said (float64: exact for
#: the integers). Unknown is episode -1, step -1, dt 0 (simulated data, version-1 files).
PROVENANCE = ('episodes', 'steps', 'dts', 'policy_versions')


class BufferRejected(ValueError):
    """A buffer file that must not be loaded; the message names the file and the fault."""


@dataclass(frozen=True)
class BufferMeta:
    """What a buffer file says about itself."""

    rate_hz: float
    obs_size: int
    action_size: int
    count: int
    policy_version: int = 0
    generation: str = ''  # the save it belongs to (its checkpoint carries the same id)
    previous_generation: str = ''  # the save before, whose checkpoint was written whole


def unknown_provenance(n: int) -> dict[str, np.ndarray]:
    """Provenance arrays for ``n`` transitions of unknown origin."""
    return {
        'episodes': np.full(n, -1.0),
        'steps': np.full(n, -1.0),
        'dts': np.zeros(n),
        'policy_versions': np.zeros(n),
    }


def _digest(
    arrays: dict[str, np.ndarray],
    names: tuple[str, ...] = FIELDS + PROVENANCE,
    metadata: dict[str, str] | None = None,
) -> str:
    """SHA-256 of the arrays and (from format version 3 on) every other metadata string."""
    h = hashlib.sha256()
    if metadata is not None:
        signed = {k: v for k, v in metadata.items() if k != 'sha256'}
        h.update(json.dumps(signed, sort_keys=True).encode())
    for name in names:
        h.update(name.encode())
        h.update(np.ascontiguousarray(arrays[name]).tobytes())
    return h.hexdigest()


def arrays_from_transitions(transitions: list[Any]) -> dict[str, np.ndarray]:
    """Buffer-shaped arrays (fields and provenance) of transitions.

    Of :class:`~rip_control.transitions.Transition` objects, e.g. from a bag.
    """
    if not transitions:
        return {}
    return {
        'observations': np.stack([t.obs for t in transitions]).astype(np.float32),
        'next_observations': np.stack([t.next_obs for t in transitions]).astype(np.float32),
        'actions': np.stack([t.action for t in transitions]).astype(np.float32),
        'rewards': np.array([t.reward for t in transitions], dtype=np.float32),
        'dones': np.array([t.terminated for t in transitions], dtype=np.float32),
        'timeouts': np.array([t.truncated for t in transitions], dtype=np.float32),
        'episodes': np.array([t.episode for t in transitions], dtype=np.float64),
        'steps': np.array([t.step for t in transitions], dtype=np.float64),
        'dts': np.array([t.dt_s for t in transitions], dtype=np.float64),
        'policy_versions': np.array([t.policy_version for t in transitions], dtype=np.float64),
    }


def encode(arrays: dict[str, np.ndarray], meta: BufferMeta) -> bytes:
    """Safetensors bytes of a buffer with its metadata and checksum.

    ``arrays`` holds :data:`FIELDS` and, if known, :data:`PROVENANCE` (else it is written as
    unknown).
    """
    n = len(arrays['rewards'])
    if n != meta.count:
        raise ValueError(f'buffer holds {n} transitions but its metadata says {meta.count}')
    if not all(name in arrays for name in PROVENANCE):
        arrays = {**arrays, **unknown_provenance(n)}
    arrays = {name: arrays[name] for name in FIELDS + PROVENANCE}
    for name in PROVENANCE:
        arrays[name] = np.asarray(arrays[name], dtype=np.float64)
    md = {
        'format': FORMAT,
        'format_version': FORMAT_VERSION,
        'rate_hz': repr(float(meta.rate_hz)),
        'obs_size': str(meta.obs_size),
        'action_size': str(meta.action_size),
        'count': str(meta.count),
        'policy_version': str(meta.policy_version),
        'generation': meta.generation,
        'previous_generation': meta.previous_generation,
    }
    md['sha256'] = _digest(arrays, metadata=md)
    return st_save({k: np.ascontiguousarray(v) for k, v in arrays.items()}, metadata=md)


def save(path: str | Path, arrays: dict[str, np.ndarray], meta: BufferMeta) -> None:
    """Encode and write atomically."""
    atomic_write_bytes(path, encode(arrays, meta))


def load(
    path: str | Path, *, rate_hz: float, obs_size: int | None, action_size: int | None
) -> tuple[dict[str, np.ndarray], BufferMeta]:
    """Read and verify a buffer file; raise :class:`BufferRejected` naming what is wrong.

    Refused: a missing or unreadable file, a truncated or corrupted one (header, sizes or
    checksum), another format or version, another control rate (the message names both
    rates), other observation/action sizes (``None``: the file's own), non-finite values.
    """
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise BufferRejected(f'cannot read replay buffer {path}: {exc}') from exc
    md, meta = _read_meta(path, data)
    version = md['format_version']
    if not math.isclose(meta.rate_hz, rate_hz, rel_tol=1e-9):
        raise BufferRejected(
            f'{path} was collected at {meta.rate_hz:g} Hz but this learner runs at '
            f'{rate_hz:g} Hz: transitions from another rate teach the wrong dynamics'
        )
    obs_size = meta.obs_size if obs_size is None else obs_size
    action_size = meta.action_size if action_size is None else action_size
    if (meta.obs_size, meta.action_size) != (obs_size, action_size):
        raise BufferRejected(
            f'{path} holds obs/action sizes {meta.obs_size}/{meta.action_size}, '
            f'expected {obs_size}/{action_size}'
        )
    try:
        arrays = st_load(data)
    except Exception as exc:  # noqa: BLE001 - the library raises several types for bad bytes
        raise BufferRejected(f'{path} is corrupt or truncated: {exc}') from exc
    names = FIELDS if version == '1' else FIELDS + PROVENANCE
    if set(arrays) != set(names):
        raise BufferRejected(f'{path} holds tensors {sorted(arrays)}, expected {sorted(names)}')
    _check_shapes(path, arrays, names, meta.count, obs_size, action_size)
    signed = md if version not in ('1', '2') else None
    if md.get('sha256') != _digest(arrays, names, signed):
        raise BufferRejected(f'{path}: checksum mismatch, the file is corrupt')
    for name in names:
        if not np.isfinite(arrays[name]).all():
            raise BufferRejected(f'{path}: non-finite values in {name}')
    why = _outside_the_task(arrays)
    if why:
        raise BufferRejected(f'{path}: {why}')
    if version == '1':
        arrays.update(unknown_provenance(meta.count))
    return arrays, meta


def _read_meta(path: Path, data: bytes) -> tuple[dict[str, str], BufferMeta]:
    """A buffer file's metadata strings and typed meta; refused if not a readable buffer."""
    try:
        md = read_metadata(data)
    except PolicyRejected as exc:
        raise BufferRejected(f'{path} is not a replay buffer file (truncated?): {exc}') from exc
    version = md.get('format_version')
    if md.get('format') != FORMAT or version not in READABLE_VERSIONS:
        raise BufferRejected(
            f'{path}: format {md.get("format")!r} v{version!r}, '
            f'expected {FORMAT!r} v{" or v".join(READABLE_VERSIONS)}'
        )
    try:
        meta = BufferMeta(
            rate_hz=float(md['rate_hz']),
            obs_size=int(md['obs_size']),
            action_size=int(md['action_size']),
            count=int(md['count']),
            policy_version=int(md.get('policy_version', '0')),
            generation=md.get('generation', ''),
            previous_generation=md.get('previous_generation', ''),
        )
    except (KeyError, ValueError) as exc:
        raise BufferRejected(f'{path}: malformed metadata: {exc!r}') from exc
    return md, meta


def _check_shapes(
    path: Path,
    arrays: dict[str, np.ndarray],
    names: tuple[str, ...],
    n: int,
    obs_size: int,
    action_size: int,
) -> None:
    """Refuse tensors of another shape or type than ``n`` transitions of these sizes hold."""
    shapes = {
        'observations': (n, obs_size),
        'next_observations': (n, obs_size),
        'actions': (n, action_size),
        'rewards': (n,),
        'dones': (n,),
        'timeouts': (n,),
    }
    for name, shape in shapes.items():
        if arrays[name].shape != shape or arrays[name].dtype != np.float32:
            raise BufferRejected(
                f'{path}: {name} is {arrays[name].dtype}{arrays[name].shape}, '
                f'expected float32{shape}'
            )
    for name in names[len(FIELDS) :]:
        if arrays[name].shape != (n,) or arrays[name].dtype != np.float64:
            raise BufferRejected(
                f'{path}: {name} is {arrays[name].dtype}{arrays[name].shape}, '
                f'expected float64({n},)'
            )


def _outside_the_task(arrays: dict[str, np.ndarray]) -> str:
    """What no rig of the task could have stored ('' if nothing).

    The checks a transition message gets (:func:`rip_control.transitions.check_values`), for
    a whole file at once.
    """
    from rip_control.rig.env import TaskConfig, bounded_by_construction

    actions = arrays['actions']
    if (np.abs(actions) > 1.0).any():
        i = int(np.flatnonzero((np.abs(actions) > 1.0).any(1))[0])
        return f'actions[{i}] = {actions[i].tolist()} is outside [-1, 1]'
    bounded = bounded_by_construction(arrays['observations'].shape[1])
    for name in ('observations', 'next_observations'):
        rows = np.flatnonzero((np.abs(arrays[name][:, bounded]) > 1.0 + 1e-6).any(1))
        if rows.size:
            i = int(rows[0])
            return (
                f'{name}[{i}] = {arrays[name][i].tolist()} holds a sine, cosine or action '
                f'outside [-1, 1] ({rows.size} rows)'
            )
    for name in ('dones', 'timeouts'):
        if not np.isin(arrays[name], (0.0, 1.0)).all():
            return f'{name} holds values other than 0 and 1'
    # Files of this package mark a truncation in timeouts with dones either set (SB3's own
    # buffers) or not (a bag's or an evaluation's transitions): terminated is done, not a timeout.
    terminated = (arrays['dones'] > 0) & (arrays['timeouts'] == 0)
    spin = arrays['next_observations'][:, 4].astype(np.float64)
    rewards = arrays['rewards'].astype(np.float64)
    for flag in (True, False):
        pick = terminated == flag
        lo, hi = TaskConfig.step_reward_range(flag, spin[pick])
        slack = 1e-5 * np.maximum(1.0, np.maximum(np.abs(lo), abs(hi)))
        bad = np.flatnonzero((rewards[pick] < lo - slack) | (rewards[pick] > hi + slack))
        if bad.size:
            i = int(np.flatnonzero(pick)[bad[0]])
            what = 'terminated' if flag else 'not terminated'
            return (
                f'rewards[{i}] = {rewards[i]:.6g} of a step {what} is outside what the task '
                f'gives it ({bad.size} rows)'
            )
    return ''


class RunFolderInUse(ValueError):
    """A run folder already holds a buffer that a new run would overwrite."""


def check_run_dir_is_free(run_dir: Path, resume_buffer: str) -> None:
    """Refuse a run folder whose buffer this learner would overwrite without continuing it.

    A second run under the same name must either continue the first (``resume_buffer`` set to
    that very file) or use another name; the earlier run's data is never replaced silently.
    """
    existing = Path(run_dir) / run_files.BUFFER
    if not existing.exists():
        return
    if resume_buffer and Path(resume_buffer).resolve() == existing.resolve():
        return
    raise RunFolderInUse(
        f'{existing} holds the replay buffer of an earlier run and would be overwritten; '
        f'continue that run with resume_buffer:={existing} (the runner: resume_buffer:=auto), '
        f'or choose another run_name'
    )
