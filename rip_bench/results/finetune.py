"""Question 'finetune': whether the shipped fine-tune keeps a good policy good.

``make demo`` run after run (:data:`DEMO_RESULT`), the matrix of rigs and seeds from the
standard prior (:data:`MATRIX_RESULT`) and from the wider one (:data:`WIDE_RESULT`). Its
readers of a matrix record (:func:`_rig_runs`, :func:`_cells`, :func:`_candidates`...) serve
other sections too.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rip_bench.generated import rig_name
from rip_bench.results.adapt import _promoted
from rip_bench.results.goals import DEMO_MIN_RETURN, FLOOR_S
from rip_bench.results.model import Records, Result, Section, Table
from rip_bench.results.text import (
    _bullets,
    _control,
    _each_run,
    _list,
    _mean,
    _overrides,
    _pct,
    _q,
    _returns_span,
    _span,
)
from rip_bench.results.v5 import _v5_balance

DEMOS = tuple(f'demo_run{i}.json' for i in range(1, 6))


def _demo_setup(r: Records) -> str:
    one = r[DEMOS[0]]
    return (
        '`bash bench/run_demos.sh`: `make demo` run after run, each continuing the one before '
        "(its buffer, its best-evaluated policy); each run's `summary.json` kept as "
        '`bench/results/demo_run<i>.json`. Code of commit d3546be (the smoothness reference, '
        'the best margin `eval_best_margin`, the balance bar `eval_balance_margin`, the narrower '
        f'sampling `train_noise_scale`). Emulated nominal rig, {one["episodes"]} episodes per run '
        f'at {one["rate_hz"]:g} Hz.'
    )


def _demo_conclusion(r: Records) -> str:
    runs = [r[n] for n in DEMOS]
    rets = [x for d in runs for x in d['episode_returns']]
    below = sum(x < DEMO_MIN_RETURN for x in rets)
    bal = [x for d in runs for x in d['balance_s']]
    evs = [[e for e in d['evaluations'] if e['verdict'] != 'baseline'] for d in runs]
    promoted = [_promoted(e) for e in evs]
    bests = [d['best_policy_version'] for d in runs]
    moves = [
        f'from v{bests[i - 1]} to v{bests[i]} in run {i + 1}'
        for i in range(1, len(runs))
        if bests[i] != bests[i - 1]
    ]
    if bests[0] != runs[0]['evaluations'][0]['policy_version']:
        moves.insert(0, f'to v{bests[0]} in run 1')
    updates = [int(d['learner']['gradient_steps_done']) for d in runs]
    per = [float(d['learner']['updates_per_transition']) for d in runs]
    hz = [d['ticks']['measured_rate_hz'] for d in runs]
    violations = sum(d['ticks']['n_violations'] for d in runs)
    restarts = sum(d['violation_restarts'] for d in runs)
    episode = _control('episode_seconds')
    return (
        f'**The goal is {"met" if below == 0 else "missed"}: {len(rets) - below} of {len(rets)} '
        f'episodes returned at least {DEMO_MIN_RETURN:.0f}** ({_returns_span(rets)}), balance '
        f'{_span(bal, 2, " s")} of each {episode:g} s episode (swing-up included). '
        + _each_run(
            [f'{p} of {len(e)}' for p, e in zip(promoted, evs, strict=True)],
            'guard promoted {} candidates',
        )
        + '. The best moved '
        + ('; '.join(moves) if moves else 'never')
        + f' (a candidate must beat the best by `eval_best_margin`, '
        f'{_pct(_control("eval_best_margin"))}), so a next run would start from '
        f'v{bests[-1]}. Every '
        f'run held {_span(hz, 4, " Hz")} with {violations} violations and {restarts} '
        f're-activations; {_span(updates, 0)} learner updates per run '
        f'({_span(per, 2)} per transition), {_span([d["wall_seconds"] for d in runs], 0, " s")} '
        'of wall time each. On this VM the hypervisor sometimes pauses the machine; when three '
        'ticks in a row are late the watchdog stops the motor and the runner re-activates, '
        'which the log and the summary report.'
    )


DEMO_RESULT = Result(
    heading='`make demo`, run after run',
    question='Run as a user runs it, each run continuing the one before, does `make demo` keep '
    "every training episode above the demo's floor?",
    setup=_demo_setup,
    tables=(Table('demo', DEMOS),),
    conclusion=_demo_conclusion,
    replicate=('bash bench/run_demos.sh',),
)

MATRIX = ('matrix.json', 'matrix_heavy.json')
GUARD_EVAL10 = 'guard_heavy_eval10s.json'


def _goals_text(d: dict[str, Any]) -> str:
    g = d['goals']
    floors = ', '.join(f'{s:g} s on {rig}' for rig, s in g['min_balance_s'].items())
    return (
        f"balance at least the simulation-only policy's minus {g['balance_slack_s']:g} s on "
        f'every rig and seed (and at least {floors}); no training episode in the second half '
        f"of a run below {_pct(g['collapse_share'])} of the first episode's return; chatter at "
        f"most {g['chatter_ratio']:g}x the simulation-only policy's"
    )


def _matrix_setup(r: Records) -> str:
    d = r[MATRIX[0]]
    return (
        "The fine-tune as shipped then: `config/finetune.yaml` with CAPS's full smoothness "
        f'term and no `eval_best_margin`; {len(d["seeds"])} seeds, {d["finetune_episodes"]} x '
        f"{d['episode_seconds']:g} s, each seed's `policy_best` deployed for "
        f'{d["eval_episodes"]} x {d["eval_seconds"]:g} s beside the simulation-only policy on '
        f'the same rig. The goals: {_goals_text(d)}. Nominal and worn rigs: `matrix.json`, code '
        "of commit d63f8a9 (before the smoothness term shared the actor's pass). Heavy rig: "
        '`matrix_heavy.json`, re-measured after the evaluation fix '
        '([results_history.md](results_history.md)), code of commit e6a11b8. Not re-run since '
        'with the current configuration.'
    )


def _rig_runs(r: Records, names: Sequence[str]) -> dict[str, dict[str, Any]]:
    """A rig's entry from the last file that has it (as the matrix table does)."""
    out: dict[str, dict[str, Any]] = {}
    for n in names:
        out.update(r[n]['rigs'])
    return out


