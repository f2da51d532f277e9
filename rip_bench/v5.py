"""V5: from simulation to a shifted rig, three ways, measured in deployment.

``python -m rip_bench v5 --rig config/rig_shifted_heavy.yaml --json PATH``

(a) the simulation-only policy deployed on the shifted rig; (b) the same policy after the
asynchronous fine-tune (:mod:`rip_control.finetune`: learner in its own process, the control
loop at the exact rate); (c) the same fine-tune done synchronously
(:mod:`rip_bench.sync_finetune`: SB3 ``learn()`` with a self-pacing env whose real rate
stretches), deployed at the configured rate. Each is evaluated by :mod:`rip_control.evaluate`
(deterministic, no learning) on the same rig, and the plots a user wants are written next to
the JSON: balance-window histogram per policy, the fine-tunes' tick-interval histograms, and
the learning curve across pre-training and fine-tuning.

The two fine-tunes are controlled: the same networks, hyperparameters, safeguards, initial
networks, warm-up (``learning_starts`` transitions acting with the initial policy) and number
of transitions (with ``--guard`` the asynchronous arm's evaluations add theirs), all read
from one parameter file (``config/finetune.yaml`` with the options here over it); the only
difference is SB3's ``learn()`` in one thread against the two nodes.
Both sample training actions at the policy's own standard deviation (``train_noise_scale``
1, which SB3's ``learn()`` cannot change), whatever the file says; with ``--skip-sync`` (b)
samples as the file says.
The regression guard is off in both (``--guard N`` turns it on for (b), which then deploys its
``policy_best``), so both deploy their last policy.

:mod:`rip_bench.matrix` runs the fine-tune as shipped (guard on) over seeds and rigs and
checks the goals: deployment balance against the simulation-only policy, no collapse of training
returns, and chatter.
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import json
from pathlib import Path
import tempfile
from typing import Any

import numpy as np

from rip_bench.arms import arm_parameters, deploy, sac_config, safeguards
from rip_bench.common import DEFAULT_POLICY, add_deployment_arguments, add_run_arguments
from rip_control.rig.emulator_process import EmulatorProcess
from rip_control.stats import tick_stats

NAME = 'v5'
HELP = 'V5: sim-only vs async vs sync fine-tune on a shifted rig'
#: the label of ``bench v5 --finetune-rig-set ...`` runs whose fine-tune had the synchronous
#: arm's observation age added to the rig's latency (``v5delay_*`` records)
TRAINED_LATE = 'async_trained_late'


def add_arguments(ap: argparse.ArgumentParser) -> None:
    """The ``v5`` options (the run's defaults are the shipped ones)."""
    ap.add_argument('--rig', default='config/rig_shifted_heavy.yaml', help='shifted rig physics')
    ap.add_argument('--policy', default=str(DEFAULT_POLICY), help='simulation-only policy')
    add_run_arguments(ap, 'rate', 'episodes', 'episode_seconds', 'gradient_steps')
    add_deployment_arguments(ap)
    ap.add_argument('--runs-dir', default='', help='where the runs go (default: a temp dir)')
    ap.add_argument('--plots', default='', help='folder for the PNGs (default: beside --json)')
    ap.add_argument(
        '--reuse-async',
        action='store_true',
        help='take (b) from an earlier run in --runs-dir instead of fine-tuning again',
    )
    ap.add_argument('--seed', type=int, default=0, help='SAC and exploration seed of both arms')
    ap.add_argument('--hidden', default='', help='network widths of both arms, e.g. 256,256')
    ap.add_argument(
        '--params-file', default='', help='base parameters (default: config/finetune.yaml)'
    )
    ap.add_argument(
        '--set',
        action='append',
        default=[],
        metavar='NODE.NAME=VALUE',
        help='override a parameter of both arms, e.g. rip_learner.smoothness=0.1 (repeatable)',
    )
    ap.add_argument(
        '--guard',
        type=int,
        default=0,
        help="(b)'s eval_every_episodes (0: off, as (c) has none); on, (b) deploys policy_best",
    )
    ap.add_argument('--skip-sync', action='store_true', help='no (c): the async arm only')
    ap.add_argument(
        '--finetune-rig-set',
        action='append',
        default=[],
        metavar='NAME=VALUE',
        help='fine-tune on --rig with this physics value changed, deploy on --rig as it is '
        '(e.g. sensing_latency_s=0.02: train under a longer delay; repeatable)',
    )
    ap.add_argument(
        '--label',
        default='',
        help=f'a name for this configuration (tables; {TRAINED_LATE!r} marks a run the v5-delay '
        'table pairs with the V5 run of its seed)',
    )


def _finetune_rig(a: argparse.Namespace, runs: Path) -> str:
    """The rig file both fine-tunes run on: ``--rig``, or a copy with ``--finetune-rig-set``."""
    if not a.finetune_rig_set:
        return str(a.rig)
    import yaml

    from rip_control.rig.dynamics import PendulumParams

    values = dataclasses.asdict(PendulumParams.from_yaml(a.rig))
    for item in a.finetune_rig_set:
        name, eq, value = item.partition('=')
        try:
            if not eq or name not in values:
                raise ValueError
            values[name] = float(value)
        except ValueError:
            raise ValueError(
                f'--finetune-rig-set {item}: expected NAME=VALUE, NAME one of the rig keys '
                'and VALUE a number'
            ) from None
    PendulumParams.from_dict(values, source='--finetune-rig-set')  # refused here if invalid
    path = runs / 'finetune_rig.yaml'
    runs.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump({'rig': values}))
    print(f'-- fine-tuning on {a.rig} with {", ".join(a.finetune_rig_set)} ({path})', flush=True)
    return str(path)


