"""The whole fine-tune with real processes: V4 (short), resume, and a learner killed mid-run."""

import csv
import json
from pathlib import Path
import re
import signal
import subprocess
import sys
import time

from diagnostic_msgs.msg import DiagnosticArray
import numpy as np
from procs import describe, processes_mentioning
import pytest
import rclpy
from ros2_cli import argv
from tick_rate import rate_but_the_longest_tick
import yaml

from rip_control import buffer_file, run_files
from rip_control.policy import load_actor_file
from rip_control.procs import child_env
from rip_control.rig.env import ACTION_SIZE, OBS_SIZE

pytestmark = [pytest.mark.alone, pytest.mark.ros, pytest.mark.slow]
REPO = Path(__file__).resolve().parent.parent


def _params_file(tmp_path, control=None, learner=None):
    doc = yaml.safe_load((REPO / 'config' / 'finetune.yaml').read_text())
    doc['rip_learner']['ros__parameters'].update(
        learning_starts=32,
        batch_size=32,
        publish_every_steps=20,
        publish_every_s=0.5,
        critic_warmup_updates=40,  # short runs: the actor moves within the first episode
    )
    doc['rip_learner']['ros__parameters'].update(learner or {})
    doc['rip_control']['ros__parameters'].update(control or {})
    path = tmp_path / 'params.yaml'
    path.write_text(yaml.safe_dump(doc))
    return path


#: The README's commands ("Running the fine-tune", "Several rigs, one learner"), run here as
#: spelled with the test's arguments appended (a later value wins).
README_FINETUNE = 'python -m rip_control.finetune rate:=50 episodes:=10 run_name:=first'
README_TWO_RIGS = 'python -m rip_control.finetune rigs:=2 episodes:=10 run_name:=pair'


def _finetune(tmp_path, *extra, params=None, readme=None):
    """The runner with the test's arguments (after ``readme``, the README's command, if given)."""
    cmd = [
        *(argv(readme) if readme else [sys.executable, '-m', 'rip_control.finetune']),
        '--quiet',
        'episodes:=3',
        'episode_seconds:=2.0',
        'run_name:=v4',
        f'runs_dir:={tmp_path / "runs"}',
        f'params_file:={params or _params_file(tmp_path)}',
        'resume_buffer:=auto',
        'policy:=auto',
        *extra,
    ]
    proc = subprocess.run(cmd, env=child_env(), capture_output=True, text=True, timeout=300)
    summary_path = tmp_path / 'runs' / 'v4' / 'summary.json'
    summary = json.loads(summary_path.read_text()) if summary_path.exists() else {}
    return proc, summary


def test_the_tick_count_of_a_run_covers_the_activations_a_trip_ended(tmp_path):
    """What rip_control.adapt counts as rig time: every activation's ticks, not the last's.

    Every tick is stretched by 26 ms from each activation's 50th on, so the watchdog trips
    each activation a few ticks later; the runner re-activates twice and then gives up. The
    tick trace is the last activation's; the two before it are counted beside it.
    """
    params = _params_file(tmp_path, control={'fault_tick_delay_ms': 26, 'fault_after_ticks': 50})
    proc, s = _finetune(tmp_path, 'episodes:=2', 'violation_restarts:=2', params=params)
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert s['violation_restarts'] == 2, s
    ticks = s['ticks']
    assert 50 < ticks['n_ticks'] < 60, ticks
    assert 2 * 50 < ticks['n_ticks_earlier_activations'] < 2 * 60, ticks


