"""``action_history`` (k): the past actions in the observation, end to end.

The simulator and the rig env build the same longer observation; a policy file records its k
and every loader refuses another, naming both; a warm start widens a k = 0 prior into a larger
k without changing what it does; and a fine-tune at k = 2 runs with real processes, its
transitions carrying the actions the loop really applied.
"""

import csv
import json
from pathlib import Path
import subprocess
import sys

import numpy as np
import pytest
import yaml

from rip_control import buffer_file, run_files
from rip_control.policy import (
    PolicyRejected,
    decode_actor,
    encode_actor,
    load_actor_file,
    random_actor,
    read_metadata,
)
from rip_control.procs import child_env
from rip_control.rig.env import (
    ACTION_SIZE,
    OBS_SIZE,
    SimRotaryInvertedPendulumEnv,
    TaskConfig,
    action_history_of,
    obs_size,
)
from rip_learner import pretrain

pytestmark = pytest.mark.alone

REPO = Path(__file__).resolve().parent.parent
SHIPPED = REPO / 'policies' / 'sim_50hz'


def test_the_simulator_appends_the_actions_before_the_previous_one_newest_first():
    env = SimRotaryInvertedPendulumEnv(TaskConfig.from_params(action_history=2))
    assert env.observation_space.shape == (OBS_SIZE + 2,)
    obs, _ = env.reset(seed=0)
    assert obs.shape == (8,) and list(obs[5:]) == [0.0, 0.0, 0.0]  # from rest
    applied = [0.5, -0.25, 0.75, 0.1]
    for i, a in enumerate(applied):
        obs, *_ = env.step(np.array([a], np.float32))
        want = ([*reversed(applied[: i + 1])] + [0.0, 0.0, 0.0])[:3]
        assert obs[5:] == pytest.approx(want), (i, obs)
    obs, _ = env.reset(seed=1)  # a new episode forgets the old one's actions
    assert list(obs[5:]) == [0.0, 0.0, 0.0]
    # k = 0 is the shipped observation, unchanged.
    assert SimRotaryInvertedPendulumEnv(TaskConfig.from_params()).observation_space.shape == (6,)


def test_the_rig_env_builds_the_same_history_and_forgets_it_at_a_new_episode(emulator):
    """The rig env (what the control loop steps) through a real pty to the emulator."""
    from rip_control.rig.client import LowLevelClient
    from rip_control.rig.env import RealRotaryInvertedPendulumEnv

    client = LowLevelClient(str(emulator.link), timeout_s=0.02)
    client.open()
    try:
        task = TaskConfig.from_params(episode_seconds=1.0, action_history=2)
        env = RealRotaryInvertedPendulumEnv(client, task)
        assert env.observation_space.shape == (8,)
        applied = [0.05, -0.1, 0.15]
        for episode in range(2):
            obs, _ = env.reset(seed=episode)
            assert list(obs[5:]) == [0.0, 0.0, 0.0], (episode, obs)
            for i, a in enumerate(applied):
                obs, *_ = env.step(np.array([a]))
                want = ([*reversed(applied[: i + 1])] + [0.0, 0.0])[:3]
                assert obs[5:] == pytest.approx(want, abs=1e-6), (episode, i, obs)
        env.close()
    finally:
        client.close()


def test_sizes_and_ks_map_both_ways_and_a_bad_k_is_named():
    assert [obs_size(k) for k in (0, 1, 2)] == [6, 7, 8]
    assert [action_history_of(n) for n in (6, 7, 8)] == [0, 1, 2]
    with pytest.raises(ValueError, match='an observation of 5 floats'):
        action_history_of(5)
    with pytest.raises(ValueError, match='action_history must be an integer >= 0, got -1'):
        TaskConfig.from_params(action_history=-1)


def test_a_policy_file_records_its_k_and_a_loader_with_another_refuses_it_naming_both():
    actor = random_actor(8, ACTION_SIZE, (16, 16), 50.0, version=3, action_history=2)
    data = encode_actor(actor.meta, actor.tensors)
    assert read_metadata(data)['action_history'] == '2'
    assert (
        decode_actor(data, rate_hz=50.0, obs_size=8, action_size=1, action_history=2).version == 3
    )
    with pytest.raises(PolicyRejected) as err:
        decode_actor(data, rate_hz=50.0, obs_size=6, action_size=1, action_history=0)
    assert str(err.value) == (
        'weights were trained with action_history 2 (an observation of 8 floats) but this node '
        'has action_history 0: set action_history:=2 or use weights trained with 0'
    )
    # Files written before k existed have no key: they are k = 0, and still load.
    shipped = read_metadata((SHIPPED / 'policy.safetensors').read_bytes())
    assert 'action_history' not in shipped
    load_actor_file(SHIPPED / 'policy.safetensors', rate_hz=50.0, obs_size=6, action_size=1)
    with pytest.raises(PolicyRejected, match='trained with action_history 0'):
        load_actor_file(
            SHIPPED / 'policy.safetensors',
            rate_hz=50.0,
            obs_size=7,
            action_size=1,
            action_history=1,
        )


