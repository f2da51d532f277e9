"""A full disk for each writer: a named error, no half-written file, the rest goes on.

The disk is made full for the test's own child process with ``RLIMIT_FSIZE`` (SIGXFSZ
ignored, so a write past the limit fails with EFBIG as on a full device).
"""

from __future__ import annotations

import csv
import os
import resource
import signal
import subprocess
import sys
import time

import pytest
import rclpy

from rip_control.procs import child_env

pytestmark = pytest.mark.alone


def _small_disk(limit_bytes: int):
    def limit() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit_bytes, limit_bytes))

    return limit


_ROWS = """
import sys
from rip_control.telemetry import EpisodeTiming, TimingCsv

out = TimingCsv(sys.argv[1])
for i in range(1000):
    row = EpisodeTiming(
        episode=i, n_ticks=300, mean_tick_dt_ms=20.0, std_tick_dt_ms=0.01,
        max_overrun_ms=0.2, n_violations=0, learner_train_calls=10,
        learner_total_train_s=1.5, episode_return=250.0, balance_s=5.3,
        policy_version=i, kind='training', verdict='none', live_version=1,
    )
    try:
        out.append(row)
    except OSError as exc:
        print(f'row {i}: {exc.strerror}', flush=True)
        break
out.close()
"""


def test_timing_csv_keeps_whole_rows_when_the_disk_fills(tmp_path):
    path = tmp_path / 'timing.csv'
    proc = subprocess.run(
        [sys.executable, '-c', _ROWS, str(path)],
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=60,
        preexec_fn=_small_disk(4000),
    )
    assert proc.returncode == 0, proc.stderr
    failed_at = int(proc.stdout.split()[1].rstrip(':'))
    # Past the limit: a write cut short, or refused whole (EFBIG) at it.
    assert 'short write' in proc.stdout or 'File too large' in proc.stdout, proc.stdout
    assert 5 < failed_at < 1000, proc.stdout
    with path.open(newline='') as f:
        rows = list(csv.DictReader(f))
    # Every row before the failing one, whole; nothing of the failing one.
    assert [int(r['episode']) for r in rows] == list(range(failed_at))
    assert all(r['live_version'] == '1' for r in rows)
    assert path.stat().st_size <= 4000 and path.read_bytes().endswith(b'\n')


def test_the_learner_goes_on_when_its_checkpoint_does_not_fit_and_says_so(tmp_path):
    """A full disk under the learner: each periodic save fails, named and counted; it goes on.

    The files on disk are the last whole ones; the final save that cannot be made ends the
    process with status 1 and says so (no traceback).

    The limit (50 kB) lets the empty buffer (1 kB) and the actor (20 kB) through and refuses
    the SAC networks (98 kB).
    """
    from conftest import LEARNER_TEST_PARAMETERS

    from rip_control import buffer_file, run_files
    from rip_control.policy import read_metadata
    from rip_control.run.launching import ProcessSpec

    runs = tmp_path / 'runs'
    params = {**LEARNER_TEST_PARAMETERS, 'run_name': 'full', 'runs_dir': str(runs)}
    params['checkpoint_every_s'] = 1.0
    spec = ProcessSpec('learner', 'learner_node', f'rip_learner_full_{os.getpid()}', params=params)
    proc = subprocess.Popen(
        spec.command(),
        env=child_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        preexec_fn=_small_disk(50_000),
    )
    lines = []
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            lines.append(line)
            if 'checkpoint failed (2 so far)' in line:
                break
        assert proc.poll() is None, ''.join(lines)  # still running after two failed saves
        proc.send_signal(signal.SIGINT)
        rest, _ = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    out = ''.join(lines) + rest
    failed = [line for line in lines if 'checkpoint failed' in line]
    assert len(failed) == 2, out
    # retried after checkpoint_every_s (1 s), not at every pass of the training loop
    stamps = [float(line.split('] [', 2)[1]) for line in failed]
    assert stamps[1] - stamps[0] >= 0.9, failed
    assert 'training goes on and tries again in 1 s: File too large' in failed[0], out
    assert run_files.CHECKPOINT in failed[0], out  # the file that did not fit, named
    assert proc.returncode == 1 and 'final save failed' in out, out
    assert 'Traceback' not in out, out
    run = runs / 'full'
    # The last whole save: buffer and actor of one generation; no networks; no temp files.
    _, meta = buffer_file.load(
        run / run_files.BUFFER, rate_hz=50.0, obs_size=None, action_size=None
    )
    actor_meta = read_metadata((run / run_files.POLICY_LATEST).read_bytes())
    assert meta.generation and actor_meta['generation'] == meta.generation
    assert not (run / run_files.CHECKPOINT).exists()
    assert not [p.name for p in run.iterdir() if p.name.endswith('.tmp')]


