"""``launch/finetune.launch.py`` under the real ROS 2 ``launch``, as ``ros2 launch`` runs it.

The package is colcon-built into a temporary workspace and its installed launch file is run
through ``launch.LaunchService`` (``test/launch_as_ros2.py``, ros2launch's code path), with
the installed executables, in a process of its own. With CI=true the launch packages must be
there (``.ci/run`` installs them from ``../shared/ros2_launch``); elsewhere the tests skip,
naming what is missing.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
import re
import signal
import subprocess
import sys
import threading
import time

import pytest
from ros2_cli import argv, require_launch, sourced_env

from rip_control import buffer_file
from rip_control.rig.env import ACTION_SIZE, OBS_SIZE

REPO = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
pytestmark = [pytest.mark.alone, pytest.mark.slow, pytest.mark.ros]


@pytest.fixture(scope='module')
def install_prefix(colcon_install):
    """The package colcon-built into a fresh workspace (once a session); its install prefix."""
    require_launch()
    prefix = colcon_install
    for exe in ('control_node', 'learner_node', 'rig_emulator', 'finetune_supervisor'):
        assert os.access(prefix / 'lib' / 'rip_control' / exe, os.X_OK), exe
    assert (prefix / 'share' / 'rip_control' / 'launch' / 'finetune.launch.py').exists()
    return prefix


class Launch:
    """``ros2 launch rip_control finetune.launch.py ARGS`` in its own process group."""

    running: list[Launch] = []  # killed at teardown if a test failed before they ended

    def __init__(self, prefix: Path, cwd: Path, args: list[str]) -> None:
        env = sourced_env(prefix)
        self.lines: list[str] = []
        self._cond = threading.Condition()
        self.proc = subprocess.Popen(
            argv('ros2 launch rip_control finetune.launch.py') + args,
            cwd=cwd,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,  # a terminal's Ctrl-C reaches the whole process group
        )
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        Launch.running.append(self)

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            with self._cond:
                self.lines.append(line.rstrip())
                self._cond.notify_all()

    def wait_for(self, pattern: str, timeout_s: float) -> str:
        """The first output line matching ``pattern`` (bounded wait)."""
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while True:
                for line in self.lines:
                    if re.search(pattern, line):
                        return line
                left = deadline - time.monotonic()
                if left <= 0 or self.proc.poll() is not None and not self._reader.is_alive():
                    pytest.fail(f'no line {pattern!r} within {timeout_s} s:\n' + self.text())
                self._cond.wait(timeout=min(left, 0.5))

    def wait(self, timeout_s: float) -> int:
        try:
            code = self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            pytest.fail(f'the launch did not end within {timeout_s} s:\n' + self.text())
        self._reader.join(timeout=5)
        return code

    def text(self) -> str:
        return '\n'.join(self.lines[-80:])

    def index(self, pattern: str) -> int:
        """Index of the first line matching ``pattern`` (-1: none)."""
        return next((i for i, line in enumerate(self.lines) if re.search(pattern, line)), -1)

    def pids(self) -> list[int]:
        return [
            int(m.group(1))
            for line in self.lines
            if (m := re.search(r'started with pid \[(\d+)\]', line))
        ]

    def events(self, emulator: str = 'emulator') -> list[str]:
        """The emulator's ``EVENT`` lines, ``what`` only, in order."""
        prefix = f'[{emulator}-'
        return [
            line.split(' ', 3)[3]
            for line in self.lines
            if line.startswith(prefix) and ' EVENT ' in line
        ]


@pytest.fixture(autouse=True)
def _no_launch_left_behind():
    """A launch whose test failed must not keep its nodes in this session's DDS domain."""
    yield
    while Launch.running:
        launch = Launch.running.pop()
        if launch.proc.poll() is None:
            os.killpg(launch.proc.pid, signal.SIGINT)
            try:
                launch.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(launch.proc.pid, signal.SIGKILL)
                launch.proc.wait()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _processes_in(folder: Path) -> list[str]:
    """Command lines of the processes whose working directory is ``folder``."""
    out = []
    for proc in Path('/proc').glob('[0-9]*'):
        try:
            if Path(os.readlink(proc / 'cwd')) == folder:
                out.append((proc / 'cmdline').read_bytes().replace(b'\0', b' ').decode())
        except OSError:
            continue  # gone meanwhile, or not ours to read
    return out


