"""Physics of the Furuta pendulum: energy, small-angle period, hard stop, parameters."""

import math

import pytest

from rip_control.rig.dynamics import FurutaDynamics, PendulumParams

FRICTIONLESS = PendulumParams(
    arm_viscous_damping_nms_per_rad=0.0,
    pendulum_viscous_damping_nms_per_rad=0.0,
    arm_limit_rad=math.pi,
)


def test_energy_is_conserved_without_damping_and_input():
    dyn = FurutaDynamics(FRICTIONLESS)
    # Released from rest: zero angular momentum about the motor axis, so the arm only
    # counter-swings and never reaches the (energy-absorbing) cable stop.
    dyn.set_state(0.0, 2.0, 0.0, 0.0)
    e0 = dyn.energy_j()
    worst = 0.0
    for _ in range(10 * 2000):  # 10 s at 2 kHz, motor disengaged: no torque
        dyn.step(FRICTIONLESS.physics_step_s, 0.0, engaged=False)
        worst = max(worst, abs(dyn.energy_j() - e0))
    assert abs(dyn.theta) < FRICTIONLESS.arm_limit_rad  # the stop never absorbed energy
    assert worst / e0 < 0.005


def test_small_angle_period_matches_the_linearised_model():
    p = FRICTIONLESS
    m, r, l_com = p.pendulum_mass_kg, p.arm_length_m, p.pendulum_length_m / 2
    jp = m * p.pendulum_length_m**2 / 12 + m * l_com**2
    j0 = p.arm_mass_kg * r**2 / 12 + p.rotor_and_hub_inertia_kg_m2 + m * r**2
    # Free arm: the non-zero mode of M0 q'' + K q = 0 with K = diag(0, m g l).
    omega2 = m * p.gravity_m_s2 * l_com * j0 / (j0 * jp - (m * r * l_com) ** 2)
    expected = 2 * math.pi / math.sqrt(omega2)

    dyn = FurutaDynamics(p)
    dyn.set_state(0.0, 0.05)
    h = p.physics_step_s
    crossings = []
    prev, t = dyn.alpha, 0.0
    while len(crossings) < 7 and t < 10:
        dyn.step(h, 0.0, engaged=False)
        t += h
        if prev < 0 <= dyn.alpha:
            crossings.append(t - h * dyn.alpha / (dyn.alpha - prev))
        prev = dyn.alpha
    measured = (crossings[-1] - crossings[0]) / (len(crossings) - 1)
    assert measured == pytest.approx(expected, rel=0.02)


def test_arm_stops_at_the_cable_limit_and_stays_there():
    p = PendulumParams(arm_limit_rad=1.0)
    dyn = FurutaDynamics(p)
    peak = 0.0
    for _ in range(2 * 2000):
        dyn.step(p.physics_step_s, 10.0, engaged=True)
        peak = max(peak, dyn.theta)
    assert peak == pytest.approx(1.0)
    assert dyn.at_limit and dyn.theta_dot == 0.0


def test_positive_voltage_turns_the_arm_positive_and_disengaged_motor_does_nothing():
    p = PendulumParams()
    on, off = FurutaDynamics(p), FurutaDynamics(p)
    on.advance(0.1, 3.0, engaged=True)
    off.advance(0.1, 3.0, engaged=False)
    assert on.theta > 0.01
    assert off.theta == 0.0


def test_voltage_is_clamped_and_dead_zone_applied():
    dyn = FurutaDynamics(PendulumParams(max_voltage_v=5.0, motor_dead_zone_v=0.5))
    assert dyn.effective_voltage(12.0) == 5.0
    assert dyn.effective_voltage(-0.4) == 0.0
    assert dyn.effective_voltage(0.6) == 0.6


def test_encoder_quantisation_is_2048_counts_per_rev():
    dyn = FurutaDynamics(PendulumParams())
    dyn.set_state(math.pi / 2, math.pi)
    assert dyn.encoder_counts() == (512, 1024)


def test_params_reject_bad_values_by_name(tmp_path):
    with pytest.raises(ValueError, match='pendulum_mass_kg must be > 0, got -1'):
        PendulumParams(pendulum_mass_kg=-1)
    with pytest.raises(ValueError, match='physics_rate_hz must be >= 1000'):
        PendulumParams(physics_rate_hz=500)
    bad = tmp_path / 'rig.yaml'
    bad.write_text('rig:\n  pendulum_mass_kg: 0.03\n  pendulum_lenght_m: 0.2\n')
    with pytest.raises(
        ValueError, match=r"unknown pendulum parameter\(s\) \['pendulum_lenght_m'\]"
    ):
        PendulumParams.from_yaml(bad)


