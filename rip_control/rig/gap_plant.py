"""A reality-gap plant: a second Furuta pendulum, outside the identification's model class.

The emulator's nominal plant (:mod:`rip_control.rig.dynamics`) is also the simulator's and the
system identification's model, so a rig built from it is always one the identification can
match exactly. A physical rig never is. This module is a second plant the Python emulator can
serve instead (a rig YAML with a ``gap:`` section beside ``rig:``), derived and integrated on
its own, with the effects real QUBE-Servo-2-class rigs show in forms the model's simple terms
can approximate but never match:

1. **Stick-slip friction** on the motor shaft (a switch model, Leine et al. 1998): while the
   shaft stands still it is held by whatever torque keeps it there, up to the breakaway torque
   ``F_s``; beyond it, it slides against ``F_c + (F_s - F_c) exp(-(|w| / v_s)^d)`` (Stribeck)
   plus the rig's viscous damping, and sticks again when its speed crosses zero below the
   breakaway. No smoothing: the shaft really stops.
2. **An asymmetric, subtractive dead zone** of the driver's output stage:
   ``V - V_pos`` above ``V_pos``, ``V + V_neg`` below ``-V_neg``, 0 between.
3. **The cable's torque** on the arm, stiffening with the twist:
   ``-k1 (th - th0) - k3 (th - th0)^3``, about an offset angle ``th0``.
4. **Actuator dynamics**: the command reaches the driver after a transport delay (the USB and
   firmware pipeline), through the amplifier's second-order response (natural frequency
   ``f_n``, damping ratio ``z``), and the motor's current follows its winding's time
   constant ``L / R`` (the current is a state).
5. **A pendulum that is not a thin rod**: a rod of finite radius with a spherical tip mass.
   Its centre of mass ``l`` and its principal inertias about it (``J_a`` along the rod, ``J_b``
   about the pivot's axis, ``J_c`` the third) enter the general Furuta equations below.
6. **Backlash** between the motor shaft (where the arm's encoder sits) and the arm's hub:
   two inertias, a dead band of ``b`` rad, and a stiff, damped, one-sided contact, integrated
   in sub-steps short enough for the contact's frequency.
7. **Encoder quantization per encoder**: each counts at its own resolution (a counter: floor,
   not round), reported in the protocol's counts.
8. **Sample ages that vary**: each reading is older than the rig's sensing latency by a
   random extra age, uniform over ``[0, jitter]`` (a USB frame: the reply carries the latest
   sample of the device's own cycle) plus an exponential tail of mean ``tail`` cut at
   ``AGE_TAIL_CUT`` means (a host's scheduling); seeded and reproducible.

Equations of motion (``alpha`` zero hanging down, derived from the Lagrangian of a rigid
pendulum with principal inertias, as in Cazzolato & Prime 2011)::

    M(a) [th_a'', a'']^T = [tau_arm - 2 P s c th_a' a' + m r l s a'^2,
                            -b_p a' + P s c th_a'^2 - m g l s]^T
    M(a) = [[J_0 + P s^2, m r l c], [m r l c, J_p]],  s = sin a, c = cos a
    J_0 = J_arm + m r^2 + J_a,  P = m l^2 + J_c - J_a,  J_p = m l^2 + J_b

``J_arm`` is the arm side's inertia about the motor axis. Without backlash the motor shaft is
rigid with the arm: ``tau_arm = k_t i - b_r th' - friction + cable`` and ``J_arm`` holds the
rotor too. With backlash the shaft is a body of its own,
``J_m th_m'' = k_t i - b_r th_m' - friction - tau_contact``, and ``tau_arm = tau_contact +
cable``. The current: ``L i' = V - R i - k_m th_m'`` (algebraic when ``L = 0``). A disengaged
driver is an open circuit (no current).

With every effect at its neutral value the plant integrates the same equations as
:class:`rip_control.rig.dynamics.FurutaDynamics` (a test cross-checks the two derivations).
The arm's cable hard stop is the same inelastic impact. The parameters both plants share
(motor, masses, lengths, damping, limits, counts per rev, physics rate) come from the rig's
:class:`~rip_control.rig.dynamics.PendulumParams`; the model's own friction, dead zone and
the like must stay at their neutral defaults in a gap rig (they are the model's forms).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, fields, replace
import math
from pathlib import Path
import random
from typing import Any

import numpy as np
import yaml

from rip_control.rig.dynamics import PendulumParams

TWO_PI = 2.0 * math.pi
AGE_TAIL_CUT = 4.0
"""The sample age's exponential tail is cut at this many means (ages stay bounded)."""
CONTACT_STEP_RAD = 0.5
"""A sub-step resolves the backlash contact's oscillation to at most this phase (rad)."""
STALL_SHARE_MAX = 0.5
"""The breakaway torque may be at most this share of the stall torque at the voltage limit."""

