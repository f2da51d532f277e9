"""The runner (``python -m rip_control.finetune``) under signals at any moment.

A signal right after the runner announces itself ends it with 130 and no traceback, leaving
no process behind; a second Ctrl-C during the ordered stop does not abort it.
"""

from __future__ import annotations

from pathlib import Path
import signal
import subprocess
import sys
import threading
import time

from procs import processes_mentioning
import pytest

from rip_control.procs import child_env

ANNOUNCED = "fine-tune 'sig"


class Runner:
    started: list[Runner] = []  # killed at teardown if a test failed before they ended

    def __init__(self, tmp_path: Path, *args: str, env: dict[str, str] | None = None) -> None:
        self.lines: list[str] = []
        self.announced = threading.Event()
        self.first_episode = threading.Event()
        self.proc = subprocess.Popen(
            [
                sys.executable,
                '-m',
                'rip_control.finetune',
                'run_name:=sig',
                f'runs_dir:={tmp_path / "runs"}',
                f'emulator_link:={tmp_path / "rig"}',
                *args,
            ],
            env=child_env(env),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        Runner.started.append(self)

    def ended(self, timeout_s: float) -> int:
        """Its exit status once it has ended and its last lines are read.

        (Its exit can come before the reader has taken the last lines it wrote.)
        """
        code = self.proc.wait(timeout=timeout_s)
        self._reader.join(timeout=10)
        return code

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line)
            if line.startswith(ANNOUNCED):
                self.announced.set()
            if line.startswith('episode '):
                self.first_episode.set()

    @property
    def text(self) -> str:
        return ''.join(self.lines[-40:])


@pytest.fixture(autouse=True)
def _no_runner_left_behind():
    yield
    while Runner.started:
        runner = Runner.started.pop()
        if runner.proc.poll() is None:
            runner.proc.kill()  # its children follow (PR_SET_PDEATHSIG)
            runner.proc.wait()


def _no_process_left(tmp_path: Path, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while processes_mentioning(str(tmp_path)):
        assert time.monotonic() < deadline, 'a child outlived the runner'
        time.sleep(0.1)


@pytest.mark.slow
def test_a_signal_right_after_the_announcement_ends_the_runner_cleanly_every_time(tmp_path):
    """Five times, alternating SIGINT and SIGTERM, from the announcement on.

    Both at once after the announcement, then at delays growing to 1.8 s, so that a signal
    falls into each phase of the start: processes being started, the learner importing,
    configuring.
    """
    delays = (0.0, 0.0, 0.4, 0.9, 1.8)
    for i, delay in enumerate(delays):
        sig = signal.SIGINT if i % 2 == 0 else signal.SIGTERM
        run_dir = tmp_path / str(i)
        runner = Runner(run_dir, 'episodes:=1', 'episode_seconds:=1')
        assert runner.announced.wait(30), runner.text
        time.sleep(delay)  # the moment, not a synchronisation
        runner.proc.send_signal(sig)
        code = runner.ended(90)
        assert code == 130, (i, sig, runner.text)
        assert 'Traceback' not in runner.text, (i, sig, runner.text)
        _no_process_left(run_dir)


@pytest.mark.slow
def test_a_second_ctrl_c_during_the_ordered_stop_does_not_abort_it(tmp_path):
    import json
    import re

    from rip_control import buffer_file, run_files
    from rip_control.rig.env import ACTION_SIZE, OBS_SIZE

    events = tmp_path / 'emulator_events'  # the emulator appends '<EVENT> <t> <what>' lines
    runner = Runner(
        tmp_path, 'episodes:=0', 'episode_seconds:=1', env={'RIP_EMULATOR_EVENTS': str(events)}
    )
    assert runner.first_episode.wait(120), runner.text
    t0 = time.monotonic()
    runner.proc.send_signal(signal.SIGINT)
    # Keep pressing Ctrl-C while it stops.
    for _ in range(5):
        time.sleep(0.1)
        if runner.proc.poll() is not None:
            break
        runner.proc.send_signal(signal.SIGINT)
    code = runner.ended(90)
    text = ''.join(runner.lines)
    assert code == 130, runner.text
    assert 'Traceback' not in text, runner.text
    assert 'please wait' in text, runner.text  # the later presses were seen, and waited
    assert 'summary' in text, runner.text
    # The stop ran whole and in its order: the motor off by the node's command, the learner
    # stopped and saved (both exit 0), then the emulator powered down.
    after = [
        what
        for _, at, what in (line.split(' ', 2) for line in events.read_text().splitlines())
        if float(at) >= t0
    ]
    assert after == ['disengaged command', 'powered down'], after
    run_dir = tmp_path / 'runs' / 'sig'
    summary = json.loads((run_dir / run_files.SUMMARY).read_text())
    assert summary['exit_codes'] == {'control': 0, 'learner': 0}, summary['exit_codes']
    # What is kept is the stop's save (after the signal), not an earlier periodic one.
    interrupted = next(i for i, line in enumerate(runner.lines) if 'interrupted' in line)
    saves = [
        (i, int(m.group(1)))
        for i, line in enumerate(runner.lines)
        if (m := re.search(r'checkpoint: (\d+) transitions', line))
    ]
    assert saves and saves[-1][0] > interrupted, runner.text
    _, meta = buffer_file.load(
        run_dir / run_files.BUFFER, rate_hz=50.0, obs_size=OBS_SIZE, action_size=ACTION_SIZE
    )
    assert meta.count == saves[-1][1] > 0
    _no_process_left(tmp_path)


def test_a_runner_inside_an_entry_point_takes_over_a_stop_the_entry_point_recorded():
    from rip_control.signals import StopSignals

    outer = StopSignals().install()
    try:
        signal.raise_signal(signal.SIGTERM)  # before the runner's own handling: recorded only
        inner = StopSignals().install()
        try:
            assert inner.requested and inner.signum == signal.SIGTERM
            with pytest.raises(KeyboardInterrupt), inner.interruptible():
                pass  # raised on entering: the stop is not lost
        finally:
            inner.restore()
        with outer.interruptible():  # handled by the inner one: the outer does not raise again
            pass
    finally:
        outer.restore()
