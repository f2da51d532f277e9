"""The reality-gap plant (``rip_control/rig/gap_plant.py``), its rigs and its plumbing.

Neutral, it integrates the model's trajectory (two derivations cross-checked); each effect
shows its signature; bad ``gap:`` values are refused by name; the emulator serves a gap rig
through its real pty, the C firmware refuses one; the offline rig records an excitation the
identification reads.
"""

from __future__ import annotations

import math
from pathlib import Path
import re
import subprocess
import sys
import time

import pytest

from rip_bench.offline_rig import OfflineRig, evaluate_policy, record_excitation
from rip_control.procs import child_env
from rip_control.rig.client import LowLevelClient
from rip_control.rig.dynamics import FurutaDynamics, PendulumParams
from rip_control.rig.emulator import Firmware
from rip_control.rig.emulator_process import EmulatorProcess
from rip_control.rig.gap_plant import AGE_TAIL_CUT, GapEffects, GapPlant, load_gap, load_rig

REPO = Path(__file__).resolve().parent.parent
GAP_RIGS = sorted((REPO / 'bench' / 'rigs').glob('gap_*.yaml'))
POLICY = REPO / 'policies' / 'sim_50hz' / 'policy.safetensors'
P = PendulumParams()
H = P.physics_step_s
BREAKAWAY_NM = 0.005  # 1.0 V of stall torque on the QUBE-Servo 2 (kt / R = 0.005 N m/V)


def _run(plant, volts, seconds, engaged=True):
    for _ in range(round(seconds / H)):
        plant.step(H, volts, engaged)


def _driven(plant_a, plant_b, seconds):
    """Both plants under the same swinging drive; the largest state difference."""
    worst = 0.0
    for k in range(round(seconds / H)):
        volts = 6.0 * math.sin(2.0 * math.pi * 1.3 * k * H) + 2.0 * math.sin(7.1 * k * H)
        plant_a.step(H, volts, True)
        plant_b.step(H, volts, True)
        worst = max(
            worst, *(abs(x - y) for x, y in zip(plant_a.state, plant_b.state, strict=True))
        )
    return worst


# -- neutral: the model's trajectory -------------------------------------------------------


@pytest.mark.parametrize('start', [(0.1, 1.0, 0.5, -1.0), (0.0, math.pi - 0.3, 0.0, 0.0)])
def test_neutral_gap_plant_integrates_the_models_trajectory(start):
    params = PendulumParams(arm_viscous_damping_nms_per_rad=8e-4, pendulum_mass_kg=0.027)
    model, gap = FurutaDynamics(params), GapPlant(params, GapEffects())
    model.set_state(*start)
    gap.set_state(*start)
    assert _driven(model, gap, 3.0) < 1e-9
    assert model.encoder_counts() == gap.encoder_counts()
    assert model.at_limit == gap.at_limit
    assert gap.energy_j() == pytest.approx(model.energy_j(), rel=1e-9)


def test_neutral_gap_plant_stops_at_the_cable_limit_as_the_model_does():
    model, gap = FurutaDynamics(P), GapPlant(P, GapEffects())
    for plant in (model, gap):
        plant.set_state(1.5, 0.3)
        _run(plant, 8.0, 1.0)
    assert gap.at_limit and gap.theta == P.arm_limit_rad
    assert gap.state == pytest.approx(model.state, abs=1e-9)


def test_every_effect_scales_and_is_neutral_scaled_to_zero():
    rig = load_gap(REPO / 'bench' / 'rigs' / 'gap_laggy.yaml')
    half = rig.scaled(0.5)
    assert half.backlash_rad == 0.5 * rig.backlash_rad
    assert half.command_delay_s == 0.5 * rig.command_delay_s
    model, gap = FurutaDynamics(P), GapPlant(P, rig.scaled(0.0))
    model.set_state(0.2, 0.5)
    gap.set_state(0.2, 0.5)
    assert _driven(model, gap, 1.0) < 1e-9