def test_the_runner_gives_both_nodes_one_k_and_refuses_a_policy_or_file_that_differs(tmp_path):
    from rip_control.run import launching
    from rip_control.run.launching import CONTROL, LEARNER, RunnerInput

    params = RunnerInput.parse({'action_history': '2'}).nodes
    assert params[CONTROL]['action_history'] == params[LEARNER]['action_history'] == 2
    # The shipped policy (k = 0) under action_history:=2: refused before anything starts.
    with pytest.raises(ValueError) as err:
        launching.plan({'action_history': '2'}, pid=1)
    assert 'policy:=' in str(err.value) and 'has action_history 2' in str(err.value)
    assert 'trained with action_history 0' in str(err.value)
    # Not typed and not in a params file: the k the policy file records, for both nodes.
    k2 = tmp_path / 'k2.safetensors'
    actor = random_actor(8, ACTION_SIZE, (64, 64), 50.0, action_history=2)
    k2.write_bytes(encode_actor(actor.meta, actor.tensors))
    specs, _ = launching.plan({'policy': str(k2), 'runs_dir': str(tmp_path / 'r')}, pid=1)
    by = {spec.label: spec for spec in specs}
    assert by['control'].params['action_history'] == 2
    assert by['learner'].params['action_history'] == 2
    # Typed, the user's k stands, and a policy of another is refused.
    with pytest.raises(ValueError, match='trained with action_history 2'):
        launching.plan({'policy': str(k2), 'action_history': '0'}, pid=1)
    # A params file that gives the nodes different k: named, with the way out.
    path = tmp_path / 'p.yaml'
    path.write_text('rip_control:\n  ros__parameters:\n    action_history: 1\n')
    with pytest.raises(ValueError, match=r'rip_control has action_history 1 but rip_learner 0'):
        launching.plan({'params_file': str(path)}, pid=1)


def test_widening_puts_the_new_inputs_after_the_old_observation_and_before_the_action():
    """From k = 1 (7 floats) to k = 3: two zero columns at 7, the critic's action column last."""
    from rip_learner.sac import widen_inputs

    rng = np.random.default_rng(1)
    actor = rng.standard_normal((4, 7)).astype(np.float32)
    critic = rng.standard_normal((4, 8)).astype(np.float32)  # [7 observation floats, action]
    later = rng.standard_normal((4, 4)).astype(np.float32)
    out = widen_inputs(
        {'layers.0.weight': actor, 'qf0.0.weight': critic, 'qf0.2.weight': later}, 7, 2
    )
    assert out['layers.0.weight'].shape == (4, 9) and out['qf0.0.weight'].shape == (4, 10)
    assert (out['layers.0.weight'][:, :7] == actor).all()
    assert (out['layers.0.weight'][:, 7:] == 0).all()
    assert (out['qf0.0.weight'][:, :7] == critic[:, :7]).all()
    assert (out['qf0.0.weight'][:, 7:9] == 0).all()
    assert (out['qf0.0.weight'][:, 9] == critic[:, 7]).all()  # the action's column, last
    assert out['qf0.2.weight'] is later  # only the first layers take the observation


def test_a_warm_start_into_a_larger_k_keeps_what_the_prior_does(tmp_path):
    """SB3's real SAC, widened from the shipped k = 0 networks: the same actions and values.

    The new inputs get zero weights, so whatever the older actions are, the actor and the
    critics compute what the prior computes on its 6 floats; training moves them from there.
    """
    import torch

    from rip_learner.sac import SacConfig, build_sac

    cfg = SacConfig.from_params(action_history=2, device='cpu')
    wide = build_sac(cfg)
    assert pretrain.warm_start(wide, str(SHIPPED), cfg, 50.0).name == 'policy.safetensors'
    narrow = build_sac(SacConfig.from_params(device='cpu'))
    pretrain.warm_start(narrow, str(SHIPPED), SacConfig.from_params(device='cpu'), 50.0)
    rng = np.random.default_rng(0)
    obs6 = rng.uniform(-1, 1, (64, 6)).astype(np.float32)
    older = rng.uniform(-1, 1, (64, 2)).astype(np.float32)  # any actions before the last
    obs8 = np.concatenate([obs6, older], axis=1)
    with torch.no_grad():  # the actor's mean before the tanh: no saturation hides a change
        m6 = narrow.actor.get_action_dist_params(torch.as_tensor(obs6))[0].numpy()
        m8 = wide.actor.get_action_dist_params(torch.as_tensor(obs8))[0].numpy()
    assert np.abs(m6).std() > 0.1  # the prior's means vary over these observations
    assert m8 == pytest.approx(m6, abs=1e-5)
    a6, _ = narrow.predict(obs6, deterministic=True)
    act = torch.as_tensor(a6)
    with torch.no_grad():
        for critic in ('critic', 'critic_target'):
            q6 = getattr(narrow, critic)(torch.as_tensor(obs6), act)
            q8 = getattr(wide, critic)(torch.as_tensor(obs8), act)
            for x, y in zip(q6, q8, strict=True):
                assert y.numpy() == pytest.approx(x.numpy(), abs=1e-5), critic
    # ...and the other way is refused by name: a k = 2 prior has no k = 0 form.
    out = tmp_path / 'k2'
    actor = random_actor(8, ACTION_SIZE, (64, 64), 50.0, action_history=2)
    out.mkdir()
    (out / 'policy.safetensors').write_bytes(encode_actor(actor.meta, actor.tensors))
    with pytest.raises(ValueError, match='trained with action_history 2, more than the 0'):
        pretrain.warm_start(narrow, str(out), SacConfig.from_params(device='cpu'), 50.0)