def _cells(rig: dict[str, Any]) -> list[dict[str, Any]]:
    return [c for c in rig['runs'] if 'failure' not in c]


def _met(c: dict[str, Any]) -> bool:
    g = c['goals']
    return bool(g['balance_ok'] and g['no_collapse'] and g['chatter_ok'])


def _candidates(c: dict[str, Any]) -> list[dict[str, Any]]:
    return [e for e in c.get('evaluations') or [] if e['verdict'] != 'baseline']


def _dep_balance(c: dict[str, Any]) -> float:
    return float(c['deployment']['longest_balance_s']['mean'])


def _matrix_conclusion(r: Records) -> str:
    rigs = _rig_runs(r, MATRIX)
    nominal, worn, heavy = (
        rigs['rig_qube_servo2'],
        rigs['rig_shifted_worn'],
        rigs['rig_shifted_heavy'],
    )

    def summary(rig: dict[str, Any]) -> str:
        cells = _cells(rig)
        per_run = sorted({f'{_promoted(_candidates(c))} of {len(_candidates(c))}' for c in cells})
        return (
            f'the guard promoted {" / ".join(per_run)} candidates per run, the deployed best '
            f'balanced {_span([_dep_balance(c) for c in cells], 2, " s")} against '
            f'{rig["sim_only"]["longest_balance_s"]["mean"]:.2f} s, the worst second-half '
            'training return was '
            f'{_pct(min(c["goals"]["worst_second_half_return_share"] for c in cells))} of the '
            f'first, and chatter was '
            f'{_span([c["goals"]["chatter_ratio"] for c in cells], 2)}x the simulation-only '
            "policy's"
        )

    w = _cells(worn)
    rejected = [e for c in w for e in _candidates(c) if e['verdict'] == 'rejected']
    all_rejected = [c['seed'] for c in w if not _promoted(_candidates(c))]
    eval10 = r[GUARD_EVAL10]
    e10 = [e for e in eval10['finetune']['async']['evaluations'] if e['verdict'] != 'baseline']
    n_met = {k: sum(map(_met, v['runs'])) for k, v in rigs.items()}
    return _bullets(
        f'**Nominal rig: {n_met["rig_qube_servo2"]} of {len(nominal["runs"])} met.** '
        f'{summary(nominal)[0].upper()}{summary(nominal)[1:]}.',
        f'**Worn rig: {n_met["rig_shifted_worn"]} of {len(worn["runs"])} met; never worse, never '
        'better.** '
        + (
            f'On seed {", ".join(map(str, all_rejected))} the guard rejected every candidate; '
            if all_rejected
            else ''
        )
        + f'over the seeds it rejected {len(rejected)} with evaluation returns '
        f'{_returns_span([e["return"] for e in rejected])} against baselines of '
        f'{_returns_span([c["evaluations"][0]["return"] for c in w])}; the deployed best '
        'balanced '
        f'{_span([_dep_balance(c) for c in w], 2, " s")} against '
        f'{worn["sim_only"]["longest_balance_s"]["mean"]:.2f} s. The {FLOOR_S:g} s goal is not '
        'met. While the guard keeps the starting policy driving, the learner trains on that '
        "policy's data only, and its candidates get worse on this rig, not better. A guard that "
        'only lets the rig see policies at least as good as the best so far cannot follow a '
        'path that passes through worse ones; which a user wants is a choice '
        f"(`eval_every_episodes: 0` turns the guard off). Most of that drop came from CAPS's "
        f'full term ({_q("safeguards")}).',
        f'**Heavy rig: {n_met["rig_shifted_heavy"]} of {len(heavy["runs"])} met.** '
        f'{summary(heavy)[0].upper()}{summary(heavy)[1:]}. With evaluation episodes as long as '
        f"the deployment's (`eval_episode_seconds: "
        f'{_overrides(eval10)["eval_episode_seconds"]}`, seed {eval10["seed"]}, '
        f'`{GUARD_EVAL10}`, measured before the evaluation fix) the guard promoted '
        f'{_promoted(e10)} of {len(e10)} candidates and the best deployed at '
        f'{_v5_balance(eval10, "async_finetuned"):.2f} s: the shorter evaluation was not the '
        'problem on this rig.',
    )


