"""System identification: the rig's physics from the transitions it recorded.

``python -m rip_learner.identify run:=runs/NAME`` (or ``buffer:=FILE``, ``bag:=DIR``)

Fits the emulator's own equations of motion (:mod:`rip_control.rig.dynamics`) to the rig's
readings by **multi-step simulation error**: the data is cut into windows of
``window_seconds``; each window is simulated from its measured start with the voltages the
rig was sent, switched at the measured tick times plus the latency, and the predicted arm and
pendulum angles are compared with the readings over the whole window (one-step regression
would fit the encoder noise and miss the latency). The fitted parameters are the motor dead
zone, the arm's Coulomb friction, the arm's and the pendulum's viscous damping, the motor
resistance (the torque per volt), the sensing latency (continuous: a voltage switch inside a
physics step counts by its share of the step) and the pendulum's and the arm's masses and the
pendulum's length. The optimiser is CMA-ES (``cma``), robust to the dead zone's and the
friction's kinks.

Beyond that base model, :data:`TERMS` (a dead zone off centre, static friction, an actuator lag,
the cable's torque, the pendulum's inertia apart from a rod's) are chosen by **held-out
multi-step prediction error**: the base is fitted to three quarters of the windows, each term is
added in turn and kept only if the held-out quarter is predicted better (and the term's size is
beyond its resolution). The held-out RMS per angle is reported; above :data:`GAP_COUNTS` encoder
counts the model does not explain the rig ("expect a gap") and ``randomization:=identified``
draws that many times wider. A physical rig is never the model: see ``docs/reality_gap.md``.

Each value's uncertainty is the Gauss-Newton standard deviation at the optimum, inflated by the
residuals' correlation time. A parameter the data does not determine (its uncertainty above
:attr:`Fitted.resolution`) keeps the prior's value, is named, and the rest are fitted again
without it, unless the fit without it costs clearly more (a model that does not explain the
rig inflates every uncertainty): then it stays, with its uncertainty.

Outputs: a rig YAML in the format of ``config/rig_*.yaml`` (``rig:`` holds every parameter, so
the emulator and ``pretrain`` load it unchanged; ``identification:`` holds each value's prior,
uncertainty and verdict, and the fit's residuals) and a plot of predicted against measured
trajectories beside it.

Only transitions reach the fit: angles and voltages as the rig reported and was sent, with
their measured dt. The rig description of an emulated rig is never read.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, fields, replace
import math
from pathlib import Path
import sys
import time
from typing import Any

import numpy as np

from rip_control import run_files
from rip_control.files import atomic_write_bytes
from rip_control.params import (
    CONTROL_PARAMETERS,
    Param,
    help_requested,
    parse_options,
    table_by_name,
)
from rip_control.rig.dynamics import (
    ARRAY_OPS,
    Coefficients,
    PendulumParams,
    effective_voltage,
    lag_gain,
    rk4_step,
)
from rip_control.transitions import EXCITATION_VERSION

_CONTROL = table_by_name(CONTROL_PARAMETERS)

OPTIONS = (
    Param('run', '', 'a run folder: its replay buffer (replay_buffer.safetensors)'),
    Param(
        'buffer',
        '',
        'a replay buffer file, or several separated by commas (each numbers its episodes '
        "after the earlier's: e.g. two deployments' evaluation transitions)",
    ),
    Param('bag', '', 'a bag of the transitions topic (a directory)'),
    Param('out', '', f'rig YAML to write (default: {run_files.IDENTIFIED_RIG} in the run folder)'),
    Param(
        'prior',
        '',
        'rig YAML of the starting values and of what is not fitted (default: '
        'the QUBE-Servo 2 of rip_control.rig.dynamics.PendulumParams)',
    ),
    _CONTROL['rate_hz'],
    _CONTROL['max_action_v'],
    Param('window_seconds', 0.5, 'length of one simulated window, s', 0.04, 10.0),
    Param(
        'upright_window_seconds',
        0.1,
        'window length where the pendulum is near upright (unstable there: errors grow fast), s',
        0.04,
        10.0,
    ),
    Param(
        'max_seconds',
        120.0,
        'use at most this much of the data (the newest excitation '
        'first, then the newest episodes), s',
        1.0,
        100_000.0,
    ),
    Param('generations', 150, 'most CMA-ES generations', 1, 100_000),
    Param('population', 12, 'CMA-ES population', 4, 1000),
    Param(
        'initial_step',
        0.25,
        "CMA-ES's first step, as a fraction of each search range "
        '(smaller: a prior already close, e.g. an earlier identification)',
        0.001,
        1.0,
    ),
    Param(
        'restarts',
        2,
        'CMA-ES runs from random starts besides the one from the prior (the '
        'cost has local minima)',
        0,
        100,
    ),
    Param(
        'tolerance',
        1e-7,
        "stop a CMA-ES run when a generation's costs span less than this "
        "fraction of the prior's cost",
        0.0,
        1.0,
    ),
    Param('seed', 0, 'seed of CMA-ES', 0, 2**31 - 1),
    Param('time_limit_s', 600.0, 'stop the search after this long', 1.0, 86_400.0),
    Param('plot', True, 'write the predicted-against-measured plot'),
)


# -- what is fitted ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Fitted:
    """One fitted parameter: its search range and how well it must be known to be kept.

    :param name: a :class:`PendulumParams` field.
    :param low: search range, absolute, or relative to the prior when ``relative``.
    :param high: see ``low``.
    :param log: search on a log scale (a positive parameter).
    :param relative: the range multiplies the prior.
    :param resolution: the largest uncertainty (one standard deviation) at which the value is
        kept: absolute, or relative to the value when ``relative``.
    :param probe: the finite-difference step of the uncertainty, in the unit of
        ``resolution``: larger than the cost's kinks (the dead zone's cost steps from one
        commanded voltage to the next), small against the value.
    :param scan: for a parameter whose cost steps (the dead zone's), the step of a grid
        scanned over its whole range, the others held, before the polishing run; 0: none.
    """

    name: str
    low: float
    high: float
    log: bool = False
    relative: bool = False
    resolution: float = 0.25
    probe: float = 0.02
    scan: float = 0.0

    def bounds(self, prior: PendulumParams, period_s: float) -> tuple[float, float]:
        """The search range in the parameter's unit."""
        if self.name == 'sensing_latency_s':
            return self.low * period_s, self.high * period_s
        if self.relative:
            value = getattr(prior, self.name)
            return self.low * value, self.high * value
        return self.low, self.high

    def tolerance(self, value: float) -> float:
        """The largest standard deviation at which ``value`` counts as determined."""
        return self.resolution * abs(value) if self.relative else self.resolution

    def step(self, value: float) -> float:
        """The finite-difference step at ``value``, in the parameter's unit."""
        return self.probe * abs(value) if self.relative else self.probe


LATENCY_PERIODS = 3  # the latency's search range, in control periods

#: What is fitted. Latency's range is in control periods.
FITTED = (
    Fitted('motor_dead_zone_v', 0.0, 3.0, resolution=0.15, probe=0.05, scan=0.02),
    Fitted('arm_coulomb_friction_nm', 0.0, 0.03, resolution=0.001, probe=2e-4),
    Fitted('arm_viscous_damping_nms_per_rad', 0.1, 20.0, log=True, relative=True),
    Fitted('pendulum_viscous_damping_nms_per_rad', 0.1, 20.0, log=True, relative=True),
    Fitted('motor_resistance_ohm', 0.5, 2.0, log=True, relative=True),
    Fitted('sensing_latency_s', 0.0, LATENCY_PERIODS, resolution=0.003, probe=5e-4),
    Fitted('pendulum_mass_kg', 0.5, 2.0, log=True, relative=True),
    Fitted('pendulum_length_m', 0.67, 1.5, log=True, relative=True),
)


@dataclass(frozen=True)
class Term:
    """A term beyond :data:`FITTED`: fitted, and kept only where it lowers the held-out error.

    :param name: what it models, in words.
    :param fitted: its parameter (neutral in :class:`PendulumParams`: the term off).
    """

    name: str
    fitted: Fitted


#: The terms a rig may need beyond the base model, tried in this order (each against the model
#: with the terms kept before it). Their neutral values are PendulumParams' defaults.
TERMS = (
    Term(
        'dead zone off centre',
        Fitted('motor_dead_zone_offset_v', -1.5, 1.5, resolution=0.1, probe=0.05, scan=0.02),
    ),
    Term(
        'static friction',
        Fitted('arm_static_friction_nm', 0.0, 0.03, resolution=0.001, probe=2e-4),
    ),
    Term('actuator lag', Fitted('actuator_lag_s', 0.0, 0.03, resolution=0.002, probe=5e-4)),
    Term(
        'cable torque',
        Fitted('arm_cable_stiffness_nm_per_rad', 0.0, 0.02, resolution=5e-4, probe=1e-4),
    ),
    Term(
        'pendulum inertia',
        Fitted('pendulum_inertia_factor', 0.5, 3.0, log=True, resolution=0.15, probe=0.02),
    ),
)
ALL_FITTED = FITTED + tuple(t.fitted for t in TERMS)
#: A term is kept when it lowers the held-out cost by more than this fraction.
TERM_GAIN = 0.03
#: Held-out RMS above this many encoder counts (either angle): the model does not explain the
#: rig ("expect a gap"), and the re-training is randomised that much wider, up to MAX_WIDENING
#: times. Set from few recordings: the stuck rig (in the model, 1 count of encoder noise)
#: 0.65-0.98 counts; the sticky gap rig (bench/rigs/gap_sticky.yaml) 1.6.
GAP_COUNTS = 1.25
MAX_WIDENING = 3.0
#: Every HELD_OUT_EVERY-th block of HELD_OUT_BLOCK consecutive windows is held out of the fit.
HELD_OUT_EVERY = 4
HELD_OUT_BLOCK = 3
#: The quick searches (a term tried, the final fit on all the data) start this close to the
#: point they refine, as a fraction of ``initial_step``, with no random restarts.
QUICK_STEP = 0.3

#: Not fitted: motion alone cannot tell a rig from one with every mass, damping and friction
#: scaled by the same factor and the torque per volt too, so one mass sets the scale. The
#: arm's is the prior's (weigh it, and give it in ``prior:=``); the pendulum's is fitted
#: relative to it.
SCALE = 'arm_mass_kg'


# -- the data ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Record:
    """One unbroken run of ticks: ``n + 1`` readings and the ``n`` voltages between them.

    ``volts[k]`` was sent right after reading ``k`` and held until after reading ``k + 1``;
    ``dt[k]`` is the measured interval between the two readings. ``from_rest``: reading 0 is
    an episode's first (the rig at rest, 0 V before it).
    """

    theta: np.ndarray
    alpha: np.ndarray
    volts: np.ndarray
    dt: np.ndarray
    episode: int
    excitation: bool
    from_rest: bool

    @property
    def seconds(self) -> float:
        """The record's length."""
        return float(self.dt.sum())


def _angles(obs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    theta = obs[:, 0].astype(np.float64)
    phi = np.arctan2(obs[:, 1].astype(np.float64), obs[:, 2].astype(np.float64))
    return theta, np.unwrap(phi + math.pi)  # alpha: zero hanging, continuous


def records_from_arrays(
    arrays: dict[str, np.ndarray], period_s: float, max_action_v: float
) -> list[Record]:
    """Unbroken records from buffer arrays.

    From buffer arrays (:data:`rip_learner.buffer_file.FIELDS` and
    ``PROVENANCE``). A transition continues the previous one when its observation is the
    previous next-observation and no episode ended between them; without provenance the dt is
    taken as the period and the episode as unknown.
    """
    obs, nxt = arrays['observations'], arrays['next_observations']
    acts = np.clip(arrays['actions'][:, 0].astype(np.float64), -1.0, 1.0) * max_action_v
    dones = arrays['dones'] > 0.5
    steps, episodes = arrays['steps'], arrays['episodes']
    dts = np.where(arrays['dts'] > 0, arrays['dts'], period_s)
    versions = arrays['policy_versions']
    out: list[Record] = []
    start = 0
    n = len(acts)
    for i in range(1, n + 1):
        broken = (
            i == n
            or dones[i - 1]
            or not np.array_equal(obs[i], nxt[i - 1])
            or episodes[i] != episodes[i - 1]
            or (steps[i] >= 0 and steps[i] != steps[i - 1] + 1)
        )
        if not broken:
            continue
        if i - start >= 2:
            chain = np.concatenate([obs[start : start + 1], nxt[start:i]])
            theta, alpha = _angles(chain)
            out.append(
                Record(
                    theta=theta,
                    alpha=alpha,
                    volts=acts[start:i],
                    dt=dts[start:i].astype(np.float64),
                    episode=int(episodes[start]),
                    excitation=bool((versions[start:i] == EXCITATION_VERSION).all()),
                    from_rest=bool(steps[start] == 0),
                )
            )
        start = i
    return out


def select(records: list[Record], max_seconds: float) -> list[Record]:
    """The excitation records first (newest first), then the newest others, up to a budget."""
    ordered = sorted(records, key=lambda r: (not r.excitation, -r.episode))
    chosen, total = [], 0.0
    for r in ordered:
        if total >= max_seconds:
            break
        chosen.append(r)
        total += r.seconds
    return chosen


# -- the batched simulation -------------------------------------------------------------------


@dataclass
class Windows:
    """Windows of the records, padded to one shape: what one simulation of a batch reads.

    Times are relative to each window's first reading. ``switch_t``/``switch_v``: the voltage
    commands that can act inside the window (earlier ones included for the latency), as sent;
    ``v_before``: the command in force before the first of them.
    """

    read_t: np.ndarray  # (S, W+1)
    theta: np.ndarray  # (S, W+1) measured
    alpha: np.ndarray  # (S, W+1)
    mask: np.ndarray  # (S, W+1) readings that exist
    switch_t: np.ndarray  # (S, J)
    switch_v: np.ndarray  # (S, J)
    v_before: np.ndarray  # (S,)
    theta_dot0: np.ndarray  # (S,)
    alpha_dot0: np.ndarray  # (S,)
    source: list[tuple[int, int]]  # (record index, first reading) of each window

    @property
    def count(self) -> int:
        """Number of windows."""
        return len(self.v_before)


def _spans(r: Record, ticks: int, upright_ticks: int) -> Iterable[tuple[int, int]]:
    """``(first tick, ticks)`` of each window of a record."""
    n, k = len(r.volts), 0
    shortest = min(max(2, ticks // 2), upright_ticks)
    while k < n:
        w = min(ticks, n - k)
        # Near upright the pendulum is unstable: a prediction error doubles every ~60 ms, so
        # a window that gets there is cut short.
        from_upright = np.abs(np.mod(r.alpha[k : k + w + 1], 2 * math.pi) - math.pi)
        if (from_upright < 0.5 * math.pi).any():
            w = min(w, upright_ticks)
        if w >= shortest:
            yield k, w
        k += w


def make_windows(
    records: list[Record], ticks: int, history: int, upright_ticks: int | None = None
) -> Windows:
    """The records cut into windows.

    Cut every record into windows of ``ticks`` ticks (a last short one if at least half),
    ``upright_ticks`` where the pendulum comes within 90 degrees of upright.
    """
    upright_ticks = upright_ticks or ticks
    rows: list[dict[str, Any]] = []
    for ri, r in enumerate(records):
        times = np.concatenate([[0.0], np.cumsum(r.dt)])
        for k, w in _spans(r, ticks, upright_ticks):
            if k == 0 and r.from_rest:
                td0 = ad0 = 0.0
            else:
                lo, hi = max(k - 1, 0), k + 1
                span = times[hi] - times[lo]
                td0 = (r.theta[hi] - r.theta[lo]) / span
                ad0 = (r.alpha[hi] - r.alpha[lo]) / span
            first = max(0, k - history)
            sw = np.arange(first, k + w)
            before = r.volts[first - 1] if first > 0 else 0.0
            rows.append(
                dict(
                    read_t=times[k : k + w + 1] - times[k],
                    theta=r.theta[k : k + w + 1],
                    alpha=r.alpha[k : k + w + 1],
                    switch_t=times[sw] - times[k],
                    switch_v=r.volts[sw],
                    v_before=before,
                    td0=td0,
                    ad0=ad0,
                    source=(ri, k),
                )
            )
    if not rows:
        raise ValueError(f'no window of {ticks} ticks in the data: too little of it')
    s = len(rows)
    width = ticks + 1
    jmax = max(len(r['switch_t']) for r in rows)
    out = Windows(
        read_t=np.zeros((s, width)),
        theta=np.zeros((s, width)),
        alpha=np.zeros((s, width)),
        mask=np.zeros((s, width), dtype=bool),
        switch_t=np.full((s, jmax), 1e9),  # padding: switches that never happen
        switch_v=np.zeros((s, jmax)),
        v_before=np.array([r['v_before'] for r in rows]),
        theta_dot0=np.array([r['td0'] for r in rows]),
        alpha_dot0=np.array([r['ad0'] for r in rows]),
        source=[r['source'] for r in rows],
    )
    for i, row in enumerate(rows):
        m = len(row['read_t'])
        out.read_t[i, :m], out.theta[i, :m] = row['read_t'], row['theta']
        out.alpha[i, :m] = row['alpha']
        out.read_t[i, m:] = row['read_t'][-1]
        out.mask[i, :m] = True
        j = len(row['switch_t'])
        out.switch_t[i, :j], out.switch_v[i, :j] = row['switch_t'], row['switch_v']
        out.switch_v[i, j:] = row['switch_v'][-1]
    return out


_FLOAT = np.float32  # the batch's precision: enough for 0.3 s windows, twice as fast


class _Batch:
    """Attribute access to a batch of parameter sets (arrays of one value per rig)."""

    def __init__(self, sets: list[PendulumParams], repeat: int) -> None:
        for f in fields(PendulumParams):
            values = np.array([getattr(p, f.name) for p in sets], dtype=_FLOAT)
            setattr(self, f.name, np.repeat(values, repeat))


def _step_voltages(
    switch_t: np.ndarray, switch_v: np.ndarray, v0: np.ndarray, h: float, n_steps: int
) -> np.ndarray:
    """The voltage of every physics step of every rig.

    ``(n_steps, rigs)``: ``v0`` before the
    first switch, and each switch (times ``switch_t``, voltages ``switch_v``, ``(rigs, J)``)
    counted in the step it falls in by the share of the step after it.
    """
    rigs, j_n = switch_t.shape
    dv = np.diff(np.concatenate([v0[:, None], switch_v], axis=1), axis=1)
    tau = switch_t / h  # in steps
    first = np.floor(tau)
    part = first + 1.0 - tau  # the share of step ``first`` after the switch
    inc = np.zeros((n_steps + 2, rigs))
    cols = np.broadcast_to(np.arange(rigs)[:, None], (rigs, j_n))
    i0 = np.clip(first, -1, n_steps).astype(np.int64) + 1  # row 0: before step 0
    np.add.at(inc, (i0, cols), dv * np.where(first < 0, 1.0, part))
    np.add.at(
        inc, (np.minimum(i0 + 1, n_steps + 1), cols), dv * np.where(first < 0, 0.0, 1 - part)
    )
    return (v0[None, :] + np.cumsum(inc, axis=0))[1 : n_steps + 1]


def simulate(
    sets: list[PendulumParams], win: Windows, start_offsets: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Predicted ``(theta, alpha)`` at every window's readings, for every parameter set.

    All sets and windows run as numpy batches of rigs with the emulator's fixed step (the
    first set's ``physics_rate_hz``; at half of it, 1 kHz, the stuck rig's pendulum damping
    came out at a third of its value): the short windows (near upright) apart from the long
    ones, so that no rig integrates past its last reading for long. ``start_offsets``
    (``(len(sets), 4)``) shifts every window's start state ``(theta, alpha, theta_dot,
    alpha_dot)``. Returns arrays of shape ``(len(sets), S, W+1)``.
    """
    h = sets[0].physics_step_s
    steps = np.rint(win.read_t / h).astype(np.int64)  # (S, W+1)
    last = steps.max(axis=1)
    short = last <= last.max() // 2
    theta = np.zeros((len(sets),) + win.read_t.shape)
    alpha = np.zeros_like(theta)
    for group in (np.flatnonzero(short), np.flatnonzero(~short)):
        if len(group):
            th, al = _simulate_group(sets, win, group, steps[group], start_offsets)
            theta[:, group], alpha[:, group] = th, al
    return theta, alpha


def _simulate_group(
    sets: list[PendulumParams],
    win: Windows,
    group: np.ndarray,
    read_step: np.ndarray,
    start_offsets: np.ndarray | None,
) -> tuple[np.ndarray, np.ndarray]:
    """:func:`simulate` of the windows ``group``: ``(len(sets), len(group), W+1)``."""
    p_n, s_n = len(sets), len(group)
    b: Any = _Batch(sets, s_n)
    k = Coefficients(b)
    h = sets[0].physics_step_s

    def tile(a: np.ndarray) -> np.ndarray:
        return np.tile(a[group], (p_n,) + (1,) * (a.ndim - 1))

    switch_t = tile(win.switch_t) + b.sensing_latency_s[:, None]
    limits = (b.max_voltage_v, b.motor_dead_zone_v, b.motor_dead_zone_offset_v)
    max_v, dz, off = (a[:, None] for a in limits)
    v_eff = effective_voltage(tile(win.switch_v), max_v, dz, off, ARRAY_OPS)
    v0 = effective_voltage(tile(win.v_before), *limits, ARRAY_OPS)
    read_step = np.tile(read_step, (p_n, 1))
    n_steps = int(read_step.max())
    volts = _step_voltages(switch_t, v_eff, v0, h, n_steps).astype(_FLOAT)
    start = [tile(a) for a in (win.theta[:, 0], win.alpha[:, 0], win.theta_dot0, win.alpha_dot0)]
    if start_offsets is not None:
        start = [a + np.repeat(start_offsets[:, i], s_n) for i, a in enumerate(start)]
    x = (
        start[0].astype(_FLOAT),
        start[1].astype(_FLOAT),
        start[2].astype(_FLOAT),
        start[3].astype(_FLOAT),
    )
    th_hist = np.empty((n_steps + 1, p_n * s_n), dtype=_FLOAT)
    al_hist = np.empty_like(th_hist)
    th_hist[0], al_hist[0] = x[0], x[1]
    step = _FLOAT(h)
    lagged = bool(np.any(b.actuator_lag_s > 0.0))
    gain = lag_gain(h, b.actuator_lag_s).astype(_FLOAT)
    motor = v0.astype(_FLOAT)  # the motor at the voltage in force before the window
    for i in range(n_steps):
        motor = motor + gain * (volts[i] - motor) if lagged else volts[i]
        x = rk4_step(k, x, step, motor, 1.0, ARRAY_OPS)
        th_hist[i + 1], al_hist[i + 1] = x[0], x[1]
    cols = np.arange(p_n * s_n)[:, None]
    theta = th_hist[read_step, cols].reshape(p_n, s_n, -1)
    alpha = al_hist[read_step, cols].reshape(p_n, s_n, -1)
    return theta, alpha


#: Probe sizes of the start state and its prior spread (rad, rad, rad/s, rad/s): the start
#: of a window is a noisy reading, so each window's start is fitted too (linearised, with
#: this spread as a ridge prior) before the parameters are judged.
_START_PROBE = np.array([1e-3, 1e-3, 1e-2, 1e-2])
_START_SPREAD = np.array([0.006, 0.006, 0.3, 0.3])


def _errors(theta: np.ndarray, alpha: np.ndarray, win: Windows) -> np.ndarray:
    """Predicted minus measured at every reading but each window's first: ``(P, S, 2W)``."""
    mask = win.mask[:, 1:]
    e = np.stack([theta[:, :, 1:] - win.theta[:, 1:], alpha[:, :, 1:] - win.alpha[:, 1:]], axis=2)
    return (e * mask[None, :, None, :]).reshape(len(theta), win.count, -1)


def start_sensitivity(params: PendulumParams, win: Windows) -> np.ndarray:
    """How each window's predicted readings move with its start state.

    As ``(S, 2W, 4)``, by finite differences at ``params``.
    """
    return start_sensitivities([params], win)[0]


def start_sensitivities(sets: list[PendulumParams], win: Windows) -> np.ndarray:
    """:func:`start_sensitivity` at each of ``sets``, in one batch: ``(P, S, 2W, 4)``."""
    return _simulate_errors([], win, sets)[2]


def _simulate_errors(
    sets: list[PendulumParams], win: Windows, probed: list[PendulumParams]
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The errors of ``sets``, and of each of ``probed`` with its start sensitivity.

    One batch (a simulation's cost is mostly its steps, hardly its width): ``(P, S, 2W)``
    for ``sets``, ``(Q, S, 2W)`` and ``(Q, S, 2W, 4)`` for ``probed``.
    """
    probes = np.vstack([np.zeros(4), np.diag(_START_PROBE)])
    everything = [*sets, *(p for p in probed for _ in probes)]
    offsets = np.vstack([np.zeros((len(sets), 4)), np.tile(probes, (len(probed), 1))])
    e = _errors(*simulate(everything, win, offsets), win)
    at = e[len(sets) :].reshape(len(probed), len(probes), win.count, e.shape[-1])
    sens = (at[:, 1:] - at[:, :1]) / _START_PROBE[None, :, None, None]  # (Q, 4, S, 2W)
    return e[: len(sets)], at[:, 0], np.moveaxis(sens, 1, -1)


def residuals(
    sets: list[PendulumParams],
    win: Windows,
    sens: np.ndarray | None = None,
    groups: list[int] | None = None,
) -> np.ndarray:
    """Prediction errors, each window's start state corrected.

    Errors at every reading but each window's first, ``(P, S, 2W + 4)``, after each window's
    start state is corrected, linearised with ``sens``: one ``(S, 2W, 4)`` for every set
    (default: at the first set, for sets close to it, e.g. one search's samples), or one per
    group of consecutive sets, ``(G, S, 2W, 4)`` with ``groups`` the groups' sizes (one each:
    :func:`own_costs`; :data:`_START_PROBE`). The ridge prior's terms are the last 4, so the
    sum of squares is the fit's cost.
    """
    if sens is None:
        r0, _, at_first = _simulate_errors(sets, win, [sets[0]])
        return _corrected(r0, at_first[0])
    r0 = _errors(*simulate(sets, win), win)  # (P, S, 2W)
    if sens.ndim == 3:
        return _corrected(r0, sens)
    return _grouped(r0, sens, groups if groups is not None else [1] * len(sets))


def _grouped(r0: np.ndarray, sens: np.ndarray, sizes: list[int]) -> np.ndarray:
    """:func:`_corrected` of consecutive groups of ``sizes`` sets, each at its sensitivity."""
    if len(sizes) != len(sens) or sum(sizes) != len(r0):
        raise ValueError(f'{len(sens)} sensitivities for groups {sizes} of {len(r0)} sets')
    cuts = np.cumsum([0, *sizes])
    return np.concatenate(
        [_corrected(r0[a:b], g) for a, b, g in zip(cuts[:-1], cuts[1:], sens, strict=True)]
    )


def _corrected(r0: np.ndarray, sens: np.ndarray) -> np.ndarray:
    """:func:`residuals` of errors ``r0`` ``(P, S, 2W)`` with one sensitivity ``(S, 2W, 4)``."""
    ridge = np.diag(1.0 / _START_SPREAD**2) * _NOISE_RAD**2
    lhs = np.einsum('sni,snj->sij', sens, sens) + ridge  # (S, 4, 4)
    rhs = -np.einsum('sni,psn->psi', sens, r0)
    delta = np.einsum('sij,psj->psi', np.linalg.inv(lhs), rhs)  # (P, S, 4)
    corrected = r0 + np.einsum('sni,psi->psn', sens, delta)
    prior_terms = delta / _START_SPREAD * _NOISE_RAD
    return np.concatenate([corrected, prior_terms], axis=-1)


def own_costs(sets: list[PendulumParams], win: Windows) -> np.ndarray:
    """Each set's cost with its start states corrected at its own sensitivity: ``(P,)``.

    For comparing different models: a sensitivity shared with another model favours that
    one (on the sticky gap rig's held-out windows, a model with an off-centre dead zone cost
    0.194 at the base model's sensitivity and 0.149 at its own).
    """
    _, r0, sens = _simulate_errors([], win, sets)
    return _cost(_grouped(r0, sens, [1] * len(sets)))


_NOISE_RAD = 2.0 * math.pi / 2048  # one encoder count: the scale of the ridge prior


def rms(res: np.ndarray) -> tuple[float, float]:
    """RMS of the arm and pendulum errors of one set's :func:`residuals` (``(S, n)``)."""
    w = (res.shape[-1] - 4) // 2
    return (
        float(np.sqrt(np.mean(res[:, :w] ** 2))),
        float(np.sqrt(np.mean(res[:, w : 2 * w] ** 2))),
    )


# -- the fit ----------------------------------------------------------------------------------


@dataclass
class Estimate:
    """One fitted parameter's result."""

    name: str
    prior: float
    value: float
    std: float
    determined: bool


@dataclass
class Identification:
    """What :func:`identify` found."""

    params: PendulumParams
    estimates: list[Estimate]
    rms_theta_rad: float
    rms_alpha_rad: float
    prior_rms_theta_rad: float
    prior_rms_alpha_rad: float
    seconds_of_data: float
    windows: int
    evaluations: int
    wall_s: float
    undetermined: list[str]
    selection: dict[str, Any] | None = None  # select_terms's record; None: none was made

    def moved(self) -> dict[str, dict[str, float]]:
        """The parameters the data moved from the prior by more than they count as determined.

        Determined, and further from the prior than :meth:`Fitted.tolerance` at the prior:
        name -> ``from``, ``to``, ``tolerance`` (what a second identification, started at a
        first one's result, found that the first got wrong).
        """
        by_name = {f.name: f for f in ALL_FITTED}
        out = {}
        for e in self.estimates:
            tolerance = by_name[e.name].tolerance(e.prior)
            if e.determined and abs(e.value - e.prior) > tolerance:
                out[e.name] = {'from': e.prior, 'to': e.value, 'tolerance': tolerance}
        return out

    def summary(self) -> dict[str, Any]:
        """The record of the fit: the rig YAML's ``identification:`` (JSON-able too)."""
        return {
            'fitted': {
                e.name: {
                    'value': float(e.value),
                    'std': None if math.isnan(e.std) else float(e.std),
                    'prior': float(e.prior),
                    'determined': e.determined,
                }
                for e in self.estimates
            },
            'undetermined_kept_prior': list(self.undetermined),
            'moved': self.moved(),
            'not_fitted_scale': SCALE,
            'residual_rms_rad': {'theta': self.rms_theta_rad, 'alpha': self.rms_alpha_rad},
            'prior_residual_rms_rad': {
                'theta': self.prior_rms_theta_rad,
                'alpha': self.prior_rms_alpha_rad,
            },
            'seconds_of_data': self.seconds_of_data,
            'windows': self.windows,
            'evaluations': self.evaluations,
            'wall_s': round(self.wall_s, 2),
            'selection': self.selection,
        }


def _with(base: PendulumParams, **values: Any) -> PendulumParams:
    """``base`` with ``values``, the dead zone's offset held within the dead zone."""
    if 'motor_dead_zone_offset_v' in values or 'motor_dead_zone_v' in values:
        dz = values.get('motor_dead_zone_v', base.motor_dead_zone_v)
        off = values.get('motor_dead_zone_offset_v', base.motor_dead_zone_offset_v)
        values['motor_dead_zone_offset_v'] = min(max(off, -dz), dz)
    return replace(base, **values)


class _Space:
    """The unit cube CMA-ES searches, mapped to the parameters being fitted."""

    def __init__(self, fitted: list[Fitted], prior: PendulumParams, period_s: float) -> None:
        self.fitted = fitted
        self.prior = prior
        self.bounds = [f.bounds(prior, period_s) for f in fitted]

    def value(self, i: int, x: float) -> float:
        lo, hi = self.bounds[i]
        if self.fitted[i].log:
            return lo * (hi / lo) ** x
        return lo + x * (hi - lo)

    def unit(self, i: int, value: float) -> float:
        lo, hi = self.bounds[i]
        if self.fitted[i].log:
            return math.log(value / lo) / math.log(hi / lo)
        return (value - lo) / (hi - lo)

    def params(self, x: Iterable[float]) -> PendulumParams:
        values: dict[str, Any] = {
            f.name: float(self.value(i, xi))
            for i, (f, xi) in enumerate(zip(self.fitted, x, strict=True))
        }
        return _with(self.prior, **values)

    def start(self, base: PendulumParams, margin: float = 0.05) -> np.ndarray:
        """``base`` in the cube, ``margin`` inside its faces (0: exactly ``base``, if inside)."""
        x = [self.unit(i, getattr(base, f.name)) for i, f in enumerate(self.fitted)]
        return np.clip(np.array(x), margin, 1.0 - margin)


def _cost(res: np.ndarray) -> np.ndarray:
    return (res**2).sum(axis=(1, 2))


#: The polishing run's first step, as a fraction of ``initial_step``.
POLISH_STEP = 0.04
#: The polishing runs' most generations, as a fraction of ``generations``.
POLISH_GENERATIONS = 0.3


def _search(
    space: _Space,
    win: Windows,
    x0: np.ndarray,
    opts: dict[str, Any],
    deadline: float,
    log: Callable[[str], object],
) -> tuple[np.ndarray, int]:
    """The best point a search finds, and the evaluations it took.

    CMA-ES runs from ``x0`` and from ``restarts`` seeded random starts; then a grid over each
    stepped parameter's whole range (:attr:`Fitted.scan`; none when ``opts['scan']`` is empty)
    at the best of them, the others
    held; then, in lockstep, polishing runs from the grid's best :data:`SCAN_CANDIDATES`
    plateaus that cost less than that best, if any, each run's first step :data:`POLISH_STEP`
    of the first and its generations :data:`POLISH_GENERATIONS` of ``generations``. The
    cheapest point seen wins.

    The cost has flat regions and local minima. The dead zone's cost steps: it changes only
    where a commanded voltage falls between two candidate values while the arm moves, so a
    run can stop in the wrong basin with another parameter making up for it (on stuck-rig
    data recorded from the emulator, a run started at 1.6 V ended at 0.02 V; in CI one
    ended at 1.50 V, for the rig's 1.2 V; different seeds on one recording ended 0.1 V
    apart). The grid finds the dead zone's plateaus for the rest of the fit, and the polish
    lets the others follow.
    """
    rng = np.random.default_rng(opts['seed'])
    starts = [x0] + [rng.uniform(0.05, 0.95, len(x0)) for _ in range(opts['restarts'])]
    finals, exact, evaluations = _lockstep(
        space, win, starts, opts['initial_step'], opts, deadline, log, cull=True
    )
    log('  ' + ', '.join(f'start {i + 1}: cost {c:.5g}' for i, c in enumerate(exact)))
    best = int(np.argmin(exact))
    seen = [(finals[best], exact[best])]
    for i, f in enumerate(space.fitted):
        if f.scan and opts.get('scan', f.name) == f.name:
            found, n = _scan(space, win, seen[0][0], seen[0][1], i)
            evaluations += n
            seen += found
            if found:
                shown = ', '.join(f'{space.value(i, float(x[i])):.3g}' for x, _ in found)
                log(f'  scanned {f.name}: polishing from {shown}')
    if len(seen) > 1 and time.monotonic() < deadline:
        polished, costs, more = _lockstep(
            space,
            win,
            [x for x, _ in seen[1:]],
            opts['initial_step'] * POLISH_STEP,
            {
                **opts,
                'seed': opts['seed'] + 7919 * len(starts),
                'generations': max(1, round(opts['generations'] * POLISH_GENERATIONS)),
            },
            deadline,
            log,
        )
        evaluations += more
        log(f'  polished: cost {min(costs):.5g}')
        seen += list(zip(polished, costs, strict=True))
    return min(seen, key=lambda xc: xc[1])[0], evaluations


def _lockstep(
    space: _Space | list[_Space],
    win: Windows,
    starts: list[np.ndarray],
    step: float,
    opts: dict[str, Any],
    deadline: float,
    log: Callable[[str], object],
    cull: bool = False,
) -> tuple[list[np.ndarray], list[float], int]:
    """CMA-ES runs from ``starts`` in lockstep.

    Returns each run's best point and its exact cost, and the evaluations they took. Every
    generation's candidates of all the runs are simulated as one batch (a batch's cost grows
    slower than its size). ``space`` may be one per start: runs in different spaces (a term
    each) share the batches too. With ``cull`` (runs of one model from different starts), a
    run whose best costs more than :data:`CULL_RATIO` times the best run's is stopped from
    generation :data:`CULL_AFTER` on: it has settled in a worse basin.
    """
    import cma

    spaces = space if isinstance(space, list) else [space] * len(starts)
    of = dict(zip(range(len(starts)), spaces, strict=True))

    runs = [
        cma.CMAEvolutionStrategy(
            list(start),
            step,
            {
                'bounds': [0.0, 1.0],
                'popsize': opts['population'],
                'seed': opts['seed'] + 7919 * i + 1,  # cma: 0 means "from the clock"
                'maxiter': opts['generations'],
                'verbose': -9,
                'tolfun': opts['tolerance'] * float(_cost(residuals([spaces[0].prior], win))[0]),
            },
        )
        for i, start in enumerate(starts)
    ]
    evaluations, generation = 0, 0
    culled: set[int] = set()
    # Each run's start-state sensitivity, at its best point so far (refreshed every 10th
    # generation): runs in different spaces are different models.
    sens: dict[int, np.ndarray] = {}
    while time.monotonic() < deadline:
        live = [i for i, es in enumerate(runs) if not es.stop() and i not in culled]
        if not live:
            break
        generation += 1
        if cull and generation > CULL_AFTER and generation % 10 == 0:
            lead_cost = min(es.result.fbest for es in runs)
            worse = [i for i in live if runs[i].result.fbest > CULL_RATIO * lead_cost]
            culled.update(worse)
            live = [i for i in live if i not in worse]
        asked = [runs[i].ask() for i in live]
        flat = [of[i].params(x) for i, xs in zip(live, asked, strict=True) for x in xs]
        groups = [len(xs) for xs in asked]
        # Each run's start-state sensitivity at its best point so far (at its start in the
        # first generation), refreshed every 10th generation in the same batch: runs in
        # different spaces are different models.
        refresh = [] if generation % 10 != 1 else live
        probed = [
            of[i].params(starts[i] if runs[i].result.xbest is None else runs[i].result.xbest)
            for i in refresh
        ]
        errors, _, fresh = _simulate_errors(flat, win, probed)
        sens.update(zip(refresh, fresh, strict=True))
        costs = _cost(_grouped(errors, np.stack([sens[i] for i in live]), groups))
        evaluations += len(flat)
        k = 0
        for i, xs in zip(live, asked, strict=True):
            runs[i].tell(xs, list(costs[k : k + len(xs)]))
            k += len(xs)
        if generation % 50 == 0:
            lead = min(range(len(runs)), key=lambda i: runs[i].result.fbest)
            best = of[lead].params(runs[lead].result.xbest)
            shown = ', '.join(f'{f.name}={getattr(best, f.name):.4g}' for f in of[lead].fitted)
            log(f'    generation {generation}: cost {runs[lead].result.fbest:.4g} | {shown}')
    else:
        log(f'  time_limit_s reached after {generation} generations')
    # Each run's best sample or its start, whichever costs less (CMA-ES never samples its
    # start; a run the deadline stopped before its first generation has only that).
    ends = [
        np.asarray(start if es.result.xbest is None else es.result.xbest)
        for es, start in zip(runs, starts, strict=True)
    ]
    n = len(runs)
    both = own_costs([of[i % n].params(x) for i, x in enumerate([*ends, *starts])], win)
    finals = [ends[i] if both[i] <= both[n + i] else np.asarray(starts[i]) for i in range(n)]
    exact = [float(min(both[i], both[n + i])) for i in range(n)]
    return finals, exact, evaluations + 2 * n


CULL_AFTER = 50
CULL_RATIO = 2.0
"""A restart costing more than this many times the best one after :data:`CULL_AFTER`
generations is stopped: on the stuck rig's excitation the two starts that lost ended at 4.8
and 16 times the winner's cost, and culling them took the identification from 88 to 76 s."""

#: How many of a scan's plateaus are polished.
SCAN_CANDIDATES = 2


def _scan(
    space: _Space, win: Windows, x: np.ndarray, cost: float, i: int
) -> tuple[list[tuple[np.ndarray, float]], int]:
    """A grid over parameter ``i``'s range, the others held at ``x``.

    The cost of a stepped parameter is flat between steps: a run of equal costs on the grid
    is one plateau, represented by its middle point. Returns ``x`` with parameter ``i`` set
    to each of the best :data:`SCAN_CANDIDATES` plateaus lower than both neighbours that
    cost less than ``cost`` (``x``'s), with their costs; and the grid's evaluations.
    """
    f = space.fitted[i]
    lo, hi = space.bounds[i]
    values = np.linspace(lo, hi, round((hi - lo) / f.scan) + 1)
    points = [x.copy() for _ in values]
    for point, value in zip(points, values, strict=True):
        point[i] = space.unit(i, float(value))
    errors, _, sens = _simulate_errors([space.params(p) for p in points], win, [space.params(x)])
    costs = _cost(_corrected(errors, sens[0]))  # at x, as ``cost`` is
    edges = [0, *(np.flatnonzero(np.diff(costs) != 0) + 1), len(costs)]
    plateaus = []
    for j, (a, b) in enumerate(zip(edges[:-1], edges[1:], strict=True)):
        left = costs[edges[j - 1]] if j > 0 else np.inf
        right = costs[b] if b < len(costs) else np.inf
        if costs[a] < min(left, right, cost):
            plateaus.append((points[(a + b - 1) // 2], float(costs[a])))
    plateaus.sort(key=lambda pc: pc[1])
    return plateaus[:SCAN_CANDIDATES], len(points)


LINE_POINTS = 9
"""Points of :func:`_line` across a term's range."""


def _line(
    space: _Space, win: Windows, x: np.ndarray, cost: float, i: int
) -> tuple[list[tuple[np.ndarray, float]], int]:
    """Parameter ``i`` at :data:`LINE_POINTS` points across its range, the others held at ``x``.

    As :func:`_scan` returns: the best point if it costs less than ``cost`` (``x``'s), with its
    cost, and the evaluations (one batch).
    """
    points = [x.copy() for _ in range(LINE_POINTS)]
    for point, u in zip(points, np.linspace(0.0, 1.0, LINE_POINTS), strict=True):
        point[i] = u
    errors, _, sens = _simulate_errors([space.params(p) for p in points], win, [space.params(x)])
    costs = _cost(_corrected(errors, sens[0]))  # at x, as ``cost`` is
    j = int(np.argmin(costs))
    return ([(points[j], float(costs[j]))] if costs[j] < cost else []), len(points)


def _uncertainty(space: _Space, win: Windows, best: PendulumParams) -> np.ndarray:
    """Each parameter's standard deviation at the optimum.

    Gauss-Newton standard deviations in each parameter's unit, inflated by the residuals'
    correlation time (consecutive errors of a window are not independent).
    """
    probes, steps = [], []
    for f, (lo, hi) in zip(space.fitted, space.bounds, strict=True):
        value = getattr(best, f.name)
        h = f.step(value) or f.probe
        centre = min(max(value, lo + h), hi - h)  # central differences inside the range
        steps.append(h)
        probes += [_with(best, **{f.name: centre + h}), _with(best, **{f.name: centre - h})]
    res = residuals([best, *probes], win)
    r0 = res[0].reshape(-1)
    d = len(steps)
    jac = np.stack(
        [(res[1 + 2 * i] - res[2 + 2 * i]).reshape(-1) / (2 * steps[i]) for i in range(d)],
        axis=1,
    )
    s2 = float(r0 @ r0) / max(1, len(r0) - d)
    cov = s2 * _correlation_time(res[0]) * np.linalg.pinv(jac.T @ jac)
    return np.sqrt(np.clip(np.diag(cov), 0.0, None))


def _correlation_time(res: np.ndarray) -> float:
    """The residuals' correlation time.

    Integrated autocorrelation time of the errors, in samples (at least 1): the largest of
    the windows' arm and pendulum error series.
    """
    w = (res.shape[-1] - 4) // 2
    total = 1.0
    for series in [*res[:, :w], *res[:, w : 2 * w]]:
        r = series - series.mean()
        var = float(r @ r)
        if var <= 0:
            continue
        tau = 1.0
        for lag in range(1, min(50, len(r) // 4)):
            rho = float(r[:-lag] @ r[lag:]) / var
            if rho < 0.05:
                break
            tau += 2.0 * rho
        total = max(total, tau)
    return total


def _loosest(fitted: list[Fitted], best: PendulumParams, std: np.ndarray) -> str | None:
    """The parameter the data determines least, if any is not determined.

    Least: its uncertainty over its tolerance.
    """
    ratios = {
        f.name: s / f.tolerance(getattr(best, f.name)) for f, s in zip(fitted, std, strict=True)
    }
    loose = {n: r for n, r in ratios.items() if not r <= 1.0}  # NaN counts as loose
    if not loose:
        return None
    return max(loose, key=lambda n: math.inf if math.isnan(loose[n]) else loose[n])


def identify(
    records: list[Record],
    prior: PendulumParams,
    opts: dict[str, Any],
    log: Callable[[str], object] = print,
) -> tuple[Identification, Windows]:
    """Fit the model to the records; see the module docstring.

    The base model (:data:`FITTED`) is fitted to all but the held-out windows
    (:func:`held_out_split`); each of :data:`TERMS` is then tried and kept only if it lowers
    the held-out cost (:func:`select_terms`); last, the chosen model is fitted to all the data,
    and what the data does not determine keeps the prior's value.
    """
    t0 = time.monotonic()
    period = 1.0 / float(opts['rate_hz'])
    win, seconds = _windows(records, opts, log)
    deadline = t0 + opts['time_limit_s']
    fit_win, held_win = held_out_split(win)
    if held_win is None:
        log('  too few windows to hold any out: the base model, no term tried')
        kept: list[Term] = []
        selection, start, evaluations = None, prior, 0
    else:
        selection, kept, start, evaluations = select_terms(
            fit_win, held_win, prior, period, opts, deadline, log
        )
    # Without a selection the full search; after one, the chosen model refined on all the
    # data, with a polish's first step: it starts at the optimum of three quarters of them.
    refine = {**_quick(opts), 'initial_step': opts['initial_step'] * POLISH_STEP}
    fit_opts, margin = (opts, 0.05) if selection is None else (refine, 0.0)
    fitted = [*FITTED, *(t.fitted for t in kept)]
    best, std, fitted, undetermined, n_eval = _fit(
        fitted, win, prior, start, period, fit_opts, deadline, log, margin
    )
    by_name = {f.name: float(s) for f, s in zip(fitted, std, strict=True)}
    estimates = [
        Estimate(f.name, getattr(prior, f.name), getattr(best, f.name), by_name[f.name], True)
        if f.name in by_name
        else Estimate(f.name, getattr(prior, f.name), getattr(prior, f.name), math.nan, False)
        for f in ALL_FITTED
    ]
    res = rms(residuals([best], win)[0])
    prior_res = rms(residuals([prior], win)[0])
    result = Identification(
        params=best,
        estimates=estimates,
        rms_theta_rad=res[0],
        rms_alpha_rad=res[1],
        prior_rms_theta_rad=prior_res[0],
        prior_rms_alpha_rad=prior_res[1],
        seconds_of_data=seconds,
        windows=win.count,
        evaluations=evaluations + n_eval,
        wall_s=time.monotonic() - t0,
        undetermined=[u for u in undetermined if u in {f.name for f in FITTED}],
        selection=selection,
    )
    return result, win


def _windows(
    records: list[Record], opts: dict[str, Any], log: Callable[[str], object]
) -> tuple[Windows, float]:
    """The chosen records cut into windows, and their seconds of data."""
    period = 1.0 / float(opts['rate_hz'])
    chosen = select(records, opts['max_seconds'])
    if not chosen:
        raise ValueError('no unbroken run of transitions to identify from')
    ticks = max(2, round(opts['window_seconds'] / period))
    upright = max(2, round(opts['upright_window_seconds'] / period))
    win = make_windows(chosen, ticks, LATENCY_PERIODS + 1, upright)
    seconds = sum(r.seconds for r in chosen)
    n_exc = sum(r.excitation for r in chosen)
    log(
        f'identifying from {seconds:.1f} s of rig data ({len(chosen)} records, {n_exc} of them '
        f'excitation; {win.count} windows of up to {ticks} ticks)'
    )
    return win, seconds


def _fit(
    fitted: list[Fitted],
    win: Windows,
    prior: PendulumParams,
    start: PendulumParams,
    period: float,
    opts: dict[str, Any],
    deadline: float,
    log: Callable[[str], object],
    margin: float,
) -> tuple[PendulumParams, np.ndarray, list[Fitted], list[str], int]:
    """Fit ``fitted`` to ``win`` from ``start``; drop (to the prior) what is not determined.

    ``margin``: how far inside the search range's faces the start is moved (0: a start
    refined, taken as it is). Returns the best parameters, the uncertainties of what stayed
    fitted, what stayed fitted, what was dropped, and the evaluations.
    """
    base, evaluations, undetermined = start, 0, list[str]()
    kept: tuple[PendulumParams, np.ndarray, list[Fitted], float] | None = None
    while True:
        space = _Space(fitted, prior, period)
        x, n_eval = _search(space, win, space.start(base, margin), opts, deadline, log)
        evaluations += n_eval
        best = space.params(x)
        cost = float(_cost(residuals([best], win))[0])
        if kept is not None and cost > (1.0 + TERM_GAIN) * kept[3]:
            # The data needs what was dropped, though it knows it loosely (a model that does
            # not explain the rig inflates every uncertainty): keep it, with its uncertainty.
            log(f'  {undetermined.pop()}: needed (cost {kept[3]:.5g} -> {cost:.5g}): kept')
            return kept[0], kept[1], kept[2], undetermined, evaluations
        std = _uncertainty(space, win, best)
        shown = ', '.join(
            f'{f.name}={getattr(best, f.name):.4g} ± {sd:.2g}'
            for f, sd in zip(fitted, std, strict=True)
        )
        log(f'  fit: {shown}')
        worst = _loosest(fitted, best, std)
        if worst is None:
            return best, std, fitted, undetermined, evaluations
        kept = (best, std, fitted, cost)
        # Keep the prior for what the data does not determine; fit the rest again.
        undetermined.append(worst)
        log(
            f'  {worst}: not determined by this data: keeping the prior value '
            f'{getattr(prior, worst):.4g}; fitting the rest again'
        )
        fitted = [f for f in fitted if f.name != worst]
        base = _with(best, **{worst: getattr(prior, worst)})
        if not fitted:
            return prior, np.zeros(0), fitted, undetermined, evaluations


def _quick(opts: dict[str, Any]) -> dict[str, Any]:
    """A search's options for refining a point: no restarts, no grid scan, a short first step."""
    return {
        **opts,
        'restarts': 0,
        'scan': '',
        'initial_step': opts['initial_step'] * QUICK_STEP,
        'generations': max(1, round(opts['generations'] * POLISH_GENERATIONS)),
    }


def held_out_split(win: Windows) -> tuple[Windows, Windows | None]:
    """The windows to fit to, and those held out (``None`` when too few to spare any).

    Every :data:`HELD_OUT_EVERY`-th block of :data:`HELD_OUT_BLOCK` consecutive windows is
    held out: a share of every record, in stretches long enough that a held-out window's
    neighbours do not give it away.
    """
    block = np.arange(win.count) // HELD_OUT_BLOCK
    held = block % HELD_OUT_EVERY == HELD_OUT_EVERY - 1
    if held.sum() < HELD_OUT_BLOCK or (~held).sum() < 2 * HELD_OUT_BLOCK:
        return win, None
    return _subset(win, np.flatnonzero(~held)), _subset(win, np.flatnonzero(held))


def _subset(win: Windows, rows: np.ndarray) -> Windows:
    """The windows ``rows`` of ``win``."""
    return Windows(
        **{f.name: getattr(win, f.name)[rows] for f in fields(Windows) if f.name != 'source'},
        source=[win.source[i] for i in rows],
    )


def select_terms(
    fit_win: Windows,
    held_win: Windows,
    prior: PendulumParams,
    period: float,
    opts: dict[str, Any],
    deadline: float,
    log: Callable[[str], object],
) -> tuple[dict[str, Any], list[Term], PendulumParams, int]:
    """Which :data:`TERMS` the data asks for, judged by held-out multi-step prediction.

    Forward selection: the base model is searched on ``fit_win``; then, round by round, each
    term not yet kept is added alone to the model so far and refined from its best (a round's
    trials in one batch, :func:`_trials`), and the one that predicts ``held_win`` best is kept
    if it lowers the held-out cost by more than :data:`TERM_GAIN` and its size is beyond its
    resolution. The rounds end when no term passes. Returns the record of the selection (each
    term's held-out cost and verdict, the held-out RMS per channel of the base and the chosen
    model, what is left unexplained), the terms kept, the chosen model's parameters and the
    evaluations.
    """
    space = _Space(list(FITTED), prior, period)
    x, evaluations = _search(space, fit_win, space.start(prior), opts, deadline, log)
    best = space.params(x)
    base_res = residuals([best], held_win)[0]
    cost = float(_cost(base_res[None])[0])
    log(f'  held out: {held_win.count} windows; base model held-out cost {cost:.5g}')
    kept: list[Term] = []
    verdicts: dict[str, Any] = {}
    while len(kept) < len(TERMS) and time.monotonic() < deadline:
        left = [t for t in TERMS if t not in kept]
        extra = [t.fitted for t in kept]
        # The model so far refined as the trials are (the control: a trial's gain over it is
        # the term's, not the refinement's), and each term added to it.
        tried, n_eval = _trials(
            [None, *left], best, fit_win, prior, period, opts, deadline, log, extra
        )
        evaluations += n_eval
        held = [float(c) for c in own_costs(tried, held_win)]
        if held[0] < cost:
            best, cost = tried[0], held[0]
        for term, candidate, h in zip(left, tried[1:], held[1:], strict=True):
            verdicts[term.fitted.name] = _verdict(term, candidate, cost, h)
        passing = [i for i, t in enumerate(left) if verdicts[t.fitted.name]['passes']]
        if not passing:
            break
        i = min(passing, key=lambda j: held[j + 1])
        kept.append(left[i])
        best, cost = tried[i + 1], held[i + 1]
        log(f'  term {left[i].name} kept: held-out cost {cost:.5g}')
    for name, v in verdicts.items():
        v['kept'] = any(t.fitted.name == name for t in kept)
        log(
            f'  term {v["term"]} ({name}={v["value"]:.4g}): held-out cost '
            f'{v["held_out_cost_without"]:.5g} -> {v["held_out_cost_with"]:.5g}: '
            + ('kept' if v['kept'] else 'left out')
        )
    selection = _selection(verdicts, kept, best, base_res, held_win, prior, log)
    return selection, kept, best, evaluations


def _verdict(term: Term, candidate: PendulumParams, cost: float, held: float) -> dict[str, Any]:
    """A term's trial: its value, the held-out cost without and with it, whether it passes."""
    name = term.fitted.name
    size = abs(getattr(candidate, name) - getattr(PendulumParams(), name))
    return {
        'term': term.name,
        'value': float(getattr(candidate, name)),
        'held_out_cost_without': cost,
        'held_out_cost_with': held,
        # Better predictions, and an effect the data tells from none: a value within its
        # resolution of neutral would only let the other parameters move.
        'passes': held < (1.0 - TERM_GAIN) * cost and size > term.fitted.resolution,
    }


def _trials(
    terms: list[Term | None],
    base: PendulumParams,
    win: Windows,
    prior: PendulumParams,
    period: float,
    opts: dict[str, Any],
    deadline: float,
    log: Callable[[str], object],
    extra: list[Fitted] | None = None,
) -> tuple[list[PendulumParams], int]:
    """The base model, ``extra`` and each term (none, for ``None``), refined from ``base``.

    One quick CMA-ES run per term, all in lockstep (one batch a generation), each from the
    best point of a line through the term's range (:func:`_line`; a term whose cost steps,
    :attr:`Fitted.scan`, from its grid's best plateau). From the term's neutral value alone,
    a quick run's small first step rarely leaves the base model's optimum: static friction
    at 0 sits on its range's face, and every sample that moves the others costs more.

    A term whose line (or grid) lowers the cost nowhere is not refined: it comes back as
    ``base`` (the term neutral), and so does the base model itself when no term is refined.
    On a rig the model explains, that is every term: the round costs its lines alone (on the
    stuck rig's excitation every refined term had come back at neutral, in 28 s).
    """
    runs: list[tuple[int, _Space, np.ndarray]] = []  # (index in terms, space, start)
    evaluations = 0
    for j, term in enumerate(terms):
        fitted = [*FITTED, *(extra or [])] + ([term.fitted] if term else [])
        space = _Space(fitted, prior, period)
        x0 = space.start(base, 0.0)
        if term is not None:
            c0 = float(own_costs([space.params(x0)], win)[0])
            scan = _scan if term.fitted.scan else _line
            found, n = scan(space, win, x0, c0, len(fitted) - 1)
            evaluations += n
            if not found:
                continue
            x0 = found[0][0]
        runs.append((j, space, x0))
    out = [base] * len(terms)
    if all(terms[j] is None for j, _, _ in runs):  # no term to refine: nor the base alone
        return out, evaluations
    quick = _quick(opts)
    spaces, starts = [r[1] for r in runs], [r[2] for r in runs]
    finals, _, n = _lockstep(spaces, win, starts, quick['initial_step'], quick, deadline, log)
    for (j, space, _), x in zip(runs, finals, strict=True):
        out[j] = space.params(x)
    return out, evaluations + n


def _selection(
    verdicts: dict[str, Any],
    kept: list[Term],
    chosen: PendulumParams,
    base_res: np.ndarray,
    held_win: Windows,
    prior: PendulumParams,
    log: Callable[[str], object],
) -> dict[str, Any]:
    """The selection's record, and its log line on what the chosen model leaves unexplained."""
    rms_chosen = rms(residuals([chosen], held_win)[0])
    base = rms(base_res)
    counts = max(rms_chosen) / (2.0 * math.pi / prior.encoder_counts_per_rev)
    gap = counts > GAP_COUNTS
    widen = min(MAX_WIDENING, max(1.0, counts / GAP_COUNTS))
    log(
        f'  held-out RMS: theta {rms_chosen[0]:.4f} rad, alpha {rms_chosen[1]:.4f} rad '
        f'({counts:.2f} encoder counts; the base model {base[0]:.4f}, {base[1]:.4f}); terms: '
        + (', '.join(t.name for t in kept) or 'none')
        + (
            f'. The model does not explain this rig: expect a gap (the re-training is '
            f'randomised {widen:.2g} times wider)'
            if gap
            else ''
        )
    )
    return {
        'held_out_windows': held_win.count,
        'terms': verdicts,
        'held_out_rms_rad': {'theta': rms_chosen[0], 'alpha': rms_chosen[1]},
        'base_held_out_rms_rad': {'theta': base[0], 'alpha': base[1]},
        'unexplained_counts': counts,
        'expect_gap': gap,
        'randomization_scale': widen,
    }


# -- input and output -------------------------------------------------------------------------


def load_records(opts: dict[str, Any]) -> tuple[list[Record], str]:
    """The records of the one data source given, and a description of it.

    The source: ``run:=``, ``buffer:=`` or ``bag:=``. Raises :class:`ValueError` naming a
    missing or unreadable source.
    """
    from rip_control import buffer_file

    given = [k for k in ('run', 'buffer', 'bag') if opts[k]]
    if len(given) != 1:
        raise ValueError(
            'give exactly one of run:=DIR, buffer:=FILE or bag:=DIR'
            + (f' (got {", ".join(given)})' if given else '')
        )
    rate, max_v = float(opts['rate_hz']), float(opts['max_action_v'])
    if opts['bag']:
        from rip_control.bags import KEY_SIZES, custom_data, read_transitions
        from rip_control.rig.env import ACTION_SIZE, OBS_SIZE

        path = Path(opts['bag'])
        if not path.exists():
            raise ValueError(f'bag:={path}: no such bag')
        sizes = custom_data(path).get(KEY_SIZES, f'{OBS_SIZE},{ACTION_SIZE}')
        obs_size, action_size = (int(v) for v in sizes.split(','))
        got = read_transitions(
            [path],
            rate_hz=rate,
            obs_size=obs_size,
            action_size=action_size,
            dt_tolerance_s=1.0 / rate,  # a late tick is data too: its dt was measured
        )
        arrays = buffer_file.arrays_from_transitions(list(got.transitions))
        source = f'bag {path} ({len(got.transitions)} transitions)'
    else:
        paths = (
            [Path(f) for f in str(opts['buffer']).split(',')]
            if opts['buffer']
            else [Path(opts['run']) / run_files.BUFFER]
        )
        parts: list[str] = []
        records: list[Record] = []
        for path in paths:
            if not path.exists():
                raise ValueError(
                    f'{"buffer" if opts["buffer"] else "run"}:= no replay buffer at {path}'
                )
            arrays, meta = buffer_file.load(path, rate_hz=rate, obs_size=None, action_size=None)
            if not len(arrays['rewards']):
                raise ValueError(f'replay buffer {path} (0 transitions): no transitions')
            # Each file numbers its episodes from 0: a later file's are the newer ones.
            first = 1 + max((r.episode for r in records), default=-1)
            arrays = {**arrays, 'episodes': arrays['episodes'] + first}
            records += records_from_arrays(arrays, 1.0 / rate, max_v)
            parts.append(f'{path} ({meta.count} transitions)')
        source = ('replay buffers ' if len(paths) > 1 else 'replay buffer ') + ' and '.join(parts)
        return records, source
    if not arrays or not len(arrays['rewards']):
        raise ValueError(f'{source}: no transitions')
    return records_from_arrays(arrays, 1.0 / rate, max_v), source


def _yaml_text(result: Identification, source: str, prior_name: str) -> str:
    """The rig YAML's text.

    ``rig:`` every parameter (what the emulator and pretrain load),
    ``identification:`` how each fitted value was found.
    """
    import yaml

    shipped = PendulumParams()  # each field's type (int or float), for a plain YAML
    rig = {
        f.name: type(getattr(shipped, f.name))(getattr(result.params, f.name))
        for f in fields(PendulumParams)
    }
    ident = {'source': source, 'prior': prior_name, **result.summary()}
    head = (
        '# Rig physics identified from its own transitions (python -m rip_learner.identify).\n'
        '# rig: what the emulator and pretrain load (rig_params:=THIS_FILE);\n'
        '# identification: each fitted value with its uncertainty (one std), the prior and\n'
        '# whether the data determined it (if not, the prior value is kept).\n'
    )
    body = yaml.safe_dump({'rig': rig, 'identification': ident}, sort_keys=False)
    return head + body


def write_yaml(path: Path, result: Identification, source: str, prior_name: str) -> None:
    """Write the rig YAML atomically."""
    atomic_write_bytes(path, _yaml_text(result, source, prior_name).encode())


def plot(path: Path, result: Identification, prior: PendulumParams, win: Windows) -> None:
    """Plot predicted (identified and prior) against measured angles.

    Over the first record's windows (the newest excitation's, if any), each window simulated
    from its measured start.
    """
    import matplotlib

    matplotlib.use('Agg')
    import matplotlib.pyplot as plt

    by_record: dict[int, list[int]] = {}
    for i, (ri, _) in enumerate(win.source):
        by_record.setdefault(ri, []).append(i)
    record = min(by_record)  # the first chosen: the newest excitation, if there is one
    rows = by_record[record]
    sub = _subset(win, np.array(rows))
    (th_fit, al_fit), (th_pri, al_pri) = (
        (a[0], b[0]) for a, b in (simulate([p], sub) for p in (result.params, prior))
    )
    fig, ax = plt.subplots(2, 1, figsize=(11, 5.5), sharex=True)
    offset = 0.0
    for j in range(sub.count):
        m = sub.mask[j]
        t = offset + sub.read_t[j][m]
        for row, (meas, fit, pri) in enumerate(
            ((sub.theta, th_fit, th_pri), (sub.alpha, al_fit, al_pri))
        ):
            ax[row].plot(
                t, meas[j][m], color='black', lw=1.2, label='measured' if j == 0 else None
            )
            ax[row].plot(
                t, fit[j][m], color='tab:blue', lw=1.0, label='identified' if j == 0 else None
            )
            ax[row].plot(
                t, pri[j][m], color='tab:red', lw=0.8, ls='--', label='prior' if j == 0 else None
            )
        offset = t[-1]
    ax[0].set(ylabel='arm angle theta (rad)')
    ax[1].set(ylabel='pendulum angle alpha (rad, 0 hanging)', xlabel='time in the record (s)')
    ax[0].set_title(
        f'each {win.read_t.shape[1] - 1}-tick window simulated from its measured start; RMS '
        f'identified {result.rms_theta_rad:.3g}/{result.rms_alpha_rad:.3g} rad, '
        f'prior {result.prior_rms_theta_rad:.3g}/{result.prior_rms_alpha_rad:.3g} rad',
        fontsize=9,
    )
    ax[0].legend(fontsize=8, loc='upper right')
    fig.tight_layout()
    tmp = path.with_name(f'.{path.name}.tmp.png')
    fig.savefig(tmp, dpi=100)
    plt.close(fig)
    tmp.replace(path)


def run(opts: dict[str, Any], log: Callable[[str], object] = print) -> tuple[Identification, Path]:
    """Load, identify, write the YAML (and the plot); return the result and the YAML's path."""
    records, source = load_records(opts)
    return run_records(records, source, opts, log)


def run_records(
    records: list[Record], source: str, opts: dict[str, Any], log: Callable[[str], object] = print
) -> tuple[Identification, Path]:
    """:func:`run` on records already loaded (``source`` describes them)."""
    log(f'identify: {source}: {len(records)} unbroken records')
    if opts['prior']:
        prior, prior_name = PendulumParams.from_yaml(opts['prior']), str(opts['prior'])
    else:
        prior, prior_name = PendulumParams(), 'QUBE-Servo 2 defaults (PendulumParams)'
    if opts['out']:
        out = Path(opts['out'])
    elif opts['run']:
        out = Path(opts['run']) / run_files.IDENTIFIED_RIG
    else:
        raise ValueError('out:=PATH.yaml is needed with buffer:= or bag:=')
    result, win = identify(records, prior, opts, log)
    write_yaml(out, result, source, prior_name)
    log(f'identify: wrote {out}')
    for e in result.estimates:
        verdict = (
            f'{e.value:.4g} ± {e.std:.2g}'
            if e.determined
            else f'not determined: kept the prior {e.prior:.4g}'
        )
        log(f'  {e.name:38s} {verdict}')
    log(
        f'  residual RMS theta {result.rms_theta_rad:.4f} rad, alpha {result.rms_alpha_rad:.4f} '
        f'rad (prior: {result.prior_rms_theta_rad:.4f}, {result.prior_rms_alpha_rad:.4f}); '
        f'{result.wall_s:.1f} s'
    )
    if opts['plot']:
        figure = out.with_suffix('.png')
        plot(figure, result, prior, win)
        log(f'identify: wrote {figure}')
    return result, out


def main(argv: list[str] | None = None) -> int:
    """Command line: ``name:=value`` options (see ``--help``)."""
    argv = sys.argv[1:] if argv is None else argv
    if help_requested(argv, __doc__, OPTIONS):
        return 0
    try:
        opts = parse_options(argv, OPTIONS)
        run(opts, log=lambda line: print(line, flush=True))
    except (ValueError, FileNotFoundError) as exc:
        print(f'identify: {exc}', file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print('identify: interrupted', file=sys.stderr)
        return 130
    return 0


if __name__ == '__main__':
    sys.exit(main())
