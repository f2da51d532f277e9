"""Nonlinear rotary inverted pendulum (Furuta) dynamics with a DC motor voltage model.

One implementation backs both the real-time rig emulator and the plain gymnasium simulator,
so the two can never drift apart.

Coordinates: ``theta`` is the arm angle about the vertical motor axis; ``alpha`` is the
pendulum angle about the arm, **zero hanging down**, ``pi`` upright. The equations follow from
the Lagrangian of Cazzolato & Prime, "On the dynamics of the Furuta pendulum" (2011), for a
pendulum swinging in the plane perpendicular to the arm::

    M(a) [th'', a'']^T = [tau - b_r th' - 2 Jp s c th' a' + m r l s a'^2,
                          -b_p a' + Jp s c th'^2 - m g l s]^T
    M(a) = [[J_r + m r^2 + Jp s^2, m r l c], [m r l c, Jp]],   s = sin a, c = cos a

with ``Jp = f m L^2/12 + m l^2`` the pendulum's inertia about its pivot, ``l = L/2`` its centre
of mass, ``f`` (``pendulum_inertia_factor``, 1 for a thin rod) its inertia about the centre of
mass over a thin rod's, ``r`` the arm length and ``J_r`` the arm (``m_r L_r^2/12``) plus rotor
and hub inertia. Any rigid pendulum whose principal axis lies along it maps onto ``(m, L, f)``
exactly: ``L`` is then twice its centre of mass's distance from the pivot. The motor is an
armature-resistance model, ``tau = k_t (V - k_m th') / R_m``, applied only while the driver is
engaged; a disengaged driver leaves the motor open-circuit (no torque, no back-EMF braking).

The arm's torque also holds: viscous damping; friction ``(F_c + F_s exp(-(th'/v_s)^2))
tanh(th'/v_e)`` (Coulomb ``F_c`` plus a static excess ``F_s`` that decays with speed, the
Stribeck effect); and the cable's restoring torque ``-k_c th``. The voltage the motor sees is
the command clamped to the limit, zero inside a dead zone that may sit off centre (from
``-(dz - off)`` to ``dz + off``), then lagged by a first-order filter of time constant
``actuator_lag_s`` (the driver's and the winding's response). The sensing latency shifts the
readings; a transport delay of the command is indistinguishable from it in the closed loop and
in the readings, so one latency stands for both.
The arm's cable hard stop is an inelastic impact: the arm stops and the pendulum keeps its
generalised momentum.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
import math
from pathlib import Path
from typing import Any

import yaml

TWO_PI = 2.0 * math.pi
SIGNED = ('motor_dead_zone_offset_v',)
"""The parameters that may be negative."""


@dataclass(frozen=True)
class PendulumParams:
    """Physical parameters of one rig. Defaults: Quanser QUBE-Servo 2 with its pendulum."""

    # motor and amplifier
    motor_resistance_ohm: float = 8.4
    motor_torque_constant_nm_per_a: float = 0.042
    motor_back_emf_v_s_per_rad: float = 0.042
    rotor_and_hub_inertia_kg_m2: float = 4.6e-6
    max_voltage_v: float = 10.0
    motor_dead_zone_v: float = 0.0  # |V| below this produces no current (centred dead zone)
    motor_dead_zone_offset_v: float = 0.0  # the dead zone spans -(dz - this) to dz + this
    actuator_lag_s: float = 0.0  # first-order time constant of the voltage the motor sees
    # rotary arm
    arm_mass_kg: float = 0.095
    arm_length_m: float = 0.085
    arm_viscous_damping_nms_per_rad: float = 5.0e-4
    arm_coulomb_friction_nm: float = 0.0
    arm_static_friction_nm: float = 0.0  # breakaway friction above the Coulomb level
    arm_cable_stiffness_nm_per_rad: float = 0.0  # the cable's restoring torque per rad
    arm_limit_rad: float = 2.0  # cable hard stop at +/- this angle
    # pendulum
    pendulum_mass_kg: float = 0.024
    pendulum_length_m: float = 0.129
    pendulum_viscous_damping_nms_per_rad: float = 3.0e-5
    pendulum_inertia_factor: float = 1.0  # inertia about its centre of mass over a thin rod's
    gravity_m_s2: float = 9.81
    # sensing
    encoder_counts_per_rev: int = 2048
    encoder_noise_counts: float = 0.0  # std of additive noise, in counts
    sensing_latency_s: float = 0.0  # reported state is this old
    # integration
    physics_rate_hz: float = 2000.0

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if not isinstance(value, (int, float)) or not math.isfinite(value):
                raise ValueError(f'PendulumParams.{f.name} must be a finite number, got {value!r}')
        positive = (
            'motor_resistance_ohm',
            'motor_torque_constant_nm_per_a',
            'max_voltage_v',
            'arm_mass_kg',
            'arm_length_m',
            'arm_limit_rad',
            'pendulum_mass_kg',
            'pendulum_length_m',
            'gravity_m_s2',
            'encoder_counts_per_rev',
            'physics_rate_hz',
            'pendulum_inertia_factor',
        )
        for name in positive:
            if getattr(self, name) <= 0:
                raise ValueError(f'PendulumParams.{name} must be > 0, got {getattr(self, name)!r}')
        for f in fields(self):
            value = getattr(self, f.name)
            if value < 0 and f.name not in SIGNED:
                raise ValueError(f'PendulumParams.{f.name} must be >= 0, got {value!r}')
        if abs(self.motor_dead_zone_offset_v) > self.motor_dead_zone_v:
            raise ValueError(
                'motor_dead_zone_offset_v must lie within +/- motor_dead_zone_v '
                f'({self.motor_dead_zone_v!r}), got {self.motor_dead_zone_offset_v!r}'
            )
        if self.physics_rate_hz < 1000.0:
            raise ValueError(f'physics_rate_hz must be >= 1000, got {self.physics_rate_hz!r}')
        if self.arm_limit_rad > math.pi:
            raise ValueError(f'arm_limit_rad must be <= pi, got {self.arm_limit_rad!r}')

    @property
    def physics_step_s(self) -> float:
        """Fixed integration step."""
        return 1.0 / self.physics_rate_hz

    @classmethod
    def from_dict(cls, values: dict[str, Any], source: str = 'parameters') -> PendulumParams:
        """Build from a mapping, rejecting unknown keys by name."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ValueError(f'unknown pendulum parameter(s) {unknown} in {source}')
        return cls(**values)

    @classmethod
    def from_yaml(cls, path: str | Path) -> PendulumParams:
        """Load a rig description; the file may hold the keys at top level or under ``rig:``."""
        path = Path(path)
        try:
            data = yaml.safe_load(path.read_text()) or {}
        except FileNotFoundError:
            raise FileNotFoundError(f'rig parameter file not found: {path}') from None
        if not isinstance(data, dict):
            raise ValueError(f'rig parameter file {path} must hold a mapping')
        if 'rig' in data:
            data = data['rig']
        return cls.from_dict(data, source=str(path))