def test_a_serial_stall_is_ridden_out_and_the_run_finishes_its_owed_episodes(tmp_path):
    """A stalled rig mid-run: the runner re-activates and runs only the episodes still owed.

    The emulator stalls five replies in a row by 40 ms 850 replies into the loop (two a tick:
    in the reset after the first training episode; a reset, the baseline evaluation, a reset
    and that episode take 250-400 ticks here): the third consecutive failed tick ends the
    activation (SerialFailure, the motor off by the node's command). The runner re-activates
    the rig and runs the one training episode still owed, and the run ends with status 0.
    The first activation's ticks are counted beside the trace of the last. What is
    kept: every transition published, in the buffer the learner saved with its networks.
    """
    from rip_control import run_files
    from rip_control.policy import read_metadata
    from rip_control.rig.emulator_process import EmulatorProcess

    stall = ['--stall-every', '1', '--stall-ms', '40']
    window = ['--faults-after-replies', '850', '--faults-for-replies', '5']
    with EmulatorProcess(tmp_path / 'rig', stall + window) as emulator:
        params = _params_file(tmp_path, control={'max_serial_errors': 3})
        proc, s = _finetune(
            tmp_path, 'episodes:=2', f'serial_port:={emulator.link}', params=params
        )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    # (a second trip, if this VM's host pauses the emulator's vCPU, is met the same way)
    assert 'SerialFailure' in out and out.count('re-activating (') >= 1, out[-4000:]
    assert s['violation_restarts'] >= 1 and s['episodes'] == 2, s
    run = tmp_path / 'runs' / 'v4'
    with (run / 'timing.csv').open(newline='') as f:
        rows = list(csv.DictReader(f))
    kinds = [r['kind'] for r in rows]
    assert kinds.count('training') == 2, kinds  # the owed ones only, over both activations
    ticks = s['ticks']
    # Each episode's ticks and its reset's (rig seconds at 50 Hz; a reset's length varies with
    # how the pendulum swings). The last activation holds the owed episode and its reset only
    # (a runner that counted afresh would run two there); the first, the baseline evaluation,
    # the first training episode and their resets.
    episode = [int(r['n_ticks']) for r in rows]
    reset = [round(float(r['reset_s']) * 50) for r in rows]
    assert abs(ticks['n_ticks'] - (reset[2] + episode[2])) <= 2, (ticks, episode, reset)
    earlier = ticks['n_ticks_earlier_activations']
    assert earlier > sum(reset[:2]) + sum(episode[:2]), (ticks, episode, reset)
    _, meta = buffer_file.load(
        run / run_files.BUFFER, rate_hz=50.0, obs_size=OBS_SIZE, action_size=ACTION_SIZE
    )
    assert meta.count == s['transitions_published'] > 0, s
    for name in (run_files.POLICY_LATEST, run_files.CHECKPOINT):
        assert read_metadata((run / name).read_bytes())['generation'] == meta.generation


