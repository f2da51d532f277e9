"""The deployment evaluation's refusals, with real processes.

(A deployment itself runs in test_readme, as the README types it, on a shifted rig.)
"""

import subprocess
import sys

import pytest

from rip_control.policy import PolicyMeta, encode_actor, random_actor
from rip_control.procs import child_env
from rip_control.rig.env import ACTION_SIZE, OBS_SIZE

pytestmark = [pytest.mark.alone, pytest.mark.ros, pytest.mark.slow]


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


def test_evaluate_without_a_policy_deploys_the_one_shipped_for_the_rate(tmp_path):
    """What its ``--help`` says of ``policy`` (the shared table): empty, the shipped policy."""
    import json

    from rip_control import run_files
    from rip_control.run_files import packaged_policy

    proc = _run(
        'rip_control.evaluate',
        'episodes:=1',
        'episode_seconds:=1',
        f'runs_dir:={tmp_path}',
        'run_name:=shipped',
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    report = json.loads((tmp_path / 'shipped' / run_files.EVALUATION).read_text())
    assert report['policy'] == str(packaged_policy(50.0))
    assert len(report['episodes']) == 1


def test_a_deployment_ends_once_its_episodes_decide_it(tmp_path):
    """``evaluate``'s ``stop_when``: the run ends after the deciding episode, in its safe order.

    Three episodes asked for; the rule says the first decides. The report holds that one
    and why the run stopped, and nothing failed or was interrupted.
    """
    import json

    from rip_control import run_files
    from rip_control.rig.emulator_args import EVENTS_FILE_ENV

    script = (
        'from rip_control.evaluate import evaluate\n'
        'seen = []\n'
        'def stop(done):\n'
        '    seen.append([m.ticks for m in done])\n'
        "    return 'decided by the first' if done else ''\n"
        f"args = {{'episodes': '3', 'episode_seconds': '1', 'runs_dir': {str(tmp_path)!r},"
        " 'run_name': 'cut'}\n"
        'evaluate(args, stream_logs=False, stop_when=stop)\n'
        "print('SEEN', seen)\n"
    )
    events = tmp_path / 'emulator_events'  # the emulator's motor events, as it did them
    proc = subprocess.run(
        [sys.executable, '-c', script],
        env=child_env({EVENTS_FILE_ENV: str(events)}),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    # The motor went off by the node's own command before the rig powered down (not by the
    # deadman, nor under an engaged motor), and was never engaged again.
    whats = [line.split(' ', 2)[2] for line in events.read_text().splitlines()]
    assert whats[-2:] == ['disengaged command', 'powered down'], whats
    assert not [w for w in whats if 'deadman' in w], whats
    assert 'could not deactivate' not in proc.stdout  # the ordered stop, not its fallback
    report = json.loads((tmp_path / 'cut' / run_files.EVALUATION).read_text())
    assert len(report['episodes']) == 1, report['episodes']
    assert report['stopped_decided'] == 'decided by the first'
    assert not report['failure'] and not report['interrupted']
    assert 'decided by the first; stopping the run' in proc.stdout
    # Asked once, when the first episode had ended and all its 50 ticks had arrived.
    assert 'SEEN [[50]]' in proc.stdout, proc.stdout[-2000:]
