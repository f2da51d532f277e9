"""``make demo`` run after run: a table of the runs' ``summary.json`` files.

Not run from here: ``bash bench/run_demos.sh`` types ``make demo`` five times, each run
continuing the one before, and keeps each summary; ``python -m rip_bench table demo FILE...``
makes the README's table of them.
"""

from __future__ import annotations

from typing import Any

NAME = 'demo'


MIN_RETURN = 200.0
"""The demo's goal: every episode returns at least this much."""


def demo_table(summaries: list[dict[str, Any]]) -> str:
    """Markdown: one row per ``make demo`` run (its ``summary.json``), and the spread."""
    rows = [
        '| run | training returns, min-max | balance, min-max | evaluations (verdicts) | '
        'live / best policy | tick rate | violations |',
        '|---|---|---|---|---|---|---|',
    ]
    every: list[float] = []
    for i, s in enumerate(summaries, 1):
        rets, bal = s['episode_returns'], s['balance_s']
        every += rets
        verdicts: dict[str, int] = {}
        for e in s.get('evaluations') or []:
            verdicts[e['verdict']] = verdicts.get(e['verdict'], 0) + 1
        ticks = s.get('ticks') or {}
        rows.append(
            f'| {i} | {min(rets):.0f}-{max(rets):.0f} | {min(bal):.2f}-{max(bal):.2f} s | '
            + ', '.join(f'{k} {v}' for k, v in verdicts.items())
            + f' | v{s.get("live_policy_version")} / v{s.get("best_policy_version")} | '
            f'{ticks.get("measured_rate_hz", float("nan")):.4f} Hz | '
            f'{ticks.get("n_violations", "?")} |'
        )
    rows.append(
        f'| all | {min(every):.0f}-{max(every):.0f} ({len(every)} episodes, '
        f'{sum(r < MIN_RETURN for r in every)} below {MIN_RETURN:.0f}) | | | | | |'
    )
    return '\n'.join(rows)


TABLES = {NAME: demo_table}