# -- each effect's signature ---------------------------------------------------------------


def _sticky(**kw):
    gap = GapEffects(breakaway_torque_nm=BREAKAWAY_NM, sliding_torque_nm=0.003, **kw)
    return GapPlant(P, gap)


def test_the_arm_sticks_below_the_breakaway_and_moves_above_it():
    below, above = _sticky(), _sticky()
    _run(below, 0.9, 1.0)  # 4.5 mN m of 5
    _run(above, 1.1, 1.0)  # 5.5 mN m
    assert below.theta == 0.0 and below.theta_dot == 0.0  # stuck exactly: no creep
    assert above.theta > 0.05


def test_a_sliding_arm_keeps_sliding_under_a_voltage_that_cannot_break_it_away():
    stuck, sliding = _sticky(), _sticky()
    _run(sliding, 2.0, 0.1)  # break away, then hold 0.9 V: above the sliding level
    for plant in (stuck, sliding):
        _run(plant, 0.9, 0.5)
    assert stuck.theta == 0.0
    assert sliding.theta_dot > 0.5


def test_the_stribeck_decay_lowers_the_friction_with_speed():
    plant = _sticky(stribeck_velocity_rad_s=0.1, stribeck_exponent=1.5)
    assert plant._friction(1e-6) == pytest.approx(BREAKAWAY_NM)
    assert plant._friction(0.1) == pytest.approx(0.003 + 0.002 * math.exp(-1.0))
    assert plant._friction(2.0) == pytest.approx(0.003, abs=1e-9)


def test_the_dead_zone_subtracts_its_own_threshold_in_each_direction():
    plant = GapPlant(P, GapEffects(dead_zone_pos_v=0.5, dead_zone_neg_v=1.0))
    volts = [plant.motor_voltage(H, v) for v in (0.4, 0.8, -0.8, -1.5, 10.0, -12.0)]
    assert volts == pytest.approx([0.0, 0.3, 0.0, -0.5, 9.5, -9.0])


def test_the_cable_drives_a_free_arm_back_towards_its_offset_and_stiffens():
    gap = GapEffects(
        cable_linear_nm_per_rad=5e-4, cable_cubic_nm_per_rad3=5e-4, cable_offset_rad=0.3
    )
    plant = GapPlant(P, gap)
    for start in (1.3, -0.7):  # 1 rad of twist either way
        plant.set_state(start, 0.0)
        plant.step(H, 0.0, False)
        assert plant.theta_dot * (0.3 - start) > 0.0
        _run(plant, 0.0, 8.0, engaged=False)
        assert plant.theta == pytest.approx(0.3, abs=0.02)
    pushes = []
    for twist in (0.5, 1.0):
        plant.set_state(0.3 + twist, 0.0)
        plant.step(H, 0.0, False)
        pushes.append(-plant.theta_dot)
    assert pushes[1] > 2.5 * pushes[0]  # not a linear spring


def test_the_command_delay_shifts_the_response_by_the_delay():
    prompt, late = GapPlant(P, GapEffects()), GapPlant(P, GapEffects(command_delay_s=0.01))
    trace_prompt, trace_late = [], []
    for _ in range(200):
        prompt.step(H, 5.0, True)
        late.step(H, 5.0, True)
        trace_prompt.append(prompt.theta)
        trace_late.append(late.theta)
    assert trace_late[:20] == [0.0] * 20
    assert trace_late[20:] == pytest.approx(trace_prompt[:-20], abs=1e-12)