def _evaluate(a: argparse.Namespace, policy: str, runs: Path, name: str) -> dict[str, Any]:
    return deploy(a, a.rig, policy, runs, f'eval_{name}')


def run(a: argparse.Namespace) -> dict[str, Any]:
    """Run (a), (b), (c) and their evaluations, write the plots: the JSON record."""
    from rip_bench.sync_finetune import delay_stats, sync_finetune
    from rip_control import finetune

    runs = Path(a.runs_dir) if a.runs_dir else Path(tempfile.mkdtemp(prefix='rip_v5_'))
    if not Path(a.policy).is_file():
        raise FileNotFoundError(
            f'--policy {a.policy}: no such file (python -m rip_learner.pretrain makes one)'
        )
    policies = {'sim_only': a.policy}
    if not a.skip_sync:
        # (c)'s SB3 learn() samples at the policy's own standard deviation, so (b) does too
        # (config/finetune.yaml narrows it); a --set of the user's, after this one, still wins.
        a.set = ['rip_control.train_noise_scale=1.0', *a.set]
    params_file, lp = arm_parameters(a, runs)
    finetune_rig = _finetune_rig(a, runs)

    summary_path = runs / 'async_finetune' / 'summary.json'
    if a.reuse_async and summary_path.exists():
        print(f'-- (b) reusing the asynchronous fine-tune in {summary_path.parent}', flush=True)
        ft = json.loads(summary_path.read_text())
    else:
        print(f'-- (b) asynchronous fine-tune on {finetune_rig}', flush=True)
        ft = finetune.run(
            {
                'policy': a.policy,
                'rig_params': finetune_rig,
                'rate': str(a.rate),
                'episodes': str(a.episodes),
                'episode_seconds': str(a.episode_seconds),
                'gradient_steps': str(a.gradient_steps),
                'run_name': 'async_finetune',
                'runs_dir': str(runs),
                'params_file': str(params_file),
            },
            stream_logs=False,
        )
    if ft['failure']:
        raise RuntimeError(f'asynchronous fine-tune failed: {ft["failure"]}')
    deployed = 'policy_best' if a.guard else 'policy_latest'
    policies['async_finetuned'] = str(runs / 'async_finetune' / f'{deployed}.safetensors')
    with np.load(runs / 'async_finetune' / 'ticks.npz', allow_pickle=False) as z:
        async_dt = z['dt_s'][1:].copy()
    episodes = rig_episodes(runs / 'async_finetune' / 'timing.csv')

    sync = None
    sync_dt = np.zeros(0)
    if not a.skip_sync:
        print(
            f'-- (c) synchronous fine-tune (SB3 learn(), self-paced env) on {finetune_rig}',
            flush=True,
        )
        with EmulatorProcess(runs / 'sync_rig', ['--params', finetune_rig]) as emu:
            sync = sync_finetune(
                str(emu.link),
                runs / 'sync_finetune',
                a.rate,
                a.episodes,
                a.gradient_steps,
                policy=a.policy,
                cfg=sac_config(lp),
                episode_seconds=a.episode_seconds,
                learning_starts=int(lp['learning_starts']),
                **safeguards(lp, a.policy, a.rate),
            )
        policies['sync_finetuned'] = sync.policy
        sync_dt = np.asarray(sync.dt_s)

    evals = {name: _evaluate(a, path, runs, name) for name, path in policies.items()}
    period = 1.0 / a.rate
    doc: dict[str, Any] = {
        'benchmark': 'v5',
        'label': a.label,
        'overrides': a.set,
        'rig': a.rig,
        'finetune_rig_overrides': a.finetune_rig_set,
        'rate_hz': a.rate,
        'finetune_episodes': a.episodes,
        'episode_seconds': a.episode_seconds,
        'gradient_steps': a.gradient_steps,
        'seed': a.seed,
        'guard_eval_every_episodes': a.guard,
        'learner_parameters': lp,
        'eval_episodes': a.eval_episodes,
        'eval_seconds': a.eval_seconds,
        'policies': policies,
        'deployment': {
            name: {'summary': r['summary'], 'episodes': r['episodes'], 'ticks': r['ticks']}
            for name, r in evals.items()
        },
        'finetune': {
            'async': {
                'ticks': ft.get('ticks'),
                'episode_returns': ft.get('episode_returns'),
                'evaluations': ft.get('evaluations'),
                'learner': ft.get('learner'),
                'episodes': episodes,
                'rig_seconds': sum(e['n_ticks'] for e in episodes) / a.rate,
            },
        },
    }
    if sync is not None:
        doc['finetune']['sync'] = {
            'ticks': tick_stats(sync_dt, np.maximum(sync_dt - period, 0.0), a.rate),
            'episode_returns': sync.episode_returns,
            'deadman_trips': sync.deadman_trips,
            'serial_timeouts': sync.serial_timeouts,
            'wall_s': sync.wall_s,
            'updates': sync.updates,
            'act_delay_ms': delay_stats(sync.act_delay_s),
        }
    plots = Path(a.plots) if a.plots else (Path(a.json).parent if a.json else runs)
    stem = f'v5_{Path(a.rig).stem}'
    _plot(doc, evals, async_dt, sync_dt, a, plots, stem)
    _print_table(doc)
    return doc


