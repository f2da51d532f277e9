"""Pre-training primitives, the shifted rigs, and a tiny real pre-training run (SB3 SAC)."""

from dataclasses import fields
import json
from pathlib import Path
import re

import numpy as np
import pytest
import yaml

from rip_control.params import parse_options, table_by_name
from rip_control.policy import PolicyRejected, load_actor_file
from rip_control.rig.dynamics import PendulumParams
from rip_control.rig.env import ACTION_SIZE, SimRotaryInvertedPendulumEnv, TaskConfig, obs_size
from rip_learner import pretrain, randomization
from rip_learner.randomization import Curriculum, CurriculumEnv, Randomization

CONFIG = Path(__file__).resolve().parent.parent / 'config'
REPO = CONFIG.parent
NEW_K = table_by_name(pretrain.OPTIONS)['action_history'].default  # new pre-trainings' k
SHIFTED = sorted(CONFIG.glob('rig_shifted_*.yaml'))


def test_curriculum_starts_upright_then_ramps_to_the_final_share():
    c = Curriculum(balance_steps=100, ramp_steps=200, final_upright_share=0.2)
    assert c.upright_share(0) == c.upright_share(99) == 1.0
    assert c.upright_share(200) == pytest.approx(0.6)
    assert c.upright_share(300) == c.upright_share(10**6) == pytest.approx(0.2)
    assert Curriculum(0, 0, 0.3).upright_share(0) == 0.3


def test_randomization_draws_inside_the_stated_ranges():
    r = Randomization()
    base = PendulumParams()
    rng = np.random.default_rng(0)
    draws = [r.sample(rng, base, 0.02) for _ in range(300)]
    masses = [d.pendulum_mass_kg / base.pendulum_mass_kg for d in draws]
    assert r.pendulum_mass_scale[0] <= min(masses) < max(masses) <= r.pendulum_mass_scale[1]
    lat = [d.sensing_latency_s for d in draws]
    assert 0.0 <= min(lat) and max(lat) <= r.sensing_latency_periods[1] * 0.02
    assert len({d.motor_dead_zone_v for d in draws}) == 300  # really drawn per episode


def test_curriculum_env_draws_physics_and_start_at_each_reset():
    sim = SimRotaryInvertedPendulumEnv(TaskConfig.from_params())
    env = CurriculumEnv(sim, Curriculum(balance_steps=10**9), Randomization(), seed=1)
    env.reset(seed=0)
    first = sim.params
    obs, _ = env.reset(seed=0)
    assert sim.params != first
    assert obs[2] > 0.99  # the balance phase starts upright: phi ~ 0
    late = CurriculumEnv(sim, Curriculum(0, 0, 0.0), None, seed=1)
    obs, _ = late.reset(seed=0)
    assert obs[2] < -0.99  # share 0: every start hangs down, as on the rig


@pytest.mark.parametrize('path', SHIFTED, ids=lambda p: p.stem)
def test_shifted_rigs_load_and_differ_from_the_simulator_beyond_its_randomisation(path):
    rig = PendulumParams.from_yaml(path)
    base = PendulumParams()
    changed = {f.name for f in fields(rig) if getattr(rig, f.name) != getattr(base, f.name)}
    assert len(changed) >= 3, changed
    r = Randomization()
    outside = [
        rig.pendulum_mass_kg / base.pendulum_mass_kg > r.pendulum_mass_scale[1],
        rig.pendulum_length_m / base.pendulum_length_m > r.pendulum_length_scale[1],
        rig.arm_viscous_damping_nms_per_rad / base.arm_viscous_damping_nms_per_rad
        > r.arm_damping_scale[1],
        rig.arm_coulomb_friction_nm > r.arm_coulomb_friction_nm[1],
        rig.motor_dead_zone_v > r.motor_dead_zone_v[1],
        rig.encoder_noise_counts > r.encoder_noise_counts[1],
    ]
    assert any(outside), f'{path.name} lies inside the pre-training randomisation'