def test_the_driver_response_and_the_winding_smooth_a_step():
    driver = GapPlant(P, GapEffects(driver_bandwidth_hz=30.0, driver_damping_ratio=0.5))
    seen = [driver.motor_voltage(H, 5.0) for _ in range(200)]
    assert seen[0] < 0.05 and 0.5 < seen[9] < 3.0
    assert max(seen) > 5.5  # damping 0.5 overshoots (a second-order response)
    assert seen[-1] == pytest.approx(5.0, abs=0.1)
    winding = GapPlant(P, GapEffects(motor_inductance_h=0.0042))  # L/R = 0.5 ms
    winding.step(H, 5.0, True)  # one step = one time constant
    assert winding.current_a == pytest.approx(5.0 / 8.4 * (1 - math.exp(-1)), rel=0.02)


def test_backlash_lets_the_motor_turn_within_the_play_without_the_arm():
    plant = GapPlant(P, GapEffects(backlash_rad=0.04))
    while plant.theta_m < 0.017:
        plant.step(H, 0.2, True)
    assert plant.theta == 0.0 and plant.theta_dot == 0.0
    assert plant.encoder_counts()[0] > 5  # the arm's encoder reads the shaft
    _run(plant, 1.0, 0.2)  # the play taken up: the shaft pushes the arm
    assert plant.theta > 0.01 and plant.theta_m - plant.theta == pytest.approx(0.02, abs=0.005)


def test_each_encoder_counts_at_its_own_resolution():
    params = PendulumParams(encoder_counts_per_rev=4096)
    plant = GapPlant(params, GapEffects(arm_counts_per_rev=1024, pendulum_counts_per_rev=2048))
    for k in range(50):
        plant.set_state(-1.0 + 0.0417 * k, 0.0123 * k - 0.3)
        arm, pend = plant.encoder_counts()
        assert arm % 4 == 0 and pend % 2 == 0
        assert arm == 4 * math.floor(plant.theta * 1024 / (2 * math.pi))
        assert pend == 2 * math.floor(plant.alpha * 2048 / (2 * math.pi))


def test_sample_ages_vary_within_their_bounds_reproducibly_by_seed():
    gap = GapEffects(sample_age_jitter_s=0.002, sample_age_tail_s=0.001)

    def ages(seed):
        plant = GapPlant(P, gap, seed=seed)
        return [plant.sample_age_s() for _ in range(2000)]

    first = ages(7)
    assert first == ages(7) and first != ages(8)
    assert 0.0 <= min(first) and max(first) <= 0.002 + AGE_TAIL_CUT * 0.001
    assert len(set(first)) == len(first)
    assert sum(first) / len(first) == pytest.approx(0.001 + 0.001, abs=2e-4)


def test_the_firmware_stamps_each_reading_with_its_own_age_never_going_back():
    params = PendulumParams(sensing_latency_s=0.005)
    gap = GapEffects(sample_age_jitter_s=0.004)
    fw = Firmware(params, seed=3, plant=GapPlant(params, gap, seed=3))
    ages, last = [], -1
    for k in range(1, 200):
        fw.advance_to(0.02 * k)
        state = fw.sample()
        ages.append(0.02 * k - state.timestamp_us * 1e-6)
        assert state.timestamp_us > last
        last = state.timestamp_us
    assert 0.005 - 1e-6 <= min(ages) and max(ages) <= 0.009 + H + 1e-6
    assert max(ages) - min(ages) > 0.003


def test_the_pendulum_with_a_tip_mass_has_its_centre_of_mass_and_inertias_apart():
    plant = GapPlant(P, GapEffects(rod_radius_m=0.005, tip_mass_kg=0.024, tip_radius_m=0.01))
    assert plant.pendulum_com_m == pytest.approx(0.75 * 0.129)
    j_a, j_b, _ = plant.pendulum_inertias_kg_m2
    assert j_a == pytest.approx(0.5 * 0.024 * 0.005**2 + 0.4 * 0.024 * 0.01**2)
    assert j_b == pytest.approx(
        0.024 * 0.129**2 / 12
        + 0.024 * 0.005**2 / 4
        + 0.4 * 0.024e-4
        + 2 * 0.024 * (0.129 / 4) ** 2
    )
    # Small swings: the period of a compound pendulum about a still arm.
    plant = GapPlant(P, GapEffects(tip_mass_kg=0.024, breakaway_torque_nm=0.01))
    plant.set_state(0.0, 0.05)
    crossings, prev, t = [], plant.alpha, 0.0
    while len(crossings) < 3:
        plant.step(H, 0.0, False)
        t += H
        if prev > 0.0 >= plant.alpha:
            crossings.append(t)
        prev = plant.alpha
    m, l_com = 0.048, 0.75 * 0.129
    period = (
        2
        * math.pi
        * math.sqrt(
            (m * l_com**2 + j_b - 0.4 * 0.024e-4 - 0.024 * 0.005**2 / 4) / (m * 9.81 * l_com)
        )
    )
    assert crossings[2] - crossings[1] == pytest.approx(period, rel=0.01)


