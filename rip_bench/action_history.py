"""``action-history``: k = 0, 1, 2 past actions in the observation, on a rig with latency.

``python -m rip_bench action-history --rig config/rig_shifted_stuck.yaml --seed 0``

For each k: re-train in simulation at the rig's physics as ``rip_control.adapt`` re-trains
(warm from the shipped policy, its k = 0 networks widened with zero weights for the new
inputs, the same step budget and seed for every k), then deploy the result on the emulated
rig (``rip_control.evaluate``: deterministic, ``--eval-episodes`` x ``--eval-seconds`` from
hanging). The stuck rig reads its state 1.5 ticks late and hides small voltages in a dead
zone: what a 6-float observation cannot tell apart is exactly what the older actions say.
``--randomization none`` (the default) trains at the rig file's exact physics, so the model
is not what differs between the k; the table is ``table action-history FILE...``.
"""

from __future__ import annotations

import argparse
from pathlib import Path
import tempfile
import time
from typing import Any

import numpy as np

from rip_bench.common import DEFAULT_POLICY, add_deployment_arguments

NAME = 'action-history'
HELP = 'k = 0, 1, 2 past actions in the observation: re-trained for a rig, deployed on it'


def add_arguments(ap: argparse.ArgumentParser) -> None:
    """The ``action-history`` options."""
    ap.add_argument('--rig', default='config/rig_shifted_stuck.yaml', help='rig physics YAML')
    ap.add_argument('--ks', default='0,1,2', help='the action histories compared')
    ap.add_argument('--seed', type=int, default=0, help='seed of every re-training')
    ap.add_argument('--steps', type=int, default=60_000, help='simulated steps per re-training')
    ap.add_argument('--minutes', type=float, default=10.0, help='wall-clock cap per re-training')
    ap.add_argument(
        '--randomization',
        default='none',
        help="'none' (the rig file's exact physics) or a pretrain randomization name",
    )
    ap.add_argument('--init', default=str(DEFAULT_POLICY.parent), help='the warm start')
    add_deployment_arguments(ap)
    ap.add_argument('--runs-dir', default='', help='default: a temporary folder')


def run(a: argparse.Namespace) -> dict[str, Any]:
    """Re-train and deploy at each k; the record."""
    from rip_bench.arms import deploy
    from rip_learner import pretrain

    runs = Path(a.runs_dir or tempfile.mkdtemp(prefix='rip_k_'))
    a.rate = 50.0
    arms = []
    for k in (int(v) for v in a.ks.split(',')):
        out = runs / f'k{k}_seed{a.seed}'
        popts = {
            **{p.name: p.default for p in pretrain.OPTIONS},
            'rate': a.rate,
            'out': str(out),
            'rig_params': a.rig,
            'init': a.init,
            'action_history': k,
            'randomize': a.randomization != 'none',
            'randomization': a.randomization if a.randomization != 'none' else 'standard',
            'steps': a.steps,
            'time_limit_s': 60.0 * a.minutes,
            'seed': a.seed,
            # warm, as rip_control.adapt re-trains: no curriculum from scratch
            'balance_steps': 0,
            'ramp_steps': 0,
            'random_steps': 1000,
        }
        print(f'== k = {k}: re-training {a.steps} steps on {a.rig} (seed {a.seed})', flush=True)
        t0 = time.monotonic()
        summary = pretrain.pretrain(popts, log=lambda line: print(f'  {line}', flush=True))
        wall = time.monotonic() - t0
        # The node's k set to the policy's (the runner would take it from the file anyway).
        extra = {'action_history': str(k)}
        name = f'eval_k{k}_seed{a.seed}'
        report = deploy(a, a.rig, str(out / 'policy.safetensors'), runs, name, extra)
        balances = [float(e['longest_balance_s']) for e in report['episodes']]
        print(f'k = {k}: deployed balance {np.mean(balances):.2f} s {balances}', flush=True)
        arms.append(
            {
                'action_history': k,
                'retrain_steps': summary['steps'],
                'retrain_wall_s': wall,
                'sim_balance_s': summary['best']['nominal']['longest_balance_s']['mean'],
                'stopped_by': summary['stopped_by'],
                'balance_s': float(np.mean(balances)),
                'balance_min_s': float(np.min(balances)),
                'episodes_s': balances,
            }
        )
    return {
        'benchmark': NAME,
        'rig': a.rig,
        'seed': a.seed,
        'randomization': a.randomization,
        'steps': a.steps,
        'eval_episodes': a.eval_episodes,
        'eval_seconds': a.eval_seconds,
        'arms': arms,
    }


def table(docs: list[dict[str, Any]]) -> str:
    """Markdown: one row per k, the deployed balance of each seed and their mean."""
    ks = sorted({arm['action_history'] for d in docs for arm in d['arms']})
    seeds = sorted(d['seed'] for d in docs)
    rows = [
        '| k | ' + ' | '.join(f'seed {s}' for s in seeds) + ' | mean | worst episode |',
        '|---|' + '---|' * (len(seeds) + 2),
    ]
    for k in ks:
        vals, worst = [], []
        for d in sorted(docs, key=lambda d: d['seed']):
            arm = next(x for x in d['arms'] if x['action_history'] == k)
            vals.append(arm['balance_s'])
            worst.append(arm['balance_min_s'])
        cells = ' | '.join(f'{v:.2f} s' for v in vals)
        rows.append(f'| {k} | {cells} | {np.mean(vals):.2f} s | {min(worst):.2f} s |')
    return '\n'.join(rows)


TABLES = {NAME: table}