def rig_episodes(timing_csv: Path) -> list[dict[str, Any]]:
    """Every episode of a run, training and evaluation, in order, from its ``timing.csv``."""
    if not timing_csv.exists():
        return []
    with timing_csv.open() as f:
        return [
            {
                'episode': int(r['episode']),
                'kind': r.get('kind') or 'training',
                'n_ticks': int(r['n_ticks']),
                'return': float(r['episode_return']),
                'balance_s': float(r['balance_s']),
                'policy_version': int(r['policy_version']),
                'verdict': r.get('verdict') or '',
            }
            for r in csv.DictReader(f)
        ]


def _print_table(doc: dict[str, Any]) -> None:
    print(f'\n== V5 on {doc["rig"]} ({doc["eval_episodes"]} x {doc["eval_seconds"]:g} s) ==')
    print(v5_table([doc]))


def v5_table(docs: list[dict[str, Any]]) -> str:
    """Markdown table of V5 results (what the README shows)."""
    rows = [
        '| rig | nets | policy | longest balance, mean (min-max) | swung up | chatter TV/s | '
        'sign changes/s | fine-tune real rate | transitions, updates |',
        '|---|---|---|---|---|---|---|---|---|',
    ]
    labels = {
        'sim_only': '(a) simulation only',
        'async_finetuned': '(b) async fine-tune',
        'sync_finetuned': '(c) sync fine-tune',
    }
    for doc in docs:
        for name, d in doc['deployment'].items():
            s = d['summary']
            bal = s['longest_balance_s']
            rate = counts = ''
            if name == 'async_finetuned':
                t = doc['finetune']['async']
                rate = f'{t["ticks"]["measured_rate_hz"]:.2f} Hz'
                learner = t.get('learner') or {}
                counts = (
                    f'{learner.get("transitions_accepted", "?")}, '
                    f'{learner.get("gradient_steps_done", "?")}'
                )
            elif name == 'sync_finetuned' and 'sync' in doc['finetune']:
                t = doc['finetune']['sync']
                rate = (
                    f'{t["ticks"]["measured_rate_hz"]:.2f} Hz, {t["deadman_trips"]} deadman trips'
                )
                counts = f'{t["ticks"]["n_ticks"]}, {t.get("updates", "?")}'
            nets = doc.get('learner_parameters', {}).get('hidden_sizes', [64, 64])
            rows.append(
                f'| {Path(doc["rig"]).stem} | {list(nets)} | {labels.get(name, name)} | '
                f'{bal["mean"]:.2f} s '
                f'({bal["min"]:.2f}-{bal["max"]:.2f}) | {s["swung_up"]}/{s["episodes"]} | '
                f'{s["action_tv_per_s"]["mean"]:.2f} | {s["sign_changes_per_s"]["mean"]:.1f} | '
                f'{rate} | {counts} |'
            )
    return '\n'.join(rows)