def test_the_recorder_stops_at_a_full_disk_and_names_what_its_bag_holds(tmp_path, ros_node):
    """The recorder's bag outgrows the disk: it stops, exit 1, naming the error and the bag.

    A bag cut off by a full disk has no index and no ``metadata.yaml`` (rosbag2's own bags
    are the same); what the recorder can do is stop at once and say so, not die in a
    traceback or record into a file nobody can read without a word.
    """
    import numpy as np
    from std_msgs.msg import Float32MultiArray, MultiArrayDimension

    from rip_control.rig.env import ACTION_SIZE, OBS_SIZE
    from rip_control.ros.qos import TRANSITIONS_QOS
    from rip_control.transitions import Transition, field_layout

    topic = f'/full_disk_transitions_{os.getpid()}'
    bag = tmp_path / 'bag'
    rec = subprocess.Popen(
        [sys.executable, '-m', 'rip_control.record', f'out:={bag}', 'rate:=50', f'topic:={topic}'],
        env=child_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=_small_disk(60_000),
    )
    pub = ros_node.create_publisher(Float32MultiArray, topic, TRANSITIONS_QOS)
    try:
        msg = Float32MultiArray()
        stride = sum(n for _, n in field_layout(OBS_SIZE, ACTION_SIZE))
        msg.layout.dim = [
            MultiArrayDimension(label=label, size=n, stride=stride)
            for label, n in field_layout(OBS_SIZE, ACTION_SIZE)
        ]
        deadline = time.monotonic() + 30
        while pub.get_subscription_count() == 0 and time.monotonic() < deadline:
            time.sleep(0.02)  # a bounded wait for the recorder's subscription to match
        assert pub.get_subscription_count() == 1, 'the recorder never subscribed'
        step = 0
        while rec.poll() is None and time.monotonic() < deadline:
            obs = np.zeros(OBS_SIZE, np.float32)
            act = np.zeros(ACTION_SIZE, np.float32)
            t = Transition(0, step, obs, act, 0.5, obs, False, False, 0.02, 1)
            msg.data = t.pack().tolist()
            pub.publish(msg)
            step += 1
            if step % 200 == 0:
                time.sleep(0.01)  # let the recorder keep up (reliable, depth 1000)
        out, err = rec.communicate(timeout=30)
    finally:
        ros_node.destroy_publisher(pub)
        if rec.poll() is None:
            rec.kill()
            rec.communicate()
    assert rec.returncode == 1, (step, out, err)
    assert 'record: File too large after ' in err, err
    # rosbags' MCAP writer holds a chunk (up to 1 MB) in memory: at 60 kB the close's own
    # write fails too, so the bag cannot be closed, and the message says so.
    assert f'{bag} could not be closed (File too large)' in err and 'cannot be read' in err, err
    assert 'Traceback' not in err, err


@pytest.fixture
def small_disk(tmp_path):
    """A 64 KiB tmpfs of the test's own (a real full disk; ``mount`` needs root)."""
    import shutil

    disk = tmp_path / 'disk'
    disk.mkdir()
    if os.geteuid() != 0 or shutil.which('mount') is None:
        message = 'a tmpfs of the test own needs root (mount)'
        if os.environ.get('CI') == 'true':
            pytest.fail(message)
        pytest.skip(message)
    subprocess.run(
        ['mount', '-t', 'tmpfs', '-o', 'size=64k,mode=0755', 'rip_small_disk', str(disk)],
        check=True,
    )
    try:
        yield disk
    finally:
        subprocess.run(['umount', '-l', str(disk)], check=False)


def _fill(disk) -> None:
    """Take every free block of ``disk``: the next write that needs one is refused (ENOSPC)."""
    import errno

    fd = os.open(disk / 'filler', os.O_WRONLY | os.O_CREAT)
    try:
        while True:
            os.write(fd, b'\0' * 4096)  # unbuffered: the refusal comes here, not at close
    except OSError as exc:
        assert exc.errno == errno.ENOSPC, exc
    finally:
        os.close(fd)