@pytest.mark.ros
@pytest.mark.slow
def test_a_fine_tune_at_k_2_runs_and_its_transitions_hold_the_actions_the_loop_applied(
    tmp_path,
):
    """Pre-train a k = 2 policy (warm, a few steps), then fine-tune it on the rig.

    The runner takes k from the policy file (nothing types it); the nodes run, the learner's
    weights go live, and in the saved buffer every transition's next observation ends with its
    own action and the two before it (the rig env's history, not a copy of the observation).
    Also the runner's params file at work: its episodes and their length stand when no
    argument is typed (the launch file's own test checks the same under ``ros2 launch``).
    """
    prior = tmp_path / 'k2'
    assert (
        pretrain.main(
            [
                f'out:={prior}',
                f'init:={SHIPPED}',
                'action_history:=2',
                'steps:=150',
                'random_steps:=100',
                'eval_every:=100',
                'eval_episodes:=1',
                'eval_seconds:=1',
                'prior_data_size:=100',
                'device:=cpu',
            ]
        )
        == 0
    )
    policy = prior / 'policy.safetensors'
    assert read_metadata(policy.read_bytes())['action_history'] == '2'
    doc = yaml.safe_load((REPO / 'config' / 'finetune.yaml').read_text())
    doc['rip_control']['ros__parameters'].update(
        episodes=2,
        episode_seconds=2.0,
        eval_every_episodes=0,  # every policy drives
    )
    doc['rip_learner']['ros__parameters'].update(
        learning_starts=32,
        batch_size=32,
        publish_every_steps=20,
        publish_every_s=0.5,
        critic_warmup_updates=40,
    )
    params = tmp_path / 'params.yaml'
    params.write_text(yaml.safe_dump(doc))
    cmd = [
        sys.executable,
        '-m',
        'rip_control.finetune',
        '--quiet',
        'run_name:=k2',
        f'runs_dir:={tmp_path / "runs"}',
        f'params_file:={params}',
        f'policy:={policy}',
    ]
    proc = subprocess.run(cmd, env=child_env(), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    # The file's episodes and length, as the runner announces them.
    assert ', 2 episodes x 2.0 s' in proc.stdout, proc.stdout
    run = tmp_path / 'runs' / 'k2'
    summary = json.loads((run / 'summary.json').read_text())
    assert summary['episodes'] == 2
    assert int(summary['learner']['train_calls']) > 0
    arrays, meta = buffer_file.load(
        run / run_files.BUFFER, rate_hz=50.0, obs_size=8, action_size=1
    )
    assert meta.count >= 150  # two episodes of 100 ticks (an arm-limit end: fewer)
    with (run / 'timing.csv').open(newline='') as f:
        ticks = [int(r['n_ticks']) for r in csv.DictReader(f) if r['kind'] == 'training']
    assert len(ticks) == 2 and max(ticks) == 100, ticks  # 2 s at 50 Hz, not the default 6 s
    obs, nxt, act = arrays['observations'], arrays['next_observations'], arrays['actions']
    # Each transition's next observation: its own action, then the two its observation had.
    assert nxt[:, 5] == pytest.approx(act[:, 0], abs=1e-6)
    assert nxt[:, 6:8] == pytest.approx(obs[:, 5:7], abs=1e-6)
    # An episode starts with no history (each episode's step 0), and two steps on its
    # oldest entry is the action applied two transitions before, in the same episode.
    ep, step = arrays['episodes'], arrays['steps']
    first = step == 0
    assert first.sum() >= 2 and (obs[first, 5:] == 0).all(), obs[first]
    later = np.flatnonzero((step[2:] == step[:-2] + 2) & (ep[2:] == ep[:-2])) + 2
    assert len(later) >= 140
    assert nxt[later, 7] == pytest.approx(act[later - 2, 0], abs=1e-6)
    assert np.abs(act[:, 0]).max() > 0.05  # the actions moved: zeros would prove nothing
    # Policies the learner made (k = 2, as the node's) went live on the rig.
    versions = summary['policy_versions']
    assert max(versions) > min(versions), versions