# -- validation ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ('values', 'match'),
    [
        ({'stiction': 0.1}, r"unknown gap effect\(s\) \['stiction'\]"),
        ({'breakaway_torque_nm': float('nan')}, 'gap.breakaway_torque_nm must be finite, got nan'),
        ({'dead_zone_neg_v': -0.1}, r'gap.dead_zone_neg_v must be in \[0, 3\], got -0.1'),
        ({'command_delay_s': 0.2}, r'gap.command_delay_s must be in \[0, 0.05\], got 0.2'),
        ({'backlash_rad': 'wide'}, "gap.backlash_rad must be a number, got 'wide'"),
        ({'breakaway_torque_nm': 0.001, 'sliding_torque_nm': 0.002}, 'gap.sliding_torque_nm'),
        ({'pendulum_counts_per_rev': 1000.5}, 'gap.pendulum_counts_per_rev must be 0 or an'),
        ({'driver_bandwidth_hz': 2.0}, 'gap.driver_bandwidth_hz must be 0'),
    ],
)
def test_bad_gap_values_and_unknown_keys_are_refused_by_name(values, match):
    with pytest.raises(ValueError, match=match):
        GapEffects.from_dict(values, source='rig.yaml')


@pytest.mark.parametrize(
    ('rig', 'gap', 'match'),
    [
        (
            'arm_coulomb_friction_nm: 0.002',
            'breakaway_torque_nm: 0.002',
            'rig.arm_coulomb_friction_nm',
        ),
        (
            'encoder_counts_per_rev: 2048',
            'arm_counts_per_rev: 1000',
            'gap.arm_counts_per_rev = 1000',
        ),
        ('max_voltage_v: 10.0', 'breakaway_torque_nm: 0.04', 'gap.breakaway_torque_nm = 0.04'),
        (
            'rotor_and_hub_inertia_kg_m2: 4.6e-6',
            'backlash_rad: 0.01\n  motor_side_inertia_kg_m2: 5e-6',
            'gap.motor_side_inertia_kg_m2',
        ),
    ],
)
def test_a_rig_the_gap_plant_cannot_play_is_refused_by_name(tmp_path, rig, gap, match):
    f = tmp_path / 'rig.yaml'
    f.write_text(f'rig:\n  {rig}\ngap:\n  {gap}\n')
    with pytest.raises(ValueError, match=match):
        load_rig(f)


def test_a_rig_file_without_a_gap_section_has_no_gap():
    assert load_rig(REPO / 'config' / 'rig_qube_servo2.yaml')[1] is None


@pytest.mark.parametrize('rig', GAP_RIGS, ids=[p.stem for p in GAP_RIGS])
def test_the_gap_rigs_load_and_can_break_the_arm_away_with_a_wide_margin(rig):
    params, gap = load_rig(rig)
    stall = (
        params.motor_torque_constant_nm_per_a * params.max_voltage_v / params.motor_resistance_ohm
    )
    assert gap is not None and gap.breakaway_torque_nm < 0.25 * stall
    loop_delay = params.sensing_latency_s + gap.max_extra_age_s + gap.command_delay_s
    assert loop_delay < 0.03


