"""``adapt``: the real -> sim -> real loop on an emulated rig, as ``rip_control.adapt`` runs it.

``python -m rip_bench adapt --rig config/rig_shifted_stuck.yaml --seed 0 --rig-minutes 10``

One run of :func:`rip_control.adapt.adapt` (its summary is the record): the deployment
balance before and after, the rig time it took and the wall time, the identification, the
re-training, the guard's verdict on the re-trained policy and on the fine-tune's.

``--check-episodes N`` measures the policy the run deployed once more after it, ``N`` x 10 s
from hanging on the same rig file (``check``; not rig time of the run): the issue's measure,
whatever the budget let the run's own deployments hold.

``--arm plain`` is the fine-tune without adapting, for the side-by-side table
(``table adapt-vs-plain``): the same deployments before and after, the same rig-time budget
and seed, and between them only the guarded SAC fine-tune from the shipped policy
(``rip_control.finetune``'s, ended by the same rig-time limit), no excitation, identification or
re-training.
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
    ap.add_argument(
        '--arm',
        choices=('adapt', 'plain'),
        default='adapt',
        help='adapt (the loop) or plain (the guarded fine-tune alone, same budget)',
    )
    ap.add_argument(
        '--check-episodes',
        type=int,
        default=0,
        help="episodes of 10 s of the deployed policy after the run (0: none); the record's check",
    )
    ap.add_argument(
        '--guard',
        choices=('on', 'off'),
        default='on',
        help="the fine-tune's regression guard (off: eval_every_episodes:=0, every new policy "
        'drives at once; what the learner does, unhidden)',
    )


def run(a: argparse.Namespace) -> dict[str, Any]:
    """One adapt run: its summary, with what was asked."""
    from rip_control.adapt import OPTIONS, adapt

    own = {p.name: p.default for p in OPTIONS}
    own.update(rig_minutes=a.rig_minutes, retrain_minutes=a.retrain_minutes)
    runs = a.runs_dir or tempfile.mkdtemp(prefix='rip_adapt_')
    runner = {
        'rig_params': a.rig,
        'seed': str(a.seed),
        'run_name': f'{Path(a.rig).stem}_seed{a.seed}'
        + ('_plain' if a.arm == 'plain' else '')
        + ('_guard_off' if a.guard == 'off' else ''),
        'runs_dir': runs,
    }
    if a.guard == 'off':
        runner['eval_every_episodes'] = '0'
    summary = adapt(own, runner, stream=False) if a.arm == 'adapt' else plain(own, runner)
    if a.check_episodes and 'deployed_policy' in summary:  # (the plain arm's is the shipped)
        summary['check'] = check(summary['deployed_policy'], runner, a.check_episodes)
    return {
        'benchmark': NAME,
        'arm': a.arm,
        'guard': a.guard,
        'rig': a.rig,
        'seed': a.seed,
        **summary,
    }


def check(policy: str, runner: dict[str, str], episodes: int) -> dict[str, Any]:
    """The deployed ``policy`` measured again: ``episodes`` x 10 s from hanging, same rig."""
    from rip_control.evaluate import evaluate
    from rip_control.run.evaluation import deployment_measures

    report = evaluate(
        {
            **{k: runner[k] for k in ('rig_params', 'seed', 'runs_dir')},
            'run_name': runner['run_name'] + '_check',
            'policy': policy,
            'episodes': str(episodes),
            'episode_seconds': '10',
        },
        stream_logs=False,
    )
    balances = [float(e['longest_balance_s']) for e in report['episodes']]
    return {
        'policy': policy,
        'balance_s': float(np.mean(balances)),
        'episodes_s': balances,
        'measures': deployment_measures(report['episodes']),
    }


def plain(own: dict[str, Any], runner: dict[str, str]) -> dict[str, Any]:
    """The plain arm: deploy the shipped policy, fine-tune it on the rig, deploy the result.

    :func:`rip_control.adapt.adapt`'s deployments and fine-tune, with nothing between them.
    """
    import time

    from rip_control.adapt import emulated_rig
    from rip_control.adapting.budget import finetune_within_budget, plan_for
    from rip_control.adapting.record import PHASES, Adapt, balances
    from rip_control.finetune import run as finetune_run
    from rip_control.run.launching import resolve_auto_policy, shipped_policy

    loop = Adapt(own, runner, stream=False)
    loop.plan = plan_for(loop)
    loop.run_dir.mkdir(parents=True, exist_ok=True)
    budget_s = 60.0 * own['rig_minutes']
    prior = shipped_policy(loop.rate)
    with emulated_rig(loop):
        base = loop.deploy(PHASES[0], prior, excitation=False)
        fine = finetune_within_budget(loop, budget_s, prior, finetune_run)
        final = base
        if fine:
            best = resolve_auto_policy(loop.run_dir / PHASES[3], loop.rate, True)
            final = loop.deploy(PHASES[4], best, excitation=False)
    before, after = balances(base), balances(final)
    return {
        'rig_seconds': loop.rig_s,
        'rig_budget_s': budget_s,
        'wall_seconds': time.monotonic() - loop.t0,
        'finetune': {
            'episodes': fine.get('episodes'),
            'evaluations': fine.get('evaluations', []),
            'live_policy_version': fine.get('live_policy_version'),
        },
        'deployment': {
            'episodes': loop.plan.episodes,
            'episode_seconds': own['deployment_episode_seconds'],
            'prior_balance_s': float(np.mean(before)),
            'adapted_balance_s': float(np.mean(after)),
            'prior_episodes_s': before,
            'adapted_episodes_s': after,
        },
        'phases': loop.phases,
        'curve': [{'rig_s': r, 'balance_s': b, 'what': w} for r, b, w in loop.curve],
    }


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
        evs = [e for e in fine['evaluations'] if e['verdict'] != 'pending']  # judged ones
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


def adapt_vs_plain_table(docs: list[dict[str, Any]]) -> str:
    """Markdown: per rig and seed, the plain fine-tune's row and adapt's, same rig-time budget."""
    rows = [
        '| rig | seed | arm | rig time (budget) | balance before → after (per episode after) '
        '| commit |',
        '|---|---|---|---|---|---|',
    ]
    for d in sorted(docs, key=lambda d: (d['rig'], d['seed'], d.get('arm', 'adapt') != 'plain')):
        dep = d['deployment']
        after = ', '.join(f'{b:.1f}' for b in dep['adapted_episodes_s'])
        rows.append(
            f'| {Path(d["rig"]).stem} | {d["seed"]} | {d.get("arm", "adapt")} | '
            f'{d["rig_seconds"] / 60:.1f} min ({d["rig_budget_s"] / 60:.0f} min) | '
            f'{dep["prior_balance_s"]:.2f} s → {dep["adapted_balance_s"]:.2f} s ({after}) | '
            f'{str(d.get("commit", ""))[:7]} |'
        )
    return '\n'.join(rows)


def budget_table(docs: list[dict[str, Any]]) -> str:
    """Markdown: per run, the budget against the rig time spent, where it went, and the result.

    The result twice: the run's own final deployment, and the ``check`` (the deployed policy
    measured again, 5 x 10 s) where the record has one.
    """
    rows = [
        '| rig | seed | budget | rig time (resets) | excitation / deployments / evaluations / '
        'training / other | target reached at | wall | balance before → after | check '
        '(5 x 10 s) |',
        '|---|---|---|---|---|---|---|---|---|',
    ]
    for d in docs:
        dep, split = d['deployment'], d.get('rig_time_split') or {}
        parts = ' / '.join(
            f'{split.get(k, 0.0):.0f}'
            for k in ('excitation_s', 'deployments_s', 'evaluations_s', 'training_s', 'other_s')
        )
        reached = d.get('target_rig_seconds')
        check = d.get('check')
        resets = 100 * d.get('reset_seconds', 0.0) / d['rig_seconds']
        rows.append(
            f'| {Path(d["rig"]).stem} | {d["seed"]} | {d["rig_budget_s"] / 60:g} min | '
            f'{d["rig_seconds"] / 60:.2f} min ({resets:.0f} %) | '
            + (f'{parts} s' if split else 'not recorded')
            + ' | '
            + (f'{reached / 60:.2f} min' if reached is not None else '-')
            + f' | {d["wall_seconds"] / 60:.1f} min | {dep["prior_balance_s"]:.2f} s → '
            f'{dep["adapted_balance_s"]:.2f} s ({len(dep["adapted_episodes_s"])} episodes) | '
            + (f'{check["balance_s"]:.2f} s' if check else '-')
            + ' |'
        )
    return '\n'.join(rows)


TABLES = {NAME: adapt_table, 'adapt-vs-plain': adapt_vs_plain_table, 'adapt-budget': budget_table}