@pytest.mark.readme(README_FINETUNE)
def test_v4_short_finetune_holds_rate_learns_and_resumes(tmp_path):
    proc, s = _finetune(tmp_path, readme=README_FINETUNE)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert s['episodes'] == 3 and s['resumed_buffer'] is None
    # policy:=auto starts a new run from the shipped pre-trained policy...
    assert s['policy'] == str(REPO / 'policies' / 'sim_50hz' / 'policy.safetensors')
    ticks = s['ticks']
    assert abs(rate_but_the_longest_tick(ticks) - 50.0) <= 0.5  # loose; bench e2e: 0.1 %
    assert ticks['n_violations'] == 0
    assert int(s['learner']['train_calls']) > 0
    versions = s['policy_versions']
    assert versions == sorted(versions)
    # The learner made newer policies; the guard evaluated the initial one first.
    assert int(s['learner']['policy_version_published']) > versions[0]
    assert s['evaluations'][0]['verdict'] == 'baseline'
    # ... and then judged a newer one, which went live or not (the guard's call).
    later = s['evaluations'][1:]
    assert later and later[0]['policy_version'] > versions[0]
    assert later[0]['verdict'] in ('promoted', 'rejected')
    run = tmp_path / 'runs' / 'v4'
    for name in (
        'timing.csv',
        'tick_dt_hist.png',
        'episode_returns.png',
        'policy_latest.safetensors',
        'policy_best.safetensors',
    ):
        assert (run / name).exists(), name
    _, meta = buffer_file.load(
        run / 'replay_buffer.safetensors', rate_hz=50.0, obs_size=OBS_SIZE, action_size=ACTION_SIZE
    )
    assert meta.count == s['transitions_published'] > 0  # every one, none lost in flight
    assert '== summary ==' in proc.stdout
    # A second run resumes the first one's buffer and says so. It has no episode count but a
    # rig-time limit (what rip_control.adapt's fine-tune is bounded by): it ends on its own
    # at the end of the episode past which the next (about 3 s, its reset included) would
    # not fit.
    proc2, s2 = _finetune(tmp_path, 'episodes:=0', 'rig_seconds:=10')
    assert proc2.returncode == 0, proc2.stdout[-3000:] + proc2.stderr[-3000:]
    assert s2['resumed_buffer'] and 'resumed from' in proc2.stdout
    assert 'would pass the 10 s limit (rig_seconds:=)' in s2['stopped_for_rig_time'], s2
    ticks2 = s2['ticks']
    rig_s = (ticks2['n_ticks'] + 1 + ticks2['n_ticks_earlier_activations']) / 50.0
    # Within the limit (and the deactivation's last ticks); not stopped long before it.
    assert 10.0 - 3.5 - 2.5 < rig_s <= 10.0 + 0.5, rig_s  # one episode and the report lag
    # Episodes of every kind fill it: the guard's baseline evaluation, then training ones.
    assert s2['episodes'] >= 1 and s2['episodes'] + len(s2['evaluations']) >= 2, s2
    # ...and a second one from the first one's best-evaluated policy (critics beside it).
    assert s2['policy'] == str(run / 'policy_best.safetensors')
    _, meta2 = buffer_file.load(
        run / 'replay_buffer.safetensors', rate_hz=50.0, obs_size=OBS_SIZE, action_size=ACTION_SIZE
    )
    assert meta2.count == meta.count + s2['transitions_published']


def test_a_harmful_update_never_drives_the_rig(tmp_path):
    """Learning rate 0.1 wrecks the actor: the regression guard keeps every one off the rig."""
    params = _params_file(
        tmp_path,
        control={'eval_every_episodes': 1, 'eval_balance_margin': 0.25},
        learner={'learning_rate': 0.1},
    )
    proc, s = _finetune(tmp_path, 'episodes:=4', params=params)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    evals = s['evaluations']
    baseline = evals[0]
    assert baseline['verdict'] == 'baseline'
    candidates = [e for e in evals[1:] if e['policy_version'] > baseline['policy_version']]
    assert candidates, f'no newer policy was evaluated: {evals}'  # else nothing was guarded
    assert all(e['verdict'] == 'rejected' for e in candidates), evals
    # Each evaluation carries the bars it was judged against (the balance one 75 % of the
    # baseline's, as nothing else went live) and the one it missed; the baseline sets them.
    assert (baseline['bar'], baseline['balance_bar_s'], baseline['rejected_for']) == (
        None,
    ) * 2 + ('',)
    for e in candidates:
        assert e['balance_bar_s'] == pytest.approx(0.75 * baseline['balance_s'], abs=1e-9), e
        assert e['rejected_for'].startswith(('return ', 'balance ')), e
    # Every training episode was driven by the initial policy, and it stays the best.
    assert set(s['policy_versions']) == {baseline['policy_version']}
    assert s['live_policy_version'] == s['best_policy_version'] == baseline['policy_version']
    run = tmp_path / 'runs' / 'v4'
    best = load_actor_file(
        run / 'policy_best.safetensors', rate_hz=50.0, obs_size=OBS_SIZE, action_size=ACTION_SIZE
    )
    assert best.version == baseline['policy_version']
    with (run / 'timing.csv').open(newline='') as f:
        rows = list(csv.DictReader(f))
    assert {'kind', 'verdict', 'live_version', 'reset_s'} <= set(rows[0]), rows[0]
    assert sum(r['kind'] == 'evaluation' for r in rows) == len(evals)


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


