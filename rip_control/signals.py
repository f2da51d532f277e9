"""Stop signals (SIGINT, SIGTERM) handled from the first line of ``main()`` to its last.

The problem it solves: a process that installs its handler late, or leaves Python's default
in place until some ``try`` is entered, has windows where a signal escapes as
``KeyboardInterrupt`` (a traceback, exit status -2) or ends the process outright (SIGTERM's
default, -15) before the code that stops it safely runs; and a handler that raises on every
signal lets a second Ctrl-C abort the ordered stop that the first one started.

:class:`StopSignals` is installed first, before the process announces itself or makes
anything that needs undoing. From then on every stop signal is recorded (``requested``,
``signum``, ``count``) and, by default, nothing is raised: set-up runs to its end, and loops
and the code after set-up look at ``requested`` and take their stop path. Code that blocks
where it cannot poll (a runner waiting on its child processes) runs inside
:meth:`StopSignals.interruptible`: there the first stop signal raises :class:`StopRequested`
(a ``KeyboardInterrupt``), once; a signal that came before the block raises on entering it;
every later signal, and every signal outside such a block, is only recorded, so the ordered
stop after the first one runs to its end. Inside a block, :meth:`StopSignals.held` keeps a
part uninterrupted (starting a child process: Python drops an exception raised in an at-fork
hook) and raises at its end, and :meth:`StopSignals.check` (for waits) raises a stop whose
exception was swallowed; a block never ends normally with a stop undelivered.

ROS-free. Python runs signal handlers in the main thread, between bytecodes, so install from
the main thread. With rclpy: install first, ``rclpy.init(...,
signal_handler_options=SignalHandlerOptions.NO)``, and let
:func:`rip_control.ros.node_params.spin_until_shutdown` install rclpy's own handlers once the node
and its executor exist (they chain to these, shut the context down and wake the executor;
installed earlier, they shut the context down under a node still being built).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
import os
import select
import signal
from types import FrameType
from typing import Any

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class StopRequested(KeyboardInterrupt):
    """The first stop signal, raised inside :meth:`StopSignals.interruptible`, once.

    (Once more only if that raise was swallowed before it left the block.)

    A ``KeyboardInterrupt`` (a ``BaseException``), so ``except Exception`` in the interrupted
    code does not swallow it, and code written for Ctrl-C catches SIGTERM the same way.
    """

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


class StopSignals:
    """Record SIGINT/SIGTERM from installation on; raise only inside ``interruptible()``.

    :param signals: the signals that mean "stop" (SIGINT and SIGTERM).
    :param repeat_note: written to stderr at every stop signal after the first (for example
        "stopping in the safe order, please wait"); empty: nothing is written.

    Installed over another :class:`StopSignals` (a runner called by an entry point that
    installed one first), a signal is recorded by both and counts as handled by both: the
    outer one never raises for a stop the inner one handled.
    """

    def __init__(self, signals: Iterable[int] = STOP_SIGNALS, repeat_note: str = '') -> None:
        self._signals = tuple(signals)
        self._repeat_note = repeat_note
        # No lock anywhere the handler goes: it runs between two bytecodes of the main thread,
        # which may hold that lock (a threading.Event's, say) or be in a handler holding it
        # when the next signal comes; a second signal then deadlocked the process (seen: a
        # control node hung for an hour after its runner was killed). A flag for readers, a
        # pipe byte (async-signal-safe) to wake waiting threads.
        self._flag = False
        self._wake_r, self._wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        self._first: int | None = None
        self._count = 0
        self._armed = 0  # depth of interruptible() blocks the main thread is in
        self._held = 0  # depth of held() parts
        self._raised = False  # the handler raised StopRequested (it may still be on its way)
        self._delivered = False  # a StopRequested left a block (or another one owns the stop)
        self._previous: dict[int, Any] = {}
        self._outer: dict[int, StopSignals] = {}
        self._at_first: list[Callable[[], object]] = []
        self._at_first_done = False  # the first signal's callbacks ran (or are running)

    # -- installing ------------------------------------------------------------------------

    def install(self) -> StopSignals:
        """Handle the stop signals from now on (main thread only); return ``self``.

        :raises ValueError: called from another thread (Python's own rule for handlers).
        """
        for sig in self._signals:
            previous = signal.signal(sig, self._on_signal)
            self._previous.setdefault(sig, previous)
            owner = getattr(previous, '__self__', None)
            if isinstance(owner, StopSignals) and owner is not self:
                self._outer[sig] = owner
                if owner._first is not None and not owner._delivered and self._first is None:
                    # A stop the outer one recorded and never raised is this one's now.
                    self._record(owner._first)
                    owner._raised = owner._delivered = True
        return self

    def at_first_signal(self, callback: Callable[[], object]) -> None:
        """Call ``callback()`` inside the handler of the first stop signal (once).

        For what must not wait for the code that polls ``requested`` (an executor's teardown
        can take a third of a second): a motor stop request, say. It runs in the main thread
        between two bytecodes of whatever was running, so it must never block (no lock it
        could be interrupting the holder of) and should be short; an exception it raises is
        written to stderr and dropped. Registered after the first signal: called at once.
        """
        self._at_first.append(callback)
        if self._at_first_done:
            # The first signal came already (perhaps between two lines of this method): run it
            # here unless that handler took it off the list and ran it.
            try:
                self._at_first.remove(callback)
            except ValueError:
                return
            self._call(callback)

    @staticmethod
    def _call(callback: Callable[[], object]) -> None:
        try:
            callback()
        except Exception as exc:  # noqa: BLE001 - a handler must not raise into the caller
            try:
                os.write(2, f'stop signal callback failed: {type(exc).__name__}: {exc}\n'.encode())
            except OSError:
                pass

    def restore(self) -> None:
        """Put back the handlers found at :meth:`install` (library use and tests).

        Call it after ``rclpy.try_shutdown()``: restoring a Python handler replaces rclpy's
        C-level one. Entry points do not restore: a signal between the restore and the
        process's end would meet Python's default again.
        """
        for sig, previous in self._previous.items():
            if signal.getsignal(sig) == self._on_signal:
                signal.signal(sig, signal.SIG_DFL if previous is None else previous)
        self._previous.clear()
        self._outer.clear()

    def __enter__(self) -> StopSignals:
        return self.install()

    def __exit__(self, *exc: object) -> None:
        self.restore()

    # -- what was received -----------------------------------------------------------------

    @property
    def requested(self) -> bool:
        """A stop signal arrived since :meth:`install` (any thread may read it)."""
        return self._flag

    @property
    def signum(self) -> int | None:
        """The first stop signal received, or None."""
        return self._first

    @property
    def count(self) -> int:
        """How many stop signals arrived."""
        return self._count

    def wait(self, timeout_s: float | None = None) -> bool:
        """Block until a stop signal arrives (threads other than the main one); whether it did."""
        if not self._flag:
            select.select([self._wake_r], [], [], timeout_s)
        return self._flag

    # -- raising ---------------------------------------------------------------------------

    @contextmanager
    def interruptible(self) -> Iterator[None]:
        """A block the first stop signal interrupts with :class:`StopRequested`, once.

        Raises on entering if a stop signal came before and was not delivered yet, and on
        leaving if one came inside and its exception was swallowed (Python drops exceptions
        raised in at-fork hooks and finalisers; code may catch it by mistake), so a stop
        never goes unnoticed. The exception may leave the ``with`` statement from its first
        line to its last: the ``try`` that catches it encloses the whole ``with``. What
        follows it (the ordered stop) is outside every such block and never interrupted.
        """
        self._armed += 1
        try:
            self.check()
            yield
            self.check()
        except StopRequested:
            self._delivered = True
            raise
        finally:
            self._armed -= 1

    @contextmanager
    def held(self) -> Iterator[None]:
        """Inside an interruptible block, a part no signal interrupts (e.g. starting a child).

        A signal meanwhile is recorded, and raised when the part is over.
        """
        self._held += 1
        try:
            yield
        finally:
            self._held -= 1
        self.check()

    def check(self) -> None:
        """Raise :class:`StopRequested` for a stop not delivered yet (in a block, not held).

        For waits inside an interruptible block, to act at once on a signal whose raise was
        swallowed; outside a block (or inside a held part) it does nothing.
        """
        if self._armed and not self._held and self._first is not None and not self._delivered:
            self._raised = True
            raise StopRequested(self._first)

    # -- the handler (main thread, between two bytecodes of whatever it was running) --------

    def _record(self, signum: int, handled: bool = False) -> None:
        if self._first is None:
            self._first = signum
        self._count += 1
        if handled:
            self._raised = self._delivered = True
        self._flag = True
        try:
            os.write(self._wake_w, b'!')
        except OSError:  # full (many signals): a waiter wakes anyway
            pass

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        self._record(signum)
        outer = self._outer.get(signum)
        if outer is not None:
            outer._record(signum, handled=True)
        if not self._at_first_done:
            self._at_first_done = True  # first: a signal inside a callback runs none again
            while self._at_first:  # each taken off as it runs: none runs twice
                self._call(self._at_first.pop(0))
        if self._armed and not self._held and not self._raised:
            self._raised = True
            raise StopRequested(self._first or signum)
        if self._count > 1 and self._repeat_note:
            # os.write, not print: the handler may have interrupted a print to the same stream.
            try:
                os.write(2, f'{self._repeat_note}\n'.encode())
            except OSError:
                pass
