"""Deployment metrics of one episode: balance windows, swing-up time, action chatter, ticks.

Pure functions of per-tick traces, shared by the rig evaluation
(:mod:`rip_control.evaluate`), the simulator evaluation of pre-training
(:mod:`rip_learner.pretrain`) and the V5 benchmark, so every number in the README is computed
one way. Tick ``k`` of a trace is the state after the ``k``-th control period: ``phi[k]`` the
pendulum angle from upright (rad), ``action[k]`` the action held during that period (in
[-1, 1]) and ``dt[k]`` that period's measured length (s).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from rip_control.rig.env import BALANCE_THRESHOLD_RAD

SWING_UP_HOLD_S = 0.5
"""A swing-up counts once the pendulum stays balanced this long."""

ACTION_DEADBAND = 0.01
"""Actions within this of zero do not count as a sign (so a resting 0 never chatters)."""


@dataclass(frozen=True)
class EpisodeMetrics:
    """What one deployed episode shows (times in seconds)."""

    duration_s: float
    longest_balance_s: float
    balanced_fraction: float
    balanced_after_swing_up: float  # share of the time after the swing-up (0: none)
    swing_up_s: float | None  # None: never balanced for SWING_UP_HOLD_S
    action_tv_per_s: float  # total variation of the action per second
    sign_changes_per_s: float
    mean_abs_action: float
    ticks: int
    dt_mean_ms: float
    dt_std_ms: float
    dt_max_dev_ms: float  # max |dt - period|
    ret: float | None = None  # the episode's return, when rewards are known

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready."""
        return asdict(self)


def _runs(mask: np.ndarray) -> list[tuple[int, int]]:
    """``[start, stop)`` index pairs of the runs of True in ``mask``."""
    padded = np.concatenate([[False], mask, [False]]).astype(np.int8)
    edges = np.flatnonzero(np.diff(padded))
    return list(zip(edges[::2].tolist(), edges[1::2].tolist(), strict=True))


def balance_windows(
    phi: np.ndarray, dt: np.ndarray, threshold_rad: float = BALANCE_THRESHOLD_RAD
) -> list[tuple[float, float]]:
    """``(start_s, length_s)`` of every continuous stretch with ``|phi| < threshold``.

    A window's length is the summed ``dt`` of its ticks; it starts at the end of the period
    before its first tick.
    """
    phi = np.asarray(phi, dtype=np.float64)
    dt = np.asarray(dt, dtype=np.float64)
    if phi.shape != dt.shape:
        raise ValueError(f'phi has shape {phi.shape} but dt has shape {dt.shape}')
    t_end = np.cumsum(dt)
    out = []
    for a, b in _runs(np.abs(phi) < threshold_rad):
        start = float(t_end[a] - dt[a])
        out.append((start, float(t_end[b - 1] - start)))
    return out


def chatter(action: np.ndarray, duration_s: float) -> tuple[float, float]:
    """``(total variation per second, sign changes per second)`` of an action trace.

    Sign changes count only between actions beyond :data:`ACTION_DEADBAND`, skipping the
    ones inside it.
    """
    a = np.asarray(action, dtype=np.float64).reshape(-1)
    if duration_s <= 0 or a.size < 2:
        return 0.0, 0.0
    tv = float(np.abs(np.diff(a)).sum())
    signs = np.sign(a[np.abs(a) > ACTION_DEADBAND])
    changes = int(np.count_nonzero(signs[1:] != signs[:-1])) if signs.size > 1 else 0
    return tv / duration_s, changes / duration_s


def episode_metrics(
    phi: np.ndarray,
    action: np.ndarray,
    dt: np.ndarray,
    period_s: float,
    reward: np.ndarray | None = None,
    threshold_rad: float = BALANCE_THRESHOLD_RAD,
) -> EpisodeMetrics:
    """All metrics of one episode's traces (see the module docstring for their layout)."""
    phi = np.asarray(phi, dtype=np.float64).reshape(-1)
    dt = np.asarray(dt, dtype=np.float64).reshape(-1)
    action = np.asarray(action, dtype=np.float64).reshape(-1)
    if not (phi.size == dt.size == action.size) or phi.size == 0:
        raise ValueError(
            f'traces must be non-empty and equally long: phi {phi.size}, action {action.size}, '
            f'dt {dt.size}'
        )
    duration = float(dt.sum())
    windows = balance_windows(phi, dt, threshold_rad)
    swing_up = next((start for start, length in windows if length >= SWING_UP_HOLD_S), None)
    tv, changes = chatter(action, duration)
    dev = np.abs(dt - period_s)
    after = 0.0
    if swing_up is not None:
        later = np.cumsum(dt) - dt > swing_up - 1e-9  # the ticks from the swing-up on
        after = float(dt[later & (np.abs(phi) < threshold_rad)].sum() / dt[later].sum())
    return EpisodeMetrics(
        duration_s=duration,
        longest_balance_s=max((length for _, length in windows), default=0.0),
        balanced_fraction=float(dt[np.abs(phi) < threshold_rad].sum() / duration),
        balanced_after_swing_up=after,
        swing_up_s=swing_up,
        action_tv_per_s=tv,
        sign_changes_per_s=changes,
        mean_abs_action=float(np.abs(action).mean()),
        ticks=int(phi.size),
        dt_mean_ms=float(dt.mean() * 1e3),
        dt_std_ms=float(dt.std() * 1e3),
        dt_max_dev_ms=float(dev.max() * 1e3),
        ret=None if reward is None else float(np.sum(reward)),
    )