def _published(launch: Launch) -> tuple[int, int, int]:
    line = launch.wait_for(r'transitions published \d+', 1)
    m = re.search(r'published (\d+), unmatched (\d+), received by the learner (\d+)', line)
    assert m, line
    return int(m.group(1)), int(m.group(2)), int(m.group(3))


def _buffer_count(path: Path) -> int:
    _, meta = buffer_file.load(path, rate_hz=50.0, obs_size=OBS_SIZE, action_size=ACTION_SIZE)
    return meta.count


def _timing_rows(path: Path, kind: str = 'training') -> int:
    """Rows of ``timing.csv`` of one kind: training episodes, or the guard's ``eval`` ones."""
    import csv

    with path.open(newline='') as f:
        return sum(row['kind'] == kind for row in csv.DictReader(f))


@pytest.fixture(scope='module')
def one_rig_run(install_prefix, tmp_path_factory):
    """The README's launch, short: ``... rate:=50 episodes:=2 episode_seconds:=2``."""
    cwd = tmp_path_factory.mktemp('launch1')
    launch = Launch(
        install_prefix,
        cwd,
        # The README's command as it spells it, then shortened (a later value wins).
        README_LAUNCH.split()[4:]
        + ['episodes:=2', 'episode_seconds:=2', f'emulator_link:={cwd / "rig"}'],
    )
    code = launch.wait(180)
    return launch, code, cwd / 'runs' / 'first'


README_LAUNCH = 'ros2 launch rip_control finetune.launch.py rate:=50 episodes:=10 run_name:=first'


@pytest.mark.readme(
    'ros2 launch rip_control finetune.launch.py rate:=50 episodes:=10 run_name:=first'
)
def test_the_launch_ends_by_itself_with_exit_0_when_the_episodes_are_done(one_rig_run):
    launch, code, _ = one_rig_run
    assert code == 0, launch.text()
    assert launch.index(r'process has died') < 0, launch.text()
    for pid in launch.pids():
        assert not _alive(pid), f'process {pid} outlived the launch'


def test_the_emulator_is_ready_before_the_control_node_starts(one_rig_run):
    launch, _, _ = one_rig_run
    ready = launch.index(r'^\[emulator-\d+\] READY ')
    started = launch.index(r'\[control_node-\d+\]: process started')
    configured = launch.index(r'\[rip_control\]: configured')
    assert 0 <= ready < started < configured, launch.text()


def test_activation_waits_for_the_learner_so_every_transition_reaches_the_buffer(one_rig_run):
    launch, _, run_dir = one_rig_run
    published, unmatched, received = _published(launch)
    assert published >= 2 * 2 * 50 * 0.5  # two episodes of 2 s at 50 Hz arrived (some end early)
    assert unmatched == 0 and received == published
    assert _buffer_count(run_dir / 'replay_buffer.safetensors') == published


def test_timing_csv_holds_both_episodes(one_rig_run):
    _, _, run_dir = one_rig_run
    assert _timing_rows(run_dir / 'timing.csv') == 2
    # The regression guard (on in config/finetune.yaml) measured the initial policy first.
    assert _timing_rows(run_dir / 'timing.csv', 'evaluation') >= 1
    # Each row says how long the reset before its episode took: ticks of the loop, engaged.
    import csv

    with (run_dir / 'timing.csv').open(newline='') as f:
        resets = [float(r['reset_s']) for r in csv.DictReader(f)]
    # Each at least the 0.5 s of stillness the reset waits for (less a skipped tick or two).
    assert all(0.4 <= s < 20.0 for s in resets), resets


def test_the_motor_is_disengaged_by_the_node_before_the_emulator_powers_down(one_rig_run):
    launch, _, _ = one_rig_run
    events = launch.events()
    assert events[0] == 'engaged command', events
    assert events[-1] == 'powered down', events
    assert events[-2] == 'disengaged command', events  # by the node, not the deadman or stop


