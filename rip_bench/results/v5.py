"""Question 'v5': whether the asynchronous fine-tune is at least as good as the synchronous one.

Over seeds on the nominal, worn and mild rigs (:data:`V5_RESULT`), the mild rig's gap tested
with the asynchronous arm made as late as the synchronous one (:data:`V5_DELAY_RESULT`), the
heavy rig (:data:`V5_HEAVY_RESULT`) and SB3's default network size (:data:`V5_256_RESULT`).
The benchmark is :mod:`rip_bench.v5`; its readers of a record's arms (:func:`_v5_balance`,
:func:`_v5_tv`) serve other sections too.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from rip_bench import v5
from rip_bench.generated import rig_name
from rip_bench.paths import REPO
from rip_bench.results.goals import FLOOR_S
from rip_bench.results.model import Records, Result, Section, Table
from rip_bench.results.text import (
    _and,
    _bullets,
    _mean,
    _overrides,
    _pct,
    _q,
    _returns_span,
    _span,
)

MILD_SEEDS = tuple(range(14))  # the mild rig's V5 seeds, and its made-later runs'
V5_DELAY_PAIRED = tuple(f'v5_mild_seed{s}.json' for s in MILD_SEEDS)
V5_SEEDS = (
    *(f'v5_{rig}_seed{s}.json' for rig in ('nominal', 'worn') for s in (0, 1, 2)),
    *V5_DELAY_PAIRED,
)
# The mild rig's gap, tested: the asynchronous arm fine-tuned on the rig made as late as the
# synchronous arm acts (``bench v5 --skip-sync --finetune-rig-set ...``), paired by seed.
V5_DELAY = tuple(f'v5delay_mild_seed{s}.json' for s in MILD_SEEDS)
V5_HEAVY = tuple(f'v5_heavy_seed{s}.json' for s in (0, 1, 2))
ARMS = {'sim_only': 'simulation only', 'async_finetuned': 'async', 'sync_finetuned': 'sync'}


def _v5_balance(d: dict[str, Any], arm: str) -> float:
    return float(d['deployment'][arm]['summary']['longest_balance_s']['mean'])


def _v5_swing_up(d: dict[str, Any], arm: str) -> float:
    return float(d['deployment'][arm]['summary']['swing_up_s_mean'])


def _v5_tv(d: dict[str, Any], arm: str) -> float:
    return float(d['deployment'][arm]['summary']['action_tv_per_s']['mean'])


def _v5_by_rig(r: Records, names: Sequence[str]) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for n in names:
        out.setdefault(rig_name(r[n]['rig']), []).append(r[n])
    return out


def _v5_setup(r: Records) -> str:
    one = r[V5_SEEDS[0]]
    rig_mild = 'bench/rigs/rig_mild.yaml'
    by_rig = _v5_by_rig(r, V5_SEEDS)
    seeds = '; '.join(
        f'{rig} {", ".join(str(d["seed"]) for d in runs)}' for rig, runs in by_rig.items()
    )
    return (
        'For each rig: (a) the simulation-only policy deployed; (b) the same policy after the '
        f"asynchronous fine-tune (this package's nodes, {one['finetune_episodes']} x "
        f'{one["episode_seconds"]:g} s at {one["rate_hz"]:g} Hz, K = {one["gradient_steps"]}); '
        "(c) after the synchronous one, SB3's `learn()` with an env that paces itself to "
        f'{one["rate_hz"]:g} Hz through the same emulator. Each deployed for '
        f'{one["eval_episodes"]} x {one["eval_seconds"]:g} s, deterministically. Both fine-tunes '
        'read `config/finetune.yaml`: the same networks, initial networks and critics, '
        'hyperparameters, safeguards, warm-up and number of transitions; the synchronous arm '
        "runs the learner's own update inside `learn()` and acts with the initial policy before "
        "`learning_starts`. Both sample at the policy's own spread (`train_noise_scale` "
        f'{_overrides(one).get("train_noise_scale", "?")} in (b)). The regression guard is off '
        "in both, and (b) deploys the learner's last policy: the only difference is where the "
        f'update runs. Seeds by rig: {seeds}; the mild rig is `{rig_mild}`, every value inside '
        'or at the edge of the pre-training randomisation. Run from clean checkouts (a '
        "`-dirty` commit's only changes were the earlier seeds' results). Balance is each "
        'seed\'s deployment mean, then their mean and the worst seed; "3-strike events" '
        "counts, per seed, the times three of the fine-tune's ticks in a row were more than "
        f'{float(one["learner_parameters"]["dt_tolerance_ms"]):g} ms late.'
    )


def _sign_flip_p(d: np.ndarray, exact_up_to: int = 20) -> float:
    """Two-sided p of a paired difference's mean under sign flips of the pairs.

    Every flip, exactly, for up to ``exact_up_to`` pairs (a block of 2^16 flips at a time);
    beyond, 2^20 flips drawn with a fixed seed.
    """
    n, bar = len(d), abs(float(np.mean(d))) - 1e-12
    if n > exact_up_to:
        signs = np.random.default_rng(0).choice([-1.0, 1.0], size=(2**20, n))
        return float(np.mean(np.abs(signs @ d) / n >= bar))
    hits = 0
    for start in range(0, 2**n, 2**16):
        flips = np.arange(start, min(start + 2**16, 2**n))[:, None] >> np.arange(n) & 1
        hits += int(np.sum(np.abs((1 - 2 * flips) @ d) / n >= bar))
    return hits / 2**n


def _v5_delay_explained(r: Records, rig: str = 'mild') -> bool:
    """Whether the made-later runs put ``rig``'s gap down to the synchronous arm's timing."""
    return rig == 'mild' and not _v5_delay_shortfalls(r)


def _v5_delay_verdict(r: Records, rig: str) -> str:
    """What the made-later runs (the next result) say of ``rig``'s gap."""
    if rig != 'mild':
        return 'No explanation is found yet.'
    m = _v5_delay_arms(r)
    said = (
        f'fine-tuned on the rig made as late as the synchronous arm acts, the asynchronous arm '
        f"deploys at {m['late'].mean():.2f} s against the synchronous arm's "
        f'{m["sync"].mean():.2f} s on the same {len(m["late"])} seeds (next result)'
    )
    if _v5_delay_explained(r):
        return (
            "It is the timing within the synchronous arm's tick, which acts on an older "
            f'observation: {said}.'
        )
    return f"The synchronous arm's older observations do not explain it: {said}."


