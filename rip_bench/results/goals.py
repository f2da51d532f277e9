"""The goals the results are judged by: targets, not measurements."""

from __future__ import annotations

from rip_bench import demo

RESCUE_BALANCE_S = 5.0
"""The rescue: a rig the simulation cannot balance balances at least this long after adapt."""
RESCUE_WALL_S = 30 * 60.0
"""... within this much wall time (and the run's rig-time budget, in its record)."""
FLOOR_S = 8.0
"""What the other rigs aim for (the worn rig's floor in the matrix records)."""
BUDGET_WALL_S = 8 * 60.0
"""``adapt rig_minutes:=2``: its wall time on these 2 cores (the rescue at :data:`FLOOR_S`)."""
RESET_SHARE = 0.2
"""The resets' share of the rig time, at most."""
DEMO_MIN_RETURN = demo.MIN_RETURN  # ``make demo``: every training episode at least this
TIMING_GOALS = {
    'seconds': 600.0,
    'std_ms': 0.02,
    'max_ms': 0.5,
    'fast_hz': 500.0,
    'fast_max_ms': 1.0,
}
"""The verification protocol's tighter timing goals: dt std and max deviation over a run of
``seconds`` at the slower rates, and max deviation at ``fast_hz``."""
