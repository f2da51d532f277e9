"""The goals ``python -m rip_bench matrix`` checks, and the tables made of saved records.

The tables are what ``python -m rip_bench table KIND FILE...`` prints. Which records the
results pages show, and that the pages hold exactly the tables they give, is
``rip_bench/results/``'s and ``test_docs``'s (the pages are generated).
"""

import math
from pathlib import Path

import pytest

from rip_bench.cli import main as bench_main
from rip_bench.matrix import check, score

REPO = Path(__file__).resolve().parent.parent


# A (rig, seed) cell's goals, every one met (what the table tests vary is elsewhere).
ALL_MET = {
    'worst_second_half_return_share': 1.0,
    'chatter_ratio': 1.0,
    'balance_ok': True,
    'no_collapse': True,
    'chatter_ok': True,
}


def _summary(balance: float, tv: float) -> dict:
    return {'longest_balance_s': {'mean': balance}, 'action_tv_per_s': {'mean': tv}}


def test_goals_pass_and_fail_on_their_own_figures() -> None:
    sim = _summary(8.0, 10.0)
    ok = check(sim, _summary(7.85, 12.0), [200, 210, 190, 205], None)
    assert ok['balance_ok'] and ok['no_collapse'] and ok['chatter_ok']
    worse = check(sim, _summary(7.7, 12.1), [200, 210, 150, 205], None)
    assert not worse['balance_ok'] and not worse['no_collapse'] and not worse['chatter_ok']
    assert math.isclose(worse['worst_second_half_return_share'], 0.75)


def test_a_floor_and_a_negative_first_return() -> None:
    sim = _summary(1.0, 10.0)
    assert not check(sim, _summary(5.0, 5.0), [100.0], 8.0)['balance_ok']
    # From -100, 80 % "as good" allows down to -120, not -80.
    assert check(sim, _summary(5.0, 5.0), [-100.0, -90.0, -115.0], None)['no_collapse']
    assert not check(sim, _summary(5.0, 5.0), [-100.0, -90.0, -130.0], None)['no_collapse']


def test_the_throughput_table_pairs_each_repeat_with_sb3s() -> None:
    from rip_bench.learner_throughput import throughput_table

    def row(impl: str, rep: int, ups: float) -> dict:
        return {
            'hidden_sizes': [64, 64],
            'batch_size': 256,
            'torch_threads': 1,
            'impl': impl,
            'repeat': rep,
            'updates_per_s': ups,
        }

    doc = {
        'rows': [row('sb3', 0, 200), row('fast', 0, 220), row('sb3', 1, 100), row('fast', 1, 150)]
    }
    lines = throughput_table(doc).splitlines()
    assert lines[2] == '| [64, 64] | 256 | 1 | sb3 | 150 (100-200) |  |'
    # Ratios pair each repeat with SB3's (1.10, 1.50), not the means (185 / 150) nor the
    # sorted values (150 / 100, 220 / 200).
    assert lines[3] == '| [64, 64] | 256 | 1 | fast | 185 (150-220) | 1.10, 1.50 |'


def test_a_rig_measured_again_supersedes_its_earlier_row() -> None:
    from rip_bench.matrix import matrix_table

    def rig(balance: float) -> dict:
        goals = ALL_MET
        run = {'deployment': {'longest_balance_s': {'mean': balance}}, 'goals': goals}
        return {'sim_only': {'longest_balance_s': {'mean': 1.0}}, 'runs': [run]}

    old = {'rigs': {'nominal': rig(9.0), 'heavy': rig(12.0)}}
    new = {'rigs': {'heavy': rig(8.0)}}
    rows = matrix_table([old, new]).splitlines()[2:]
    assert [r.split(' | ')[0] for r in rows] == ['| nominal', '| heavy']
    assert '8.00 s (8.00 s)' in rows[1] and '12.00' not in rows[1]


def test_the_matrix_table_counts_the_seeds_that_deployed_their_starting_policy() -> None:
    from rip_bench.matrix import matrix_table

    goals = ALL_MET

    def run(best: int) -> dict:
        return {
            'deployment': {'longest_balance_s': {'mean': 8.0}},
            'goals': goals,
            'evaluations': [{'policy_version': 3, 'verdict': 'baseline'}],
            'best_policy_version': best,
        }

    doc = {'rigs': {'worn': {'sim_only': {'longest_balance_s': {'mean': 8.0}},
                             'runs': [run(3), run(40), run(3)]}}}  # fmt: skip
    (row,) = matrix_table([doc]).splitlines()[2:]
    assert row.split(' | ')[4] == '2 of 3'
    # A seed whose fine-tune failed is shown as failed and counted as a miss.
    from rip_bench.matrix import FAILED_GOALS

    doc['rigs']['worn']['runs'][1] = {'seed': 1, 'failure': 'lost its node', 'goals': FAILED_GOALS}
    (row,) = matrix_table([doc]).splitlines()[2:]
    assert '8.00, 8.00, seed 1 failed' in row and row.endswith('| 2/3 |'), row