def _v5_conclusion(r: Records) -> str:
    by_rig = _v5_by_rig(r, V5_SEEDS)
    means = {
        rig: {arm: _mean([_v5_balance(d, arm) for d in runs]) for arm in ARMS}
        for rig, runs in by_rig.items()
    }
    pairs = ', '.join(
        f'{rig} {m["async_finetuned"]:.2f} s against {m["sync_finetuned"]:.2f} s'
        for rig, m in means.items()
    )
    held = [
        rig
        for rig, m in means.items()
        if round(m['async_finetuned'], 2) >= round(m['sync_finetuned'], 2)
    ]
    missed = [rig for rig in means if rig not in held]
    parts = [
        f'**Asynchronous against synchronous, guard off:** {pairs}. '
        + (
            (
                f'**So "at least as good on every rig" holds on the {_and(held)} rig'
                f'{"s" * (len(held) > 1)} and is not met on the {_and(missed)} one'
                + (
                    "; the gap there comes from the synchronous loop's timing (it acts on "
                    'older observations), not from the asynchronous learner (below).**'
                    if all(_v5_delay_explained(r, rig) for rig in missed)
                    else '.**'
                )
            )
            if missed
            else '**So "at least as good on every rig" holds.**'
        )
    ]
    for rig in missed:
        runs = by_rig[rig]
        a = [_v5_balance(d, 'async_finetuned') for d in runs]
        s = [_v5_balance(d, 'sync_finetuned') for d in runs]
        sim = [_v5_balance(d, 'sim_only') for d in runs]
        lower = sum(round(x, 2) < round(y, 2) for x, y in zip(a, s, strict=True))
        level = sum(round(x, 2) == round(y, 2) for x, y in zip(a, s, strict=True))
        gap = _mean(s) - _mean(a)
        half = len(runs) // 2
        parts.append(
            f'On the {rig} rig the asynchronous arm is {gap:.2f} s lower on the mean of '
            f'{len(runs)} seeds ({_pct(gap / _mean(s))} of the balance; lower on {lower}, '
            'level on '
            f'{level}, higher on {len(runs) - lower - level}; seeds '
            f'{runs[0]["seed"]}-{runs[half - 1]["seed"]}: {_mean(a[:half]):.2f} against '
            f'{_mean(s[:half]):.2f} s, seeds {runs[half]["seed"]}-{runs[-1]["seed"]}: '
            f'{_mean(a[half:]):.2f} against {_mean(s[half:]):.2f} s). That is smaller than '
            f"the synchronous arm's own spread over seeds "
            f'({max(s) - min(s):.2f} s). Both arms stay within '
            f'{max(abs(_mean(a) - _mean(sim)), abs(_mean(s) - _mean(sim))):.2f} s of the '
            'simulation-only policy. It is not the rate (below). ' + _v5_delay_verdict(r, rig)
        )
        d = np.array(a) - np.array(s)
        sd = float(d.std(ddof=1))  # 0 when every pair differs alike: t is then infinite
        t_stat = (
            float(d.mean()) / (sd / np.sqrt(len(d))) if sd else float(np.sign(d.mean())) * np.inf
        )
        ups = {
            arm: _mean([_v5_swing_up(d, arm) for d in runs])
            for arm in ('sim_only', 'async_finetuned', 'sync_finetuned')
        }
        p_value = _sign_flip_p(d)
        parts.append(
            f'Paired by seed, asynchronous minus synchronous on the {rig} rig is '
            f'{d.mean():+.2f} s (standard deviation {d.std(ddof=1):.2f} s, t = {t_stat:.2f} with '
            f'{len(d) - 1} degrees of freedom; an exact sign-flip test over the {len(d)} pairs '
            f'gives p = {p_value:.3f}): '
            + (
                f'a difference at the {_pct(SIGNIFICANCE)} level'
                + (
                    ", which the next result puts down to the synchronous arm's timing. "
                    if _v5_delay_explained(r, rig)
                    else ', so the criterion is not met on this rig. '
                )
                if p_value < SIGNIFICANCE
                else 'not told apart from no difference at these seeds, and not shown to be none. '
            )
            + 'Every deployment episode swings up and then '
            'balances to its end, so the longest balance is the episode less its swing-up: the '
            'arms differ in how fast they swing up (mean time to balance '
            f'{ups["async_finetuned"]:.2f} s asynchronous, '
            f'{ups["sync_finetuned"]:.2f} s synchronous, '
            f'{ups["sim_only"]:.2f} s simulation only), not in how they balance.'
        )
        ret = {
            arm: np.array([_mean(d['finetune'][arm]['episode_returns']) for d in runs])
            for arm in ('async', 'sync')
        }
        gain = ret['async'] - ret['sync']
        parts.append(
            f"While they fine-tuned, the asynchronous arm's training episodes on the {rig} rig "
            f'returned {ret["async"].mean():.1f} on the mean against {ret["sync"].mean():.1f} '
            f'(paired {gain.mean():+.1f}, sign-flip p = {_sign_flip_p(gain):.3f})'
            + (
                ': its episodes were no worse; the gap is in the policy each arm ends with.'
                if gain.mean() >= 0
                else '.'
            )
        )
    every = [r[n] for n in V5_SEEDS]
    a_hz = [d['finetune']['async']['ticks']['measured_rate_hz'] for d in every]
    s_hz = [d['finetune']['sync']['ticks']['measured_rate_hz'] for d in every]
    a_v = sum(d['finetune']['async']['ticks']['n_violations'] for d in every)
    s_v = sum(d['finetune']['sync']['ticks']['n_violations'] for d in every)
    rate = every[0]['rate_hz']
    parts.append(
        f'**The rate.** The asynchronous loop held {_span(a_hz, 2, " Hz")} in all {len(every)} '
        f'runs with {a_v} 3-strike events; the synchronous one held {_span(s_hz, 2, " Hz")}, '
        f'with {s_v} in {len(every)} runs: the update now fits in a {1e3 / rate:.0f} ms tick '
        '(which commit made it cheaper was not bisected). The asynchronous arm trains on '
        f'{rate:g} Hz transitions whatever the update costs; the synchronous one only while its '
        'update fits in the tick.'
    )
    if 'worn' in by_rig:
        m = means['worn']
        lower = all(m[a] < m['sim_only'] for a in ('async_finetuned', 'sync_finetuned'))
        parts.append(
            f'**The worn rig is not rescued by fine-tuning alone, in either arm**: from '
            f'{m["sim_only"]:.2f} s both end '
            + ('lower' if lower else 'near it')
            + f' with the guard off ({m["async_finetuned"]:.2f} and {m["sync_finetuned"]:.2f} '
            f's). The guard keeps such a policy off the rig; `adapt` ({_q("adapt")}) is what '
            f'reaches {FLOOR_S:g} s on this rig.'
        )
    chatter = '; '.join(
        f'{rig} {_mean([_v5_tv(d, "sim_only") for d in runs]):.1f} to '
        + _span(
            [_mean([_v5_tv(d, a) for d in runs]) for a in ('async_finetuned', 'sync_finetuned')],
            1,
        )
        for rig, runs in by_rig.items()
    )
    parts.append(f'Chatter (total variation of the action per second) by rig: {chatter}.')
    return _bullets(*parts)


