"""The excitation episode: an input that makes the rig's physics identifiable.

A short, deterministic, safe input that makes the rig's physics identifiable from its own
readings (:mod:`rip_learner.identify`).

The pendulum hangs throughout; an arm-centring PD keeps the arm well inside its limit while a
feed-forward voltage and a moving arm reference do the exciting, in four parts:

1. **Ramps** (``ramp_s``): the feed-forward voltage ramps slowly to ``+ramp_v``, back, to
   ``-ramp_v`` and back. The arm stands still until the voltage clears the dead zone and
   the Coulomb friction, then creeps against the PD: breakaway, dead zone, friction and the
   torque per volt.
2. **Chirp** (``chirp_s``): the arm reference sweeps from ``chirp_start_hz`` to
   ``chirp_end_hz`` (exponentially), its amplitude falling with frequency. It passes the
   hanging pendulum's resonance once, quickly: gain, damping, the pendulum's length and
   mass through the arm's reaction, and the latency at the fast end.
3. **Brake ladder** (``ladder_s``): cycles of ``ladder_cycle_s``, each a kick of ``kick_v`` for
   ``kick_s`` (alternating in sign; it ends early once the arm turns at ``kick_speed_rad_s``)
   and then, while the arm still moves the kick's way, a braking voltage against it: one rung
   of a ladder from ``brake_low_v`` to ``brake_high_v`` per cycle, over a weak centring PD.
   The dead zone only shows while the arm moves (a gated voltage below the breakaway leaves a
   standing arm standing), and on a rig whose friction stops the arm in a few ticks the ramps
   and the chirp give few such ticks: here every cycle coasts through a voltage of its own.
   Braking, not driving, and kicks capped by speed, so a rig without friction stays as far
   inside its limit as in the chirp.
4. **Free swing** (the rest of ``duration_s``): 0 V, the motor engaged. The swing the chirp
   and the kicks left decays: the pendulum's damping, the arm's back-EMF braking.

Every action is a deterministic function of the tick and the reading, bounded to the
configured ``max_action_v`` like any policy's action. The node runs it at the configured rate,
as an episode of its own kind (``excitation``), marked in ``~/episode``, ``timing.csv`` and the
replay buffer.
"""

from __future__ import annotations

from dataclasses import dataclass
import math

import numpy as np

from rip_control.rig.env import VELOCITY_SCALE


