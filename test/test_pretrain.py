"""Pre-training primitives, the shifted rigs, and a tiny real pre-training run (SB3 SAC)."""

from dataclasses import fields
import json
from pathlib import Path

import numpy as np
import pytest

from rip_control.params import parse_options
from rip_control.policy import PolicyRejected, load_actor_file
from rip_control.rig.dynamics import PendulumParams
from rip_control.rig.env import ACTION_SIZE, OBS_SIZE, SimRotaryInvertedPendulumEnv, TaskConfig
from rip_learner import pretrain
from rip_learner.pretrain import Curriculum, CurriculumEnv, Randomization

CONFIG = Path(__file__).resolve().parent.parent / 'config'
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
    }
    assert set(scales) == {f.name for f in fields(r)}
    return all(
        lo - 1e-12 <= scales[k] <= hi + 1e-12
        for k, (lo, hi) in ((k, getattr(r, k)) for k in scales)
    )


def test_the_wide_randomisation_covers_the_worn_rig_and_not_the_heavy_or_stuck_one():
    wide, standard = pretrain.RANDOMIZATIONS['wide'], pretrain.RANDOMIZATIONS['standard']
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
    assert "randomization: 'broad' is not one of ['standard', 'wide']" in capsys.readouterr().err
    assert not (tmp_path / 'x').exists()


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
            'learning_starts:=200',
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
    summary = json.loads((out / 'pretrain.json').read_text())
    assert summary['rate_hz'] == 100.0 and summary['steps'] == 600
    assert len(summary['curve']) == 2 and (out / 'progress.csv').read_text().count('\n') == 3
    assert (out / 'learning_curve.png').stat().st_size > 1000
    actor = load_actor_file(
        out / 'policy.safetensors', rate_hz=100.0, obs_size=OBS_SIZE, action_size=ACTION_SIZE
    )
    assert actor.meta.hidden_sizes == (16, 16)
    assert actor.metadata['trained_in'] == 'simulation'
    with pytest.raises(PolicyRejected, match='trained at 100 Hz but this node runs at 50 Hz'):
        load_actor_file(
            out / 'policy.safetensors', rate_hz=50.0, obs_size=OBS_SIZE, action_size=ACTION_SIZE
        )
    assert (out / 'sac_checkpoint.safetensors').exists()