def test_a_seed_that_delivered_the_starting_policy_is_scored_as_that_policy(tmp_path) -> None:
    import dataclasses
    from pathlib import Path

    import numpy as np

    from rip_bench.matrix import matrix_table, same_weights
    from rip_control.policy import encode_actor, load_actor_file
    from rip_control.rig.env import ACTION_SIZE, OBS_SIZE

    # The shipped policy, and the same weights re-saved under another version (what the node
    # writes to policy_best when no candidate beats the baseline), and one weight changed.
    shipped = Path(__file__).resolve().parent.parent / 'policies/sim_50hz/policy.safetensors'
    actor = load_actor_file(shipped, rate_hz=50.0, obs_size=OBS_SIZE, action_size=ACTION_SIZE)
    again, changed = tmp_path / 'again.safetensors', tmp_path / 'changed.safetensors'
    meta = dataclasses.replace(actor.meta, version=7)
    again.write_bytes(encode_actor(meta, actor.tensors))
    tensors = {k: v.copy() for k, v in actor.tensors.items()}
    tensors['mu.bias'] = tensors['mu.bias'] + np.float32(1e-6)
    changed.write_bytes(encode_actor(meta, tensors))
    assert same_weights(again, shipped, 50.0) and not same_weights(changed, shipped, 50.0)

    # The same policy measured twice (8.16 s, then 7.74 s on the seed's deployment): no gain,
    # no loss, chatter unchanged, and the 8 s floor judged on both pooled (7.95 s): missed.
    # Different weights with the same figures: judged on the deployment alone.
    sim, tuned = _summary(8.16, 20.0), _summary(7.74, 21.0)
    same = score(sim, tuned, True, [240, 230], 8.0)
    assert (same['balance_gain_s'], same['chatter_ratio']) == (0.0, 1.0)
    assert same['pooled_balance_s'] == pytest.approx(7.95) and not same['balance_ok']
    assert score(sim, tuned, True, [240, 230], None)['balance_ok']
    other = score(sim, tuned, False, [240, 230], None)
    assert other['balance_gain_s'] == pytest.approx(-0.42) and not other['balance_ok']
    assert 'pooled_balance_s' not in other

    def cell(goals: dict) -> dict:
        return {'deployment': tuned, 'goals': goals}

    doc = {'rigs': {'worn': {'sim_only': sim, 'runs': [cell(same), cell(other)]}}}
    (row,) = matrix_table([doc]).splitlines()[2:]
    assert '| 7.85 s (7.74 s) | 7.95* (7.74), 7.74 |' in row and row.endswith('| 0/2 |'), row


def test_the_round_trip_table_shows_the_spread_over_repeats() -> None:
    from rip_bench.serial_roundtrip import roundtrip_table

    def run(firmware: str, mean: float, repeat: int) -> dict:
        figures = {
            'n': 10,
            'mean_ms': mean,
            'std_ms': 0.1,
            'p50_ms': mean,
            'p99_ms': 2 * mean,
            'max_ms': 5 * mean,
        }
        return {
            'firmware': firmware,
            'repeat': repeat,
            'get_state': figures,
            'set_voltage': figures,
            'device_cpu_share': 0.05,
            'timeouts': repeat,
        }

    doc = {
        'rate_hz': 500.0,
        'load': 'sac',
        'repeats': 2,
        'seconds': 20.0,
        'runs': [run('python', 0.3, 0), run('c', 0.1, 0), run('c', 0.2, 1), run('python', 0.3, 1)],
    }
    rows = roundtrip_table(doc).splitlines()
    assert rows[2].startswith('| Python emulator | 0.300 ms | 0.600 ms | 1.500 ms |')
    assert rows[3].startswith('| C firmware (host build) | 0.100-0.200 ms | 0.200-0.400 ms')
    assert rows[3].endswith('| 5.0 % | 1 |')