def test_params_load_from_yaml(tmp_path):
    f = tmp_path / 'rig.yaml'
    f.write_text('pendulum_mass_kg: 0.03\nmotor_dead_zone_v: 0.2\n')
    p = PendulumParams.from_yaml(f)
    assert p.pendulum_mass_kg == 0.03 and p.motor_dead_zone_v == 0.2
    assert p.arm_mass_kg == PendulumParams().arm_mass_kg


def _arm_after(params: PendulumParams, volts: float, seconds: float = 0.5) -> FurutaDynamics:
    dyn = FurutaDynamics(params)
    for _ in range(round(seconds / params.physics_step_s)):
        dyn.step(params.physics_step_s, volts, engaged=True)
    return dyn


def test_an_off_centre_dead_zone_passes_one_direction_sooner_than_the_other():
    dyn = FurutaDynamics(PendulumParams(motor_dead_zone_v=1.0, motor_dead_zone_offset_v=0.4))
    assert dyn.effective_voltage(1.3) == 0.0  # the positive edge is at 1.4 V
    assert dyn.effective_voltage(1.5) == 1.5
    assert dyn.effective_voltage(-0.7) == -0.7  # the negative edge is at -0.6 V
    assert dyn.effective_voltage(-0.5) == 0.0


def test_static_friction_holds_the_arm_under_a_voltage_the_coulomb_level_alone_lets_through():
    coulomb = PendulumParams(arm_coulomb_friction_nm=0.002)
    sticky = PendulumParams(arm_coulomb_friction_nm=0.002, arm_static_friction_nm=0.004)
    # 1 V stalls at 5 mN m: above the Coulomb level, below Coulomb + static.
    assert abs(_arm_after(coulomb, 1.0).theta) > 0.05
    assert abs(_arm_after(sticky, 1.0).theta) < 0.01
    assert abs(_arm_after(sticky, 3.0).theta) > 0.05  # above the breakaway it moves


def test_the_cable_pulls_the_arm_back_towards_zero():
    dyn = FurutaDynamics(PendulumParams(arm_cable_stiffness_nm_per_rad=0.01))
    dyn.set_state(1.0, 0.0)
    for _ in range(2000):  # 1 s, driver off
        dyn.step(dyn.params.physics_step_s, 0.0, engaged=False)
    assert dyn.theta < 0.9
    free = FurutaDynamics(PendulumParams())
    free.set_state(1.0, 0.0)
    free.advance(1.0, 0.0, engaged=False)
    assert free.theta == pytest.approx(1.0, abs=1e-6)


def test_the_actuator_lag_delays_the_motor_voltage_by_its_time_constant():
    lag = 0.01
    dyn = FurutaDynamics(PendulumParams(actuator_lag_s=lag))
    h = dyn.params.physics_step_s
    for _ in range(round(lag / h)):
        dyn.step(h, 5.0, engaged=True)
    assert dyn.motor_volts == pytest.approx(5.0 * (1 - math.exp(-1)), rel=0.03)
    dyn.step(h, 5.0, engaged=False)  # a disengaged driver drives nothing
    assert dyn.motor_volts == 0.0
    assert FurutaDynamics(PendulumParams()).params.actuator_lag_s == 0.0
    assert (
        _arm_after(PendulumParams(), 5.0, 0.02).theta
        > _arm_after(PendulumParams(actuator_lag_s=lag), 5.0, 0.02).theta
    )


def test_a_heavier_inertia_about_the_centre_of_mass_slows_the_swing():
    def period(params: PendulumParams) -> float:
        dyn = FurutaDynamics(params)
        dyn.set_state(0.0, 0.05)
        crossings, t, prev = [], 0.0, dyn.alpha
        while len(crossings) < 3:
            dyn.step(params.physics_step_s, 0.0, engaged=False)
            t += params.physics_step_s
            if prev < 0.0 <= dyn.alpha:
                crossings.append(t)
            prev = dyn.alpha
        return crossings[2] - crossings[1]

    assert period(PendulumParams(pendulum_inertia_factor=2.0)) > 1.05 * period(PendulumParams())


def test_the_dead_zone_offset_must_lie_within_the_dead_zone():
    with pytest.raises(ValueError, match='motor_dead_zone_offset_v'):
        PendulumParams(motor_dead_zone_v=0.2, motor_dead_zone_offset_v=0.3)
    assert PendulumParams(motor_dead_zone_v=0.2, motor_dead_zone_offset_v=-0.2)
    with pytest.raises(ValueError, match='pendulum_inertia_factor'):
        PendulumParams(pendulum_inertia_factor=0.0)