FRICTION_VELOCITY_RAD_S = 0.01  # the Coulomb friction's tanh smoothing velocity
STRIBECK_VELOCITY_RAD_S = 0.1  # the static friction's decay with speed


class Coefficients:
    """The constants the equations of motion use, derived from the physical parameters.

    Built from anything with the :class:`PendulumParams` attribute names whose values are
    floats (one rig) or numpy arrays (a batch of rigs: each attribute an array, one value a
    rig; :func:`rip_learner.ident_model.simulate` packs them into records, one a rig).
    """

    def __init__(self, p: Any) -> None:
        m = p.pendulum_mass_kg
        self.r = p.arm_length_m
        self.l_com = p.pendulum_length_m / 2.0
        self.jp = p.pendulum_inertia_factor * m * p.pendulum_length_m**2 / 12.0 + m * self.l_com**2
        jr = p.arm_mass_kg * p.arm_length_m**2 / 12.0 + p.rotor_and_hub_inertia_kg_m2
        self.mrl = m * self.r * self.l_com
        self.mgl = m * p.gravity_m_s2 * self.l_com
        self.j0 = jr + m * self.r**2
        self.kt_over_r = p.motor_torque_constant_nm_per_a / p.motor_resistance_ohm
        self.km = p.motor_back_emf_v_s_per_rad
        self.br = p.arm_viscous_damping_nms_per_rad
        self.bp = p.pendulum_viscous_damping_nms_per_rad
        self.fc = p.arm_coulomb_friction_nm
        self.fs = p.arm_static_friction_nm
        self.kc = p.arm_cable_stiffness_nm_per_rad
        self.limit = p.arm_limit_rad
        # Whether the rig has the optional terms (asked once here, not at every step).
        self.static = self.fs != 0.0
        self.cable = self.kc != 0.0