def v5_seeds_table(docs: list[dict[str, Any]]) -> str:
    """Markdown table of V5 over seeds: one row per rig, network and arm (the README's).

    Balance is each seed's deployment mean (5 x 10 s), then the mean and the worst of those;
    the real rate is the fine-tune's measured tick rate over the run, lowest and highest seed;
    3-strike events are the times three ticks in a row were more than 5 ms late, per seed.
    """
    rows = [
        '| rig | nets | policy | seeds | longest balance, mean (min) over seeds | per seed | '
        'swung up | chatter TV/s | fine-tune real rate, min-max | 3-strike events | '
        'transitions, updates (mean) |',
        '|---|---|---|---|---|---|---|---|---|---|---|',
    ]
    labels = {
        'sim_only': '(a) simulation only',
        'async_finetuned': '(b) async fine-tune',
        'sync_finetuned': '(c) sync fine-tune',
    }
    groups: dict[tuple[str, str, str, str], list[dict[str, Any]]] = {}
    for doc in docs:
        nets = str(list(doc.get('learner_parameters', {}).get('hidden_sizes', [64, 64])))
        # Seeds of one configuration: the same rig, networks, starting policy and label.
        key = (Path(doc['rig']).stem, nets, str(doc['policies']['sim_only']), doc.get('label', ''))
        group = groups.setdefault(key, [])
        if any(d['seed'] == doc['seed'] for d in group):
            raise ValueError(f'{key[0]} {nets}: seed {doc["seed"]} is given twice')
        group.append(doc)
    for (rig, nets, _, _), group in groups.items():
        group.sort(key=lambda d: int(d['seed']))
        seeds = ', '.join(str(d['seed']) for d in group)
        for name, label in labels.items():
            runs = [d for d in group if name in d['deployment']]
            if not runs:
                continue
            sums = [d['deployment'][name]['summary'] for d in runs]
            bal = [s['longest_balance_s']['mean'] for s in sums]
            swung = sum(s['swung_up'] for s in sums)
            total = sum(s['episodes'] for s in sums)
            tv = float(np.mean([s['action_tv_per_s']['mean'] for s in sums]))
            rate = late = counts = ''
            arm = {'async_finetuned': 'async', 'sync_finetuned': 'sync'}.get(name)
            if arm is not None and all(arm in d['finetune'] for d in runs):
                ticks = [d['finetune'][arm]['ticks'] for d in runs]
                hz = [t['measured_rate_hz'] for t in ticks]
                rate = f'{min(hz):.2f}-{max(hz):.2f} Hz'
                late = ', '.join(str(int(t['n_violations'])) for t in ticks)
                if arm == 'async':
                    ls = [d['finetune']['async'].get('learner') or {} for d in runs]
                    n = np.mean([float(x.get('transitions_accepted', 0)) for x in ls])
                    u = np.mean([float(x.get('gradient_steps_done', 0)) for x in ls])
                else:
                    n = np.mean([t['n_ticks'] for t in ticks])
                    u = np.mean([float(d['finetune']['sync'].get('updates', 0)) for d in runs])
                counts = f'{n:.0f}, {u:.0f}'
            rows.append(
                f'| {rig} | {nets} | {label} | {seeds} | {np.mean(bal):.2f} s ({min(bal):.2f} s) '
                f'| {", ".join(f"{b:.2f}" for b in bal)} | {swung}/{total} | {tv:.2f} | {rate} '
                f'| {late} | {counts} |'
            )
    return '\n'.join(rows)


