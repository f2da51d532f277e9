"""The whole fine-tune with real processes: V4 (short), resume, and a learner killed mid-run."""

import json
from pathlib import Path
import signal
import subprocess
import sys
import time

from diagnostic_msgs.msg import DiagnosticArray
import pytest
import rclpy
import yaml

from rip_control.emulator_process import child_env
from rip_control.env import ACTION_SIZE, OBS_SIZE
from rip_learner import buffer_store

pytestmark = [pytest.mark.ros, pytest.mark.slow]
REPO = Path(__file__).resolve().parent.parent


def _params_file(tmp_path):
    doc = yaml.safe_load((REPO / 'config' / 'finetune.yaml').read_text())
    doc['rip_learner']['ros__parameters'].update(
        learning_starts=32, batch_size=32, publish_every_steps=20, publish_every_s=0.5
    )
    path = tmp_path / 'params.yaml'
    path.write_text(yaml.safe_dump(doc))
    return path


def _finetune(tmp_path, *extra):
    cmd = [
        sys.executable,
        '-m',
        'rip_control.finetune',
        '--quiet',
        'episodes:=3',
        'episode_seconds:=2.0',
        'run_name:=v4',
        f'runs_dir:={tmp_path / "runs"}',
        f'params_file:={_params_file(tmp_path)}',
        'resume_buffer:=auto',
        'policy:=auto',
        *extra,
    ]
    proc = subprocess.run(cmd, env=child_env(), capture_output=True, text=True, timeout=300)
    summary_path = tmp_path / 'runs' / 'v4' / 'summary.json'
    summary = json.loads(summary_path.read_text()) if summary_path.exists() else {}
    return proc, summary