#: The rig's parameters the gap plant plays; every other one must keep its default.
PLAYED = frozenset(
    {
        'motor_resistance_ohm',
        'motor_torque_constant_nm_per_a',
        'motor_back_emf_v_s_per_rad',
        'rotor_and_hub_inertia_kg_m2',
        'max_voltage_v',
        'arm_mass_kg',
        'arm_length_m',
        'arm_viscous_damping_nms_per_rad',
        'arm_limit_rad',
        'pendulum_mass_kg',
        'pendulum_length_m',
        'pendulum_viscous_damping_nms_per_rad',
        'gravity_m_s2',
        'encoder_counts_per_rev',
        'encoder_noise_counts',
        'sensing_latency_s',
        'physics_rate_hz',
    }
)

# (low, high) of every effect's value; high None: no upper bound beyond finiteness.
_RANGES: dict[str, tuple[float, float]] = {
    'breakaway_torque_nm': (0.0, 0.05),
    'sliding_torque_nm': (0.0, 0.05),
    'stribeck_velocity_rad_s': (1e-3, 10.0),
    'stribeck_exponent': (0.2, 3.0),
    'dead_zone_pos_v': (0.0, 3.0),
    'dead_zone_neg_v': (0.0, 3.0),
    'cable_linear_nm_per_rad': (0.0, 0.05),
    'cable_cubic_nm_per_rad3': (0.0, 0.05),
    'cable_offset_rad': (-1.0, 1.0),
    'command_delay_s': (0.0, 0.05),
    'driver_bandwidth_hz': (0.0, 500.0),
    'driver_damping_ratio': (0.2, 2.0),
    'motor_inductance_h': (0.0, 0.05),
    'rod_radius_m': (0.0, 0.02),
    'tip_mass_kg': (0.0, 0.2),
    'tip_distance_m': (0.0, 0.5),
    'tip_radius_m': (0.0, 0.05),
    'backlash_rad': (0.0, 0.1),
    'backlash_stiffness_nm_per_rad': (0.5, 1000.0),
    'backlash_damping_ratio': (0.0, 2.0),
    'motor_side_inertia_kg_m2': (1e-7, 1e-3),
    'arm_counts_per_rev': (0, 1 << 20),
    'pendulum_counts_per_rev': (0, 1 << 20),
    'sample_age_jitter_s': (0.0, 0.02),
    'sample_age_tail_s': (0.0, 0.01),
}

#: What :meth:`GapEffects.scaled` scales: each effect's magnitudes (their neutral value is 0).
_MAGNITUDES = (
    'breakaway_torque_nm',
    'sliding_torque_nm',
    'dead_zone_pos_v',
    'dead_zone_neg_v',
    'cable_linear_nm_per_rad',
    'cable_cubic_nm_per_rad3',
    'cable_offset_rad',
    'command_delay_s',
    'motor_inductance_h',
    'tip_mass_kg',
    'rod_radius_m',
    'backlash_rad',
    'sample_age_jitter_s',
    'sample_age_tail_s',
)