def _actor_in_checkpoint(state):
    """The actor of a SAC checkpoint in the wire layout (SB3's latent_pi holds Linear, ReLU...)."""
    linears = sorted({int(k.split('.')[2]) for k in state if k.startswith('actor.latent_pi.')})
    out = {}
    for i, index in enumerate(linears):
        for part in ('weight', 'bias'):
            out[f'layers.{i}.{part}'] = state[f'actor.latent_pi.{index}.{part}']
    for head in ('mu', 'log_std'):
        for part in ('weight', 'bias'):
            out[f'{head}.{part}'] = state[f'actor.{head}.{part}']
    return out


SHORT_LEASE_PROFILE = """<?xml version="1.0" encoding="UTF-8" ?>
<profiles xmlns="http://www.eprosima.com/XMLSchemas/fastRTPS_Profiles">
  <participant profile_name="short_lease" is_default_profile="true">
    <rtps>
      <builtin>
        <discovery_config>
          <leaseDuration><sec>3</sec></leaseDuration>
          <leaseAnnouncement><sec>1</sec></leaseAnnouncement>
        </discovery_config>
      </builtin>
    </rtps>
  </participant>
</profiles>
"""


def test_learner_killed_mid_run_control_keeps_rate_on_the_last_policy_and_a_restart_resumes(
    control_rig, learner_process, ros_node, tmp_path
):
    from safetensors.numpy import load_file
    from std_msgs.msg import Float64MultiArray, UInt8MultiArray

    from rip_control.policy import decode_actor
    from rip_control.ros.qos import WEIGHTS_QOS

    rig = control_rig(episode_seconds=2.0)  # strikes from 20 ms: see the control_rig fixture
    diag = _ControlDiag(ros_node, rig.name)
    episodes = []  # (time received, policy version the episode was acted with)

    def on_episode(msg):
        fields = {d.label: v for d, v in zip(msg.layout.dim, msg.data, strict=True)}
        episodes.append((time.monotonic(), int(fields['policy_version'])))

    ep_sub = ros_node.create_subscription(
        Float64MultiArray, f'/{rig.name}/episode', on_episode, 10
    )
    # The learner's participant announces a 3 s lease (FastDDS's default is 20 s): DDS drops
    # it that long after its death, and the node counts what no learner receives from then.
    profile = tmp_path / 'short_lease.xml'
    profile.write_text(SHORT_LEASE_PROFILE)
    proc, _ = learner_process(
        env={'FASTDDS_DEFAULT_PROFILES_FILE': str(profile)},
        checkpoint_every_s=1.0,
        # A version each 0.3 s, by time only (every few updates would make ~20 versions
        # between two checkpoints, and the restart below waits 3 s for each of them).
        publish_every_s=0.3,
        publish_every_steps=10**6,
    )
    assert rig.driver.change('configure') and rig.driver.change('activate')
    got_weights = _spin_until(
        ros_node, lambda: diag.values and int(diag.values[-1].get('policy_version', 0)) >= 2, 60
    )
    assert got_weights, diag.values[-1:]
    run_dir = tmp_path / 'runs' / 'learner'
    ckpt = run_dir / 'replay_buffer.safetensors'
    assert _spin_until(ros_node, ckpt.exists, 20)
    # The kill comes once the node runs a version newer than the checkpoint's: the restarted
    # learner's first versions are then older than the running one, to be refused. Stopped
    # (SIGSTOP), the learner writes and publishes nothing while the two are compared.
    for _ in range(20):
        proc.send_signal(signal.SIGSTOP)
        ckpt_version = buffer_file.load(
            ckpt, rate_hz=50.0, obs_size=OBS_SIZE, action_size=ACTION_SIZE
        )[1].policy_version
        reported = len(diag.values)
        assert _spin_until(ros_node, lambda n=reported: len(diag.values) > n + 1, 5)
        if int(diag.values[-1]['policy_version']) > ckpt_version:
            break
        proc.send_signal(signal.SIGCONT)
        _spin_until(ros_node, lambda: False, 0.7)  # a few more versions (it publishes /0.3 s)
    else:
        raise AssertionError(f'the node never ran past the checkpoint (v{ckpt_version})')
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=10)
    t_kill = time.monotonic()
    # What the dead learner left: its last checkpoint, which nothing changes now.
    _, saved = buffer_file.load(ckpt, rate_hz=50.0, obs_size=OBS_SIZE, action_size=ACTION_SIZE)
    saved_actor = _actor_in_checkpoint(load_file(run_dir / run_files.CHECKPOINT))
    killed_at = len(diag.values)
    assert _spin_until(ros_node, lambda: len(diag.values) >= killed_at + 2, 5)
    # The weights the node acts on from here (one report's grace for a message in flight).
    last_version = int(diag.values[killed_at + 1]['policy_version'])
    accepted = diag.values[killed_at + 1]['weights_accepted']
    assert last_version >= 2  # the learner's, not the initial policy
    # What the dead learner misses is counted once DDS drops it (its lease running out).
    unmatched_before = int(diag.values[killed_at + 1]['transitions_unmatched'])
    # (within 10 s: the default lease, 20 s, would not be; the profile is what shortened it)
    assert _spin_until(
        ros_node, lambda: int(diag.values[-1]['transitions_unmatched']) > unmatched_before, 10
    ), diag.values[-1]['message']
    print(f'undelivered transitions counted from {time.monotonic() - t_kill:.1f} s after the kill')
    # Whole episodes acted with the last policy (three of 2 s) before a learner comes back.
    assert _spin_until(
        ros_node, lambda: len([t for t, _ in episodes if t > t_kill + 0.5]) >= 3, 20
    ), episodes
    absent_s = time.monotonic() - t_kill
    # All the while the learner was gone: active at 50 Hz, no violation, the last policy.
    during = diag.values[killed_at + 1 :]
    assert len(during) >= absent_s - 3, (len(during), absent_s)
    for d in during:
        assert d['lifecycle_state'] == 'active', d
        # A missed tick reads 49 Hz for its report (timing is the benchmarks' subject; this
        # VM's host stops a vCPU for ~100 ms now and then: five ticks, 45 Hz): loose per
        # report, tight over the whole absence.
        assert abs(float(d['tick_rate_hz']) - 50.0) < 6.0, d
        assert d['violations'] == '0', d
        assert int(d['policy_version']) == last_version and d['weights_accepted'] == accepted
    rates = [float(d['tick_rate_hz']) for d in during]
    assert abs(sum(rates) / len(rates) - 50.0) < 0.5, rates
    # ...which is every tick but a stray missed few (this VM pauses now and then: a clean
    # clone's CI saw 3 in 40 s; at most 1 % of the absence's ticks), and nothing lost.
    missed = int(during[-1]['missed_ticks']) - int(during[0]['missed_ticks'])
    assert missed <= max(2, 0.01 * 50.0 * absent_s), [d['missed_ticks'] for d in during]
    assert {d['outbox_dropped'] for d in during} == {'0'}
    # Whole episodes acted with it, and the motor still under control.
    acted = [v for t, v in episodes if t > t_kill + 0.5]
    assert len(acted) >= 3 and set(acted) == {last_version}, acted
    assert rig.engaged_now()
    # A restarted learner resumes from the checkpoint: the buffer and the networks.
    published = []
    w_sub = ros_node.create_subscription(
        UInt8MultiArray, 'policy_weights', lambda m: published.append(bytes(m.data)), WEIGHTS_QOS
    )
    # Its first weights go out at start, before this subscription may have matched its
    # publisher (~0.3 s here); TRANSIENT_LOCAL keeps only the newest. Publishing again only
    # 3 s later keeps that first version the one delivered (once, a fast restart had sent six
    # versions before the match, and the test saw v8 as its first).
    rejected_before = int(diag.values[-1]['weights_rejected'])
    restarted_at = len(diag.values)
    proc2, name2 = learner_process(
        resume_buffer=str(ckpt), publish_every_s=3.0, publish_every_steps=10**6
    )
    learner = _ControlDiag(ros_node, name2)
    assert _spin_until(ros_node, lambda: published and learner.values, 60), 'restart silent'
    assert int(learner.values[0]['buffer_resumed']) == saved.count
    assert int(learner.values[0]['buffer_size']) >= saved.count
    first = decode_actor(published[0], rate_hz=50.0, obs_size=OBS_SIZE, action_size=ACTION_SIZE)
    assert first.version == saved.policy_version + 1  # the versions continue...
    assert set(first.tensors) == set(saved_actor)
    for key, value in saved_actor.items():  # ...from the checkpoint's networks
        np.testing.assert_array_equal(first.tensors[key], value, err_msg=key)
    # Once its versions pass the running one, the node acts on the restarted learner's weights.
    assert _spin_until(
        ros_node, lambda: int(diag.values[-1]['policy_version']) > last_version, 150
    ), (diag.values[-1], last_version)
    # ... and never before: its versions up to the running one were refused, not acted on
    # (the checkpoint is a second old at most, so its first versions are the older ones).
    after = diag.values[restarted_at:]
    assert all(int(d['policy_version']) >= last_version for d in after), after
    assert first.version <= last_version, (first.version, last_version)  # (the kill's rule)
    assert int(diag.values[-1]['weights_rejected']) > rejected_before, diag.values[-1]
    reasons = {d['last_weights_rejection'] for d in after}
    assert any(f'is not newer than the running {last_version}' in r for r in reasons), reasons
    t0 = time.monotonic()
    assert rig.driver.change('deactivate')
    assert rig.wait_disengaged_after(t0) is not None
    for sub in (diag.sub, learner.sub, ep_sub, w_sub):
        ros_node.destroy_subscription(sub)