def delay_pairs(docs: list[dict[str, Any]]) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """``(V5 record, made-later record)`` of each seed both have, by seed.

    ``docs``: V5 records with both fine-tunes, and ``--skip-sync`` records labelled
    :data:`TRAINED_LATE`; one rig, and one change of it in every made-later record.

    :raises ValueError: a seed given twice, records of two rigs or two changes, or no pair.
    """
    plain: dict[int, dict[str, Any]] = {}
    late: dict[int, dict[str, Any]] = {}
    for doc in docs:
        into = late if doc.get('label') == TRAINED_LATE else plain
        if doc['seed'] in into:
            raise ValueError(f'seed {doc["seed"]} is given twice ({doc.get("label") or "V5"})')
        into[doc['seed']] = doc
    for what, values in (
        ('rigs', {d.get('rig') for d in docs}),
        (
            'changes of the rig',
            {tuple(d.get('finetune_rig_overrides', ())) for d in late.values()},
        ),
    ):
        if len(values) > 1:
            raise ValueError(
                f'the records are of {len(values)} {what}: {sorted(map(str, values))}'
            )
    seeds = sorted(set(plain) & set(late))
    if not seeds:
        raise ValueError(f'no seed has both a V5 record and one labelled {TRAINED_LATE}')
    return [(plain[seed], late[seed]) for seed in seeds]


def delay_table(docs: list[dict[str, Any]]) -> str:
    """Markdown: per seed, the three arms, and the async arm fine-tuned as late as sync's.

    ``docs`` as :func:`delay_pairs` takes them; the last row is the means.
    """
    rows = [
        '| seed | (b) async | (c) sync | (b) async, fine-tuned on the rig made later | '
        'the change | time to balance: (b), (c), (b) made later |',
        '|---|---|---|---|---|---|',
    ]
    cols: list[list[float]] = [[], [], []]
    pairs = delay_pairs(docs)
    for p, q in pairs:
        vals = [
            p['deployment']['async_finetuned']['summary'],
            p['deployment']['sync_finetuned']['summary'],
            q['deployment']['async_finetuned']['summary'],
        ]
        for col, v in zip(cols, vals, strict=True):
            col.append(float(v['longest_balance_s']['mean']))
        rows.append(
            f'| {p["seed"]} | '
            + ' | '.join(f'{c[-1]:.2f} s' for c in cols)
            + f' | {", ".join(q.get("finetune_rig_overrides", []))} | '
            + ', '.join(f'{v["swing_up_s_mean"]:.2f}' for v in vals)
            + ' s |'
        )
    rows.append(
        f'| mean of {len(pairs)} | ' + ' | '.join(f'{np.mean(c):.2f} s' for c in cols) + ' | | |'
    )
    return '\n'.join(rows)