MATRIX_RESULT = Result(
    heading='Over seeds and rigs, from the standard prior',
    question='Over rigs and seeds, does the shipped fine-tune (safeguards and guard '
    'on) meet its goals?',
    setup=_matrix_setup,
    tables=(Table('matrix', MATRIX),),
    files=(GUARD_EVAL10,),
    conclusion=_matrix_conclusion,
    replicate=(
        'bash bench/run_matrix.sh',
        (
            'python -m rip_bench matrix --seeds 0 1 2 --rigs config/rig_shifted_heavy.yaml --json '
            'bench/results/matrix_heavy.json'
        ),
    ),
)

WIDE = ('matrix_wide_worn.json', 'matrix_wide_nominal_heavy.json', 'matrix_wide_nominal.json')
WIDE_EARLIER = ('matrix_wide_8b13c2b.json', 'matrix_wide_9db4a66.json', 'matrix_wide_caps.json')
WIDE_PRETRAIN = 'policies/sim_50hz_wide/pretrain.json'


def _wide_setup(r: Records) -> str:
    p = r[WIDE_PRETRAIN]
    d = r[WIDE[0]]
    return (
        'From `policies/sim_50hz_wide/` (pre-trained with `randomization:=wide`, '
        f'{p["steps"]} steps in {p["wall_s"]:.0f} s), with the fine-tune as shipped now: the '
        'smoothness reference, the best margin `eval_best_margin`, the balance bar '
        '`eval_balance_margin`, the narrower sampling `train_noise_scale` '
        f'{_control("train_noise_scale"):g} (given with `--set`, the value `config/finetune.yaml` '
        'took after). The goals '
        + ('as above' if d['goals'] == r[MATRIX[0]]['goals'] else f'({_goals_text(d)})')
        + f'. The {len(WIDE)} runs, code of commit '
        '9f06a6a: the worn rig; the nominal and heavy rigs; the nominal rig again, alone, '
        'because in the run before a test run had been started beside it by mistake and its '
        'seed failed. A rig measured again replaces its earlier row. A `*` marks a seed that '
        "deployed the simulation-only policy's own weights (no candidate beat it by the best "
        'margin): it delivered exactly that policy, so its balance gain is 0 and its chatter '
        'ratio 1 by identity; the figure shown is the two measurements of that one policy '
        "pooled (the simulation-only line and the seed's own deployment), the seed's own in "
        "brackets, and the worn rig's floor is judged on the pooled figure."
    )


