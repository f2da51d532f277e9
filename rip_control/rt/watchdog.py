"""The two watchdogs of the control loop.

:class:`OverrunWatchdog` is the 3-strike rule evaluated inside the tick: a tick released
more than ``threshold_s`` after its deadline is a strike, ``max_strikes`` in a row is a
:class:`TimingViolation` (one late tick is a scheduler hiccup; several in a row is
structural). The case the 3-strike rule cannot see - a loop that stops ticking altogether
(stuck in I/O, frozen) and never reaches the next strike check - is the node's: its pump
thread watches the real-time process's heartbeat (:mod:`rip_control.ros.control_node`).
"""

from __future__ import annotations


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