V5_RESULT = Result(
    heading='Over seeds, nominal, worn and mild rigs',
    question='The same fine-tune with the update beside the control loop (this package) or '
    "inside it (SB3's `learn()` with a self-pacing env): which deploys the better policy, and "
    'at what control rate does each train?',
    setup=_v5_setup,
    tables=(Table('v5-seeds', V5_SEEDS),),
    conclusion=_v5_conclusion,
    compare=V5_DELAY,
    replicate=(
        'RIGS="nominal worn" bash bench/run_v5.sh',
        'RIGS=mild SEEDS="0 1 2 3 4 5 6 7 8 9 10 11 12 13" bash bench/run_v5.sh',
    ),
)


def _v5_delay_arms(r: Records) -> dict[str, np.ndarray]:
    """Per paired seed: balance of (b), (c) and (b) fine-tuned later; and their swing-ups."""
    out: dict[str, list[float]] = {}
    for plain, late in v5.delay_pairs([r[n] for n in (*V5_DELAY_PAIRED, *V5_DELAY)]):
        for key, d, arm in (
            ('async', plain, 'async_finetuned'),
            ('sync', plain, 'sync_finetuned'),
            ('late', late, 'async_finetuned'),
        ):
            out.setdefault(key, []).append(_v5_balance(d, arm))
            out.setdefault(key + '_up', []).append(_v5_swing_up(d, arm))
    return {k: np.array(v) for k, v in out.items()}