def test_two_rigs_run_their_episodes_and_the_launch_ends_by_itself(install_prefix, tmp_path):
    # The episodes and their length come from a params file, not typed: a params file's values
    # stand when no argument is typed, and reach every rig's node.
    import csv

    import yaml

    doc = yaml.safe_load((REPO / 'config' / 'finetune.yaml').read_text())
    doc['rip_control']['ros__parameters'].update(episodes=1, episode_seconds=2.0)
    params = tmp_path / 'my_rig.yaml'
    params.write_text(yaml.safe_dump(doc))
    launch = Launch(
        install_prefix,
        tmp_path,
        ['rigs:=2', 'rate:=50', f'params_file:={params}', f'emulator_link:={tmp_path / "rig"}'],
    )
    code = launch.wait(180)
    assert code == 0, launch.text()
    published, unmatched, received = _published(launch)
    assert unmatched == 0 and received == published > 0
    run_dir = tmp_path / 'runs' / 'default'
    assert _buffer_count(run_dir / 'replay_buffer.safetensors') == published
    for i in (0, 1):
        assert _timing_rows(run_dir / f'rig{i}' / 'timing.csv') == 1
        assert launch.index(rf'/rig{i}/rip_control active') >= 0
        # 2 s at 50 Hz: 100 policy ticks, fewer only if the arm limit ended one early (6 s, the
        # default, would give 300); the guard's evaluation is as long.
        with (run_dir / f'rig{i}' / 'timing.csv').open(newline='') as f:
            rows = list(csv.DictReader(f))
        assert max(int(r['n_ticks']) for r in rows) == 100, rows
    for emulator in ('emulator0', 'emulator1'):
        events = launch.events(emulator)
        assert events[-2:] == ['disengaged command', 'powered down'], (emulator, events)
    for pid in launch.pids():
        assert not _alive(pid), f'process {pid} outlived the launch'


def test_ctrl_c_mid_run_disengages_first_saves_the_buffer_and_exits_0(install_prefix, tmp_path):
    launch = Launch(
        install_prefix,
        tmp_path,
        ['rate:=50', 'episodes:=0', 'episode_seconds:=1', f'emulator_link:={tmp_path / "rig"}'],
    )
    launch.wait_for(r'\[rip_supervisor\]: /rip_control active', 120)
    # Mid-run, with the learner training: a training episode has ended (not only the
    # regression guard's first evaluation).
    launch.wait_for(r'(?<!evaluation )episode +\d+: return', 60)
    os.killpg(launch.proc.pid, signal.SIGINT)  # what Ctrl-C in a terminal does
    code = launch.wait(60)
    assert code == 0, launch.text()
    events = launch.events()
    assert events[-2:] == ['disengaged command', 'powered down'], events
    assert launch.index(r'process has died') < 0, launch.text()
    assert launch.index(r'Traceback') < 0, launch.text()
    assert launch.index(r'\[control_node-\d+\]: process has finished cleanly') >= 0
    assert _buffer_count(tmp_path / 'runs' / 'default' / 'replay_buffer.safetensors') > 0
    for pid in launch.pids():
        assert not _alive(pid), f'process {pid} outlived the launch'


def test_a_rig_fault_ends_the_launch_with_status_1_naming_it(install_prefix, tmp_path):
    import yaml

    doc = yaml.safe_load((REPO / 'config' / 'finetune.yaml').read_text())
    # Every tick stretched by 26 ms after 50 ticks: the 3-strike watchdog trips.
    doc['rip_control']['ros__parameters'].update(fault_tick_delay_ms=26, fault_after_ticks=50)
    params = tmp_path / 'params.yaml'
    params.write_text(yaml.safe_dump(doc))
    launch = Launch(
        install_prefix,
        tmp_path,
        [
            'rate:=50',
            'episodes:=2',
            'episode_seconds:=3',
            f'params_file:={params}',
            f'emulator_link:={tmp_path / "rig"}',
            'violation_restarts:=2',
        ],
    )
    code = launch.wait(120)
    assert code == 1, launch.text()
    # The fault that ended the last activation is named: the injected one, or a serial failure
    # if this VM's host stopped the emulator's vCPU (~100 ms) before the fault came.
    launch.wait_for(
        r'FAILED: /rip_control left active on its own: .*(TimingViolation|SerialFailure)', 1
    )
    assert 'TimingViolation: 3 consecutive ticks overran' in launch.text(), launch.text()
    # A trip is first met by re-activating the rig (here twice); the injected fault trips
    # every activation, so the third trip ends the launch.
    assert launch.text().count('re-activating (') == 2, launch.text()
    assert '2 restarts in a row without a finished episode' in launch.text()
    assert 'disengaged command' in launch.events(), launch.events()
    for pid in launch.pids():
        assert not _alive(pid), f'process {pid} outlived the launch'


