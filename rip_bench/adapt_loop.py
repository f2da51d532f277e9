"""``adapt``: the real -> sim -> real loop on an emulated rig, as ``rip_control.adapt`` runs it.

``python -m rip_bench adapt --rig config/rig_shifted_stuck.yaml --seed 0 --rig-minutes 10``

One run of :func:`rip_control.adapt.adapt` (its summary is the record): the deployment
balance before and after, the rig time it took and the wall time, the identification, the
re-training, the guard's verdict on the re-trained policy and on the fine-tune's.
"""

from __future__ import annotations

import argparse
from pathlib import Path
import tempfile
from typing import Any

import numpy as np

NAME = 'adapt'
HELP = 'identify, re-train in simulation and fine-tune on an emulated rig (rip_control.adapt)'


def add_arguments(ap: argparse.ArgumentParser) -> None:
    """The ``adapt`` options."""
    ap.add_argument('--rig', default='config/rig_shifted_stuck.yaml')
    ap.add_argument('--seed', type=int, default=0)
    ap.add_argument('--rig-minutes', type=float, default=10.0)
    ap.add_argument('--retrain-minutes', type=float, default=12.0)
    ap.add_argument('--runs-dir', default='', help='default: a temporary folder')


def run(a: argparse.Namespace) -> dict[str, Any]:
    """One adapt run: its summary, with what was asked."""
    from rip_control.adapt import OPTIONS, adapt

    own = {p.name: p.default for p in OPTIONS}
    own.update(rig_minutes=a.rig_minutes, retrain_minutes=a.retrain_minutes)
    runs = a.runs_dir or tempfile.mkdtemp(prefix='rip_adapt_')
    runner = {
        'rig_params': a.rig,
        'seed': str(a.seed),
        'run_name': f'{Path(a.rig).stem}_seed{a.seed}',
        'runs_dir': runs,
    }
    summary = adapt(own, runner, stream=False)
    return {'benchmark': NAME, 'rig': a.rig, 'seed': a.seed, **summary}


def adapt_table(docs: list[dict[str, Any]]) -> str:
    """Markdown: one row per run, and the mean over the runs of each rig."""
    rows = [
        '| rig | seed | rig time | wall | re-training | re-trained policy on the rig, at rig time '
        '(guard) '
        '| fine-tune evaluations (promoted) | balance before → after (per episode after) |',
        '|---|---|---|---|---|---|---|---|',
    ]
    for d in docs:
        dep, cand, fine = d['deployment'], d['candidate'], d['finetune']
        evs = fine['evaluations']
        promoted = sum(e['verdict'] == 'promoted' for e in evs)
        after = ', '.join(f'{b:.1f}' for b in dep['adapted_episodes_s'])
        at = next(c['rig_s'] for c in d['curve'] if c['what'] == '2_candidate')
        rows.append(
            f'| {Path(d["rig"]).stem} | {d["seed"]} | {d["rig_seconds"] / 60:.1f} min | '
            f'{d["wall_seconds"] / 60:.1f} min | {d["retrain"]["steps"]} steps, '
            f'{d["retrain"]["wall_s"] / 60:.1f} min | {cand["balance_s"]:.2f} s at '
            f'{at / 60:.1f} min ({cand["verdict"]}) | {len(evs)} ({promoted}) | '
            f'{dep["prior_balance_s"]:.2f} s → {dep["adapted_balance_s"]:.2f} s ({after}) |'
        )
    by_rig: dict[str, list[float]] = {}
    for d in docs:
        by_rig.setdefault(Path(d['rig']).stem, []).append(d['deployment']['adapted_balance_s'])
    for rig, vals in by_rig.items():
        if len(vals) > 1:
            rows.append(
                f'| {rig} | mean of {len(vals)} | | | | | | → {np.mean(vals):.2f} s '
                f'(min {np.min(vals):.2f} s) |'
            )
    return '\n'.join(rows)


TABLES = {NAME: adapt_table}
