"""The learner's SAC replay buffer and the buffer file (:mod:`rip_control.buffer_file`).

:func:`extract` and :func:`insert` move transitions between an SB3 ``ReplayBuffer`` (one
env) and the file's arrays; :class:`ProvenanceLog` keeps, slot for slot, where each
transition in the SB3 buffer came from (the file's :data:`~rip_control.buffer_file.PROVENANCE`).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from rip_control.buffer_file import PROVENANCE, unknown_provenance


class ProvenanceLog:
    """The provenance of what an SB3 ``ReplayBuffer`` holds, slot for slot.

    :param size: the buffer's capacity.
    """

    def __init__(self, size: int) -> None:
        self.arrays = unknown_provenance(size)

    def record(self, slot: int, episode: int, step: int, dt_s: float, version: int) -> None:
        """What is about to be stored in ``slot`` (the buffer's ``pos`` before its ``add``)."""
        a = self.arrays
        a['episodes'][slot], a['steps'][slot] = episode, step
        a['dts'][slot], a['policy_versions'][slot] = dt_s, version

    def restore(self, first_slot: int, arrays: dict[str, np.ndarray]) -> None:
        """Loaded provenance, for the slots a :func:`insert` from ``first_slot`` filled."""
        size = len(self.arrays['dts'])
        n = len(arrays['dts'])
        kept = np.arange(max(0, n - size), n)  # a wrapping insert keeps the newest
        for name in PROVENANCE:
            self.arrays[name][(first_slot + kept) % size] = arrays[name][kept]

    def extract(self, rb: Any) -> dict[str, np.ndarray]:
        """The provenance of :func:`extract`'s transitions, in the same order."""
        order = _order(rb)
        return {name: self.arrays[name][order] for name in PROVENANCE}


def _order(rb: Any) -> np.ndarray:
    n = rb.buffer_size if rb.full else rb.pos
    order = np.arange(n)
    if rb.full:
        order = (order + rb.pos) % rb.buffer_size
    return order


def extract(rb: Any) -> dict[str, np.ndarray]:
    """The stored transitions of an SB3 ``ReplayBuffer`` (one env), oldest first."""
    order = _order(rb)
    return {
        'observations': rb.observations[order, 0].astype(np.float32),
        'next_observations': rb.next_observations[order, 0].astype(np.float32),
        'actions': rb.actions[order, 0].astype(np.float32),
        'rewards': rb.rewards[order, 0].astype(np.float32),
        'dones': rb.dones[order, 0].astype(np.float32),
        'timeouts': rb.timeouts[order, 0].astype(np.float32),
    }


def insert(rb: Any, arrays: dict[str, np.ndarray]) -> int:
    """Append loaded transitions to an SB3 ``ReplayBuffer``; returns how many were added."""
    n = len(arrays['rewards'])
    for i in range(n):
        rb.add(
            arrays['observations'][i][None],
            arrays['next_observations'][i][None],
            arrays['actions'][i][None],
            arrays['rewards'][i : i + 1],
            arrays['dones'][i : i + 1],
            [{'TimeLimit.truncated': bool(arrays['timeouts'][i])}],
        )
    return n