@dataclass(frozen=True)
class ExcitationDesign:
    """The excitation's shape; the defaults identify the shipped rigs from one run.

    :param duration_s: the whole episode (≤ 20 s).
    :param ramp_s: part 1's length.
    :param ramp_v: part 1's peak feed-forward voltage.
    :param chirp_s: part 2's length.
    :param chirp_start_hz: part 2's first frequency.
    :param chirp_end_hz: part 2's last frequency.
    :param chirp_amplitude_rad: the arm reference's amplitude at the start of the chirp; it
        falls as 1/sqrt(f / chirp_start_hz).
    :param kp_v_per_rad: the centring PD's stiffness.
    :param kd_v_s_per_rad: the centring PD's damping.
    :param ladder_s: part 3's length.
    :param ladder_cycle_s: one kick and its braking.
    :param kick_s: the kick's length.
    :param kick_v: the kick's voltage.
    :param kick_speed_rad_s: the arm speed at which a kick ends early.
    :param brake_low_v: the braking voltage of part 3's first cycle.
    :param brake_high_v: the braking voltage of part 3's last cycle.
    :param ladder_kp_v_per_rad: part 3's centring stiffness.
    :param ladder_kd_v_s_per_rad: part 3's centring damping.
    """

    duration_s: float = 20.0
    ramp_s: float = 6.0
    ramp_v: float = 5.0
    chirp_s: float = 7.0
    chirp_start_hz: float = 0.4
    chirp_end_hz: float = 5.0
    chirp_amplitude_rad: float = 0.5
    kp_v_per_rad: float = 8.0
    kd_v_s_per_rad: float = 0.15
    ladder_s: float = 4.0
    ladder_cycle_s: float = 0.16
    kick_s: float = 0.06
    kick_v: float = 5.0
    kick_speed_rad_s: float = 6.0
    brake_low_v: float = 0.3
    brake_high_v: float = 2.7
    ladder_kp_v_per_rad: float = 3.0
    ladder_kd_v_s_per_rad: float = 0.05

    def __post_init__(self) -> None:
        for name, value in vars(self).items():
            if not (isinstance(value, (int, float)) and math.isfinite(value) and value >= 0):
                raise ValueError(
                    f'ExcitationDesign.{name} must be a finite number >= 0, got {value!r}'
                )
        if not 0 < self.duration_s <= 20.0:
            raise ValueError(
                f'ExcitationDesign.duration_s must be in (0, 20], got {self.duration_s!r}'
            )
        parts = self.ramp_s + self.chirp_s + self.ladder_s
        if parts > self.duration_s:
            raise ValueError(
                f'ExcitationDesign: ramp_s + chirp_s + ladder_s = {parts:g} s '
                f'exceeds duration_s = {self.duration_s:g} s'
            )
        if self.ladder_s > 0 and not 0 < self.kick_s < self.ladder_cycle_s <= self.ladder_s:
            raise ValueError(
                'ExcitationDesign: need 0 < kick_s < ladder_cycle_s <= ladder_s, got '
                f'{self.kick_s!r}, {self.ladder_cycle_s!r}, {self.ladder_s!r}'
            )
        if not 0 < self.chirp_start_hz < self.chirp_end_hz:
            raise ValueError(
                'ExcitationDesign: need 0 < chirp_start_hz < chirp_end_hz, got '
                f'{self.chirp_start_hz!r}, {self.chirp_end_hz!r}'
            )

    def feed_forward_v(self, t: float) -> float:
        """Part 1's voltage at ``t`` (a trapezoid-free triangle up, down, down, up)."""
        if t >= self.ramp_s or self.ramp_s <= 0:
            return 0.0
        x = 4.0 * t / self.ramp_s  # four legs: 0->+1, +1->0, 0->-1, -1->0
        leg, frac = int(x), x - int(x)
        shape = (frac, 1.0 - frac, -frac, frac - 1.0)[leg]
        return self.ramp_v * shape

    def reference_rad(self, t: float) -> float:
        """Part 2's arm reference at ``t`` (0 outside the chirp)."""
        tc = t - self.ramp_s
        if tc < 0.0 or tc >= self.chirp_s or self.chirp_s <= 0:
            return 0.0
        f0, f1, span = self.chirp_start_hz, self.chirp_end_hz, self.chirp_s
        growth = math.log(f1 / f0) / span
        freq = f0 * math.exp(growth * tc)
        phase = 2.0 * math.pi * f0 * (math.exp(growth * tc) - 1.0) / growth
        taper = min(1.0, tc / 0.5, (span - tc) / 0.5)  # no step at either end
        return taper * self.chirp_amplitude_rad * math.sqrt(f0 / freq) * math.sin(phase)

    def ladder_v(self, t: float) -> tuple[str, float] | None:
        """Part 3's open-loop input at ``t``: ``('kick', V)``, ``('brake', V)`` or ``None``."""
        tl = t - self.ramp_s - self.chirp_s
        if tl < 0.0 or tl >= self.ladder_s:
            return None
        cycles = max(1, int(self.ladder_s / self.ladder_cycle_s))
        cycle = min(int(tl / self.ladder_cycle_s), cycles - 1)
        sign = 1.0 if cycle % 2 == 0 else -1.0
        if tl - cycle * self.ladder_cycle_s < self.kick_s:
            return 'kick', sign * self.kick_v
        rung = cycle / max(1, cycles - 1)
        return 'brake', -sign * (self.brake_low_v + rung * (self.brake_high_v - self.brake_low_v))

    def voltage(self, t: float, theta: float, theta_dot: float) -> float:
        """The commanded voltage at ``t`` for the arm's reading (before the rig's limit)."""
        ladder = self.ladder_v(t)
        if ladder is not None:
            kind, volts = ladder
            if kind == 'kick' and math.copysign(1.0, volts) * theta_dot >= self.kick_speed_rad_s:
                volts = 0.0  # fast enough (a rig without friction): coast
            elif kind == 'brake' and volts * theta_dot >= 0.0:
                volts = 0.0  # the arm stopped or turned: brake no further
            return (
                volts - self.ladder_kp_v_per_rad * theta - self.ladder_kd_v_s_per_rad * theta_dot
            )
        if t >= self.ramp_s + self.chirp_s:
            return 0.0
        error = self.reference_rad(t) - theta
        return self.feed_forward_v(t) + self.kp_v_per_rad * error - self.kd_v_s_per_rad * theta_dot


class Excitation:
    """The excitation as the control loop drives it: an action per tick from the observation.

    :param design: its shape.
    :param rate_hz: the control rate (tick ``k`` is at ``k / rate_hz``).
    :param max_action_v: volts at action +/-1 (the action is clipped to [-1, 1]).
    """

    def __init__(self, design: ExcitationDesign, rate_hz: float, max_action_v: float) -> None:
        self.design = design
        self.period_s = 1.0 / rate_hz
        self.max_action_v = max_action_v
        self.steps = max(1, round(design.duration_s * rate_hz))

    def action(self, step: int, obs: np.ndarray) -> np.ndarray:
        """The action of tick ``step`` (0: the episode's first) from its observation.

        The observation is the task's (``theta`` first, ``theta_dot / 10`` fourth).
        """
        theta, theta_dot = float(obs[0]), float(obs[3]) / VELOCITY_SCALE
        volts = self.design.voltage(step * self.period_s, theta, theta_dot)
        value = max(-1.0, min(1.0, volts / self.max_action_v))
        return np.array([value], dtype=np.float32)