#: the level at which a paired difference counts as one (a sign-flip test)
SIGNIFICANCE = 0.05


def _v5_delay_shortfalls(r: Records) -> list[str]:
    """Why the made-later records do not put the mild rig's gap down to the sync arm's timing.

    Empty when they do: the synchronous arm's delay is recorded; made later, the asynchronous
    arm gains on itself as the rig is (a paired difference at :data:`SIGNIFICANCE`) and
    deploys at least at the synchronous arm's balance.
    """
    m = _v5_delay_arms(r)
    late, sync, plain = (round(float(m[k].mean()), 2) for k in ('late', 'sync', 'async'))
    gain = _sign_flip_p(m['late'] - m['async'])
    out = []
    if not _sync_delays(r):
        out.append("the synchronous arm's delay is not recorded")
    if not (late > plain and gain < SIGNIFICANCE):
        out.append(
            f'made later, the asynchronous arm does not gain on itself as the rig is '
            f'({late:.2f} s against {plain:.2f} s, p = {gain:.3f})'
        )
    if late < sync:
        out.append(
            f'made later, it still deploys below the synchronous arm ({late:.2f} s '
            f'against {sync:.2f} s)'
        )
    return out


def _sync_delays(r: Records) -> list[dict[str, float]]:
    """The synchronous arm's observation-to-action delay (ms) in the V5 records that have it."""
    return [
        r[n]['finetune']['sync']['act_delay_ms']
        for n in V5_DELAY_PAIRED
        if r[n]['finetune'].get('sync', {}).get('act_delay_ms', {}).get('n')
    ]


