"""Tick statistics of a run (the timing benchmark's figures, the runner's summary).

And the CPU time a virtual machine's host stole meanwhile (``/proc/stat``).

Pure numpy: the runner, the benchmarks and the tests share it without importing each other.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np


def tick_stats(
    dt_s: np.ndarray,
    overrun_s: np.ndarray,
    rate_hz: float,
    threshold_s: float = 0.005,
    max_strikes: int = 3,
) -> dict[str, Any]:
    """Summary figures of a run's tick intervals (the JSON fields of the timing benchmark).

    ``n_violations`` applies the 3-strike rule to ``overrun_s``; runs that were tripped
    by it stop there, so for the node the trace's own count is authoritative.
    """
    dt = np.asarray(dt_s, dtype=np.float64)
    period = 1.0 / rate_hz
    dev = np.abs(dt - period)
    strikes = violations = 0
    for ov in np.asarray(overrun_s, dtype=np.float64):
        strikes = strikes + 1 if ov > threshold_s else 0
        if strikes >= max_strikes:
            violations += 1
            strikes = 0
    return {
        'target_rate_hz': rate_hz,
        'measured_rate_hz': float(len(dt) / dt.sum()) if len(dt) else 0.0,
        'n_ticks': int(len(dt)),
        'dt_mean_ms': float(dt.mean() * 1e3) if len(dt) else math.nan,
        'dt_std_ms': float(dt.std() * 1e3) if len(dt) else math.nan,
        'dt_p99_abs_dev_ms': float(np.percentile(dev, 99) * 1e3) if len(dt) else math.nan,
        'dt_max_abs_dev_ms': float(dev.max() * 1e3) if len(dt) else math.nan,
        'max_overrun_ms': float(np.max(overrun_s) * 1e3) if len(dt) else math.nan,
        'n_violations': violations,
    }


def overrun_causes(
    overrun_s: np.ndarray, prev_work_s: np.ndarray, period_s: float, late_s: float = 0.0005
) -> dict[str, Any]:
    """Split late releases (over ``late_s``) by cause.

    Either the previous tick's work ran into this deadline, or the thread woke late
    (scheduling, waiting for the GIL).
    """
    ov = np.asarray(overrun_s)
    work = np.asarray(prev_work_s)
    late = ov > late_s
    from_work = late & (work > period_s - late_s)
    return {
        'work_mean_ms': float(work.mean() * 1e3) if len(work) else 0.0,
        'work_p99_ms': float(np.percentile(work, 99) * 1e3) if len(work) else 0.0,
        'work_max_ms': float(work.max() * 1e3) if len(work) else 0.0,
        'late_releases': int(late.sum()),
        'late_after_long_work': int(from_work.sum()),
        'late_woke_late': int((late & ~from_work).sum()),
    }


def cpu_times(stat_path: str = '/proc/stat') -> tuple[int, int]:
    """``(steal, total)`` of the machine's CPU time so far, in clock ticks (all CPUs).

    Steal is the time a virtual machine's CPUs were runnable but the host ran something
    else: to a program inside, a stall it cannot see coming. ``(0, 0)`` where there is no
    ``/proc/stat`` or it cannot be read.
    """
    try:
        with open(stat_path) as f:
            fields = f.readline().split()
        if not fields or fields[0] != 'cpu':
            return 0, 0
        ticks = [int(x) for x in fields[1:9]]  # user .. steal (guest time is inside user)
    except (OSError, ValueError):
        return 0, 0
    ticks += [0] * (8 - len(ticks))
    return ticks[7], sum(ticks)


def steal_fraction(start: tuple[int, int], end: tuple[int, int]) -> float:
    """The share of CPU time stolen by the host between two :func:`cpu_times` readings."""
    total = end[1] - start[1]
    return (end[0] - start[0]) / total if total > 0 else 0.0