def summarize(episodes: list[EpisodeMetrics]) -> dict[str, Any]:
    """Mean, min and max of each numeric metric over episodes; swing-ups counted."""
    if not episodes:
        return {'episodes': 0}
    out: dict[str, Any] = {'episodes': len(episodes)}
    for name in (
        'longest_balance_s',
        'balanced_fraction',
        'action_tv_per_s',
        'sign_changes_per_s',
        'mean_abs_action',
        'dt_std_ms',
        'dt_max_dev_ms',
    ):
        values = [getattr(e, name) for e in episodes]
        out[name] = {
            'mean': float(np.mean(values)),
            'min': float(np.min(values)),
            'max': float(np.max(values)),
        }
    ups = [e.swing_up_s for e in episodes if e.swing_up_s is not None]
    out['swung_up'] = len(ups)
    out['swing_up_s_mean'] = float(np.mean(ups)) if ups else None
    rets = [e.ret for e in episodes if e.ret is not None]
    out['return_mean'] = float(np.mean(rets)) if rets else None
    return out


#: Student's t at 95 % (one side), by degrees of freedom: a 90 % two-sided interval of a mean.
_T90 = {1: 6.314, 2: 2.920, 3: 2.353, 4: 2.132, 5: 2.015, 6: 1.943, 7: 1.895, 8: 1.860, 9: 1.833}
_T90_LARGE = 1.812  # 10 degrees of freedom; an overstatement beyond (1.645 at infinity)


def mean_interval(values: list[float]) -> dict[str, float | None]:
    """The mean of ``values`` and its 90 % confidence interval (Student's t; None if n < 2).

    Treats the episodes as independent draws of the policy on the rig: what a repeated
    deployment of the same policy would land within, nine times in ten.
    """
    v = np.asarray(values, dtype=np.float64)
    if v.size == 0:
        return {'mean': None, 'ci90_low': None, 'ci90_high': None, 'n': 0}
    mean = float(v.mean())
    if v.size < 2:
        return {'mean': mean, 'ci90_low': None, 'ci90_high': None, 'n': 1}
    half = _T90.get(v.size - 1, _T90_LARGE) * float(v.std(ddof=1)) / float(np.sqrt(v.size))
    return {'mean': mean, 'ci90_low': mean - half, 'ci90_high': mean + half, 'n': int(v.size)}


def difference_interval(after: list[float], before: list[float]) -> dict[str, float | None]:
    """``mean(after) - mean(before)`` and its 90 % interval (Welch's t; None if either n < 2).

    Two deployments of different policies on one rig are independent samples, not pairs.
    """
    a, b = np.asarray(after, dtype=np.float64), np.asarray(before, dtype=np.float64)
    if a.size == 0 or b.size == 0:
        return {'mean': None, 'ci90_low': None, 'ci90_high': None}
    diff = float(a.mean() - b.mean())
    if a.size < 2 or b.size < 2:
        return {'mean': diff, 'ci90_low': None, 'ci90_high': None}
    va, vb = a.var(ddof=1) / a.size, b.var(ddof=1) / b.size
    se = float(np.sqrt(va + vb))
    if se == 0.0:
        return {'mean': diff, 'ci90_low': diff, 'ci90_high': diff}
    df = (va + vb) ** 2 / (va**2 / (a.size - 1) + vb**2 / (b.size - 1))
    half = _T90.get(max(1, int(df)), _T90_LARGE) * se  # df rounded down: the wider interval
    return {'mean': diff, 'ci90_low': diff - half, 'ci90_high': diff + half}


#: What a deployment's summary gives of its episodes, each with its 90 % interval.
DEPLOYMENT_MEASURES = (
    'longest_balance_s',
    'balanced_after_swing_up',
    'swing_up_s',
    'action_tv_per_s',
    'sign_changes_per_s',
)


def deployment_measures(episodes: list[dict[str, Any]]) -> dict[str, Any]:
    """:data:`DEPLOYMENT_MEASURES` over a deployment's episodes (those an episode has).

    A swing-up that never happened counts as the episode's whole length (it is not faster).
    """
    out: dict[str, Any] = {}
    for name in DEPLOYMENT_MEASURES:
        if not all(name in e for e in episodes):
            continue
        values = [
            e.get('duration_s', 0.0) if e[name] is None else float(e[name]) for e in episodes
        ]
        out[name] = mean_interval(values)
    return out


def phi_from_obs(obs: np.ndarray) -> np.ndarray:
    """Pendulum angle from upright out of observations (``sin_phi``, ``cos_phi`` columns)."""
    obs = np.asarray(obs, dtype=np.float64)
    return np.arctan2(obs[..., 1], obs[..., 2])