# The equations below are written for one rig in plain floats: the emulator and the simulator
# run them as Python, and rip_learner.ident_model compiles the same functions (numba) to run
# batches of rigs. Only math's functions and scalar arithmetic belong in them.


def accelerations(
    k: Any,
    theta: float,
    alpha: float,
    theta_dot: float,
    alpha_dot: float,
    volts: float,
    engaged: Any,
) -> tuple[float, float]:
    """``(theta'', alpha'')`` of the equations of motion (the module docstring's).

    :param k: the rig's :class:`Coefficients` (or a record with their names).
    """
    s, c = math.sin(alpha), math.cos(alpha)
    torque = engaged * k.kt_over_r * (volts - k.km * theta_dot) - k.br * theta_dot
    friction = k.fc
    if k.static:
        friction = friction + k.fs * math.exp(-((theta_dot / STRIBECK_VELOCITY_RAD_S) ** 2))
    torque = torque - friction * math.tanh(theta_dot / FRICTION_VELOCITY_RAD_S)
    if k.cable:
        torque = torque - k.kc * theta
    jps = k.jp * s
    rhs1 = torque - 2.0 * jps * c * theta_dot * alpha_dot + k.mrl * s * alpha_dot**2
    rhs2 = -k.bp * alpha_dot + jps * c * theta_dot**2 - k.mgl * s
    m11 = k.j0 + jps * s
    m12 = k.mrl * c
    det = m11 * k.jp - m12 * m12
    return (k.jp * rhs1 - m12 * rhs2) / det, (m11 * rhs2 - m12 * rhs1) / det


State = tuple[float, float, float, float]


def rk4_step(k: Any, x: State, h: float, volts: float, engaged: Any) -> State:
    """One fixed RK4 step, then the cable stop.

    One fixed RK4 step of ``(theta, alpha, theta_dot, alpha_dot)`` with the voltage held,
    then the cable stop: an impulsive, inelastic stop of the arm. The impulse acts on theta
    only, so the pendulum's generalised momentum ``M21 th' + M22 a'`` is conserved.
    """
    th, al, td, ad = x
    k1t, k1a = accelerations(k, th, al, td, ad, volts, engaged)
    h2 = 0.5 * h
    td2, ad2 = td + h2 * k1t, ad + h2 * k1a
    k2t, k2a = accelerations(k, th + h2 * td, al + h2 * ad, td2, ad2, volts, engaged)
    td3, ad3 = td + h2 * k2t, ad + h2 * k2a
    k3t, k3a = accelerations(k, th + h2 * td2, al + h2 * ad2, td3, ad3, volts, engaged)
    td4, ad4 = td + h * k3t, ad + h * k3a
    k4t, k4a = accelerations(k, th + h * td3, al + h * ad3, td4, ad4, volts, engaged)
    h6 = h / 6.0
    th = th + h6 * (td + 2.0 * td2 + 2.0 * td3 + td4)
    al = al + h6 * (ad + 2.0 * ad2 + 2.0 * ad3 + ad4)
    td = td + h6 * (k1t + 2.0 * k2t + 2.0 * k3t + k4t)
    ad = ad + h6 * (k1a + 2.0 * k2a + 2.0 * k3a + k4a)
    if not abs(th) >= k.limit:  # noqa: SIM201 - the arm not at its stop (nor NaN): usual
        return th, al, td, ad
    high = th >= k.limit
    if (td > 0.0) if high else (td < 0.0):  # still moving into the stop: it stops dead
        ad = (k.mrl * math.cos(al) * td + k.jp * ad) / k.jp
        td = 0.0
    th = k.limit if high else -k.limit
    return th, al, td, ad