def _v5_delay_setup(r: Records) -> str:
    from rip_control.rig.dynamics import PendulumParams

    delays = _sync_delays(r)
    late = r[V5_DELAY[0]]
    one = r[V5_DELAY_PAIRED[0]]
    work = _mean([r[n]['finetune']['async']['ticks']['work_mean_ms'] for n in V5_DELAY_PAIRED])
    base = PendulumParams.from_yaml(REPO / late['rig']).sensing_latency_s
    changed = dict(o.split('=', 1) for o in late['finetune_rig_overrides'])
    raised = float(changed['sensing_latency_s'])
    return (
        "SB3's `learn()` runs its updates between handing the env an observation and sending "
        'the action computed from it. So the synchronous arm, while its ticks hold '
        f'{one["rate_hz"]:g} Hz, acts on an observation '
        + (
            f'{_span([d["p50"] for d in delays], 1, " ms")} old (median per run; 95th '
            f'percentile {_span([d["p95"] for d in delays], 1, " ms")}, over the whole '
            f'fine-tune, warm-up included; `act_delay_ms` in the {len(delays)} V5 record'
            f'{"s" * (len(delays) > 1)} that measure it)'
            if delays
            else 'older than the asynchronous arm does (not yet recorded)'
        )
        + ". The asynchronous loop reads, acts and sends within its tick's work, "
        f'{work:.2f} ms on the mean in these runs. The two arms therefore fine-tune on '
        'different dynamics: the synchronous one on the rig made later by that delay. '
        'To test whether this, and not the learner, makes the gap: the asynchronous arm '
        "alone (`--skip-sync`, sampling at the policy's own spread as in V5), fine-tuned on "
        f'the mild rig with its sensing latency raised from {1e3 * base:g} ms to '
        f'{1e3 * raised:g} ms (`--finetune-rig-set {_and(late["finetune_rig_overrides"])}`: '
        f'{1e3 * (raised - base):.1f} ms later'
        + (
            ", the synchronous arm's median delay above"
            if delays
            and min(d['p50'] for d in delays) - 0.05
            <= 1e3 * (raised - base)
            <= max(d['p50'] for d in delays) + 0.05
            else ''
        )
        + '), then deployed on the mild rig as it is, against the V5 runs of the same seeds. '
        "Every arm is deployed through the package's own loop (`rip_control.evaluate`), which "
        'acts within its tick: the delay is in training only. Between the commits of these '
        "records the asynchronous fine-tune's code changed only in what the guard's "
        'evaluations send, and the guard is off here (`git diff 4af186e HEAD -- rip_control/rt '
        'rip_learner` shows that and `pretrain`, which these runs do not use).'
    )