def test_at_least_four_gap_rigs_are_shipped():
    assert len(GAP_RIGS) >= 4


# -- the emulator and the offline rig --------------------------------------------------------


def test_the_emulator_serves_a_gap_rig_through_its_pty(tmp_path):
    rig = REPO / 'bench' / 'rigs' / 'gap_mild.yaml'
    with EmulatorProcess(tmp_path / 'rig', ['--params', str(rig), '--seed', '1']) as emu:
        assert emu.ready_line.endswith('plant=gap')
        with LowLevelClient(str(emu.link)) as client:
            client.engage()
            for _ in range(15):
                client.set_voltage(3.0)
                time.sleep(0.01)
            arm = client.get_state().arm_counts
            client.disengage_motor()
    assert arm > 10


def _emulator(*args):
    cmd = [sys.executable, '-m', 'rip_control.rig.emulator', *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=30, env=child_env())


def test_check_validates_the_gap_section_and_the_c_firmware_refuses_a_gap_rig(tmp_path):
    rig = REPO / 'bench' / 'rigs' / 'gap_sticky.yaml'
    assert _emulator('--params', str(rig), '--check').returncode == 0
    bad = tmp_path / 'bad.yaml'
    bad.write_text('rig: {}\ngap:\n  backlash_rad: -1.0\n')
    out = _emulator('--params', str(bad), '--check')
    assert out.returncode == 2 and 'gap.backlash_rad' in out.stderr
    for extra in (['--check'], ['--link', str(tmp_path / 'link')]):
        out = _emulator('--firmware', 'c', '--params', str(rig), *extra)
        assert out.returncode == 2
        assert str(rig) in out.stderr and "C firmware's plant does not play the gap" in out.stderr


def test_the_offline_rig_records_an_excitation_the_identification_reads():
    from rip_learner.identify import records_from_arrays

    arrays = record_excitation(REPO / 'bench' / 'rigs' / 'gap_sticky.yaml', seed=2)
    assert len(arrays['actions']) == 1000 and arrays['actions'].shape == (1000, 1)
    records = records_from_arrays(arrays, 0.02, 8.0)
    assert len(records) == 1 and records[0].excitation and records[0].from_rest
    assert records[0].seconds == pytest.approx(20.0)
    assert abs(records[0].theta).max() > 0.1  # the arm broke away


def test_the_offline_rig_balances_the_shipped_policy_on_the_nominal_rig():
    (m,) = evaluate_policy(REPO / 'config' / 'rig_qube_servo2.yaml', POLICY, episodes=1, seconds=4)
    assert m.longest_balance_s > 2.0


def test_the_offline_rig_reads_the_replies_as_counts_and_timestamps():
    rig = OfflineRig(P, GapEffects(pendulum_counts_per_rev=512), seed=0)
    rig.place(0.3)
    reading = rig.at(0.01).read()
    assert 0.01 - 1.01 * H <= reading.time_s <= 0.01  # the physics: whole steps
    assert reading.alpha == pytest.approx(
        math.floor(0.3 * 512 / (2 * math.pi)) * 2 * math.pi / 512
    )


OFFLINE = (
    'python -m rip_bench.offline_rig --params bench/rigs/gap_sticky.yaml '
    '--policy policies/sim_50hz/policy.safetensors --episodes 5 --seconds 10'
)


@pytest.mark.readme(OFFLINE)
def test_the_documented_offline_run_shows_the_shipped_policy_failing_on_the_sticky_rig():
    """docs/reality_gap.md's command as typed: the shipped policy balances under 1 s there."""
    out = subprocess.run(
        [sys.executable, *OFFLINE.split()[1:]],
        env=child_env(),
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    mean = re.search(r'^mean balance (\d+\.\d+) s over 5 episodes$', out.stdout, re.M)
    assert mean and float(mean[1]) < 1.0, out.stdout
