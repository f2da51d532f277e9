"""Bounded, non-blocking hand-off with hold-back, from the control loop outwards.

In the real-time process the loop pushes each transition here; a released item goes into a
shared-memory ring (``_release`` is overridden there, :mod:`rip_control.rt.process`) that the
node's pump thread drains and publishes. A full ring drops the new item and counts it; it
never blocks the tick. The deque-backed base class (``pop_from_non_rt``) serves tests and
in-process use.

Transitions are *held back* ``holdback`` items before they become publishable, so that when
the 3-strike watchdog trips, the transitions of the earlier violating ticks can still be
withdrawn (:meth:`Outbox.discard_held_from_rt`) and never leave the loop.
"""

from __future__ import annotations

from collections import deque
from typing import Generic, TypeVar

T = TypeVar('T')


class Outbox(Generic[T]):
    """Single-producer (the loop), single-consumer queue with hold-back.

    :param capacity: publishable items kept at most; beyond it new items are dropped.
    :param holdback: newest items withheld until this many later items confirm them.
    """

    def __init__(self, capacity: int, holdback: int = 0) -> None:
        if capacity < 1:
            raise ValueError(f'capacity must be >= 1, got {capacity!r}')
        if holdback < 0:
            raise ValueError(f'holdback must be >= 0, got {holdback!r}')
        self.capacity = capacity
        self.holdback = holdback
        self._held: deque[T] = deque()
        self._ready: deque[T] = deque()
        self.n_pushed = 0
        self.n_dropped_full = 0
        self.n_discarded = 0

    def push_from_rt(self, item: T) -> None:
        """Queue an item (the loop); never blocks."""
        self.n_pushed += 1
        held = self._held
        held.append(item)
        if len(held) > self.holdback:
            self._release(held.popleft())

    def flush_held_from_rt(self) -> None:
        """Release all held items (end of an episode with clean timing)."""
        while self._held:
            self._release(self._held.popleft())

    def discard_held_from_rt(self) -> int:
        """Withdraw the held items (a timing violation); return how many."""
        n = len(self._held)
        self._held.clear()
        self.n_discarded += n
        return n

    def _release(self, item: T) -> None:
        if len(self._ready) >= self.capacity:
            self.n_dropped_full += 1
            return
        self._ready.append(item)

    def pop_from_non_rt(self) -> T | None:
        """Take the oldest publishable item, or ``None`` (the consumer)."""
        try:
            return self._ready.popleft()
        except IndexError:
            return None

    def __len__(self) -> int:
        return len(self._ready)
