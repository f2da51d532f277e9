"""The ``transitions`` message layout: one tick as a labelled flat float32 vector.

A ``std_msgs/Float32MultiArray`` whose ``layout.dim`` entries name each field and give its
size, in order, so a recorded bag is self-describing. This module is ROS-free: it packs to a
numpy array plus ``(label, size)`` pairs and validates the other way.
"""

from __future__ import annotations

from dataclasses import dataclass
import math

import numpy as np


def field_layout(obs_size: int, action_size: int) -> tuple[tuple[str, int], ...]:
    """``(label, size)`` of every field, in wire order."""
    return (
        ('episode', 1),
        ('step', 1),
        ('obs', obs_size),
        ('action', action_size),
        ('reward', 1),
        ('next_obs', obs_size),
        ('terminated', 1),
        ('truncated', 1),
        ('dt', 1),
        ('policy_version', 1),
    )


#: The ``policy_version`` of a transition the excitation episode drove (no actor did): what
#: marks excitation data in the transitions topic, bags and the replay buffer.
EXCITATION_VERSION = -1


@dataclass(frozen=True)
class Transition:
    """One tick's transition. ``dt_s`` is the measured interval between the two observations."""

    episode: int
    step: int
    obs: np.ndarray
    action: np.ndarray
    reward: float
    next_obs: np.ndarray
    terminated: bool
    truncated: bool
    dt_s: float
    policy_version: int

    def pack(self) -> np.ndarray:
        """Flat float32 vector in :func:`field_layout` order."""
        return np.concatenate(
            [
                np.array([self.episode, self.step], dtype=np.float32),
                self.obs.astype(np.float32, copy=False),
                self.action.astype(np.float32, copy=False),
                np.array([self.reward], dtype=np.float32),
                self.next_obs.astype(np.float32, copy=False),
                np.array(
                    [self.terminated, self.truncated, self.dt_s, self.policy_version],
                    dtype=np.float32,
                ),
            ]
        )


class TransitionRejected(ValueError):
    """A transition message that must not enter the buffer; ``reason`` is a short key."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


def unpack(
    labels: list[tuple[str, int]], data: np.ndarray, obs_size: int, action_size: int
) -> Transition:
    """Check a received layout and values; raise :class:`TransitionRejected` naming the fault."""
    expected = field_layout(obs_size, action_size)
    if tuple(labels) != expected:
        raise TransitionRejected(
            'layout', f'transition layout {list(labels)} differs from expected {list(expected)}'
        )
    total = sum(size for _, size in expected)
    if data.shape != (total,):
        raise TransitionRejected('size', f'transition has {data.size} values, expected {total}')
    if not np.isfinite(data).all():
        bad = [lbl for lbl, sl in _slices(expected).items() if not np.isfinite(data[sl]).all()]
        raise TransitionRejected('non_finite', f'non-finite values in {bad}')
    f = {label: data[sl] for label, sl in _slices(expected).items()}
    dt = float(f['dt'][0])
    if not (dt > 0 and math.isfinite(dt)):
        raise TransitionRejected('dt', f'transition dt {dt!r} s is not positive')
    return Transition(
        episode=int(f['episode'][0]),
        step=int(f['step'][0]),
        obs=f['obs'].copy(),
        action=f['action'].copy(),
        reward=float(f['reward'][0]),
        next_obs=f['next_obs'].copy(),
        terminated=bool(f['terminated'][0]),
        truncated=bool(f['truncated'][0]),
        dt_s=dt,
        policy_version=int(f['policy_version'][0]),
    )


def check_period(t: Transition, rate_hz: float, tolerance_s: float) -> Transition:
    """Refuse a transition whose measured dt is further than ``tolerance_s`` from ``1/rate``.

    The learner applies this to live and recorded transitions alike: a stretched tick never
    trains the critic, however it arrived.
    """
    period = 1.0 / rate_hz
    if abs(t.dt_s - period) > tolerance_s:
        raise TransitionRejected(
            'dt',
            f'measured dt {t.dt_s * 1e3:.3f} ms is not within '
            f'{tolerance_s * 1e3:g} ms of the {period * 1e3:g} ms period',
        )
    return t


def _slices(layout: tuple[tuple[str, int], ...]) -> dict[str, slice]:
    out, offset = {}, 0
    for label, size in layout:
        out[label] = slice(offset, offset + size)
        offset += size
    return out