def _inside(rig: PendulumParams, r: Randomization) -> bool:
    """Whether every parameter ``r`` randomises is within its range for ``rig``."""
    base = PendulumParams()
    scales = {
        'pendulum_mass_scale': rig.pendulum_mass_kg / base.pendulum_mass_kg,
        'pendulum_length_scale': rig.pendulum_length_m / base.pendulum_length_m,
        'arm_mass_scale': rig.arm_mass_kg / base.arm_mass_kg,
        'motor_resistance_scale': rig.motor_resistance_ohm / base.motor_resistance_ohm,
        'arm_damping_scale': rig.arm_viscous_damping_nms_per_rad
        / base.arm_viscous_damping_nms_per_rad,
        'pendulum_damping_scale': rig.pendulum_viscous_damping_nms_per_rad
        / base.pendulum_viscous_damping_nms_per_rad,
        'arm_coulomb_friction_nm': rig.arm_coulomb_friction_nm,
        'motor_dead_zone_v': rig.motor_dead_zone_v,
        'encoder_noise_counts': rig.encoder_noise_counts,
        'sensing_latency_periods': rig.sensing_latency_s / 0.02,
        'motor_dead_zone_offset_v': rig.motor_dead_zone_offset_v,
        'arm_static_friction_nm': rig.arm_static_friction_nm,
        'actuator_lag_s': rig.actuator_lag_s,
        'arm_cable_stiffness_nm_per_rad': rig.arm_cable_stiffness_nm_per_rad,
        'pendulum_inertia_scale': rig.pendulum_inertia_factor,
    }
    assert set(scales) == {f.name for f in fields(r)}
    return all(
        lo - 1e-12 <= scales[k] <= hi + 1e-12
        for k, (lo, hi) in ((k, getattr(r, k)) for k in scales)
    )


def test_the_wide_randomisation_covers_the_worn_rig_and_not_the_heavy_or_stuck_one():
    wide, standard = randomization.RANDOMIZATIONS['wide'], randomization.RANDOMIZATIONS['standard']
    assert standard == Randomization()
    rigs = {p.stem: PendulumParams.from_yaml(p) for p in SHIFTED}
    assert _inside(rigs['rig_shifted_worn'], wide)
    assert not _inside(rigs['rig_shifted_worn'], standard)
    assert not _inside(rigs['rig_shifted_heavy'], wide)
    assert not _inside(rigs['rig_shifted_stuck'], wide)
    assert _inside(PendulumParams(), wide) and _inside(PendulumParams(), standard)
    # wide only widens: every standard range lies inside the wide one
    for f in fields(standard):
        (lo, hi), (wlo, whi) = getattr(standard, f.name), getattr(wide, f.name)
        assert wlo <= lo and hi <= whi, f.name


def test_an_unknown_randomisation_is_refused_by_name_before_training(tmp_path, capsys):
    assert pretrain.main([f'out:={tmp_path / "x"}', 'randomization:=broad']) == 2
    err = capsys.readouterr().err
    assert "randomization: 'broad' is not one of ['identified', 'standard', 'wide']" in err
    assert not (tmp_path / 'x').exists()
    # 'identified' needs an identified rig file, and says so.
    assert pretrain.main([f'out:={tmp_path / "x"}', 'randomization:=identified']) == 2
    assert 'needs rig_params:=FILE' in capsys.readouterr().err
    plain = REPO / 'config' / 'rig_shifted_stuck.yaml'
    argv = [f'out:={tmp_path / "x"}', 'randomization:=identified', f'rig_params:={plain}']
    assert pretrain.main(argv) == 2
    assert 'has none' in capsys.readouterr().err and not (tmp_path / 'x').exists()


def test_identified_ranges_are_as_wide_as_the_uncertainty_with_a_floor(tmp_path):
    ident = {
        'rig': {'motor_dead_zone_v': 1.2, 'sensing_latency_s': 0.03},
        'identification': {
            'fitted': {
                'motor_dead_zone_v': {'value': 1.2, 'std': 0.2, 'determined': True},
                'sensing_latency_s': {'value': 0.03, 'std': 1e-5, 'determined': True},
                'motor_resistance_ohm': {'value': 9.7, 'std': 0.97, 'determined': True},
                'pendulum_mass_kg': {'value': 0.024, 'std': None, 'determined': False},
            }
        },
    }
    path = tmp_path / 'identified.yaml'
    path.write_text(yaml.safe_dump(ident))
    r = randomization.around_identified(path, 0.02)
    assert r.motor_dead_zone_v == pytest.approx((-0.4, 0.4))  # 2 std
    assert r.sensing_latency_periods == pytest.approx((-0.2, 0.2))  # the floor, in periods
    assert r.motor_resistance_scale == pytest.approx((0.8, 1.2))  # 2 x 10 %
    assert r.pendulum_mass_scale == Randomization().pendulum_mass_scale  # undetermined
    # Drawn around the rig file's values (added to them, never below zero).
    base = PendulumParams.from_yaml(path)
    rng = np.random.default_rng(0)
    draws = [r.sample(rng, base, 0.02) for _ in range(200)]
    dz = [d.motor_dead_zone_v for d in draws]
    assert 0.8 <= min(dz) < 1.0 and 1.4 < max(dz) <= 1.6
    assert all(0.026 <= d.sensing_latency_s <= 0.034 for d in draws)