def test_the_table_command_names_a_bad_file(tmp_path, capsys) -> None:
    bad = tmp_path / 'bad.json'
    bad.write_text('[1, 2]')
    for path, why in ((tmp_path / 'missing.json', 'cannot be read'), (bad, 'a JSON object')):
        with pytest.raises(SystemExit) as exit_:
            bench_main(['table', 'timing', str(path)])
        assert exit_.value.code == 2
        err = capsys.readouterr().err
        assert str(path) in err and why in err, err
    # Records a table cannot make, named: the wrong kind, or a set it refuses.
    late = REPO / 'bench' / 'results' / 'v5delay_mild_seed0.json'
    demo = REPO / 'bench' / 'results' / 'demo_run1.json'
    for kind, path, why in (
        ('v5-seeds', demo, "table v5-seeds: error: not a v5-seeds record: no 'rig'"),
        ('v5-delay', late, 'table v5-delay: error: no seed has both a V5 record and one labelled'),
    ):
        with pytest.raises(SystemExit) as exit_:
            bench_main(['table', kind, str(path)])
        assert exit_.value.code == 2
        err = capsys.readouterr().err
        assert why in err, err


def test_every_record_says_its_code_machine_and_host_steal() -> None:
    import argparse
    import subprocess
    import types

    from rip_bench.cli import run_measured

    def run(a: argparse.Namespace) -> dict:
        return {'benchmark': 'fake', 'value': a.value}

    fake = types.SimpleNamespace(NAME='fake', HELP='', add_arguments=None, run=run)
    record = run_measured(fake, argparse.Namespace(value=3))
    assert record['value'] == 3
    head = subprocess.run(
        ['git', 'describe', '--always'], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout.strip()
    assert record['commit'].removesuffix('-dirty') == head
    m = record['machine']
    assert m['cpus'] >= 1 and m['cpu_model'] and m['torch']['device'] in ('cpu', 'cuda')
    assert 0.0 <= record['host_steal']['fraction'] <= 1.0 and record['host_steal']['wall_s'] >= 0


def test_v5_fine_tunes_on_a_changed_copy_of_the_rig_and_names_a_bad_key(tmp_path) -> None:
    import argparse
    import dataclasses

    from rip_bench.v5 import _finetune_rig
    from rip_control.rig.dynamics import PendulumParams

    rig = REPO / 'bench' / 'rigs' / 'rig_mild.yaml'
    a = argparse.Namespace(rig=str(rig), finetune_rig_set=[])
    assert _finetune_rig(a, tmp_path) == str(rig)  # nothing changed: the rig itself
    a.finetune_rig_set = ['sensing_latency_s=0.0199']
    changed = PendulumParams.from_yaml(_finetune_rig(a, tmp_path))
    mild = PendulumParams.from_yaml(rig)
    assert mild.sensing_latency_s != 0.0199
    # the one value changed, every other one the mild rig's (not the nominal rig's)
    assert dataclasses.asdict(changed) == {**dataclasses.asdict(mild), 'sensing_latency_s': 0.0199}
    for bad in ('sensing_latency=0.02', 'sensing_latency_s=abc', 'sensing_latency_s'):
        a.finetune_rig_set = [bad]
        with pytest.raises(ValueError, match=f'--finetune-rig-set {bad}: expected NAME=VALUE'):
            _finetune_rig(a, tmp_path)


def test_the_sync_arm_counts_how_old_an_observation_is_when_its_action_comes(monkeypatch) -> None:
    import gymnasium as gym
    import numpy as np

    from rip_bench import sync_finetune
    from rip_bench.sync_finetune import DeadmanTolerantEnv, delay_stats

    clock = [100.0]
    monkeypatch.setattr(sync_finetune.time, 'monotonic', lambda: clock[0])

    class Rig(gym.Env):
        """A step takes 1 s of the clock (act, wait for the tick, observe), a reset 5 s."""

        observation_space = gym.spaces.Box(-1.0, 1.0, (1,))
        action_space = gym.spaces.Box(-1.0, 1.0, (1,))

        def reset(self, **kwargs):
            clock[0] += 5.0
            return np.zeros(1, np.float32), {}

        def step(self, action):
            clock[0] += 1.0
            return np.zeros(1, np.float32), 0.0, False, False, {}

    env = DeadmanTolerantEnv(Rig())  # type: ignore[arg-type]
    env.reset()
    for between in (0.5, 0.05, 0.02, 0.01):  # the caller's updates, before each action
        clock[0] += between
        env.step(0.0)
    # From each observation handed out to the next action: not the step's own second, and
    # not the first action after the reset's observation.
    assert env.act_delay_s == pytest.approx([0.05, 0.02, 0.01])
    clock[0] += 0.2  # the caller before the reset (SB3 resets at an episode's end)
    env.reset()
    clock[0] += 0.4
    env.step(0.0)  # a new episode's first action: not counted either
    assert len(env.act_delay_s) == 3
    assert delay_stats(env.act_delay_s) == pytest.approx(
        {'n': 3, 'mean': 80.0 / 3, 'p50': 20.0, 'p95': 47.0, 'max': 50.0}
    )
    assert delay_stats([]) == {'n': 0}


def test_the_delay_table_pairs_each_seed_with_its_made_later_run() -> None:
    from rip_bench.v5 import TRAINED_LATE, delay_table

    def summary(balance: float) -> dict:
        return {'longest_balance_s': {'mean': balance}, 'swing_up_s_mean': 10.0 - balance}

    def plain(seed: int, a: float, s: float, rig: str = 'mild') -> dict:
        arms = {'async_finetuned': summary(a), 'sync_finetuned': summary(s)}
        deployment = {k: {'summary': v} for k, v in arms.items()}
        return {'seed': seed, 'label': '', 'rig': rig, 'deployment': deployment}

    def late(seed: int, a: float, change: str = 'sensing_latency_s=0.02') -> dict:
        return {
            'seed': seed,
            'label': TRAINED_LATE,
            'rig': 'mild',
            'finetune_rig_overrides': [change],
            'deployment': {'async_finetuned': {'summary': summary(a)}},
        }

    # seed 1 has no made-later run: it is left out of the rows and of the means
    docs = [plain(0, 9.0, 9.2), plain(1, 1.0, 1.0), plain(2, 9.1, 9.0), late(2, 9.4), late(0, 9.2)]
    rows = delay_table(docs).splitlines()
    assert len(rows) == 5
    assert rows[2] == (
        '| 0 | 9.00 s | 9.20 s | 9.20 s | sensing_latency_s=0.02 | 1.00, 0.80, 0.80 s |'
    )
    assert rows[3] == (
        '| 2 | 9.10 s | 9.00 s | 9.40 s | sensing_latency_s=0.02 | 0.90, 1.00, 0.60 s |'
    )
    assert rows[-1] == '| mean of 2 | 9.05 s | 9.10 s | 9.30 s | | |'
    with pytest.raises(ValueError, match='seed 0 is given twice'):
        delay_table([*docs, late(0, 9.0)])
    with pytest.raises(ValueError, match='no seed has both'):
        delay_table([plain(0, 9.0, 9.0)])
    with pytest.raises(ValueError, match='2 rigs'):
        delay_table([*docs, plain(3, 9.0, 9.0, rig='worn')])
    with pytest.raises(ValueError, match='2 changes of the rig'):
        delay_table([*docs, late(1, 9.0, 'sensing_latency_s=0.03')])


def test_v5_fine_tunes_both_arms_on_the_changed_rig_and_deploys_on_the_rig(
    tmp_path, monkeypatch
) -> None:
    # Each stage is stopped at its call, its rig recorded: the fine-tunes' and the deployment's.
    import numpy as np

    from rip_bench import v5
    from rip_bench.cli import build_parser
    from rip_control import finetune

    class Reached(Exception):
        pass

    got: dict[str, object] = {}

    def stop(name):
        def record(*args, **kwargs):
            got[name] = (args, kwargs)
            raise Reached(name)

        return record

    rig = str(REPO / 'bench' / 'rigs' / 'rig_mild.yaml')
    runs = tmp_path / 'runs'

    def args(*more):
        return build_parser().parse_args(
            [
                'v5',
                '--rig',
                rig,
                '--runs-dir',
                str(runs),
                '--finetune-rig-set',
                'sensing_latency_s=0.02',
                *more,
            ]
        )

    changed = str(runs / 'finetune_rig.yaml')
    monkeypatch.setattr(finetune, 'run', stop('async'))
    with pytest.raises(Reached):
        v5.run(args())
    assert got['async'][0][0]['rig_params'] == changed
    # (b) taken from a run on disk, so that (c) and then the deployment are reached
    done = runs / 'async_finetune'
    done.mkdir(parents=True)
    (done / 'summary.json').write_text('{"failure": ""}')
    np.savez(done / 'ticks.npz', dt_s=np.full(3, 0.02))
    monkeypatch.setattr(v5, 'EmulatorProcess', stop('sync'))
    with pytest.raises(Reached):
        v5.run(args('--reuse-async'))
    assert got['sync'][0][1] == ['--params', changed]
    monkeypatch.setattr(v5, 'deploy', stop('deploy'))
    with pytest.raises(Reached):
        v5.run(args('--reuse-async', '--skip-sync'))
    assert got['deploy'][0][1] == rig  # deployed on the rig as it is