def test_the_control_node_goes_on_when_its_disk_is_full_and_counts_what_it_lost(
    control_rig, ros_node, small_disk
):
    """The disk under the run folder fills: the rows and the trace are lost, named, counted.

    ``timing.csv`` continues an earlier run's (its rows fill its first 4 KiB block) and the
    disk is full before the node configures: every new row needs a block and is refused; the
    tick trace written at deactivate is refused too. The loop runs on at its rate, every
    episode is counted and published, the motor goes off by the node's command, and the rows
    already on disk stay as they were.
    """
    from dataclasses import asdict, fields
    import io

    from diagnostic_msgs.msg import DiagnosticArray
    from std_msgs.msg import Float64MultiArray

    from rip_control import run_files
    from rip_control.telemetry import EpisodeTiming, TimingCsv

    name = f'rip_control_full_{os.getpid()}'
    run_dir = small_disk / name
    path = run_dir / run_files.TIMING_CSV

    def row(i: int, episode_return: float) -> EpisodeTiming:
        return EpisodeTiming(
            episode=i, n_ticks=50, mean_tick_dt_ms=20.0, std_tick_dt_ms=0.01,
            max_overrun_ms=0.2, n_violations=0, learner_train_calls=0,
            learner_total_train_s=0.0, episode_return=episode_return, balance_s=0.0,
            policy_version=0, kind='training', verdict='none', live_version=0,
        )  # fmt: skip

    rows = TimingCsv(path)
    i = 0
    while path.stat().st_size < 4096 - 400:
        rows.append(row(i, 10.25))
        i += 1
    rows.close()
    # The last row fills the block to its end exactly (its return's digits padded with
    # zeros): any new row needs a block of its own, and the disk has none.
    probe = io.StringIO()
    csv.DictWriter(probe, [f.name for f in fields(EpisodeTiming)]).writerow(asdict(row(i, 10.25)))
    text = probe.getvalue().replace(
        '10.25', '10.25' + '0' * (4096 - path.stat().st_size - len(probe.getvalue())), 1
    )
    with path.open('a', newline='') as f:
        f.write(text)
    assert path.stat().st_size == 4096
    before = (run_dir / run_files.TIMING_CSV).read_bytes()
    _fill(small_disk)
    trace = small_disk / 'ticks.npz'
    episodes, reports = [], []

    def on_diagnostics(msg):
        for s in msg.status:
            values = {kv.key: kv.value for kv in s.values}
            if s.name.startswith(name + ':') and 'files_unwritten' in values:
                reports.append(values)

    subs = [
        ros_node.create_subscription(
            Float64MultiArray, f'/{name}/episode', lambda m: episodes.append(m), 100
        ),
        ros_node.create_subscription(DiagnosticArray, '/diagnostics', on_diagnostics, 10),
    ]

    def spin_until(cond, timeout_s):
        deadline = time.monotonic() + timeout_s
        while not cond() and time.monotonic() < deadline:
            rclpy.spin_once(ros_node, timeout_sec=0.1)
        return cond()

    try:
        rig = control_rig(name=name, runs_dir=str(small_disk), tick_trace=str(trace))
        assert rig.driver.change('configure') and rig.driver.change('activate'), rig.why()
        assert spin_until(lambda: len(episodes) >= 3, 30), rig.why()
        t0 = time.monotonic()
        assert rig.driver.change('deactivate'), rig.why()
        first = rig.wait_disengage_after(t0)
        assert first is not None and first[1] == 'command', first  # the node's own command
        # The row of every episode and then the trace (written last, at deactivate): each
        # lost and counted, the counter settled on exactly that many, the trace named last.
        assert spin_until(
            lambda: (
                reports
                and int(reports[-1]['files_unwritten']) == len(episodes) + 1
                and reports[-1]['last_file_error'].startswith(f'{trace}:')
            ),
            10,
        ), (reports[-1:], len(episodes))
    finally:
        for sub in subs:
            ros_node.destroy_subscription(sub)
    last = reports[-1]
    assert 'No space left on device' in last['last_file_error'], last
    assert int(last['violations']) == 0 and last['lifecycle_state'] == 'inactive', last
    log = rig.log()
    assert f'could not write {run_dir / run_files.TIMING_CSV} (No space left on device)' in log
    assert 'the loop goes on' in log and 'Traceback' not in log, log[-3000:]
    # Every episode counted and reported, in order; the rows on disk as they were.
    numbers = [
        int(dict(zip([d.label for d in m.layout.dim], m.data, strict=True))['episode'])
        for m in episodes
    ]
    assert numbers == list(range(numbers[0], numbers[0] + len(numbers))), numbers
    assert (run_dir / run_files.TIMING_CSV).read_bytes() == before
    # No trace, and no temporary file of it left on the disk.
    assert sorted(p.name for p in small_disk.iterdir()) == sorted(['filler', name])
