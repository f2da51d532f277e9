"""The two watchdogs of the control loop.

:class:`OverrunWatchdog` is the 3-strike rule evaluated inside the tick: a tick released
more than ``threshold_s`` after its deadline is a strike, ``max_strikes`` in a row is a
:class:`TimingViolation` (one late tick is a scheduler hiccup; several in a row is
structural). :class:`HungLoopWatchdog` is an independent thread for the case the 3-strike
rule cannot see: a control thread that stops ticking altogether (stuck in I/O, a long pause),
which never reaches the next strike check.
"""

from __future__ import annotations

from collections.abc import Callable
import threading
import time


class TimingViolation(RuntimeError):
    """The control loop missed its deadline by more than the threshold too many times in a row."""


class OverrunWatchdog:
    """Counts consecutive overruns; control-thread only.

    :param threshold_s: an overrun above this is a strike.
    :param max_strikes: consecutive strikes that make a violation.
    """

    def __init__(self, threshold_s: float, max_strikes: int) -> None:
        if not threshold_s > 0:
            raise ValueError(f'threshold_s must be > 0, got {threshold_s!r}')
        if max_strikes < 1:
            raise ValueError(f'max_strikes must be >= 1, got {max_strikes!r}')
        self.threshold_s = threshold_s
        self.max_strikes = max_strikes
        self.strikes = 0
        self.n_strikes_total = 0
        self.n_violations = 0

    def is_strike(self, overrun_s: float) -> bool:
        """Whether this overrun counts as a strike."""
        return overrun_s > self.threshold_s

    def check_from_rt(self, overrun_s: float) -> None:
        """Record one tick's overrun; raise :class:`TimingViolation` on the last strike."""
        if overrun_s > self.threshold_s:
            self.strikes += 1
            self.n_strikes_total += 1
            if self.strikes >= self.max_strikes:
                self.n_violations += 1
                strikes, self.strikes = self.strikes, 0
                raise TimingViolation(
                    f'{strikes} consecutive ticks overran their deadline by more than '
                    f'{self.threshold_s * 1e3:.1f} ms (last: {overrun_s * 1e3:.2f} ms)'
                )
        else:
            self.strikes = 0


class HungLoopWatchdog:
    """Calls ``on_hung`` once if the control thread stops kicking it for ``timeout_s``.

    The control thread calls :meth:`kick_from_rt` every tick (a float store, no lock). The
    watchdog thread polls at a quarter of the timeout, so it fires between ``timeout_s``
    and ``1.25 * timeout_s`` after the last kick. It re-arms after the next kick.

    :param timeout_s: silence that counts as hung.
    :param on_hung: called from the watchdog thread with the silence in seconds; typically
        disengages the motor.
    :param name: thread name.
    """

    def __init__(
        self, timeout_s: float, on_hung: Callable[[float], None], name: str = 'hung-watchdog'
    ) -> None:
        if not timeout_s > 0:
            raise ValueError(f'timeout_s must be > 0, got {timeout_s!r}')
        self.timeout_s = timeout_s
        self._on_hung = on_hung
        self._last_kick = time.monotonic()
        self._stop = threading.Event()
        self._fired = False
        self.n_trips = 0
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> None:
        """Start watching (counting from now)."""
        self._last_kick = time.monotonic()
        self._thread.start()

    def kick_from_rt(self) -> None:
        """The control thread is alive."""
        self._last_kick = time.monotonic()
        self._fired = False

    def stop(self) -> None:
        """Stop the watchdog thread."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=1.0)

    def _run(self) -> None:
        poll = self.timeout_s / 4
        while not self._stop.wait(poll):
            silence = time.monotonic() - self._last_kick
            if silence > self.timeout_s and not self._fired:
                self._fired = True
                self.n_trips += 1
                self._on_hung(silence)