@dataclass(frozen=True)
class GapEffects:
    """The gap effects of one rig (the ``gap:`` section of its YAML); all neutral by default.

    Each effect is off at its neutral value (0 unless said) and scales with its magnitudes
    (:meth:`scaled`).

    :param breakaway_torque_nm: static friction: a still shaft sticks until the net torque on
        it exceeds this.
    :param sliding_torque_nm: Coulomb friction while sliding (at most the breakaway).
    :param stribeck_velocity_rad_s: speed over which the friction decays from breakaway to
        sliding.
    :param stribeck_exponent: shape of that decay, ``exp(-(|w| / v_s)^d)``.
    :param dead_zone_pos_v: the driver's output loses this much of a positive voltage.
    :param dead_zone_neg_v: ... and this much of a negative one.
    :param cable_linear_nm_per_rad: the cable's restoring torque per rad of twist.
    :param cable_cubic_nm_per_rad3: its stiffening, per rad cubed.
    :param cable_offset_rad: the arm angle at which the cable is relaxed.
    :param command_delay_s: transport delay of the command (rounded to physics steps).
    :param driver_bandwidth_hz: natural frequency of the amplifier's second-order response
        (0: none).
    :param driver_damping_ratio: its damping ratio.
    :param motor_inductance_h: the winding's inductance (0: the current follows at once).
    :param rod_radius_m: the pendulum rod's radius (0: a thin rod).
    :param tip_mass_kg: a solid sphere on the pendulum (0: none).
    :param tip_distance_m: the sphere's centre from the pivot (0: at the rod's end).
    :param tip_radius_m: the sphere's radius.
    :param backlash_rad: the play between the motor shaft and the arm's hub (0: rigid).
    :param backlash_stiffness_nm_per_rad: the contact's stiffness once the play is taken up.
    :param backlash_damping_ratio: the contact's damping ratio.
    :param motor_side_inertia_kg_m2: the inertia on the shaft's side of the play (the rest of
        the rig's ``rotor_and_hub_inertia_kg_m2`` is the hub's, on the arm's side).
    :param arm_counts_per_rev: the arm encoder's resolution (0: the rig's, rounded as the
        model does); must divide the rig's ``encoder_counts_per_rev``.
    :param pendulum_counts_per_rev: the pendulum encoder's, likewise.
    :param sample_age_jitter_s: a reading's extra age is uniform over [0, this] ...
    :param sample_age_tail_s: ... plus an exponential of this mean, cut at
        :data:`AGE_TAIL_CUT` means.
    """

    breakaway_torque_nm: float = 0.0
    sliding_torque_nm: float = 0.0
    stribeck_velocity_rad_s: float = 0.05
    stribeck_exponent: float = 1.0
    dead_zone_pos_v: float = 0.0
    dead_zone_neg_v: float = 0.0
    cable_linear_nm_per_rad: float = 0.0
    cable_cubic_nm_per_rad3: float = 0.0
    cable_offset_rad: float = 0.0
    command_delay_s: float = 0.0
    driver_bandwidth_hz: float = 0.0
    driver_damping_ratio: float = 0.7
    motor_inductance_h: float = 0.0
    rod_radius_m: float = 0.0
    tip_mass_kg: float = 0.0
    tip_distance_m: float = 0.0
    tip_radius_m: float = 0.0
    backlash_rad: float = 0.0
    backlash_stiffness_nm_per_rad: float = 20.0
    backlash_damping_ratio: float = 0.3
    motor_side_inertia_kg_m2: float = 4.0e-6
    arm_counts_per_rev: int = 0
    pendulum_counts_per_rev: int = 0
    sample_age_jitter_s: float = 0.0
    sample_age_tail_s: float = 0.0

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise ValueError(f'gap.{f.name} must be a number, got {value!r}')
            if not math.isfinite(value):
                raise ValueError(f'gap.{f.name} must be finite, got {value!r}')
            low, high = _RANGES[f.name]
            if not low <= value <= high:
                raise ValueError(f'gap.{f.name} must be in [{low:g}, {high:g}], got {value!r}')
        for name in ('arm_counts_per_rev', 'pendulum_counts_per_rev'):
            value = getattr(self, name)
            if value != int(value) or 0 < value < 16:
                raise ValueError(f'gap.{name} must be 0 or an integer >= 16, got {value!r}')
        if self.sliding_torque_nm > self.breakaway_torque_nm:
            raise ValueError(
                f'gap.sliding_torque_nm must be at most gap.breakaway_torque_nm '
                f'({self.breakaway_torque_nm!r}), got {self.sliding_torque_nm!r}'
            )
        if 0.0 < self.driver_bandwidth_hz < 5.0:
            raise ValueError(
                'gap.driver_bandwidth_hz must be 0 (none) or >= 5, got '
                f'{self.driver_bandwidth_hz!r}'
            )

    @property
    def max_extra_age_s(self) -> float:
        """The largest extra age a reading can have."""
        return self.sample_age_jitter_s + AGE_TAIL_CUT * self.sample_age_tail_s

    def scaled(self, factor: float) -> GapEffects:
        """The same effects, each ``factor`` times as strong (0: all neutral).

        Magnitudes (torques, thresholds, delays, play, tip mass, rod radius, ages) scale by
        ``factor``, the driver's bandwidth by its inverse (its lag scales); the encoders keep
        their resolution unless ``factor`` is 0.
        """
        if not (math.isfinite(factor) and factor >= 0.0):
            raise ValueError(f'scale factor must be a finite number >= 0, got {factor!r}')
        values = {name: getattr(self, name) * factor for name in _MAGNITUDES}
        if factor == 0.0:
            values.update(driver_bandwidth_hz=0.0, arm_counts_per_rev=0, pendulum_counts_per_rev=0)
        else:
            values['driver_bandwidth_hz'] = self.driver_bandwidth_hz / factor
        return replace(self, **values)

    @classmethod
    def from_dict(cls, values: dict[str, Any], source: str = 'gap') -> GapEffects:
        """Build from a mapping, rejecting unknown keys by name."""
        if not isinstance(values, dict):
            raise ValueError(f'the gap: section of {source} must be a mapping, got {values!r}')
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ValueError(f'unknown gap effect(s) {unknown} in {source}')
        return cls(**values)


