"""The end of a run: its summary (``summary.json``, printed), plots and merged timing."""

from __future__ import annotations

from collections import Counter
import math
from pathlib import Path
from typing import Any

from rip_control import run_files
from rip_control.files import atomic_write_bytes
from rip_control.rt.guard import VERDICTS
from rip_control.run.supervisor import RigMonitor, episode_rejection


def finite_or_none(x: float | None) -> float | None:
    """``x`` for a JSON summary: None where it is missing or not finite."""
    return x if x is not None and math.isfinite(x) else None


def merge_timing(run_dir: Path, rigs: list[tuple[str, Path]]) -> None:
    """``run_dir/timing.csv``: every rig's per-episode rows, a ``rig`` column first."""
    header, rows = '', []
    for rig, rig_dir in rigs:
        path = rig_dir / run_files.TIMING_CSV
        if not path.exists():
            continue
        lines = path.read_text().splitlines()
        if not lines:
            continue
        header = header or 'rig,' + lines[0]
        rows += [f'{rig},{line}' for line in lines[1:] if line]
    if header:
        text = '\n'.join([header, *rows]) + '\n'
        atomic_write_bytes(run_dir / run_files.TIMING_CSV, text.encode())


def summarise(
    run_dir: Path, monitor: RigMonitor, rate_hz: float, resumed: str, wall_s: float
) -> dict[str, Any]:
    """One rig's summary (printed, and returned for ``summary.json``); its plots written."""
    import numpy as np

    eps, evs = monitor.episodes, monitor.evaluations
    summary: dict[str, Any] = {
        'run_dir': str(run_dir),
        'rate_hz': rate_hz,
        'episodes': len(eps),
        'wall_seconds': round(wall_s, 1),
        'resumed_buffer': resumed or None,
        'episode_returns': [e['return'] for e in eps],
        'balance_s': [e['balance_s'] for e in eps],
        # Rig seconds spent resetting before the episodes of every kind (excitation and the
        # guard's evaluations included), as the node counted them.
        'reset_seconds': round(
            sum(
                e['reset_s']
                for e in (*eps, *evs, *monitor.excitations)
                if finite_or_none(e.get('reset_s')) is not None
            ),
            2,
        ),
        'policy_versions': [int(e['policy_version']) for e in eps],
        'evaluations': [_evaluation(e) for e in evs],
        'live_policy_version': int(evs[-1]['live_version']) if evs else None,
        'best_policy_version': int(evs[-1]['best_version']) if evs else None,
        'best_eval_return': evs[-1]['best_score'] if evs else None,
        'learner': monitor.learner,
        # The control node's last report: what it published, and what reached nobody.
        'transitions_published': int(monitor.control.get('transitions_published', 0)),
        'transitions_unmatched': int(monitor.control.get('transitions_unmatched', 0)),
        # Re-activations after a timing violation (each one a trip of the 3-strike rule).
        'violation_restarts': monitor.restarts_total,
        # Failed ticks over every activation; in an episode each one cuts it short.
        'serial_errors': monitor.serial_errors_earlier + monitor.serial_errors_now(),
    }
    trace = run_dir / run_files.TICK_TRACE
    if trace.exists():
        from rip_control.stats import overrun_causes, tick_stats

        with np.load(trace, allow_pickle=False) as z:
            stats = tick_stats(z['dt_s'][1:], z['overrun_s'][1:], rate_hz)
            stats['n_violations'] = int(z['violations'])
            # The trace is the last activation's; the ticks of those a trip ended before it.
            stats['n_ticks_earlier_activations'] = monitor.ticks_earlier
            stats.update(overrun_causes(z['overrun_s'][1:], z['prev_work_s'][1:], 1.0 / rate_hz))
            summary['ticks'] = stats
            plots(run_dir, z['dt_s'][1:], rate_hz, eps)
    print('\n== summary ==\n' + '\n'.join(_lines(summary, monitor, resumed)), flush=True)
    return summary