def test_an_operators_deactivate_ends_the_launch_as_a_stop_motor_off_buffer_saved(
    install_prefix, tmp_path, ros_node
):
    from rip_control.ros.lifecycle_driver import LifecycleDriver

    launch = Launch(
        install_prefix,
        tmp_path,
        ['episodes:=0', 'episode_seconds:=1', f'emulator_link:={tmp_path / "rig"}'],
    )
    launch.wait_for(r'\[rip_supervisor\]: /rip_control active', 120)
    launch.wait_for(r'(?<!evaluation )episode +1: return', 60)
    # What `ros2 lifecycle set /rip_control deactivate` does: one change_state call.
    driver = LifecycleDriver(ros_node, '/rip_control')
    assert driver.wait_for_services(10.0)
    engaged_before = len(launch.events())
    assert driver.change('deactivate')
    code = launch.wait(90)
    assert code == 0, launch.text()
    launch.wait_for(r'stopped by the operator after \d+ episodes; motors off', 1)
    assert launch.index(r'FAILED') < 0, launch.text()
    # The motor off at the operator's command, by the node, and nothing after it but the end.
    after = launch.events()[engaged_before:]
    assert after[-2:] == ['disengaged command', 'powered down'], after
    assert sum(e.startswith('disengaged') for e in after) == 1, after
    published, unmatched, received = _published(launch)
    assert unmatched == 0 and received == published > 0
    assert _buffer_count(tmp_path / 'runs' / 'default' / 'replay_buffer.safetensors') == published
    for pid in launch.pids():
        assert not _alive(pid), f'process {pid} outlived the launch'


def test_an_adapt_option_without_adapt_true_is_refused_by_name(install_prefix, tmp_path):
    launch = Launch(install_prefix, tmp_path, ['rig_minutes:=10', 'episodes:=1'])
    assert launch.wait(60) != 0
    launch.wait_for(r'rig_minutes:=10: options of the adapt loop; add adapt:=true', 1)
    assert launch.pids() == [], launch.text()  # refused before any process started


README_ADAPT_LAUNCH = (
    'ros2 launch rip_control finetune.launch.py adapt:=true rig_minutes:=10 run_name:=adapted'
)