def load_gap(path: str | Path) -> GapEffects | None:
    """The ``gap:`` section of a rig YAML, or None if it has none (the nominal plant)."""
    path = Path(path)
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except FileNotFoundError:
        raise FileNotFoundError(f'rig parameter file not found: {path}') from None
    if not isinstance(data, dict) or 'gap' not in data:
        return None
    if 'rig' not in data:
        raise ValueError(f'{path}: a gap: section needs the rig parameters under rig:')
    return GapEffects.from_dict(data['gap'], source=str(path))


def load_rig(path: str | Path) -> tuple[PendulumParams, GapEffects | None]:
    """A rig file's parameters and its gap effects (None: the nominal plant), validated."""
    params = PendulumParams.from_yaml(path)
    gap = load_gap(path)
    if gap is not None:
        GapPlant(params, gap)  # the checks across the two sections
    return params, gap


def _expm(m: np.ndarray) -> np.ndarray:
    """Matrix exponential by scaling and squaring a Taylor series (small matrices)."""
    norm = float(np.abs(m).sum(axis=1).max())
    squarings = max(0, math.ceil(math.log2(norm / 0.05))) if norm > 0.05 else 0
    a = m / 2.0**squarings
    out, term = np.eye(len(m)), np.eye(len(m))
    for k in range(1, 12):
        term = term @ a / k
        out = out + term
    for _ in range(squarings):
        out = out @ out
    return out


