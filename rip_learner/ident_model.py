"""The model an identification fits, and how well a parameter set predicts the data.

What is fitted: :data:`FITTED`, the base model, and :data:`TERMS`, the terms a rig may need
beyond it, each parameter a :class:`Fitted` (a :class:`PendulumParams` field, its search range
and the resolution at which it counts as determined). How well a parameter set predicts: every
window simulated from its measured start for many parameter sets in one batch, the
emulator's own equations compiled (:func:`simulate`), the prediction errors with each
window's start state corrected (:func:`residuals`), and their costs (:func:`cost_of`,
:func:`own_costs`).
"""

from __future__ import annotations

from dataclasses import dataclass, fields
import math
from typing import Any

import numba
import numpy as np

from rip_control.rig.dynamics import (
    Coefficients,
    PendulumParams,
    accelerations,
    effective_voltage,
    lagged_voltage,
    rk4_step,
)
from rip_learner.ident_data import Windows

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
#: A term is kept when it lowers the held-out cost by more than this fraction; a parameter the
#: data does not determine stays fitted when the fit without it costs this fraction more.
TERM_GAIN = 0.03


#: Not fitted: motion alone cannot tell a rig from one with every mass, damping and friction
#: scaled by the same factor and the torque per volt too, so one mass sets the scale. The
#: arm's is the prior's (weigh it, and give it in ``prior:=``); the pendulum's is fitted
#: relative to it.
SCALE = 'arm_mass_kg'


# -- the batched simulation -------------------------------------------------------------------


class _Batch:
    """Attribute access to a batch of parameter sets (arrays of one value per rig)."""

    def __init__(self, sets: list[PendulumParams], repeat: int) -> None:
        for f in fields(PendulumParams):
            values = np.array([getattr(p, f.name) for p in sets], dtype=np.float64)
            setattr(self, f.name, np.repeat(values, repeat))


def _records(k: Coefficients) -> np.ndarray:
    """A batch's :class:`Coefficients` as records, one a rig (what the compiled loop reads)."""
    columns = {name: np.asarray(value) for name, value in vars(k).items()}
    out = np.empty(len(columns['jp']), dtype=[(n, c.dtype) for n, c in columns.items()])
    for name, column in columns.items():
        out[name] = column
    return out


# The emulator's own equations (rip_control.rig.dynamics), compiled for the loop below: the
# same source, no second copy of them. Compiled in each process at its first simulation.
for _equation in (accelerations, rk4_step, lagged_voltage):
    numba.extending.register_jitable(_equation)
_effective_voltage = numba.vectorize(effective_voltage)


@numba.njit(parallel=True)
def _integrate(
    k: np.ndarray,
    x0: np.ndarray,
    volts: np.ndarray,
    motor0: np.ndarray,
    lag: np.ndarray,
    h: float,
    read_step: np.ndarray,
    theta: np.ndarray,
    alpha: np.ndarray,
) -> None:  # pragma: no cover - compiled (its results are the identification tests')
    """Each rig ``r`` integrated from ``x0[r]`` under ``volts[:, r]``, read at ``read_step[r]``.

    Into ``theta[r]`` and ``alpha[r]``: the state after ``read_step[r, j]`` physics steps.
    """
    for r in numba.prange(k.shape[0]):
        last = read_step[r].max()
        hist = np.empty((last + 1, 2))
        kr = k[r]
        x = (x0[r, 0], x0[r, 1], x0[r, 2], x0[r, 3])
        hist[0, 0], hist[0, 1] = x[0], x[1]
        motor = motor0[r]
        for i in range(last):
            motor = lagged_voltage(motor, volts[i, r], h, lag[r])
            x = rk4_step(kr, x, h, motor, 1.0)
            hist[i + 1, 0], hist[i + 1, 1] = x[0], x[1]
        for j in range(read_step.shape[1]):
            theta[r, j] = hist[read_step[r, j], 0]
            alpha[r, j] = hist[read_step[r, j], 1]


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

    Every set and window is a rig of one batch, integrated on every core with the emulator's
    equations and fixed step (the first set's ``physics_rate_hz``; at half of it, 1 kHz, the
    stuck rig's pendulum damping came out at a third of its value), each up to its own last
    reading; the short windows (near upright) apart from the long ones, so that the step
    voltages of a short one are not laid out for a long one's steps. ``start_offsets``
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
    v_eff = _effective_voltage(tile(win.switch_v), max_v, dz, off)
    v0 = _effective_voltage(tile(win.v_before), *limits)
    read_step = np.tile(read_step, (p_n, 1))
    volts = _step_voltages(switch_t, v_eff, v0, h, int(read_step.max()))
    start = [tile(a) for a in (win.theta[:, 0], win.alpha[:, 0], win.theta_dot0, win.alpha_dot0)]
    if start_offsets is not None:
        start = [a + np.repeat(start_offsets[:, i], s_n) for i, a in enumerate(start)]
    theta = np.empty(read_step.shape)
    alpha = np.empty(read_step.shape)
    # the motor starts at the voltage in force before the window
    x0 = np.stack(start, axis=1).astype(np.float64)
    _integrate(_records(k), x0, volts, v0, b.actuator_lag_s, h, read_step, theta, alpha)
    return theta.reshape(p_n, s_n, -1), alpha.reshape(p_n, s_n, -1)


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
    return simulate_errors([], win, sets)[2]


def simulate_errors(
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
        r0, _, at_first = simulate_errors(sets, win, [sets[0]])
        return corrected(r0, at_first[0])
    r0 = _errors(*simulate(sets, win), win)  # (P, S, 2W)
    if sens.ndim == 3:
        return corrected(r0, sens)
    return grouped(r0, sens, groups if groups is not None else [1] * len(sets))


def grouped(r0: np.ndarray, sens: np.ndarray, sizes: list[int]) -> np.ndarray:
    """:func:`corrected` of consecutive groups of ``sizes`` sets, each at its sensitivity."""
    if len(sizes) != len(sens) or sum(sizes) != len(r0):
        raise ValueError(f'{len(sens)} sensitivities for groups {sizes} of {len(r0)} sets')
    cuts = np.cumsum([0, *sizes])
    return np.concatenate(
        [corrected(r0[a:b], g) for a, b, g in zip(cuts[:-1], cuts[1:], sens, strict=True)]
    )


def corrected(r0: np.ndarray, sens: np.ndarray) -> np.ndarray:
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
    _, r0, sens = simulate_errors([], win, sets)
    return cost_of(grouped(r0, sens, [1] * len(sets)))


_NOISE_RAD = 2.0 * math.pi / 2048  # one encoder count: the scale of the ridge prior


def rms(res: np.ndarray) -> tuple[float, float]:
    """RMS of the arm and pendulum errors of one set's :func:`residuals` (``(S, n)``)."""
    w = (res.shape[-1] - 4) // 2
    return (
        float(np.sqrt(np.mean(res[:, :w] ** 2))),
        float(np.sqrt(np.mean(res[:, w : 2 * w] ** 2))),
    )


def cost_of(res: np.ndarray) -> np.ndarray:
    """Each set's cost: the sum of squares of its :func:`residuals` (``(P, S, n)`` -> ``(P,)``)."""
    return (res**2).sum(axis=(1, 2))