def _v5_delay_conclusion(r: Records) -> str:
    m = _v5_delay_arms(r)
    n = len(m['async'])
    vs_sync = m['late'] - m['sync']
    vs_async = m['late'] - m['async']
    return _bullets(
        f'Fine-tuned on the rig made as late as the synchronous arm acts, the asynchronous arm '
        f'deploys at {m["late"].mean():.2f} s over {n} seeds, against {m["sync"].mean():.2f} s '
        f'for the synchronous arm and {m["async"].mean():.2f} s for itself fine-tuned on the '
        'rig as it is. Paired by seed, made-later minus synchronous is '
        f'{vs_sync.mean():+.2f} s (sign-flip p = {_sign_flip_p(vs_sync):.3f}); made-later minus '
        f'as-is is {vs_async.mean():+.2f} s (p = {_sign_flip_p(vs_async):.3f}).',
        'Mean time to balance (the swing-up, where V5 saw the gap): '
        f'{m["late_up"].mean():.2f} s made later, {m["sync_up"].mean():.2f} s synchronous, '
        f'{m["async_up"].mean():.2f} s as-is (per seed in the table).',
        (
            "**So the mild rig's gap is the synchronous loop's timing, not the asynchronous "
            'learner:** on the dynamics the synchronous arm trains on, the asynchronous arm '
            'deploys no lower on the mean '
            + (
                f'(higher than the synchronous arm, p = {_sign_flip_p(vs_sync):.3f})'
                if _sign_flip_p(vs_sync) < SIGNIFICANCE
                else f'(p = {_sign_flip_p(vs_sync):.3f} against the synchronous arm: no '
                'difference shown either way)'
            )
            + ', and the delay is what moves it '
            f'(p = {_sign_flip_p(vs_async):.3f}). The delay alone gives the asynchronous arm what '
            'the synchronous arm gains; what the synchronous arm adds is its timing, not a better '
            'learner. That a longer delay '
            'in training helps on this rig is a finding about this rig and policy, not a setting '
            'this package ships.'
            if _v5_delay_explained(r)
            else '**The delay does not explain the gap:** '
            + '; '.join(_v5_delay_shortfalls(r))
            + '.'
        ),
    )


V5_DELAY_RESULT = Result(
    heading="The mild rig's gap: the synchronous arm acts on older observations",
    question='Why does the synchronous arm swing up faster on the mild rig, and does the '
    'asynchronous learner do as well on the same dynamics?',
    setup=_v5_delay_setup,
    tables=(Table('v5-delay', (*V5_DELAY_PAIRED, *V5_DELAY)),),
    conclusion=_v5_delay_conclusion,
    replicate=(
        'for seed in 0 1 2 3 4 5 6 7 8 9 10 11 12 13; do python -m rip_bench v5 '
        '--rig bench/rigs/rig_mild.yaml --seed $seed --skip-sync '
        '--set rip_control.train_noise_scale=1.0 --finetune-rig-set sensing_latency_s=0.0199 '
        f'--label {v5.TRAINED_LATE} --json bench/results/v5delay_mild_seed$seed.json '
        '--plots bench/results/v5_delay; done',
    ),
)


def _v5_heavy_conclusion(r: Records) -> str:
    runs = [r[n] for n in V5_HEAVY]
    m = {arm: _mean([_v5_balance(d, arm) for d in runs]) for arm in ARMS}
    hz = [d['finetune']['sync']['ticks']['measured_rate_hz'] for d in runs]
    return (
        f'Asynchronous {m["async_finetuned"]:.2f} s against synchronous '
        f'{m["sync_finetuned"]:.2f} s, from {m["sim_only"]:.2f} s simulation-only. The '
        f'synchronous loop then did not fit its update in a tick and ran at {_span(hz, 0, " Hz")} '
        f'(its 3-strike events in the table); the asynchronous one held '
        f'{_span([d["finetune"]["async"]["ticks"]["measured_rate_hz"] for d in runs], 2, " Hz")}.'
    )


V5_HEAVY_RESULT = Result(
    heading='The heavy rig, at older code',
    question='The same comparison on the heavy rig.',
    setup=lambda r: (
        'As above, code of commit 24cd7ab (not re-run since: the records predate '
        "the commit field and the learner's later speed-ups)."
    ),
    tables=(Table('v5-seeds', V5_HEAVY),),
    conclusion=_v5_heavy_conclusion,
    replicate=('RIGS=heavy bash bench/run_v5.sh',),
)

V5_256 = 'v5_worn_256.json'
V5_256_ATTEMPTS = 'v5_worn_256_attempts_d3546be.json'


def _v5_256_setup(r: Records) -> str:
    d = r[V5_256]
    return (
        f'The worn rig, seed {d["seed"]}, code of commit ec3a95b, with a '
        f'{d["learner_parameters"]["hidden_sizes"]} policy pre-trained the same way first (the '
        f'note of the attempts before it: "{r[V5_256_ATTEMPTS]["pretrain"]}"); plots in '
        '`bench/results/v5_256/`.'
    )


