"""What the simulator draws each episode: the physics' ranges and the curriculum's starts.

:class:`Randomization` (uniform ranges around a base rig: a second unit's tolerances, a worn
actuator's, or an identification's uncertainty, :func:`around_identified`) and
:class:`Curriculum` with :class:`CurriculumEnv` (upright starts first, then hanging ones), as
:mod:`rip_learner.pretrain` trains with them.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

from rip_control.rig.dynamics import PendulumParams
from rip_control.rig.env import SimRotaryInvertedPendulumEnv


@dataclass(frozen=True)
class Randomization:
    """Per-episode physics ranges, uniform, around a base rig.

    ``*_scale`` multiply the base's value; the others are added to it (friction, dead zone,
    noise: the QUBE-Servo 2 has none, so on it they are the values themselves; latency in
    control periods), and a sum below zero counts as zero.

    Chosen around the QUBE-Servo 2's datasheet values with the tolerances a second unit or a
    worn one plausibly has; the shifted rigs under ``config/`` lie partly outside them on
    purpose (the gap fine-tuning must close).
    """

    pendulum_mass_scale: tuple[float, float] = (0.85, 1.2)
    pendulum_length_scale: tuple[float, float] = (0.9, 1.12)
    arm_mass_scale: tuple[float, float] = (0.9, 1.1)
    motor_resistance_scale: tuple[float, float] = (0.9, 1.1)
    arm_damping_scale: tuple[float, float] = (0.5, 2.0)
    pendulum_damping_scale: tuple[float, float] = (0.5, 2.0)
    arm_coulomb_friction_nm: tuple[float, float] = (0.0, 0.002)
    motor_dead_zone_v: tuple[float, float] = (0.0, 0.3)
    encoder_noise_counts: tuple[float, float] = (0.0, 0.5)
    sensing_latency_periods: tuple[float, float] = (0.0, 0.5)
    # The widened model's terms: none on a QUBE-Servo 2 (randomised only around an
    # identification that kept them).
    motor_dead_zone_offset_v: tuple[float, float] = (0.0, 0.0)
    arm_static_friction_nm: tuple[float, float] = (0.0, 0.0)
    actuator_lag_s: tuple[float, float] = (0.0, 0.0)
    arm_cable_stiffness_nm_per_rad: tuple[float, float] = (0.0, 0.0)
    pendulum_inertia_scale: tuple[float, float] = (1.0, 1.0)

    def sample(
        self, rng: np.random.Generator, base: PendulumParams, period_s: float
    ) -> PendulumParams:
        """One draw around ``base``."""

        def u(r: tuple[float, float]) -> float:
            return float(rng.uniform(r[0], r[1]))

        def plus(value: float, r: tuple[float, float]) -> float:
            return max(0.0, value + u(r))

        values: dict[str, Any] = dict(
            pendulum_mass_kg=base.pendulum_mass_kg * u(self.pendulum_mass_scale),
            pendulum_length_m=base.pendulum_length_m * u(self.pendulum_length_scale),
            arm_mass_kg=base.arm_mass_kg * u(self.arm_mass_scale),
            motor_resistance_ohm=base.motor_resistance_ohm * u(self.motor_resistance_scale),
            arm_viscous_damping_nms_per_rad=base.arm_viscous_damping_nms_per_rad
            * u(self.arm_damping_scale),
            pendulum_viscous_damping_nms_per_rad=base.pendulum_viscous_damping_nms_per_rad
            * u(self.pendulum_damping_scale),
            arm_coulomb_friction_nm=plus(
                base.arm_coulomb_friction_nm, self.arm_coulomb_friction_nm
            ),
            motor_dead_zone_v=plus(base.motor_dead_zone_v, self.motor_dead_zone_v),
            encoder_noise_counts=plus(base.encoder_noise_counts, self.encoder_noise_counts),
            sensing_latency_s=plus(base.sensing_latency_s / period_s, self.sensing_latency_periods)
            * period_s,
        )
        # The widened model's terms, drawn only where their range is not the neutral point
        # (the random stream of a rig without them is as it was before they existed).
        for name in ('arm_static_friction_nm', 'actuator_lag_s', 'arm_cable_stiffness_nm_per_rad'):
            if getattr(self, name) != (0.0, 0.0):
                values[name] = plus(getattr(base, name), getattr(self, name))
        if self.pendulum_inertia_scale != (1.0, 1.0):
            values['pendulum_inertia_factor'] = base.pendulum_inertia_factor * u(
                self.pendulum_inertia_scale
            )
        offset = base.motor_dead_zone_offset_v
        if self.motor_dead_zone_offset_v != (0.0, 0.0):
            offset += u(self.motor_dead_zone_offset_v)
        dz = values['motor_dead_zone_v']
        values['motor_dead_zone_offset_v'] = min(max(offset, -dz), dz)
        return replace(base, **values)


#: The ranges by name (the ``randomization`` option). ``wide`` keeps the masses and lengths of
#: ``standard`` and widens what wears: friction, dead zone, winding resistance, arm damping,
#: encoder noise and read-out latency. ``config/rig_shifted_worn.yaml`` lies inside it;
#: ``config/rig_shifted_heavy.yaml`` (masses, lengths) and ``config/rig_shifted_stuck.yaml``
#: (friction, dead zone, latency) stay outside.
RANDOMIZATIONS = {
    'standard': Randomization(),
    'wide': Randomization(
        motor_resistance_scale=(0.9, 1.25),
        arm_damping_scale=(0.5, 5.0),
        arm_coulomb_friction_nm=(0.0, 0.005),
        motor_dead_zone_v=(0.0, 0.8),
        encoder_noise_counts=(0.0, 1.2),
        sensing_latency_periods=(0.0, 1.25),
    ),
}


#: How wide ``randomization:=identified`` draws: this many standard deviations of each
#: identified value, and at least the floor (the identification's own uncertainty leaves out
#: what the model cannot represent; a policy trained on one exact rig is brittle). Floors are
#: relative for the scales, absolute for dead zone (V), friction (N m) and latency (periods).
IDENTIFIED_SIGMAS = 2.0
IDENTIFIED_FLOORS = {
    'pendulum_mass_kg': 0.05,
    'pendulum_length_m': 0.05,
    'motor_resistance_ohm': 0.05,
    'arm_viscous_damping_nms_per_rad': 0.2,
    'pendulum_viscous_damping_nms_per_rad': 0.3,
    'motor_dead_zone_v': 0.1,
    'arm_coulomb_friction_nm': 0.0005,
    'sensing_latency_s': 0.2,
    'motor_dead_zone_offset_v': 0.1,
    'arm_static_friction_nm': 0.0005,
    'actuator_lag_s': 0.001,
    'arm_cable_stiffness_nm_per_rad': 0.0002,
    'pendulum_inertia_factor': 0.1,
}
#: The randomisation field each identified parameter widens, and whether it is a scale.
_IDENTIFIED_FIELDS = {
    'pendulum_mass_kg': ('pendulum_mass_scale', True),
    'pendulum_length_m': ('pendulum_length_scale', True),
    'motor_resistance_ohm': ('motor_resistance_scale', True),
    'arm_viscous_damping_nms_per_rad': ('arm_damping_scale', True),
    'pendulum_viscous_damping_nms_per_rad': ('pendulum_damping_scale', True),
    'motor_dead_zone_v': ('motor_dead_zone_v', False),
    'arm_coulomb_friction_nm': ('arm_coulomb_friction_nm', False),
    'sensing_latency_s': ('sensing_latency_periods', False),
    'motor_dead_zone_offset_v': ('motor_dead_zone_offset_v', False),
    'arm_static_friction_nm': ('arm_static_friction_nm', False),
    'actuator_lag_s': ('actuator_lag_s', False),
    'arm_cable_stiffness_nm_per_rad': ('arm_cable_stiffness_nm_per_rad', False),
    'pendulum_inertia_factor': ('pendulum_inertia_scale', True),
}


def around_identified(path: str | Path, period_s: float) -> Randomization:
    """Ranges around the values a rig file's ``identification:`` section gives.

    Each determined parameter is drawn within :data:`IDENTIFIED_SIGMAS` standard deviations
    of its value, at least :data:`IDENTIFIED_FLOORS`; an undetermined one (the prior kept)
    gets the ``standard`` range; the arm's mass (not identified) and the encoder noise keep
    theirs too.

    :raises ValueError: the file has no identification section (naming it).
    """
    import yaml

    doc = yaml.safe_load(Path(path).read_text()) or {}
    fitted = (doc.get('identification') or {}).get('fitted')
    if not isinstance(fitted, dict):
        raise ValueError(
            f'randomization:=identified needs a rig file with an identification: section '
            f'(python -m rip_learner.identify writes one); {path} has none'
        )
    ranges: dict[str, tuple[float, float]] = {}
    selection = (doc.get('identification') or {}).get('selection') or {}
    widen = float(selection.get('randomization_scale', 1.0))  # what the model leaves unexplained
    for name, (field_name, is_scale) in _IDENTIFIED_FIELDS.items():
        entry = fitted.get(name) or {}
        if not entry.get('determined') or entry.get('std') is None:
            continue  # the standard range
        value, std = float(entry['value']), widen * float(entry['std'])
        floor = widen * IDENTIFIED_FLOORS[name]
        if is_scale:
            w = min(0.5, max(floor, IDENTIFIED_SIGMAS * std / value if value > 0 else floor))
            ranges[field_name] = (1.0 - w, 1.0 + w)
        elif name == 'sensing_latency_s':
            w = max(floor, IDENTIFIED_SIGMAS * std / period_s)
            ranges[field_name] = (-w, w)
        else:
            w = max(floor, IDENTIFIED_SIGMAS * std)
            ranges[field_name] = (-w, w)
    return replace(Randomization(), **ranges)


def randomization_named(name: str, rig_params: str = '', period_s: float = 0.02) -> Randomization:
    """The ranges called ``name``, or a ValueError naming the choices.

    ``identified``: around ``rig_params``'s identification (:func:`around_identified`).
    """
    if name == 'identified':
        if not rig_params:
            raise ValueError(
                'randomization:=identified needs rig_params:=FILE (an identified rig)'
            )
        return around_identified(rig_params, period_s)
    try:
        return RANDOMIZATIONS[name]
    except KeyError:
        raise ValueError(
            f'randomization: {name!r} is not one of {sorted([*RANDOMIZATIONS, "identified"])}'
        ) from None


@dataclass(frozen=True)
class Curriculum:
    """Share of episodes that start near upright, by environment step."""

    balance_steps: int = 10_000
    ramp_steps: int = 20_000
    final_upright_share: float = 0.2

    def upright_share(self, step: int) -> float:
        """1 during the balance phase, then a linear ramp down to the final share."""
        if step < self.balance_steps:
            return 1.0
        if self.ramp_steps <= 0:
            return self.final_upright_share
        x = min(1.0, (step - self.balance_steps) / self.ramp_steps)
        return 1.0 + x * (self.final_upright_share - 1.0)


class CurriculumEnv(gym.Wrapper):
    """Draws each episode's start (curriculum) and physics (randomisation) at reset."""

    def __init__(
        self,
        env: SimRotaryInvertedPendulumEnv,
        curriculum: Curriculum,
        randomization: Randomization | None,
        seed: int,
    ) -> None:
        super().__init__(env)
        self.sim = env
        self.nominal = env.params
        self.curriculum = curriculum
        self.randomization = randomization
        self.rng = np.random.default_rng(seed)
        self.steps = 0

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> Any:
        """New physics (if randomising) and a start drawn from the curriculum."""
        if self.randomization is not None:
            self.sim.set_params(
                self.randomization.sample(self.rng, self.nominal, self.sim.config.period_s)
            )
        upright = self.rng.random() < self.curriculum.upright_share(self.steps)
        return self.env.reset(seed=seed, options={'start': 'upright' if upright else 'down'})

    def step(self, action: Any) -> Any:
        """Count the step (the curriculum's clock) and take it."""
        self.steps += 1
        return self.env.step(action)
