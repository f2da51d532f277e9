"""Start and stop the rig emulator as a child process (for the runner, demos and tests)."""

from __future__ import annotations

from pathlib import Path
import selectors
import signal
import subprocess
import sys
import threading
import time

from rip_control.procs import child_env, die_with_parent, signals_blocked


class EmulatorProcess:
    """A running ``rip_control.rig.emulator``; use as a context manager.

    :param link: where the emulator links its pty.
    :param args: extra command-line arguments (physics file, faults, ...).
    :param ready_timeout_s: how long to wait for its READY line.
    :param firmware: ``python`` (the emulator) or ``c`` (the host build of the C firmware).
    """

    def __init__(
        self,
        link: str | Path,
        args: list[str] | None = None,
        ready_timeout_s: float = 10.0,
        firmware: str = 'python',
    ) -> None:
        self.link = Path(link)
        self.firmware = firmware
        self.args = list(args or []) + (['--firmware', firmware] if firmware != 'python' else [])
        self.ready_timeout_s = ready_timeout_s
        self.proc: subprocess.Popen[str] | None = None
        self.device = ''
        self.ready_line = ''
        self.lines: list[str] = []
        self._lines_cond = threading.Condition()
        self._reader: threading.Thread | None = None

    def start(self) -> EmulatorProcess:
        """Spawn it and wait (bounded) until it serves the link."""
        cmd = [sys.executable, '-m', 'rip_control.rig.emulator', '--link', str(self.link)]
        with signals_blocked():
            self.proc = subprocess.Popen(
                cmd + self.args,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                env=child_env(),
                preexec_fn=die_with_parent,  # noqa: PLW1509 - prctl only, no locks taken
            )
        assert self.proc.stdout is not None
        sel = selectors.DefaultSelector()
        sel.register(self.proc.stdout, selectors.EVENT_READ)
        deadline = time.monotonic() + self.ready_timeout_s
        while time.monotonic() < deadline:
            if sel.select(timeout=max(0.0, deadline - time.monotonic())):
                line = self.proc.stdout.readline()
                if line.startswith('READY '):
                    self.ready_line = line.strip()
                    self.device = line.split()[1]
                    sel.close()
                    self._reader = threading.Thread(target=self._read_stdout, daemon=True)
                    self._reader.start()
                    return self
                if not line:
                    break
        sel.close()
        err = self.stop()
        raise RuntimeError(f'rig emulator did not become ready: {err.strip() or "no output"}')

    def _read_stdout(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        for line in self.proc.stdout:
            with self._lines_cond:
                self.lines.append(line.rstrip('\n'))
                self._lines_cond.notify_all()

    def wait_for_line(self, prefix: str, timeout_s: float, start: int = 0) -> str | None:
        """Wait (bounded) for a stdout line starting with ``prefix``, from index ``start``."""
        deadline = time.monotonic() + timeout_s
        with self._lines_cond:
            while True:
                for line in self.lines[start:]:
                    if line.startswith(prefix):
                        return line
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return None
                self._lines_cond.wait(remaining)

    def wait_for_event(self, what: str, timeout_s: float) -> float | None:
        """Wait (bounded) for an ``EVENT <t> <what>`` line; its monotonic time ``t``."""
        deadline = time.monotonic() + timeout_s
        with self._lines_cond:
            while True:
                for line in self.lines:
                    if line.startswith('EVENT ') and line.split(' ', 2)[2] == what:
                        return float(line.split(' ', 2)[1])
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return None
                self._lines_cond.wait(remaining)

    def events(self) -> list[tuple[float, str]]:
        """``(monotonic_s, what)`` of the EVENT lines so far (needs ``--events``)."""
        with self._lines_cond:
            out = []
            for line in self.lines:
                if line.startswith('EVENT '):
                    _, t, what = line.split(' ', 2)
                    out.append((float(t), what))
            return out

    @property
    def alive(self) -> bool:
        """Whether the process is still running."""
        return self.proc is not None and self.proc.poll() is None

    def signal(self, signum: int) -> None:
        """Send a signal (SIGSTOP/SIGCONT/SIGKILL for fault tests)."""
        if self.proc is not None:
            self.proc.send_signal(signum)

    def stop(self, timeout_s: float = 5.0) -> str:
        """SIGTERM, wait (bounded, then SIGKILL); return what it printed to stderr."""
        if self.proc is None:
            return ''
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        if self._reader is not None:
            self._reader.join(timeout=2.0)
        err = self.proc.stderr.read() if self.proc.stderr else ''
        return err or ''

    def __enter__(self) -> EmulatorProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