def _wide_conclusion(r: Records) -> str:
    rigs = _rig_runs(r, WIDE)
    standard = _rig_runs(r, MATRIX)
    worn, nominal, heavy = (
        rigs['rig_shifted_worn'],
        rigs['rig_qube_servo2'],
        rigs['rig_shifted_heavy'],
    )
    met = sum(sum(map(_met, v['runs'])) for v in rigs.values())
    total = sum(len(v['runs']) for v in rigs.values())
    shares = ', '.join(
        f'{rig_name(k)} {min(c["goals"]["worst_second_half_return_share"] for c in _cells(v)):.2f}'
        for k, v in rigs.items()
    )
    w = _cells(worn)
    w_c = [e for c in w for e in _candidates(c)]
    w_prom = [e for e in w_c if e['verdict'] == 'promoted']
    w_rej = [e for e in w_c if e['verdict'] == 'rejected']
    w_base = [c['evaluations'][0]['return'] for c in w]
    rets = [x for c in w for x in c['episode_returns']]
    firsts = [c['episode_returns'][0] for c in w]
    worst_seed = min(w, key=lambda c: min(e['return'] for e in _candidates(c)))
    low = [e for e in _candidates(worst_seed) if e['return'] < min(w_base) * 0.5]
    rejected_all = [e for v in rigs.values() for c in _cells(v) for e in _candidates(c)]
    on_return = all(
        e['rejected_for'].startswith('return') for e in rejected_all if e['verdict'] == 'rejected'
    )
    n = _cells(nominal)
    n_c = [e for c in n for e in _candidates(c)]
    own = [_dep_balance(c) for c in n]
    gains = []
    for c in _cells(heavy):
        base = c['evaluations'][0]
        best = [e for e in _candidates(c) if e['policy_version'] == c['best_policy_version']]
        if best:
            gains.append((c, best[0], base))
    wide_nominal = [
        r[x]['rigs']['rig_qube_servo2']['sim_only']['longest_balance_s']['mean']
        for x in (*WIDE_EARLIER, *WIDE)
        if 'rig_qube_servo2' in r[x]['rigs']
    ]
    wide_heavy = [
        r[x]['rigs']['rig_shifted_heavy']['sim_only']['longest_balance_s']['mean']
        for x in (*WIDE_EARLIER, *WIDE)
        if 'rig_shifted_heavy' in r[x]['rigs']
    ]
    margin = _control('eval_best_margin')
    gain_text = '; '.join(
        f"seed {c['seed']}'s candidate v{e['policy_version']} evaluated "
        f'{_pct(e["return"] / b["return"] - 1)} above the baseline ({e["return"]:.0f} against '
        f'{b["return"]:.0f}), became the best and deployed at {_dep_balance(c):.2f} s against '
        f'{heavy["sim_only"]["longest_balance_s"]["mean"]:.2f} s'
        for c, e, b in gains
    )
    return _bullets(
        f'**{met} of {total} goals met.** The worst second-half training episode against its '
        f"run's first: {shares}.",
        '**The prior does the work on the worn rig, not the fine-tune.** Pre-trained on worn '
        'actuators, the simulation-only policy balances the worn rig for '
        f'{worn["sim_only"]["longest_balance_s"]["mean"]:.2f} s (against '
        f'{standard["rig_shifted_worn"]["sim_only"]["longest_balance_s"]["mean"]:.2f} s for '
        '`policies/sim_50hz/`). '
        + f'{sum(c["same_as_sim_only"] for c in w)} of {len(w)} seeds deployed that policy '
        f'again: the guard promoted {len(w_prom)} of {len(w_c)} candidates '
        f'({_returns_span([e["return"] for e in w_prom])}; '
        f'{_returns_span([e["return"] for e in w_rej])} rejected, against baselines of '
        f"{_returns_span(w_base)}), none by the {_pct(margin)} best margin. From the seeds' own "
        f'deployments the mean is {_mean([_dep_balance(c) for c in w]):.2f} s (min '
        f'{min(_dep_balance(c) for c in w):.2f} s).',
        "**The narrower sampling removed the collapse the guard cannot see**: the worn rig's "
        f'{len(rets)} training episodes returned {_returns_span(rets)} (first episodes '
        f"{_returns_span(firsts)}). The guard still had work: seed {worst_seed['seed']}'s "
        + (
            f'candidates at {_list([e["return"] for e in low], 0)} never drove.'
            if low
            else 'worst candidate never drove.'
        ),
        '**The balance bar**: every rejection in these runs was on '
        + ('return.' if on_return else 'return or balance.'),
        "**The nominal rig shows this prior's own spread, not the fine-tune's.** Every seed "
        'deployed the starting policy, which measured '
        f'{nominal["sim_only"]["longest_balance_s"]["mean"]:.2f} s here ({_span(own, 2, " s")} '
        "in the seeds' own deployments): it misses a swing-up now and then. "
        f'{_promoted(n_c)} of {len(n_c)} candidates were promoted (returns '
        f'{_returns_span([e["return"] for e in n_c if e["verdict"] == "promoted"])}) but none '
        f'beat the baseline by the {_pct(margin)} best margin. The margin protects against a tie '
        'won by noise; here it keeps a policy that misses swing-ups. Telling the two apart '
        'needs more than one evaluation episode per candidate, which is not built.',
        f'**The heavy rig, and one real gain**: {gain_text}.' if gains else '',
        'The standard prior stays the shipped default (`policies/sim_50hz/`): it balances the '
        'nominal and heavy rigs '
        f'{standard["rig_qube_servo2"]["sim_only"]["longest_balance_s"]["mean"]:.2f} and '
        f'{standard["rig_shifted_heavy"]["sim_only"]["longest_balance_s"]["mean"]:.2f} s before '
        f'any fine-tuning, against {_span(wide_nominal, 2)} and {_span(wide_heavy, 2)} s for the '
        f'wide one over its {len(wide_nominal)} measurements. The wide one is a choice: '
        '`policy:=policies/sim_50hz_wide/policy.safetensors` (its prior data is found beside '
        'it).',
    )