def test_v4_short_finetune_holds_rate_learns_and_resumes(tmp_path):
    proc, s = _finetune(tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert s['episodes'] == 3 and s['resumed_buffer'] is None
    # policy:=auto starts a new run from the shipped pre-trained policy...
    assert s['policy'] == str(REPO / 'policies' / 'sim_50hz' / 'policy.safetensors')
    ticks = s['ticks']
    assert abs(ticks['measured_rate_hz'] - 50.0) <= 0.5  # loose; bench e2e has the 0.1 % one
    assert ticks['n_violations'] == 0
    assert int(s['learner']['train_calls']) > 0
    versions = s['policy_versions']
    assert versions == sorted(versions) and versions[-1] > versions[0]
    run = tmp_path / 'runs' / 'v4'
    for name in (
        'timing.csv',
        'tick_dt_hist.png',
        'episode_returns.png',
        'policy_latest.safetensors',
    ):
        assert (run / name).exists(), name
    _, meta = buffer_store.load(
        run / 'replay_buffer.safetensors', rate_hz=50.0, obs_size=OBS_SIZE, action_size=ACTION_SIZE
    )
    assert meta.count == s['transitions_published'] > 0  # every one, none lost in flight
    assert '== summary ==' in proc.stdout
    # A second run resumes the first one's buffer and says so.
    proc2, s2 = _finetune(tmp_path)
    assert proc2.returncode == 0, proc2.stdout[-3000:] + proc2.stderr[-3000:]
    assert s2['resumed_buffer'] and 'resumed from' in proc2.stdout
    # ...and a second one from the first one's latest policy (critics beside it).
    assert s2['policy'] == str(run / 'policy_latest.safetensors')
    _, meta2 = buffer_store.load(
        run / 'replay_buffer.safetensors', rate_hz=50.0, obs_size=OBS_SIZE, action_size=ACTION_SIZE
    )
    assert meta2.count == meta.count + s2['transitions_published']


def test_finetune_refuses_bad_arguments_clearly(tmp_path):
    proc = subprocess.run(
        [sys.executable, '-m', 'rip_control.finetune', 'rat:=50'],
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2 and "'rat'" in proc.stderr


def test_finetune_refuses_to_overwrite_an_earlier_runs_buffer(tmp_path):
    earlier = tmp_path / 'runs' / 'r' / 'replay_buffer.safetensors'
    earlier.parent.mkdir(parents=True)
    earlier.write_bytes(b'the earlier run')
    cmd = [
        sys.executable,
        '-m',
        'rip_control.finetune',
        'run_name:=r',
        f'runs_dir:={tmp_path / "runs"}',
    ]
    proc = subprocess.run(cmd, env=child_env(), capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2, proc.stderr
    assert str(earlier) in proc.stderr and 'resume_buffer:=auto' in proc.stderr
    assert earlier.read_bytes() == b'the earlier run'


class _ControlDiag:
    def __init__(self, node, name):
        self.values = []
        self.sub = node.create_subscription(DiagnosticArray, '/diagnostics', self._on, 10)
        self.name = name

    def _on(self, msg):
        for st in msg.status:
            if st.name.startswith(self.name + ':'):
                values = {kv.key: kv.value for kv in st.values}
                self.values.append({'message': st.message, **values})


def _spin_until(node, cond, timeout_s):
    end = time.monotonic() + timeout_s
    while time.monotonic() < end and not cond():
        rclpy.spin_once(node, timeout_sec=0.05)
    return cond()


def test_learner_killed_mid_run_control_keeps_rate_then_a_restarted_learner_is_used(
    control_rig, learner_process, ros_node, tmp_path
):
    rig = control_rig(episode_seconds=2.0)
    diag = _ControlDiag(ros_node, rig.name)
    proc, _ = learner_process(checkpoint_every_s=1.0, publish_every_s=0.3, publish_every_steps=10)
    assert rig.driver.change('configure') and rig.driver.change('activate')
    got_weights = _spin_until(
        ros_node, lambda: diag.values and int(diag.values[-1].get('policy_version', 0)) >= 2, 60
    )
    assert got_weights, diag.values[-1:]
    ckpt = tmp_path / 'runs' / 'learner' / 'replay_buffer.safetensors'
    assert _spin_until(ros_node, ckpt.exists, 20)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=10)
    t_kill = time.monotonic()
    killed_at = len(diag.values)
    _spin_until(ros_node, lambda: len(diag.values) >= killed_at + 4, 10)
    after = diag.values[killed_at + 1 :]
    assert after, 'no diagnostics after the kill'
    for d in after:
        assert d['lifecycle_state'] == 'active'
        assert abs(float(d['tick_rate_hz']) - 50.0) < 1.0
        assert d['violations'] == '0'
    assert rig.engaged_now()  # still under control, on the last policy
    # What the dead learner misses is counted once DDS drops it (its lease running out).
    unmatched_before = int(after[0]['transitions_unmatched'])
    assert _spin_until(
        ros_node, lambda: int(diag.values[-1]['transitions_unmatched']) > unmatched_before, 40
    ), diag.values[-1]['message']
    print(f'undelivered transitions counted from {time.monotonic() - t_kill:.1f} s after the kill')
    version_before = int(diag.values[-1]['policy_version'])
    # A restarted learner resumes from its checkpoint and its weights are used again.
    proc2, _ = learner_process(
        resume_buffer=str(ckpt), publish_every_s=0.3, publish_every_steps=10
    )
    assert _spin_until(
        ros_node, lambda: int(diag.values[-1]['policy_version']) > version_before, 60
    ), diag.values[-1]
    t0 = time.monotonic()
    assert rig.driver.change('deactivate')
    assert rig.wait_disengaged_after(t0) is not None
    ros_node.destroy_subscription(diag.sub)


def _processes_mentioning(text):
    found = []
    for proc_dir in Path('/proc').iterdir():
        try:
            cmdline = (proc_dir / 'cmdline').read_bytes().replace(b'\0', b' ').decode()
        except (OSError, ValueError):
            continue
        if text in cmdline:
            found.append(proc_dir.name)
    return found


@pytest.mark.parametrize('how', ['SIGINT', 'SIGTERM', 'SIGKILL'])
def test_stopping_the_runner_disengages_the_motor_and_saves_the_buffer(
    start_emulator, tmp_path, how
):
    import threading

    emu = start_emulator('--events', name=f'rig_{how}')
    cmd = [
        sys.executable,
        '-m',
        'rip_control.finetune',
        'episodes:=0',
        'episode_seconds:=2.0',
        f'serial_port:={emu.link}',
        'run_name:=stop',
        f'runs_dir:={tmp_path / "runs"}',
        f'params_file:={_params_file(tmp_path)}',
    ]
    proc = subprocess.Popen(
        cmd, env=child_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    lines, first_episode = [], threading.Event()

    def read():
        for line in proc.stdout:
            lines.append(line)
            if line.startswith('episode '):
                first_episode.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        assert first_episode.wait(120), ''.join(lines[-30:])
        t0 = time.monotonic()
        proc.send_signal(getattr(signal, how))
        code = proc.wait(timeout=90)
        if how == 'SIGKILL':
            # No clean-up ran in the runner: its children learn of its death from the
            # kernel (SIGTERM on parent death) and take their own safe exits.
            assert code == -signal.SIGKILL
            deadline = time.monotonic() + 60
            while _processes_mentioning(str(tmp_path / 'runs')):
                assert time.monotonic() < deadline, 'children outlived the killed runner'
                time.sleep(0.2)
        else:
            assert code == 130, ''.join(lines[-30:])
    finally:
        if proc.poll() is None:
            proc.kill()
    reader.join(timeout=5)

    def disengaged_after_stop():
        return [t for t, what in emu.events() if what.startswith('disengaged') and t >= t0]

    deadline = time.monotonic() + 2.0  # the emulator's EVENT line is read asynchronously
    while not disengaged_after_stop() and time.monotonic() < deadline:
        emu.wait_for_line('EVENT', 0.05, start=len(emu.lines))
    assert disengaged_after_stop(), 'the motor was never disengaged after the stop'
    assert emu.events()[-1][1].startswith('disengaged')
    out = ''.join(lines)
    assert how == 'SIGKILL' or 'interrupted' in out
    _, meta = buffer_store.load(
        tmp_path / 'runs' / 'stop' / 'replay_buffer.safetensors',
        rate_hz=50.0,
        obs_size=OBS_SIZE,
        action_size=ACTION_SIZE,
    )
    assert meta.count > 0


def test_two_rigs_feed_one_learner_and_both_get_its_weights(tmp_path):
    proc, s = _finetune(tmp_path, 'rigs:=2', 'episode_seconds:=1.5')
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert [r['rig'] for r in s['rigs']] == ['rig0', 'rig1']
    run = tmp_path / 'runs' / 'v4'
    for r in s['rigs']:
        assert r['episodes'] == 3 and r['ticks']['n_violations'] == 0
        assert abs(r['ticks']['measured_rate_hz'] - 50.0) <= 0.5
        assert (run / r['rig'] / 'timing.csv').exists()
        # The learner's weights reached this rig: its policy version rose during the run.
        assert r['policy_versions'][-1] > r['policy_versions'][0], r['policy_versions']
    _, meta = buffer_store.load(
        run / 'replay_buffer.safetensors', rate_hz=50.0, obs_size=OBS_SIZE, action_size=ACTION_SIZE
    )
    # One buffer holds every transition both rigs published (3 episodes of at most 75 each):
    # the runner activates a rig only once its publisher has matched the learner, and stops
    # the learner only once it has received everything.
    published = [r['transitions_published'] for r in s['rigs']]
    assert all(100 < n <= 4 * 75 for n in published), published
    assert meta.count == sum(published), (meta.count, published)
    assert all(r['transitions_unmatched'] == 0 for r in s['rigs'])
    assert 'the learner received' not in proc.stdout
    assert '[rig0] episode' in proc.stdout and '[rig1] episode' in proc.stdout
    # Per-rig rows in one timing.csv (each rig's own file stays in its folder).
    rows = (run / 'timing.csv').read_text().splitlines()
    assert rows[0].startswith('rig,episode,n_ticks,mean_tick_dt_ms')
    assert sorted({row.split(',')[0] for row in rows[1:]}) == ['rig0', 'rig1']