def _evaluation(e: dict[str, Any]) -> dict[str, Any]:
    """One guard evaluation episode, as the summary records it."""
    return {
        'episode': int(e['episode']),
        'policy_version': int(e['policy_version']),
        'return': e['return'],
        'balance_s': e['balance_s'],
        'verdict': VERDICTS[int(e['verdict'])],
        # What the verdict judged: the means over the evaluation's episodes (None
        # before its last episode, ``pending``).
        'judged_return': finite_or_none(e.get('eval_score')),
        'judged_balance_s': finite_or_none(e.get('eval_balance_s')),
        # The bars it was judged against (None for the baseline, which sets them)
        # and, for a rejection, the one it missed.
        'bar': finite_or_none(e.get('eval_bar')),
        'balance_bar_s': finite_or_none(e.get('eval_balance_bar_s')),
        'rejected_for': episode_rejection(e),
    }


def _lines(summary: dict[str, Any], monitor: RigMonitor, resumed: str) -> list[str]:
    """The summary's printed lines."""
    run_dir, rate_hz = summary['run_dir'], summary['rate_hz']
    eps, evs = monitor.episodes, monitor.evaluations
    rate = summary.get('ticks', {}).get('measured_rate_hz', float('nan'))
    lines = [f'run folder      {run_dir}']
    if monitor.learner:
        lines.append(
            f'buffer          {"resumed from " + resumed if resumed else "fresh"}; now '
            f'{monitor.learner.get("buffer_size", "?")} transitions'
        )
    lines.append(
        f'episodes        {len(eps)}, returns ' + ', '.join(f'{e["return"]:.1f}' for e in eps)
    )
    lines.append(
        f'tick rate       {rate:.4f} Hz (target {rate_hz}), violations '
        f'{summary.get("ticks", {}).get("n_violations", "?")}'
        + (
            f' in the last activation; re-activated {monitor.restarts_total} time(s) after '
            'earlier ones'
            if monitor.restarts_total
            else ''
        )
    )
    if monitor.learner:
        lines.append(
            f'learner         {monitor.learner.get("gradient_steps_done", "?")} updates, '
            f'{monitor.learner.get("updates_per_transition", "?")} per transition, policy '
            f'v{monitor.learner.get("policy_version_published", "?")}'
        )
    lines.append(f'policy versions used per episode: {summary["policy_versions"]}')
    if evs:
        verdicts = Counter(VERDICTS[int(e['verdict'])] for e in evs)
        lines.append(
            f'regression guard: {len(evs)} evaluation episode(s) ({dict(verdicts)}); live policy '
            f'v{summary["live_policy_version"]}, best v{summary["best_policy_version"]} '
            f'(evaluation return {summary["best_eval_return"]:.2f}, {run_files.POLICY_BEST})'
        )
    return lines


def plots(run_dir: Path, dt_s: Any, rate_hz: float, eps: list[dict[str, float]]) -> None:
    """The tick-interval histogram and the per-episode returns, as PNGs in ``run_dir``."""
    import matplotlib

    matplotlib.use('Agg')
    import matplotlib.pyplot as plt
    import numpy as np

    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.hist((np.asarray(dt_s) - 1.0 / rate_hz) * 1e3, bins=100)
    ax.set_xlabel('tick dt - period (ms)')
    ax.set_ylabel('ticks')
    ax.set_yscale('log')
    ax.set_title(f'control tick interval at {rate_hz:g} Hz ({len(dt_s)} ticks)')
    fig.tight_layout()
    fig.savefig(run_dir / run_files.TICK_HISTOGRAM, dpi=100)
    plt.close(fig)
    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.plot([e['episode'] for e in eps], [e['return'] for e in eps], 'o-', label='return')
    ax.set_xlabel('episode')
    ax.set_ylabel('episode return')
    ax2 = ax.twinx()
    ax2.plot([e['episode'] for e in eps], [e['balance_s'] for e in eps], 's--', color='C1')
    ax2.set_ylabel('longest balance (s)', color='C1')
    ax.set_title('fine-tune: per-episode return')
    fig.tight_layout()
    fig.savefig(run_dir / run_files.EPISODE_RETURNS, dpi=100)
    plt.close(fig)
