"""The fine-tune as shipped, over seeds and rigs, against the goals it is held to.

``python -m rip_bench matrix --rigs config/rig_shifted_worn.yaml ... --seeds 0 1 2``

For each rig the simulation-only policy is deployed once (deterministic evaluation episodes);
for each seed the fine-tune runs with ``config/finetune.yaml`` as shipped (regression guard
on) and its ``policy_best`` is deployed on the same rig. Each (rig, seed) is checked against:

* **balance**: the fine-tuned policy's mean longest balance is at least the simulation-only
  one's minus 0.2 s (and, on a rig named in ``--min-balance``, at least that long);
* **no collapse**: no training episode in the second half of the run returns less than 80 %
  of the first episode's return;
* **chatter**: total variation of the action per second at most 1.2 x the simulation-only
  policy's.

A seed whose ``policy_best`` is the simulation-only policy itself (the same weights: no
candidate beat it) delivered exactly that policy: it is neither better nor worse than itself
(balance gain 0, chatter ratio 1), and a floor is judged on both measurements of it pooled
(the simulation-only one and the seed's own deployment, as many episodes each), not on either
alone. Both measurements are kept in the JSON.
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path
import tempfile
from typing import Any

import numpy as np

from rip_bench.arms import arm_parameters, deploy
from rip_bench.common import DEFAULT_POLICY, add_deployment_arguments, add_run_arguments
from rip_control.policy import load_actor_file
from rip_control.rig.env import ACTION_SIZE, OBS_SIZE

NAME = 'matrix'
HELP = 'the shipped fine-tune over seeds and rigs, with its goals'

BALANCE_SLACK_S = 0.2
COLLAPSE_SHARE = 0.8
CHATTER_RATIO = 1.2
FAILED_GOALS = {'balance_ok': False, 'no_collapse': False, 'chatter_ok': False}


def add_arguments(ap: argparse.ArgumentParser) -> None:
    """The ``matrix`` options (the run's defaults are the shipped ones)."""
    ap.add_argument('--rigs', nargs='+', required=True, help='rig physics YAML files')
    ap.add_argument('--seeds', nargs='+', type=int, default=[0, 1, 2])
    ap.add_argument('--policy', default=str(DEFAULT_POLICY), help='simulation-only policy')
    add_run_arguments(ap, 'rate', 'episodes', 'episode_seconds')
    add_deployment_arguments(ap)
    ap.add_argument(
        '--min-balance',
        action='append',
        default=[],
        metavar='RIG_STEM=SECONDS',
        help='a floor for one rig, e.g. rig_shifted_worn=8',
    )
    ap.add_argument('--params-file', default='')
    ap.add_argument('--set', action='append', default=[], metavar='NODE.NAME=VALUE')
    ap.add_argument('--runs-dir', default='')


def _evaluate(a: argparse.Namespace, rig: str, policy: str, runs: Path, name: str) -> Any:
    return deploy(a, rig, policy, runs, name)['summary']


def same_weights(a: str | Path, b: str | Path, rate_hz: float) -> bool:
    """Whether two policy files hold the same actor weights (their versions may differ)."""
    x, y = (
        load_actor_file(p, rate_hz=rate_hz, obs_size=OBS_SIZE, action_size=ACTION_SIZE)
        for p in (a, b)
    )
    return x.tensors.keys() == y.tensors.keys() and all(
        np.array_equal(x.tensors[k], y.tensors[k]) for k in x.tensors
    )


def score(
    sim: dict[str, Any],
    tuned: dict[str, Any],
    same: bool,
    returns: list[float],
    floor: float | None,
) -> dict[str, Any]:
    """The goals of one (rig, seed), ``same`` if it deployed the simulation-only weights."""
    if not same:
        return {**check(sim, tuned, returns, floor), 'same_as_sim_only': False}
    pooled = (sim['longest_balance_s']['mean'] + tuned['longest_balance_s']['mean']) / 2
    goals = check(sim, sim, returns, floor)
    return {
        **goals,
        'balance_ok': floor is None or pooled >= floor,
        'same_as_sim_only': True,
        'pooled_balance_s': pooled,
    }


def check(
    sim: dict[str, Any], tuned: dict[str, Any], returns: list[float], floor: float | None
) -> dict[str, Any]:
    """The goals of one (rig, seed): each a bool, with the figures it was decided on."""
    bal_sim = sim['longest_balance_s']['mean']
    bal = tuned['longest_balance_s']['mean']
    tv_sim = sim['action_tv_per_s']['mean']
    tv = tuned['action_tv_per_s']['mean']
    second_half = returns[len(returns) // 2 :]
    worst = min(second_half) if second_half else float('nan')
    first = returns[0] if returns else float('nan')
    return {
        'balance_gain_s': bal - bal_sim,
        'balance_ok': bal >= bal_sim - BALANCE_SLACK_S and (floor is None or bal >= floor),
        'worst_second_half_return_share': worst / first if first else float('nan'),
        # 80 % of the first return, measured from it (a negative first return too).
        'no_collapse': bool(returns) and worst >= first - (1 - COLLAPSE_SHARE) * abs(first),
        'chatter_ratio': tv / tv_sim if tv_sim else float('inf'),
        'chatter_ok': tv <= CHATTER_RATIO * tv_sim,
    }


def run(a: argparse.Namespace) -> dict[str, Any]:
    """Run every (rig, seed): the JSON record."""
    from rip_control import finetune

    runs = Path(a.runs_dir) if a.runs_dir else Path(tempfile.mkdtemp(prefix='rip_matrix_'))
    floors = {k: float(v) for k, _, v in (x.partition('=') for x in a.min_balance)}
    doc: dict[str, Any] = {
        'benchmark': 'matrix',
        'policy': a.policy,
        'rate_hz': a.rate,
        'finetune_episodes': a.episodes,
        'episode_seconds': a.episode_seconds,
        'eval_episodes': a.eval_episodes,
        'eval_seconds': a.eval_seconds,
        'seeds': a.seeds,
        'goals': {
            'balance_slack_s': BALANCE_SLACK_S,
            'collapse_share': COLLAPSE_SHARE,
            'chatter_ratio': CHATTER_RATIO,
            'min_balance_s': floors,
        },
        'rigs': {},
    }
    for rig in a.rigs:
        stem = Path(rig).stem
        sim = _evaluate(a, rig, a.policy, runs / stem, 'sim_only')
        cells = []
        for seed in a.seeds:
            ns = argparse.Namespace(**{**vars(a), 'seed': seed, 'guard': None, 'hidden': ''})
            params_file, lp = arm_parameters(ns, runs / stem / f'seed{seed}')
            print(f'-- fine-tune on {stem}, seed {seed}', flush=True)
            ft = finetune.run(
                {
                    'policy': a.policy,
                    'rig_params': rig,
                    'rate': str(a.rate),
                    'episodes': str(a.episodes),
                    'episode_seconds': str(a.episode_seconds),
                    'run_name': 'finetune',
                    'runs_dir': str(runs / stem / f'seed{seed}'),
                    'params_file': str(params_file),
                },
                stream_logs=False,
            )
            if ft['failure']:
                # Recorded and counted as a miss; the other seeds and rigs still run.
                print(f'   {stem} seed {seed}: the fine-tune failed: {ft["failure"]}', flush=True)
                cells.append({'seed': seed, 'failure': ft['failure'], 'goals': FAILED_GOALS})
                continue
            run_dir = runs / stem / f'seed{seed}' / 'finetune'
            best = run_dir / 'policy_best.safetensors'
            deployed = best if best.exists() else run_dir / 'policy_latest.safetensors'
            tuned = _evaluate(a, rig, str(deployed), runs / stem / f'seed{seed}', 'deployed')
            returns = list(ft.get('episode_returns') or [])
            same = same_weights(deployed, a.policy, a.rate)
            cells.append(
                {
                    'seed': seed,
                    'deployed': deployed.name,
                    'deployment': tuned,
                    'same_as_sim_only': same,
                    'episode_returns': returns,
                    'evaluations': ft.get('evaluations'),
                    'live_policy_version': ft.get('live_policy_version'),
                    'best_policy_version': ft.get('best_policy_version'),
                    'measured_rate_hz': (ft.get('ticks') or {}).get('measured_rate_hz'),
                    'learner_updates': (ft.get('learner') or {}).get('gradient_steps_done'),
                    'goals': score(sim, tuned, same, returns, floors.get(stem)),
                }
            )
            print(f'   {stem} seed {seed}: {cells[-1]["goals"]}', flush=True)
        doc['rigs'][stem] = {'rig': rig, 'sim_only': sim, 'runs': cells, 'learner': lp}
    print('\n' + matrix_table([doc]))
    return doc


def matrix_table(docs: list[dict[str, Any]]) -> str:
    """Markdown: per rig, the simulation-only policy and the fine-tune over seeds.

    A rig measured in several files is shown once, from the last file that has it (a rig
    re-measured after a fix supersedes the earlier figures). A seed that deployed the
    simulation-only policy's own weights shows, marked ``*``, the two measurements of that
    policy pooled, with its own deployment's reading in brackets.
    """
    rows = [
        '| rig | sim-only balance | fine-tuned balance, mean (min) over seeds | per seed | '
        'deployed the starting policy | worst 2nd-half return / 1st | chatter ratio, max | '
        'goals met |',
        '|---|---|---|---|---|---|---|---|',
    ]
    rigs: dict[str, Any] = {}
    for doc in docs:
        rigs.update(doc['rigs'])
    for stem, r in rigs.items():
        sim = r['sim_only']['longest_balance_s']['mean']
        done = [c for c in r['runs'] if 'failure' not in c]  # a failed seed has no figures
        bals, per_seed = [], []
        for c in done:
            m = c['deployment']['longest_balance_s']['mean']
            pooled = c['goals'].get('pooled_balance_s')
            bals.append(m if pooled is None else pooled)
            per_seed.append(f'{m:.2f}' if pooled is None else f'{pooled:.2f}* ({m:.2f})')
        bals = bals or [math.nan]
        shares = [c['goals']['worst_second_half_return_share'] for c in done] or [math.nan]
        chat = [c['goals']['chatter_ratio'] for c in done] or [math.nan]
        met = sum(
            c['goals']['balance_ok'] and c['goals']['no_collapse'] and c['goals']['chatter_ok']
            for c in r['runs']
        )
        kept = sum(_kept_start(c) for c in r['runs'])
        rows.append(
            f'| {stem} | {sim:.2f} s | {np.mean(bals):.2f} s ({min(bals):.2f} s) | '
            + ', '.join(per_seed)
            + ''.join(f', seed {c["seed"]} failed' for c in r['runs'] if 'failure' in c)
            + f' | {kept} of {len(r["runs"])} | {min(shares):.2f} | {max(chat):.2f} | '
            f'{met}/{len(r["runs"])} |'
        )
    return '\n'.join(rows)


def _kept_start(cell: dict[str, Any]) -> bool:
    """Whether the seed's best policy is the one it started from (no better one was promoted).

    Its deployment then measures the simulation-only policy again, and differs from that row
    by the spread of the deployment's episodes alone.
    """
    evaluations = cell.get('evaluations') or []
    start = evaluations[0]['policy_version'] if evaluations else None
    return start is not None and cell.get('best_policy_version') == start


TABLES = {NAME: matrix_table}