WIDE_RESULT = Result(
    heading='From a prior pre-trained on wider randomisation',
    question='The same goals, from `policies/sim_50hz_wide/`, with the fine-tune as shipped now?',
    setup=_wide_setup,
    tables=(Table('matrix', WIDE),),
    compare=(*MATRIX, *WIDE_EARLIER, WIDE_PRETRAIN),
    conclusion=_wide_conclusion,
    replicate=(
        (
            'python -m rip_bench matrix --policy policies/sim_50hz_wide/policy.safetensors '
            '--seeds 0 '
            '1 2 --min-balance rig_shifted_worn=8 --rigs config/rig_shifted_worn.yaml --set '
            'rip_control.train_noise_scale=0.5 --json bench/results/matrix_wide_worn.json'
        ),
        (
            'python -m rip_bench matrix --policy policies/sim_50hz_wide/policy.safetensors '
            '--seeds 0 '
            '1 2 --min-balance rig_shifted_worn=8 --rigs config/rig_qube_servo2.yaml '
            'config/rig_shifted_heavy.yaml --set rip_control.train_noise_scale=0.5 --json '
            'bench/results/matrix_wide_nominal_heavy.json'
        ),
        (
            'python -m rip_bench matrix --policy policies/sim_50hz_wide/policy.safetensors '
            '--seeds 0 '
            '1 2 --min-balance rig_shifted_worn=8 --rigs config/rig_qube_servo2.yaml --set '
            'rip_control.train_noise_scale=0.5 --json bench/results/matrix_wide_nominal.json'
        ),
        '# --set is now the shipped value and can be left out',
    ),
)


SECTION = Section(
    'finetune',
    'Does the shipped fine-tune keep a good policy good?',
    (DEMO_RESULT, MATRIX_RESULT, WIDE_RESULT),
)