def test_a_warm_start_from_a_rig_file_trains_from_the_priors_networks(tmp_path, capsys):
    out = tmp_path / 'warm'
    argv = [
        f'out:={out}',
        f'rig_params:={REPO / "config" / "rig_shifted_stuck.yaml"}',
        f'init:={REPO / "policies" / "sim_50hz"}',
        'steps:=300',
        'random_steps:=100',
        'eval_every:=200',
        'eval_episodes:=1',
        'eval_seconds:=1',
        'prior_data_size:=50',
        'device:=cpu',
    ]
    assert pretrain.main(argv) == 0
    summary = json.loads((out / 'pretrain.json').read_text())
    assert summary['rig']['motor_dead_zone_v'] == 1.2  # the file's physics
    assert summary['init'].endswith('sim_50hz/policy.safetensors')
    # The warm start was scored first (step 1): its evaluation is the init's own.
    assert summary['curve'][0]['step'] == 1
    # The hidden sizes must match the init's, and a folder without critics is refused.
    bare = tmp_path / 'bare'
    bare.mkdir()
    (bare / 'policy.safetensors').write_bytes(
        (REPO / 'policies' / 'sim_50hz' / 'policy.safetensors').read_bytes()
    )
    capsys.readouterr()
    assert pretrain.main([*argv[:2], f'init:={bare}', 'steps:=10', f'out:={tmp_path / "b"}']) == 2
    assert 'checkpoint.safetensors' in capsys.readouterr().err
    assert pretrain.main([*argv[:3], 'hidden_sizes:=[32, 32]', 'steps:=10']) == 2
    assert '[32, 32]' in capsys.readouterr().err


def test_there_are_at_least_two_shifted_rigs_and_a_bad_key_is_named(tmp_path):
    assert len(SHIFTED) >= 2
    bad = tmp_path / 'rig.yaml'
    bad.write_text('rig:\n  pendulum_mass_kg: 0.03\n  pendulum_colour: red\n')
    with pytest.raises(ValueError, match=r"unknown pendulum parameter\(s\) \['pendulum_colour'\]"):
        PendulumParams.from_yaml(bad)
    bad.write_text('rig:\n  pendulum_mass_kg: .nan\n')
    with pytest.raises(ValueError, match='pendulum_mass_kg must be a finite number'):
        PendulumParams.from_yaml(bad)


def test_options_are_typed_and_range_checked_by_name():
    opts = parse_options(
        ['rate:=100', 'hidden_sizes:=[32, 32]', 'randomize:=false'], pretrain.OPTIONS
    )
    assert opts['rate'] == 100.0 and opts['hidden_sizes'] == [32, 32] and not opts['randomize']
    with pytest.raises(ValueError, match=r'rate:=fast: expected a double'):
        parse_options(['rate:=fast'], pretrain.OPTIONS)
    with pytest.raises(ValueError, match=r'rate:=5000: expected a value in \[1, 1000\]'):
        parse_options(['rate:=5000'], pretrain.OPTIONS)
    with pytest.raises(ValueError, match="option 'rtae' does not exist; did you mean rate"):
        parse_options(['rtae:=50'], pretrain.OPTIONS)
    assert pretrain.main(['steps:=-1']) == 2


def test_a_tiny_pretraining_run_saves_a_policy_tagged_with_its_rate(tmp_path, capsys):
    out = tmp_path / 'pt'
    code = pretrain.main(
        [
            'rate:=100',
            f'out:={out}',
            'steps:=600',
            'random_steps:=200',
            'eval_every:=300',
            'eval_episodes:=1',
            'eval_seconds:=1.0',
            'batch_size:=64',
            'hidden_sizes:=[16, 16]',
        ]
    )
    assert code == 0
    log = capsys.readouterr().out
    assert 'step     300' in log and 'steps/s' in log and 'done in' in log
    ends = re.search(r'step     300 \| +(\d+) s, ends within (\d+) s \|', log)
    assert ends, log
    # the 300 steps left at this rate (tens of steps a second at least), not the 900-s limit
    assert int(ends[2]) <= 30, ends[0]
    summary = json.loads((out / 'pretrain.json').read_text())
    assert summary['rate_hz'] == 100.0 and summary['steps'] == 600
    assert len(summary['curve']) == 2 and (out / 'progress.csv').read_text().count('\n') == 3
    assert (out / 'learning_curve.png').stat().st_size > 1000
    actor = load_actor_file(
        out / 'policy.safetensors',
        rate_hz=100.0,
        obs_size=obs_size(NEW_K),
        action_size=ACTION_SIZE,
        action_history=NEW_K,
    )
    assert actor.meta.hidden_sizes == (16, 16)
    assert actor.metadata['trained_in'] == 'simulation'
    with pytest.raises(PolicyRejected, match='trained at 100 Hz but this node runs at 50 Hz'):
        load_actor_file(
            out / 'policy.safetensors',
            rate_hz=50.0,
            obs_size=obs_size(NEW_K),
            action_size=ACTION_SIZE,
            action_history=NEW_K,
        )
    assert (out / 'sac_checkpoint.safetensors').exists()