def effective_voltage(
    volts: float, max_voltage_v: float, dead_zone_v: float, offset_v: float
) -> float:
    """Voltage the driver passes on: clamped to the limit, zero inside the dead zone.

    The dead zone spans ``-(dead_zone_v - offset_v)`` to ``dead_zone_v + offset_v``.
    """
    v = max_voltage_v if volts > max_voltage_v else volts
    v = -max_voltage_v if v < -max_voltage_v else v
    return 0.0 if abs(v - offset_v) < dead_zone_v else v


def lagged_voltage(motor_v: float, target_v: float, dt_s: float, lag_s: float) -> float:
    """The motor's voltage ``dt_s`` on, moving towards ``target_v`` with a first-order lag.

    At once where there is no lag (``lag_s`` 0).
    """
    if lag_s <= 0.0:
        return target_v
    return motor_v - math.expm1(-dt_s / lag_s) * (target_v - motor_v)


class FurutaDynamics:
    """Integrates one pendulum with fixed-step RK4 on plain floats (a few us a step).

    :param params: the rig's physical parameters.
    """

    def __init__(self, params: PendulumParams) -> None:
        self.params = params
        self._k = Coefficients(params)
        self.theta = 0.0
        self.alpha = 0.0
        self.theta_dot = 0.0
        self.alpha_dot = 0.0
        self.at_limit = False
        self.motor_volts = 0.0  # what the motor sees: the driver's output after the lag

    # -- state -----------------------------------------------------------------------------

    def set_state(
        self, theta: float, alpha: float, theta_dot: float = 0.0, alpha_dot: float = 0.0
    ) -> None:
        """Place the pendulum (simulation and tests only: a real rig cannot be teleported)."""
        self.theta, self.alpha, self.theta_dot, self.alpha_dot = theta, alpha, theta_dot, alpha_dot
        self.at_limit = abs(theta) >= self.params.arm_limit_rad
        self.motor_volts = 0.0

    @property
    def state(self) -> tuple[float, float, float, float]:
        """``(theta, alpha, theta_dot, alpha_dot)``."""
        return self.theta, self.alpha, self.theta_dot, self.alpha_dot

    def energy_j(self) -> float:
        """Total mechanical energy (kinetic + potential, zero at rest hanging down)."""
        k = self._k
        s, c = math.sin(self.alpha), math.cos(self.alpha)
        td, ad = self.theta_dot, self.alpha_dot
        kinetic = 0.5 * (k.j0 + k.jp * s * s) * td * td
        kinetic += k.mrl * c * td * ad + 0.5 * k.jp * ad * ad
        return kinetic + k.mgl * (1.0 - c)

    def effective_voltage(self, voltage_v: float) -> float:
        """Voltage the driver passes on: clamped to the limit, minus the dead zone."""
        p = self.params
        return effective_voltage(
            voltage_v, p.max_voltage_v, p.motor_dead_zone_v, p.motor_dead_zone_offset_v
        )

    # -- integration -----------------------------------------------------------------------

    def step(self, dt_s: float, voltage_v: float, engaged: bool) -> None:
        """Advance by ``dt_s`` with the voltage held (zero-order hold), then apply the stop.

        With an actuator lag the motor's voltage moves towards the driver's output at the
        step's start and is held through it (the lag is long against a physics step).
        """
        v = self.effective_voltage(voltage_v) if engaged else 0.0  # open circuit: at once
        if engaged:
            v = lagged_voltage(self.motor_volts, v, dt_s, self.params.actuator_lag_s)
        self.motor_volts = v
        x = rk4_step(self._k, self.state, dt_s, v, engaged)
        self.theta, self.alpha, self.theta_dot, self.alpha_dot = x
        self.at_limit = abs(self.theta) >= self.params.arm_limit_rad

    def advance(self, duration_s: float, voltage_v: float, engaged: bool) -> None:
        """Advance by a whole number of fixed physics steps covering ``duration_s``."""
        h = self.params.physics_step_s
        for _ in range(max(1, round(duration_s / h))):
            self.step(h, voltage_v, engaged)

    # -- sensing ---------------------------------------------------------------------------

    def encoder_counts(self) -> tuple[int, int]:
        """Quantised ``(arm, pendulum)`` encoder counts; pendulum zero is hanging down."""
        scale = self.params.encoder_counts_per_rev / TWO_PI
        return round(self.theta * scale), round(self.alpha * scale)