def safeguards_table(docs: list[dict[str, Any]]) -> str:
    """Markdown: one row per (rig, configuration) of ``bench v5 --skip-sync --label`` runs."""
    rows = [
        '| rig | configuration | deployed balance, mean (min-max) | chatter TV/s | '
        'training returns: first, worst of 2nd half, last | updates |',
        '|---|---|---|---|---|---|',
    ]
    for doc in docs:
        d = doc['deployment']['async_finetuned']['summary']
        bal = d['longest_balance_s']
        rets = doc['finetune']['async']['episode_returns'] or [float('nan')]
        second = rets[len(rets) // 2 :]
        learner = doc['finetune']['async'].get('learner') or {}
        rows.append(
            f'| {Path(doc["rig"]).stem} | {doc.get("label") or "?"} | {bal["mean"]:.2f} s '
            f'({bal["min"]:.2f}-{bal["max"]:.2f}) | {d["action_tv_per_s"]["mean"]:.1f} | '
            f'{rets[0]:.0f}, {min(second):.0f}, {rets[-1]:.0f} | '
            f'{learner.get("gradient_steps_done", "?")} |'
        )
    return '\n'.join(rows)


def _plot(
    doc: dict[str, Any],
    evals: dict[str, dict[str, Any]],
    async_dt: np.ndarray,
    sync_dt: np.ndarray,
    a: argparse.Namespace,
    folder: Path,
    stem: str,
) -> None:
    import matplotlib

    matplotlib.use('Agg')
    import matplotlib.pyplot as plt

    folder.mkdir(parents=True, exist_ok=True)
    # Balance windows per policy.
    fig, ax = plt.subplots(figsize=(7, 3.6))
    names = list(evals)
    data = [[e['longest_balance_s'] for e in evals[n]['episodes']] for n in names]
    bins = np.linspace(0.0, a.eval_seconds, 21).tolist()
    ax.hist(data, bins=bins, label=names)
    ax.axvline(5.0, color='k', ls=':', lw=1)
    ax.set(
        xlabel='longest balance window in an episode (s)',
        ylabel='episodes',
        title=f'deployment on {Path(a.rig).stem} at {a.rate:g} Hz',
    )
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(folder / f'{stem}_balance_hist.png', dpi=100)
    plt.close(fig)
    # Tick intervals while fine-tuning.
    fig, ax = plt.subplots(figsize=(7, 3.6))
    period_ms = 1e3 / a.rate
    hi = max(float(np.max(sync_dt)) * 1e3 if sync_dt.size else period_ms, period_ms * 2)
    bins = np.linspace(0.0, hi, 120).tolist()
    ax.hist(async_dt * 1e3, bins=bins, alpha=0.7, label='async (rip_control)')
    ax.hist(sync_dt * 1e3, bins=bins, alpha=0.7, label='sync SB3 learn()')
    ax.axvline(period_ms, color='k', ls=':', lw=1)
    ax.set(
        xlabel='tick interval (ms)',
        ylabel='ticks',
        yscale='log',
        title=f'control period while fine-tuning (configured {period_ms:g} ms)',
    )
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(folder / f'{stem}_dt_hist.png', dpi=100)
    plt.close(fig)
    # Learning curve: pre-training evaluations, then fine-tune episodes (x: env steps).
    fig, ax = plt.subplots(figsize=(8, 3.6))
    progress = Path(a.policy).with_name('progress.csv')
    last = 0
    if progress.exists():
        with progress.open() as f:
            rows = list(csv.DictReader(f))
        steps = [int(r['step']) for r in rows]
        ax.plot(steps, [float(r['train_return']) for r in rows], label='pre-training (sim)')
        last = steps[-1] if steps else 0
    per_ep = int(round(a.episode_seconds * a.rate))
    for label, rets in (
        ('async fine-tune (rig)', doc['finetune']['async']['episode_returns'] or []),
        ('sync fine-tune (rig)', doc['finetune'].get('sync', {}).get('episode_returns', [])),
    ):
        xs = [last + per_ep * (i + 1) for i in range(len(rets))]
        ax.plot(xs, rets, 'o-', ms=3, label=label)
    ax.set(
        xlabel='environment steps',
        ylabel='episode return',
        title='learning curve: simulation, then the shifted rig',
    )
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(folder / f'{stem}_learning_curve.png', dpi=100)
    plt.close(fig)
    # Balance over rig time: every training episode, and the guard's deterministic evaluations.
    eps = doc['finetune']['async'].get('episodes') or []
    if eps:
        ends = np.cumsum([e['n_ticks'] for e in eps]) / a.rate / 60.0
        fig, ax = plt.subplots(figsize=(8, 3.6))
        train = [
            (t, e['balance_s'])
            for t, e in zip(ends, eps, strict=True)
            if e['kind'] != 'evaluation'
        ]
        evals_ = [(t, e) for t, e in zip(ends, eps, strict=True) if e['kind'] == 'evaluation']
        if train:
            ax.plot(*zip(*train, strict=True), '.', color='0.5', label='training episode')
        if evals_:
            ax.plot(
                [t for t, _ in evals_],
                [e['balance_s'] for _, e in evals_],
                'o-',
                ms=4,
                label='evaluation (mean action)',
            )
        ax.set(
            xlabel='rig time (minutes, training and evaluation episodes)',
            ylabel='longest balance in the episode (s)',
            title=f'fine-tuning on {Path(a.rig).stem}',
        )
        ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(folder / f'{stem}_rig_time.png', dpi=100)
        plt.close(fig)


TABLES = {
    NAME: v5_table,
    'v5-seeds': v5_seeds_table,
    'v5-delay': delay_table,
    'safeguards': safeguards_table,
}
