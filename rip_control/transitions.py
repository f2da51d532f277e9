"""The ``transitions`` message layout: one tick as a labelled flat float32 vector.

A ``std_msgs/Float32MultiArray`` whose ``layout.dim`` entries name each field and give its
size, in order, so a recorded bag is self-describing. This module is ROS-free: it packs to a
numpy array plus ``(label, size)`` pairs and validates the other way.
"""

from __future__ import annotations

from dataclasses import dataclass
import math

import numpy as np

TOPIC = 'transitions'
"""The topic's name, relative (a control node's namespace applies; with several rigs the
launch file remaps it to the learner's ``/transitions``)."""


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


#: A run's identity travels as a last, empty dimension of the layout: ``run_id=<id>``, size
#: 0 (no data). Readers that do not care (bags, recorders) see the fields as before.
RUN_ID_LABEL = 'run_id='


def run_tagged(layout: tuple[tuple[str, int], ...], run_id: str) -> tuple[tuple[str, int], ...]:
    """``layout`` with the run's identity appended ('' : untagged)."""
    return (*layout, (RUN_ID_LABEL + run_id, 0)) if run_id else tuple(layout)


def split_run_id(labels: list[tuple[str, int]]) -> tuple[list[tuple[str, int]], str]:
    """A received layout's field labels, and the run it names ('' if untagged)."""
    if labels and labels[-1][0].startswith(RUN_ID_LABEL) and int(labels[-1][1]) == 0:
        return list(labels[:-1]), labels[-1][0][len(RUN_ID_LABEL) :]
    return list(labels), ''


#: The ``policy_version`` of a transition the excitation episode drove (no actor did): what
#: marks excitation data in the transitions topic, bags and the replay buffer.
EXCITATION_VERSION = -1
#: The largest episode, step or version a transition carries: float32 on the wire holds
#: every whole number up to 2**24 exactly (a year of 50 Hz ticks is 2**30: steps count
#: within an episode, episodes and versions within a run).
COUNTER_MAX = 2**24


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
    """Check a received layout and values; raise :class:`TransitionRejected` naming the fault.

    A run tag at the end of the layout (:func:`run_tagged`) is allowed and ignored here: the
    learner checks it (:func:`split_run_id`) before.
    """
    labels, _ = split_run_id(labels)
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
    for name in ('episode', 'step', 'policy_version', 'terminated', 'truncated'):
        value = float(f[name][0])
        lowest = EXCITATION_VERSION if name == 'policy_version' else 0
        highest = 1 if name in ('terminated', 'truncated') else COUNTER_MAX
        if value != int(value) or not lowest <= value <= highest:
            raise TransitionRejected(
                'counters', f'{name} {value!r} is not a whole number in {lowest}..{highest}'
            )
    t = Transition(
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
    return check_values(t)


def check_values(t: Transition) -> Transition:
    """Refuse a transition no rig of this task could have made, naming the field.

    The action must lie in [-1, 1], and so must each observation's sine, cosine and past
    actions (:func:`~rip_control.rig.env.bounded_by_construction`; the arm angle and the
    velocities are what the rig measured), the flags must not both be set, and the reward
    must be one the task gives such a step
    (:meth:`~rip_control.rig.env.TaskConfig.step_reward_range`).
    """
    from rip_control.rig.env import ACTION_SIZE, TaskConfig, bounded_by_construction

    if t.action.size != ACTION_SIZE or np.any(np.abs(t.action) > 1.0):
        raise TransitionRejected('action', f'action {t.action.tolist()} is outside [-1, 1]')
    bounded = bounded_by_construction(t.obs.size)
    for name, obs in (('obs', t.obs), ('next_obs', t.next_obs)):
        outside = [i for i in bounded if abs(float(obs[i])) > 1.0 + 1e-6]
        if outside:
            i = outside[0]
            raise TransitionRejected(
                'observation',
                f'{name}[{i}] = {float(obs[i]):.6g} is outside [-1, 1] (a sine, a cosine or an '
                'action)',
            )
    if t.terminated and t.truncated:
        raise TransitionRejected('flags', 'a transition cannot be terminated and truncated')
    lo, hi = TaskConfig.step_reward_range(t.terminated, float(t.next_obs[4]))
    slack = 1e-5 * max(1.0, abs(lo), abs(hi))  # float32 on the wire
    if not lo - slack <= t.reward <= hi + slack:
        what = 'terminated' if t.terminated else 'not terminated'
        raise TransitionRejected(
            'reward',
            f"reward {t.reward:.6g} of a step {what} is outside the task's [{lo:g}, {hi:g}]",
        )
    return t


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
