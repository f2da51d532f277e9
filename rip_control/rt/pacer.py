"""Absolute-deadline pacing for a periodic loop.

The loop runs at exactly its rate on average because deadlines are absolute
(``next += period``), never "sleep one period from now". Waiting is two-stage: sleep until
``spin_s`` before the deadline (sleep overshoots by up to a millisecond or more), then
busy-wait the rest. When a tick overruns by whole periods, those cycles are counted as
missed and skipped, so the loop never bursts short ticks to catch up: a short dt teaches
the policy dynamics as wrong as a long one.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
import math
import time


@dataclass(frozen=True)
class TickTiming:
    """What one :meth:`Pacer.wait` observed.

    :param tick_time_s: the deadline this tick was released at (monotonic seconds).
    :param dt_s: actual release-to-release interval (monotonic clock).
    :param overrun_s: how late the release was versus its deadline (>= 0).
    :param missed: whole periods skipped before this tick because of an overrun.
    """

    tick_time_s: float
    dt_s: float
    overrun_s: float
    missed: int


class Pacer:
    """Releases a loop once per period on absolute deadlines.

    :param period_s: loop period.
    :param spin_s: busy-wait this long before each deadline (0 disables the busy-wait).
    :param clock: monotonic clock (injectable for tests).
    :param sleep: sleep function (injectable for tests).
    """

    def __init__(
        self,
        period_s: float,
        *,
        spin_s: float = 0.001,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if not (math.isfinite(period_s) and period_s > 0):
            raise ValueError(f'period_s must be a positive finite number, got {period_s!r}')
        if not (math.isfinite(spin_s) and spin_s >= 0):
            raise ValueError(f'spin_s must be >= 0, got {spin_s!r}')
        self.period_s = period_s
        self.spin_s = spin_s
        self._clock = clock
        self._sleep = sleep
        self._next = 0.0
        self._last_release = 0.0
        self.n_missed = 0

    def start(self) -> float:
        """Anchor the schedule now; the first :meth:`wait` releases one period later."""
        now = self._clock()
        self._next = now + self.period_s
        self._last_release = now
        return now

    @property
    def next_deadline_s(self) -> float:
        """The next release time."""
        return self._next

    def wait(self) -> TickTiming:
        """Block until the next deadline (or return at once if it has passed)."""
        clock = self._clock
        deadline = self._next
        remaining = deadline - clock()
        if remaining > self.spin_s:
            self._sleep(remaining - self.spin_s)
        while clock() < deadline:
            pass
        now = clock()
        overrun = now - deadline
        missed = 0
        if overrun >= self.period_s:
            # Late by whole periods: skip them instead of bursting to catch up.
            missed = int(overrun // self.period_s)
            self.n_missed += missed
        self._next = deadline + (missed + 1) * self.period_s
        dt = now - self._last_release
        self._last_release = now
        return TickTiming(tick_time_s=deadline, dt_s=dt, overrun_s=overrun, missed=missed)