@pytest.mark.readme(README_ADAPT_LAUNCH)
def test_adapt_under_launch_keeps_a_wrong_identifications_policy_off_the_rig(
    install_prefix, tmp_path
):
    """``adapt:=true`` runs the loop; a re-training at a wrong identification never drives.

    The identification given says the nominal rig's motor winding has a quarter of its
    resistance (four times the torque per volt). The policy re-trained at it (2000 steps,
    seed 0) learns to push a quarter as hard and cannot swing the real rig's pendulum up (in
    one run, 0.1 s in its 4-s deployment where the prior balanced 3.3 s). Deployed on the rig it is
    judged by the guard's rule, rejected, and the fine-tune goes on from the prior: the
    re-trained policy's version never drives a training episode, and the result is the
    prior's.
    """
    import csv

    import numpy as np
    from safetensors.numpy import load_file
    import yaml

    from rip_control.adapt import VERSION_GAP

    wrong = yaml.safe_load((REPO / 'config' / 'rig_qube_servo2.yaml').read_text())
    wrong['rig']['motor_resistance_ohm'] /= 4.0
    (tmp_path / 'wrong.yaml').write_text(yaml.safe_dump(wrong))
    launch = Launch(
        install_prefix,
        tmp_path,
        # The README's command as it spells it, then shortened (a later value wins).
        README_ADAPT_LAUNCH.split()[4:]
        + [
            f'identification:={tmp_path / "wrong.yaml"}',
            'retrain_steps:=2000',
            # Room for the guard's baseline and a training episode under the rig-time limit,
            # and for an episode run again after a host stop (~100 ms of a vCPU).
            'rig_minutes:=0.75',
            'deployment_episodes:=1',
            'deployment_episode_seconds:=4',
            'episode_seconds:=3',
            # The guard's evaluations: 2 episodes typed (adapt's own default is 3), each as
            # long as a deployment's (adapt's, not typed).
            'eval_episodes:=2',
        ],
    )
    assert launch.wait(300) == 0, launch.text()
    out = tmp_path / 'runs' / 'adapted'
    s = json.loads((out / 'adapt_summary.json').read_text())
    cand = s['candidate']
    assert cand['verdict'] == 'rejected', cand
    assert cand['balance_s'] < 1.0 < s['deployment']['prior_balance_s'], s['deployment']
    assert s['finetune']['start'] == 'prior' and (s['finetune']['episodes'] or 0) >= 1, (
        s['finetune'],
        s['phases'],
    )
    launch.wait_for(r'\[adapt-\d+\] adapt: 2_candidate: rejected .* from the prior policy', 1)

    def rows(phase: str) -> list[dict[str, str]]:
        with (out / phase / 'timing.csv').open(newline='') as f:
            return list(csv.DictReader(f))

    # The options reached the loop as typed on the launch line.
    assert {k: s['options'][k] for k in ('identification', 'retrain_steps', 'rig_minutes')} == {
        'identification': str(tmp_path / 'wrong.yaml'),
        'retrain_steps': 2000,
        'rig_minutes': 0.75,
    }
    # The re-trained policy drove its judged deployment, and only that: the fine-tune started
    # from the prior (the guard's baseline evaluation and the first training episode drove
    # it), and nothing it made came from the re-trained policy (whose version is above any
    # the prior's learner publishes).
    prior_version = cand['policy_version'] - VERSION_GAP
    assert {r['policy_version'] for r in rows('2_candidate')} == {str(cand['policy_version'])}
    fine = rows('3_finetune')
    assert [(r['kind'], r['verdict']) for r in fine[:3]] == [
        ('evaluation', 'pending'),
        ('evaluation', 'baseline'),
        ('training', ''),
    ]
    assert [r['live_version'] for r in fine[:3]] == [str(prior_version)] * 3, fine
    # The guard's baseline evaluation joins the curve, at the rig time its episodes ended;
    # its episodes are the split's evaluations, the training episode its training.
    guard = [p for p in s['curve'] if p['what'].startswith('3_finetune ')]
    assert guard[0]['what'] == f'3_finetune v{prior_version} baseline', s['curve']
    names = [p['phase'] for p in s['phases']]
    before = sum(p['rig_seconds'] for p in s['phases'][: names.index('3_finetune')])
    finetune_s = s['phases'][names.index('3_finetune')]['rig_seconds']
    assert before < guard[0]['rig_s'] < before + finetune_s, (before, finetune_s, guard)
    assert guard[0]['balance_s'] == pytest.approx(
        (float(fine[0]['balance_s']) + float(fine[1]['balance_s'])) / 2
    )
    assert s['rig_time_split']['evaluations_s'] > 0 and s['rig_time_split']['training_s'] > 0
    # Each as long as a deployment's episode (4 s; one may end early at the arm limit).
    assert 4 * 50 in {int(r['n_ticks']) for r in fine[:2]}, fine
    assert all(
        int(r[col]) < cand['policy_version']
        for r in fine
        for col in ('policy_version', 'live_version')
    ), fine
    deployed = load_file(tmp_path / s['deployed_policy'])  # relative: to the launch's folder
    candidate = load_file(out / 'candidate' / 'policy.safetensors')
    assert any(not np.array_equal(deployed[k], candidate[k]) for k in candidate)
    # Nothing the loop started outlived the launch (each phase's nodes run in this folder).
    assert _processes_in(tmp_path) == [], launch.text()