class GapPlant:
    """The reality-gap plant, with :class:`~rip_control.rig.dynamics.FurutaDynamics`'s interface.

    :param params: the rig's shared physical parameters.
    :param gap: the gap effects.
    :param seed: seed of the sample ages' random draws.
    :raises ValueError: naming the parameter, for a rig the gap plant cannot play as given.
    """

    def __init__(self, params: PendulumParams, gap: GapEffects, seed: int | None = None) -> None:
        self.params = params
        self.gap = gap
        self._check(params, gap)
        p, g = params, gap
        self._rng = random.Random(seed)
        # motor and driver
        self._r = p.motor_resistance_ohm
        self._kt = p.motor_torque_constant_nm_per_a
        self._km = p.motor_back_emf_v_s_per_rad
        self._vmax = p.max_voltage_v
        self._tau_e = g.motor_inductance_h / p.motor_resistance_ohm
        self._delay_s = g.command_delay_s
        self._filter: tuple[float, ...] | None = None
        self._filter_h = 0.0
        # friction (on the motor shaft)
        self._fs, self._fc = g.breakaway_torque_nm, g.sliding_torque_nm
        self._vs, self._sd = g.stribeck_velocity_rad_s, g.stribeck_exponent
        self._stiction = self._fs > 0.0
        self._br = p.arm_viscous_damping_nms_per_rad
        self._bp = p.pendulum_viscous_damping_nms_per_rad
        # pendulum: a rod of finite radius and a sphere on it
        m_rod, length, rho = p.pendulum_mass_kg, p.pendulum_length_m, g.rod_radius_m
        m_tip = g.tip_mass_kg
        d_tip = g.tip_distance_m or length
        m = m_rod + m_tip
        l_com = (m_rod * length / 2.0 + m_tip * d_tip) / m
        sphere = 0.4 * m_tip * g.tip_radius_m**2
        j_b = (
            m_rod * (length**2 / 12.0 + rho**2 / 4.0)
            + m_rod * (length / 2.0 - l_com) ** 2
            + sphere
            + m_tip * (d_tip - l_com) ** 2
        )
        j_c = j_b  # the rod and the sphere are symmetric about the rod's axis
        j_a = 0.5 * m_rod * rho**2 + sphere
        r = p.arm_length_m
        self.pendulum_mass_kg, self.pendulum_com_m = m, l_com
        self.pendulum_inertias_kg_m2 = (j_a, j_b, j_c)
        self._jp = m * l_com**2 + j_b
        self._pp = m * l_com**2 + j_c - j_a
        self._mrl = m * r * l_com
        self._mgl = m * p.gravity_m_s2 * l_com
        j_arm = p.arm_mass_kg * p.arm_length_m**2 / 12.0 + p.rotor_and_hub_inertia_kg_m2
        # backlash: the shaft's side of the play is a body of its own
        self._play = g.backlash_rad > 0.0
        self._half_play = 0.5 * g.backlash_rad
        self._jm = g.motor_side_inertia_kg_m2 if self._play else 0.0
        self._j0 = j_arm - self._jm + m * r * r + j_a
        self._kc = g.backlash_stiffness_nm_per_rad
        j_red = self._jm * self._j0 / (self._jm + self._j0) if self._play else 1.0
        self._cc = 2.0 * g.backlash_damping_ratio * math.sqrt(self._kc * j_red)
        h = p.physics_step_s
        omega = math.sqrt(self._kc / j_red) if self._play else 0.0
        self.substeps = max(1, math.ceil(omega * h / CONTACT_STEP_RAD))
        # cable
        self._k1, self._k3 = g.cable_linear_nm_per_rad, g.cable_cubic_nm_per_rad3
        self._th0 = g.cable_offset_rad
        self._cable = self._k1 > 0.0 or self._k3 > 0.0
        self._limit = p.arm_limit_rad
        # encoders: radians per count of each, and protocol counts per encoder count
        cpr = p.encoder_counts_per_rev
        self._enc: list[tuple[float, int]] = []
        for own in (g.arm_counts_per_rev, g.pendulum_counts_per_rev):
            self._enc.append((0.0, 1) if not own else (own / TWO_PI, cpr // int(own)))
        self._scale = cpr / TWO_PI
        self._t = 0.0
        self.set_state(0.0, 0.0)

    @staticmethod
    def _check(p: PendulumParams, g: GapEffects) -> None:
        default = PendulumParams()
        for f in fields(p):
            if f.name not in PLAYED and getattr(p, f.name) != getattr(default, f.name):
                raise ValueError(
                    f'rig.{f.name} = {getattr(p, f.name)!r} is a term of the model '
                    '(rip_control.rig.dynamics), which the gap plant does not play: leave it '
                    'at its default and give the effect in gap:'
                )
        if g.backlash_rad > 0.0 and g.motor_side_inertia_kg_m2 >= p.rotor_and_hub_inertia_kg_m2:
            raise ValueError(
                f'gap.motor_side_inertia_kg_m2 must be below rig.rotor_and_hub_inertia_kg_m2 '
                f'({p.rotor_and_hub_inertia_kg_m2!r}), got {g.motor_side_inertia_kg_m2!r}'
            )
        for name in ('arm_counts_per_rev', 'pendulum_counts_per_rev'):
            own = getattr(g, name)
            if own and p.encoder_counts_per_rev % own:
                raise ValueError(
                    f'gap.{name} = {own!r} must divide rig.encoder_counts_per_rev '
                    f'({p.encoder_counts_per_rev!r}): the protocol reports the finest count'
                )
        stall = p.motor_torque_constant_nm_per_a * p.max_voltage_v / p.motor_resistance_ohm
        if g.breakaway_torque_nm > STALL_SHARE_MAX * stall:
            raise ValueError(
                f'gap.breakaway_torque_nm = {g.breakaway_torque_nm!r} is above '
                f'{STALL_SHARE_MAX:g} of the stall torque at rig.max_voltage_v '
                f'({stall:.4g} N m): no controller could move such an arm reliably'
            )

    # -- state -----------------------------------------------------------------------------

    def set_state(
        self, theta: float, alpha: float, theta_dot: float = 0.0, alpha_dot: float = 0.0
    ) -> None:
        """Place the pendulum at rest in its actuator (simulation and tests only).

        The motor shaft sits in the middle of the play, the current, the driver and the
        command's delay line hold nothing.
        """
        self.theta_m, self.theta, self.alpha = theta, theta, alpha
        self.theta_m_dot, self.theta_dot, self.alpha_dot = theta_dot, theta_dot, alpha_dot
        self.current_a = 0.0
        self.driver_v = (0.0, 0.0)
        self._delayed: deque[tuple[float, float]] = deque()
        self._held_v = 0.0
        self.stuck = self._stiction and theta_dot == 0.0
        self.at_limit = abs(theta) >= self._limit

    @property
    def state(self) -> tuple[float, float, float, float]:
        """``(theta, alpha, theta_dot, alpha_dot)`` of the arm (its hub) and the pendulum."""
        return self.theta, self.alpha, self.theta_dot, self.alpha_dot

    def energy_j(self) -> float:
        """Mechanical energy (kinetic + gravity, zero at rest hanging down; no cable)."""
        s, c = math.sin(self.alpha), math.cos(self.alpha)
        td, ad = self.theta_dot, self.alpha_dot
        kinetic = 0.5 * (self._j0 + self._pp * s * s) * td * td
        kinetic += self._mrl * c * td * ad + 0.5 * self._jp * ad * ad
        kinetic += 0.5 * self._jm * self.theta_m_dot**2
        return kinetic + self._mgl * (1.0 - c)

    # -- actuator --------------------------------------------------------------------------

    def _driver_input(self, h: float, volts: float) -> float:
        """The command after the transport delay (clamped to the voltage limit)."""
        v = max(-self._vmax, min(self._vmax, volts))
        if self._delay_s <= 0.0:
            return v
        self._delayed.append((self._t + self._delay_s, v))
        due = self._t + 0.5 * h  # the delay rounds to whole steps
        while self._delayed and self._delayed[0][0] <= due:
            self._held_v = self._delayed.popleft()[1]
        return self._held_v

    def _driver_output(self, h: float, u: float) -> float:
        """The amplifier's output over this step (its mean), from the delayed command."""
        if self.gap.driver_bandwidth_hz <= 0.0:
            return u
        if self._filter is None or h != self._filter_h:
            wn = TWO_PI * self.gap.driver_bandwidth_hz
            z = self.gap.driver_damping_ratio
            aug = np.zeros((3, 3))
            aug[0, 1] = 1.0
            aug[1, 0], aug[1, 1], aug[1, 2] = -wn * wn, -2.0 * z * wn, wn * wn
            e = _expm(aug * h)  # zero-order hold on the input: exact
            self._filter = tuple(float(x) for x in e[:2, :].reshape(-1))
            self._filter_h = h
        a00, a01, b0, a10, a11, b1 = self._filter
        y, yd = self.driver_v
        ny = a00 * y + a01 * yd + b0 * u
        nyd = a10 * y + a11 * yd + b1 * u
        self.driver_v = (ny, nyd)
        return 0.5 * (y + ny)

    def _dead_zone(self, v: float) -> float:
        g = self.gap
        if v > g.dead_zone_pos_v:
            return v - g.dead_zone_pos_v
        if v < -g.dead_zone_neg_v:
            return v + g.dead_zone_neg_v
        return 0.0

    def motor_voltage(self, h: float, volts: float) -> float:
        """Advance the actuator chain by ``h`` and return the motor's mean terminal voltage."""
        return self._dead_zone(self._driver_output(h, self._driver_input(h, volts)))

    # -- mechanics -------------------------------------------------------------------------

    def _friction(self, speed: float) -> float:
        """The sliding friction's magnitude at ``speed`` (> 0), beyond the viscous term."""
        if not self._stiction:
            return 0.0
        return self._fc + (self._fs - self._fc) * math.exp(-((speed / self._vs) ** self._sd))

    def _cable_torque(self, theta: float) -> float:
        if not self._cable:
            return 0.0
        d = theta - self._th0
        return -self._k1 * d - self._k3 * d * d * d

    def _pendulum_rhs(self, s: float, c: float, td: float, ad: float) -> float:
        return -self._bp * ad + self._pp * s * c * td * td - self._mgl * s

    def _arm_acc(
        self, al: float, td: float, ad: float, tau: float
    ) -> tuple[float, float, float, float, float]:
        """``(theta'', alpha'', s, c, rhs2)`` of the arm and pendulum under arm torque ``tau``."""
        s, c = math.sin(al), math.cos(al)
        pps = self._pp * s
        rhs1 = tau - 2.0 * pps * c * td * ad + self._mrl * s * ad * ad
        rhs2 = self._pendulum_rhs(s, c, td, ad)
        m11 = self._j0 + pps * s
        m12 = self._mrl * c
        det = m11 * self._jp - m12 * m12
        return (self._jp * rhs1 - m12 * rhs2) / det, (m11 * rhs2 - m12 * rhs1) / det, s, c, rhs2

    def step(self, dt_s: float, voltage_v: float, engaged: bool) -> None:
        """Advance by ``dt_s`` with the command held, then apply the cable stop."""
        volts = self.motor_voltage(dt_s, voltage_v)
        h = dt_s / self.substeps
        for _ in range(self.substeps):
            drive, slope = self._drive(h, volts, engaged)
            if self._play:
                self._substep_play(h, drive, slope)
            else:
                self._substep_rigid(h, drive, slope)
            self._stop()
        self._t += dt_s

    def advance(self, duration_s: float, voltage_v: float, engaged: bool) -> None:
        """Advance by a whole number of fixed physics steps covering ``duration_s``."""
        h = self.params.physics_step_s
        for _ in range(max(1, round(duration_s / h))):
            self.step(h, voltage_v, engaged)

    def _drive(self, h: float, volts: float, engaged: bool) -> tuple[float, float]:
        """The motor torque over a sub-step as ``drive - slope * shaft speed``.

        Without inductance the current is algebraic (the back-EMF enters the integration);
        with it, the current's exact exponential response over the sub-step, its mean driving.
        """
        if not engaged:
            self.current_a = 0.0  # open circuit
            return 0.0, 0.0
        if self._tau_e <= 0.0:
            k = self._kt / self._r
            return k * volts, k * self._km
        i_ss = (volts - self._km * self.theta_m_dot) / self._r
        decay = math.exp(-h / self._tau_e)
        i0 = self.current_a
        mean = i_ss + (i0 - i_ss) * self._tau_e / h * (1.0 - decay)
        self.current_a = i_ss + (i0 - i_ss) * decay
        return self._kt * mean, 0.0

    def _substep_rigid(self, h: float, drive: float, slope: float) -> None:
        """One RK4 sub-step of the arm rigid with the shaft: sliding, or stuck."""
        th, al, td, ad = self.theta, self.alpha, self.theta_dot, self.alpha_dot
        if self.stuck:
            # Held still: what torque would the friction need to keep it so?
            tau0 = drive + self._cable_torque(th)
            s, c = math.sin(al), math.cos(al)
            add = self._pendulum_rhs(s, c, 0.0, ad) / self._jp
            needed = self._mrl * c * add - (tau0 + self._mrl * s * ad * ad)
            if abs(needed) <= self._fs:
                self._pendulum_only(h)
                return
            self.stuck = False
            direction = -1.0 if needed > 0.0 else 1.0
        else:
            direction = 1.0 if td > 0.0 else -1.0 if td < 0.0 else 0.0

        def acc(al_: float, th_: float, td_: float, ad_: float) -> tuple[float, float]:
            tau = drive - slope * td_ - self._br * td_ + self._cable_torque(th_)
            if direction:
                tau -= direction * self._friction(abs(td_))
            tdd, add_, *_ = self._arm_acc(al_, td_, ad_, tau)
            return tdd, add_

        h2 = 0.5 * h
        k1t, k1a = acc(al, th, td, ad)
        td2, ad2 = td + h2 * k1t, ad + h2 * k1a
        k2t, k2a = acc(al + h2 * ad, th + h2 * td, td2, ad2)
        td3, ad3 = td + h2 * k2t, ad + h2 * k2a
        k3t, k3a = acc(al + h2 * ad2, th + h2 * td2, td3, ad3)
        td4, ad4 = td + h * k3t, ad + h * k3a
        k4t, k4a = acc(al + h * ad3, th + h * td3, td4, ad4)
        h6 = h / 6.0
        th = th + h6 * (td + 2.0 * td2 + 2.0 * td3 + td4)
        al = al + h6 * (ad + 2.0 * ad2 + 2.0 * ad3 + ad4)
        td_new = td + h6 * (k1t + 2.0 * k2t + 2.0 * k3t + k4t)
        ad = ad + h6 * (k1a + 2.0 * k2a + 2.0 * k3a + k4a)
        if self._stiction and direction and td_new * direction <= 0.0:
            # The speed crossed zero: the shaft sticks. The friction's impulse acts on the
            # arm only, so the pendulum keeps its generalised momentum.
            ad += self._mrl * math.cos(al) * td_new / self._jp
            td_new = 0.0
            self.stuck = True
        self.theta, self.alpha, self.theta_dot, self.alpha_dot = th, al, td_new, ad
        self.theta_m, self.theta_m_dot = th, td_new

    def _pendulum_only(self, h: float) -> None:
        """RK4 of the pendulum alone, its arm held still."""
        al, ad = self.alpha, self.alpha_dot

        def acc(al_: float, ad_: float) -> float:
            return self._pendulum_rhs(math.sin(al_), math.cos(al_), 0.0, ad_) / self._jp

        h2 = 0.5 * h
        k1 = acc(al, ad)
        ad2 = ad + h2 * k1
        k2 = acc(al + h2 * ad, ad2)
        ad3 = ad + h2 * k2
        k3 = acc(al + h2 * ad2, ad3)
        ad4 = ad + h * k3
        k4 = acc(al + h * ad3, ad4)
        self.alpha = al + h / 6.0 * (ad + 2.0 * ad2 + 2.0 * ad3 + ad4)
        self.alpha_dot = ad + h / 6.0 * (k1 + 2.0 * k2 + 2.0 * k3 + k4)
        self.theta_dot = self.theta_m_dot = 0.0

    def _contact(self, delta: float, delta_dot: float) -> float:
        """The torque the shaft passes to the hub across the play (one-sided: never pulls)."""
        if delta > self._half_play:
            return max(0.0, self._kc * (delta - self._half_play) + self._cc * delta_dot)
        if delta < -self._half_play:
            return min(0.0, self._kc * (delta + self._half_play) + self._cc * delta_dot)
        return 0.0

    def _substep_play(self, h: float, drive: float, slope: float) -> None:
        """One RK4 sub-step of the two bodies across the play: shaft sliding or stuck."""
        thm, wm = self.theta_m, self.theta_m_dot
        tha, al, wa, ad = self.theta, self.alpha, self.theta_dot, self.alpha_dot
        stuck = self.stuck
        if stuck:
            needed = -(drive - self._contact(thm - tha, -wa))
            if abs(needed) > self._fs:
                stuck = self.stuck = False
                direction = -1.0 if needed > 0.0 else 1.0
            else:
                direction = 0.0
        else:
            direction = 1.0 if wm > 0.0 else -1.0 if wm < 0.0 else 0.0

        def acc(
            thm_: float, wm_: float, tha_: float, al_: float, wa_: float, ad_: float
        ) -> tuple[float, float, float]:
            tc = self._contact(thm_ - tha_, wm_ - wa_)
            if stuck:
                wmd = 0.0
            else:
                tau_m = drive - slope * wm_ - self._br * wm_ - tc
                if direction:
                    tau_m -= direction * self._friction(abs(wm_))
                wmd = tau_m / self._jm
            wad, add, *_ = self._arm_acc(al_, wa_, ad_, tc + self._cable_torque(tha_))
            return wmd, wad, add

        h2 = 0.5 * h
        k1 = acc(thm, wm, tha, al, wa, ad)
        s2 = (wm + h2 * k1[0], wa + h2 * k1[1], ad + h2 * k1[2])
        k2 = acc(thm + h2 * wm, s2[0], tha + h2 * wa, al + h2 * ad, s2[1], s2[2])
        s3 = (wm + h2 * k2[0], wa + h2 * k2[1], ad + h2 * k2[2])
        k3 = acc(thm + h2 * s2[0], s3[0], tha + h2 * s2[1], al + h2 * s2[2], s3[1], s3[2])
        s4 = (wm + h * k3[0], wa + h * k3[1], ad + h * k3[2])
        k4 = acc(thm + h * s3[0], s4[0], tha + h * s3[1], al + h * s3[2], s4[1], s4[2])
        h6 = h / 6.0
        thm += h6 * (wm + 2.0 * s2[0] + 2.0 * s3[0] + s4[0])
        tha += h6 * (wa + 2.0 * s2[1] + 2.0 * s3[1] + s4[1])
        al += h6 * (ad + 2.0 * s2[2] + 2.0 * s3[2] + s4[2])
        wm_new = wm + h6 * (k1[0] + 2.0 * k2[0] + 2.0 * k3[0] + k4[0])
        wa += h6 * (k1[1] + 2.0 * k2[1] + 2.0 * k3[1] + k4[1])
        ad += h6 * (k1[2] + 2.0 * k2[2] + 2.0 * k3[2] + k4[2])
        if self._stiction and direction and wm_new * direction <= 0.0:
            wm_new, self.stuck = 0.0, True  # the shaft alone stops: the play decouples it
        self.theta_m, self.theta_m_dot = thm, wm_new
        self.theta, self.alpha, self.theta_dot, self.alpha_dot = tha, al, wa, ad

    def _stop(self) -> None:
        """The cable hard stop: an inelastic impact of the arm; the pendulum keeps its momentum."""
        th, td = self.theta, self.theta_dot
        self.at_limit = abs(th) >= self._limit
        if not self.at_limit:
            return
        self.theta = math.copysign(self._limit, th)
        if td * th > 0.0:
            self.alpha_dot += self._mrl * math.cos(self.alpha) * td / self._jp
            self.theta_dot = 0.0
            if not self._play:
                self.theta_m_dot = 0.0
        if not self._play:
            self.theta_m = self.theta

    # -- sensing ---------------------------------------------------------------------------

    def encoder_counts(self) -> tuple[int, int]:
        """``(arm, pendulum)`` counts in the protocol's unit; the arm's encoder is the shaft's."""
        out = []
        for angle, (per_rad, factor) in zip((self.theta_m, self.alpha), self._enc, strict=True):
            if per_rad:
                out.append(math.floor(angle * per_rad) * factor)
            else:
                out.append(round(angle * self._scale))
        return out[0], out[1]

    def sample_age_s(self) -> float:
        """A reading's extra age beyond the rig's sensing latency (a fresh random draw)."""
        g = self.gap
        age = 0.0
        if g.sample_age_jitter_s > 0.0:
            age += self._rng.uniform(0.0, g.sample_age_jitter_s)
        if g.sample_age_tail_s > 0.0:
            tail = self._rng.expovariate(1.0 / g.sample_age_tail_s)
            age += min(tail, AGE_TAIL_CUT * g.sample_age_tail_s)
        return age

    @property
    def max_sample_age_s(self) -> float:
        """The largest extra age :meth:`sample_age_s` can draw."""
        return self.gap.max_extra_age_s
