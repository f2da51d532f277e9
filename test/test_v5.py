"""V5 (short) and the deployment evaluation, with real processes.

The emulator on a shifted rig, the control node, the learner and SB3's synchronous ``learn()``.
"""

import json
from pathlib import Path
import subprocess
import sys

import pytest
import yaml

from rip_control.policy import PolicyMeta, encode_actor, random_actor
from rip_control.procs import child_env
from rip_control.rig.env import ACTION_SIZE, OBS_SIZE

pytestmark = [pytest.mark.ros, pytest.mark.slow]
REPO = Path(__file__).resolve().parent.parent
HEAVY = REPO / 'config' / 'rig_shifted_heavy.yaml'
PARAMS = REPO / 'config' / 'finetune.yaml'


def _policy(path, rate=50.0):
    actor = random_actor(OBS_SIZE, ACTION_SIZE, (64, 64), rate, version=1, seed=3)
    path.write_bytes(
        encode_actor(PolicyMeta(1, rate, OBS_SIZE, ACTION_SIZE, (64, 64)), actor.tensors)
    )
    return path


def _run(*args, timeout=400):
    return subprocess.run(
        [sys.executable, '-m', *args],
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_evaluate_deploys_deterministically_and_reports_per_episode(tmp_path):
    policy = _policy(tmp_path / 'p.safetensors')
    proc = _run(
        'rip_control.evaluate',
        '--quiet',
        f'policy:={policy}',
        'episodes:=2',
        'episode_seconds:=1.0',
        f'rig_params:={HEAVY}',
        f'runs_dir:={tmp_path}',
        'run_name:=ev',
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    report = json.loads((tmp_path / 'ev' / 'evaluation.json').read_text())
    # 50 ticks of 1 s episodes; a transition the loop dropped for a stretched dt (a busy CI
    # VM's late tick) is one fewer, counted by the node.
    ticks = [e['ticks'] for e in report['episodes']]
    assert len(ticks) == 2 and all(25 <= t <= 50 for t in ticks), ticks
    for e in report['episodes']:
        assert 0.0 <= e['longest_balance_s'] <= e['duration_s']
        assert e['dt_mean_ms'] == pytest.approx(20.0, abs=0.5)
    assert report['summary']['episodes'] == 2 and report['transitions_rejected'] == 0
    assert (tmp_path / 'ev' / 'evaluation.png').stat().st_size > 1000
    assert 'longest balance window' in proc.stdout


def test_evaluate_refuses_learning_options_and_a_policy_at_another_rate(tmp_path):
    policy = _policy(tmp_path / 'p.safetensors')
    proc = _run('rip_control.evaluate', f'policy:={policy}', 'gradient_steps:=4')
    assert proc.returncode == 2 and "['gradient_steps'] configure learning" in proc.stderr
    proc = _run('rip_control.evaluate', f'policy:={tmp_path / "missing.safetensors"}')
    assert proc.returncode == 2 and 'missing.safetensors: no such file' in proc.stderr
    other = _policy(tmp_path / 'p100.safetensors', rate=100.0)
    proc = _run(
        'rip_control.evaluate',
        f'policy:={other}',
        'episodes:=1',
        'episode_seconds:=1.0',
        f'runs_dir:={tmp_path}',
        'run_name:=ev100',
    )
    # Refused before anything starts (it used to start the processes and fail in configure).
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert 'trained at 100 Hz but this node runs at 50 Hz' in proc.stderr
    assert 'process' not in proc.stdout and not (tmp_path / 'ev100').exists()


def test_v5_short_runs_all_three_ways_and_writes_json_and_plots(tmp_path):
    (tmp_path / 'sim').mkdir()
    policy = _policy(tmp_path / 'sim' / 'policy.safetensors')
    out = tmp_path / 'v5.json'
    # A parameter file that narrows the training samples, as config/finetune.yaml may.
    doc = yaml.safe_load(PARAMS.read_text())
    doc['rip_control']['ros__parameters']['train_noise_scale'] = 0.5
    params = tmp_path / 'params.yaml'
    params.write_text(yaml.safe_dump(doc))
    proc = _run(
        'rip_bench',
        'v5',
        '--params-file',
        str(params),
        '--rig',
        str(HEAVY),
        '--policy',
        str(policy),
        '--episodes',
        '1',
        '--episode-seconds',
        '1.0',
        '--eval-episodes',
        '1',
        '--eval-seconds',
        '1.0',
        '--runs-dir',
        str(tmp_path / 'runs'),
        '--json',
        str(out),
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    # Both arms sample at the policy's own spread, as SB3's learn() does, whatever the file
    # says: the async arm's control node read 1 from the file both arms were given.
    arms = yaml.safe_load((tmp_path / 'runs' / 'params.yaml').read_text())
    assert arms['rip_control']['ros__parameters']['train_noise_scale'] == 1.0
    doc = json.loads(out.read_text())
    assert set(doc['deployment']) == {'sim_only', 'async_finetuned', 'sync_finetuned'}
    # The host's steal during the run is recorded and printed.
    assert 0.0 <= doc['host_steal']['fraction'] < 1.0 and doc['host_steal']['wall_s'] > 0
    assert 'host steal: ' in proc.stdout
    for d in doc['deployment'].values():
        assert d['summary']['episodes'] == 1
    assert abs(doc['finetune']['async']['ticks']['measured_rate_hz'] - 50.0) < 0.5
    # One sync episode: it may end early (random actor at the arm limit, deadman).
    assert len(doc['finetune']['sync']['episode_returns']) == 1
    assert doc['finetune']['sync']['ticks']['n_ticks'] > 0
    for suffix in ('balance_hist', 'dt_hist', 'learning_curve'):
        assert (tmp_path / f'v5_rig_shifted_heavy_{suffix}.png').stat().st_size > 1000
    assert '(c) sync fine-tune' in proc.stdout
    # Over seeds: one row per arm, each seed's deployment mean, then their mean and the worst.
    other = json.loads(out.read_text())
    other['seed'] = 1
    sim = other['deployment']['sim_only']['summary']['longest_balance_s']
    first = doc['deployment']['sim_only']['summary']['longest_balance_s']['mean']
    sim['mean'] = first + 2.0
    out1 = tmp_path / 'v5_seed1.json'
    out1.write_text(json.dumps(other))
    table = _run('rip_bench', 'table', 'v5-seeds', str(out), str(out1))
    assert table.returncode == 0, table.stderr[-2000:]
    rows = [r for r in table.stdout.splitlines() if r.startswith('| rig_shifted_heavy')]
    assert [r.split(' | ')[2] for r in rows] == [
        '(a) simulation only',
        '(b) async fine-tune',
        '(c) sync fine-tune',
    ]
    cells = rows[0].split(' | ')
    assert cells[3:6] == [
        '0, 1',
        f'{first + 1.0:.2f} s ({first:.2f} s)',
        f'{first:.2f}, {first + 2.0:.2f}',
    ], rows[0]
    swung = doc['deployment']['async_finetuned']['summary']['swung_up']
    assert rows[1].split(' | ')[6] == f'{2 * swung}/2'  # both seeds' episodes counted