_ROS_LOG_FORMAT = '[{severity}] [{time}] [{name}]: {message}'
_CHILD_LINE = re.compile(r'^\[(\w+)\] \[\w+\] \[(\d+\.\d+)\] \[[^\]]*\]: (.*)$')


def _child_log(lines, label):
    """``(wall-clock time, message)`` of a child's ROS log lines as the runner streamed them."""
    out = []
    for line in lines:
        m = _CHILD_LINE.match(line.rstrip('\n'))
        if m and m.group(1) == label:
            out.append((float(m.group(2)), m.group(3)))
    return out


def _emulator_events(path):
    """``(monotonic s, what)`` of the EVENT lines an emulator appended to ``path``."""
    if not path.exists():
        return []
    return [
        (float(t), what)
        for _, t, what in (line.split(' ', 2) for line in path.read_text().splitlines())
    ]


# SIGTERM takes SIGINT's path (rip_control.signals.StopSignals handles both the same);
# test_runner_signals sends it at every moment of the start, where the paths could differ.
@pytest.mark.parametrize('how', ['SIGINT', 'SIGKILL'])
def test_stopping_the_runner_turns_the_motor_off_then_stops_the_learner_then_the_emulator(
    tmp_path, how
):
    import threading

    # The runner starts its own emulator (no serial_port), at a link of this test's own; the
    # emulator appends its events (with their monotonic times) to a file the test reads.
    events = tmp_path / 'emulator_events'
    cmd = [
        sys.executable,
        '-m',
        'rip_control.finetune',
        'episodes:=0',
        'episode_seconds:=1.0',
        f'emulator_link:={tmp_path / "rig"}',
        'run_name:=stop',
        f'runs_dir:={tmp_path / "runs"}',
        f'params_file:={_params_file(tmp_path)}',
    ]
    env = child_env(
        {'RIP_EMULATOR_EVENTS': str(events), 'RCUTILS_CONSOLE_OUTPUT_FORMAT': _ROS_LOG_FORMAT}
    )
    proc = subprocess.Popen(
        cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
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
            while left := processes_mentioning(str(tmp_path)):
                assert time.monotonic() < deadline, (
                    f'children outlived the killed runner:\n{describe(left)}\n'
                    + ''.join(lines[-40:])
                )
                time.sleep(0.2)
        else:
            assert code == 130, ''.join(lines[-30:])
    finally:
        if proc.poll() is None:
            proc.kill()
    reader.join(timeout=5)
    to_wall = time.time() - time.monotonic()  # the emulator's clock to the log lines' clock
    after = [(t, what) for t, what in _emulator_events(events) if t >= t0]
    whats = [what for _, what in after]
    assert whats and whats[-1] == 'powered down', whats  # the emulator stopped last, cleanly
    t_down = after[-1][0]
    _, meta = buffer_file.load(
        tmp_path / 'runs' / 'stop' / 'replay_buffer.safetensors',
        rate_hz=50.0,
        obs_size=OBS_SIZE,
        action_size=ACTION_SIZE,
    )
    assert meta.count > 0
    if how == 'SIGKILL':
        # Every child got its SIGTERM at once: no order, but the motor went off.
        assert 'disengaged command' in whats, whats  # the node's own, not a timed-out grace
        return
    out = ''.join(lines)
    assert 'interrupted' in out
    # 1. The motor off, by the control node's own command (not the deadman, nor the
    # emulator powering down under an engaged motor).
    assert whats == ['disengaged command', 'powered down'], whats
    t_off = after[0][0]
    # 2. Then the learner: asked to stop after the motor was off, saved, exited 0...
    learner = _child_log(lines, 'learner')
    stopping = [t for t, msg in learner if msg.startswith('stopping')]
    assert stopping and stopping[0] > t_off + to_wall, (stopping, t_off + to_wall)
    assert any(msg.startswith('checkpoint:') for t, msg in learner if t >= stopping[0])
    summary = json.loads((tmp_path / 'runs' / 'stop' / 'summary.json').read_text())
    assert summary['exit_codes'] == {'control': 0, 'learner': 0}, summary['exit_codes']
    # 3. ...before the emulator powered down: the learner's last line precedes it.
    assert learner[-1][0] < t_down + to_wall, (learner[-1], t_down + to_wall)


@pytest.mark.readme(README_TWO_RIGS)
def test_two_rigs_feed_one_learner_and_both_get_its_weights(tmp_path):
    proc, s = _finetune(tmp_path, 'episode_seconds:=1.5', readme=README_TWO_RIGS)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert [r['rig'] for r in s['rigs']] == ['rig0', 'rig1']
    run = tmp_path / 'runs' / 'v4'
    for r in s['rigs']:
        assert r['episodes'] == 3 and r['ticks']['n_violations'] == 0
        assert abs(rate_but_the_longest_tick(r['ticks']) - 50.0) <= 0.5
        assert (run / r['rig'] / 'timing.csv').exists()
        # The learner's weights reached this rig: the regression guard evaluated a newer
        # version on it (whether that one went on to drive is the guard's call).
        seen = [e['policy_version'] for e in r['evaluations']] + r['policy_versions']
        assert max(seen) > r['policy_versions'][0], (r['policy_versions'], r['evaluations'])
    _, meta = buffer_file.load(
        run / 'replay_buffer.safetensors', rate_hz=50.0, obs_size=OBS_SIZE, action_size=ACTION_SIZE
    )
    # One buffer holds every transition both rigs published: 3 training episodes and the
    # guard's evaluations (theirs are sent too) of at most 75 each, plus at most 75 for each
    # episode a fault cut short (a re-activation after a trip, or a serial error inside an
    # episode: a loaded machine has them now and then, and CI once saw 328 on one rig). The
    # runner activates a rig only once its publisher has matched the learner, and stops the
    # learner only once it has received everything.
    published = [r['transitions_published'] for r in s['rigs']]
    most = [
        75 * (3 + len(r['evaluations']) + r['violation_restarts'] + r['serial_errors'])
        for r in s['rigs']
    ]
    assert all(100 < n <= m for n, m in zip(published, most, strict=True)), (published, most)
    assert meta.count == sum(published), (meta.count, published)
    assert all(r['transitions_unmatched'] == 0 for r in s['rigs'])
    assert 'the learner received' not in proc.stdout
    assert '[rig0] episode' in proc.stdout and '[rig1] episode' in proc.stdout
    # Per-rig rows in one timing.csv (each rig's own file stays in its folder).
    rows = (run / 'timing.csv').read_text().splitlines()
    assert rows[0].startswith('rig,episode,n_ticks,mean_tick_dt_ms')
    assert sorted({row.split(',')[0] for row in rows[1:]}) == ['rig0', 'rig1']


def test_an_operators_deactivate_ends_the_run_as_a_stop_motor_off_buffer_saved(tmp_path, ros_node):
    import threading

    from rip_control.ros.lifecycle_driver import LifecycleDriver

    events = tmp_path / 'emulator_events'
    cmd = [
        sys.executable,
        '-m',
        'rip_control.finetune',
        'episodes:=0',  # until stopped: only the operator ends this run
        'episode_seconds:=1.0',
        f'emulator_link:={tmp_path / "rig"}',
        'run_name:=operator',
        f'runs_dir:={tmp_path / "runs"}',
        f'params_file:={_params_file(tmp_path)}',
    ]
    env = child_env({'RIP_EMULATOR_EVENTS': str(events)})
    proc = subprocess.Popen(
        cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    lines, second_episode = [], threading.Event()

    def read():
        for line in proc.stdout:
            lines.append(line)
            if line.startswith('episode   1:'):
                second_episode.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        assert second_episode.wait(120), ''.join(lines[-30:])
        # One refused weights message first: its warning takes the diagnostics' message, and
        # the stop must still read as the operator's (a bug once read it as a fault).
        from std_msgs.msg import UInt8MultiArray

        from rip_control.ros.qos import WEIGHTS_QOS

        diag = _ControlDiag(ros_node, 'rip_control')
        pub = ros_node.create_publisher(UInt8MultiArray, '/policy_weights', WEIGHTS_QOS)
        try:
            pub.publish(UInt8MultiArray(data=list(b'not safetensors')))
            assert _spin_until(
                ros_node,
                lambda: any(int(v.get('weights_rejected', 0)) >= 1 for v in diag.values),
                20.0,
            ), diag.values[-1:]
        finally:
            ros_node.destroy_publisher(pub)
            ros_node.destroy_subscription(diag.sub)
        # What `ros2 lifecycle set /rip_control deactivate` does: one change_state call.
        driver = LifecycleDriver(ros_node, '/rip_control')
        assert driver.wait_for_services(10.0)
        t0 = time.monotonic()
        assert driver.change('deactivate')
        code = proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    reader.join(timeout=5)
    out = ''.join(lines)
    assert code == 0, out[-3000:]
    assert 'stopped by the operator after' in out and 'FAILED' not in out, out[-3000:]
    summary = json.loads((tmp_path / 'runs' / 'operator' / 'summary.json').read_text())
    assert summary['stopped_by_operator'] == '/rip_control'
    assert not summary['failure'] and not summary['interrupted']
    assert summary['exit_codes'] == {'control': 0, 'learner': 0}, summary['exit_codes']
    # The motor went off at the operator's command, by the node, before the emulator stopped.
    whats = [what for t, what in _emulator_events(events) if t >= t0]
    assert whats == ['disengaged command', 'powered down'], whats
    _, meta = buffer_file.load(
        tmp_path / 'runs' / 'operator' / 'replay_buffer.safetensors',
        rate_hz=50.0,
        obs_size=OBS_SIZE,
        action_size=ACTION_SIZE,
    )
    assert meta.count == summary['transitions_published'] > 0