def _v5_256_conclusion(r: Records) -> str:
    d = r[V5_256]
    a, s = d['finetune']['async'], d['finetune']['sync']
    at, st = a['ticks'], s['ticks']
    la = a['learner']
    rets = s['episode_returns']
    penalty = _termination_penalty()
    first_end = next((i for i, x in enumerate(rets) if x <= penalty + 0.1), None)
    dep = {arm: d['deployment'][arm]['summary'] for arm in ARMS}
    sim = dep['sim_only']['longest_balance_s']
    sy = dep['sync_finetuned']['longest_balance_s']
    inside = sim['min'] <= sy['mean'] <= sim['max']
    return _bullets(
        f'**The rate is where the arms part.** The asynchronous loop held '
        f'{at["measured_rate_hz"]:.2f} Hz over {at["n_ticks"]} ticks with '
        f'{at["n_violations"]} violations (dt std {at["dt_std_ms"]:.2f} ms, p99 of the tick '
        f'error {at["dt_p99_abs_dev_ms"]:.2f} ms, the largest {at["dt_max_abs_dev_ms"]:.1f} ms), '
        f'while its learner did what it could ({float(la["updates_per_s"]):.0f} updates/s, '
        f'{la["gradient_steps_done"]} updates over {la["transitions_accepted"]} transitions, '
        f'{float(la["updates_per_transition"]):.1f} per transition, most of them during resets). '
        f'The synchronous loop ran at {st["measured_rate_hz"]:.1f} Hz over the run (dt '
        f'{st["dt_mean_ms"]:.1f} ± {st["dt_std_ms"]:.1f} ms, up to {st["dt_max_abs_dev_ms"]:.0f} '
        f'ms late, {st["n_violations"]} ticks more than '
        f'{float(d["learner_parameters"]["dt_tolerance_ms"]):g} ms late), with '
        f'{s["deadman_trips"]} deadman trip{"s" * (s["deadman_trips"] != 1)}.',
        f'**Nothing is rescued, by either arm.** This prior balances {sim["mean"]:.2f} s on the '
        f'worn rig and swings up in {dep["sim_only"]["swung_up"]} of '
        f"{dep['sim_only']['episodes']} deployments. The asynchronous fine-tune's training "
        f'returns stayed at {_returns_span(a["episode_returns"])} and its policy deployed at '
        f'{dep["async_finetuned"]["longest_balance_s"]["mean"]:.2f} s, swinging up in '
        f'{dep["async_finetuned"]["swung_up"]} of {dep["async_finetuned"]["episodes"]}. '
        + (
            f"The synchronous arm's episodes ended at once from its episode {first_end + 1} on "
            f'(returns of {penalty:g}: the arm into its limit), so it trained on {st["n_ticks"]} '
            f'transitions and made {s["updates"]} updates; '
            if first_end is not None
            else ''
        )
        + f'its policy swung up in {dep["sync_finetuned"]["swung_up"]} of '
        f'{dep["sync_finetuned"]["episodes"]} and balanced {sy["mean"]:.2f} s '
        f'({_span([sy["min"], sy["max"]])}), '
        + ('inside' if inside else 'outside')
        + f" the simulation-only policy's own spread ({_span([sim['min'], sim['max']])} s). One "
        'seed: this ranks nothing.',
    )


def _termination_penalty() -> float:
    """The task's termination penalty (a terminated step's reward)."""
    from rip_control.rig.env import TaskConfig

    return float(TaskConfig.termination_penalty)


V5_256_RESULT = Result(
    heading="[256, 256], SB3's default network size",
    question="With SB3's default network size instead of the shipped one, where does each arm "
    'stand?',
    setup=_v5_256_setup,
    tables=(Table('v5', (V5_256,)),),
    compare=(V5_256_ATTEMPTS,),
    conclusion=_v5_256_conclusion,
    replicate=('WIDE=1 bash bench/run_v5.sh',),
)


SECTION = Section(
    'v5',
    'Is the asynchronous fine-tune at least as good as the synchronous one? (V5)',
    (V5_RESULT, V5_DELAY_RESULT, V5_HEAVY_RESULT, V5_256_RESULT),
)
