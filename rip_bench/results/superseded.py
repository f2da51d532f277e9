"""results_history.md's results: each superseded one, with what replaced it and why.

A result moves here from its section's module when a newer measurement replaces it; its
``superseded`` text refers to the current results by section (``{key}``, numbered by
:data:`rip_bench.results.order.ORDER`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rip_bench.generated import rig_name
from rip_bench.results.adapt import ADAPT_K0, _after, _before, _candidate_at_s, _promoted
from rip_bench.results.finetune import (
    GUARD_EVAL10,
    WIDE_EARLIER,
    _candidates,
    _cells,
    _dep_balance,
    _met,
)
from rip_bench.results.goals import RESCUE_BALANCE_S, RESCUE_WALL_S
from rip_bench.results.model import Records, Result, Section, Table, Text, _none
from rip_bench.results.order import _numbers
from rip_bench.results.text import (
    _bullets,
    _control,
    _list,
    _minutes,
    _of,
    _pct,
    _returns_span,
    _span,
)
from rip_bench.results.v5 import V5_256_ATTEMPTS


def _adapt_k0_conclusion(r: Records) -> str:
    docs = [r[n] for n in ADAPT_K0]
    stuck = [d for d in docs if 'stuck' in d['rig']]
    others = [d for d in docs if d not in stuck]
    over = [d for d in docs if d['rig_seconds'] > d['rig_budget_s']]
    met = sum(_after(d) >= RESCUE_BALANCE_S and d['wall_seconds'] <= RESCUE_WALL_S for d in stuck)
    return _bullets(
        f'Rescue met on {_of(met, len(stuck))} seeds of the stuck rig: '
        f'{_span([_after(d) for d in stuck], 2, " s")}, the re-trained policy balancing from its '
        f'first deployment at {_span([_candidate_at_s(d) / 60 for d in stuck], 1)} minutes of '
        'rig time.',
        'One seed each on the other rigs: '
        + '; '.join(f'{rig_name(d["rig"])} {_before(d):.2f} → {_after(d):.2f} s' for d in others)
        + '.',
        'Over the rig-time budget: '
        + '; '.join(
            f'{Path(d["rig"]).stem} seed {d["seed"]} ({_minutes(d["rig_seconds"])} of '
            f'{d["rig_budget_s"] / 60:g} min, commit {d["commit"]})'
            for d in over
        )
        + '. The fine-tune then ran in chunks planned from a measured cost per episode: serial '
        'stalls re-ran episodes the plan had not counted, the rig time of a re-activated run '
        "counted only its last activation, and the guard's evaluations did not yet count "
        "against the budget (fixed: every activation's ticks count, and the runner stops at "
        'its rig-time limit, `rig_seconds:=`).'
        if over
        else '',
    )


ADAPT_K0_RESULT = Result(
    heading='',
    superseded='the same benchmark re-trained with two past actions in the observation '
    "(results.md, question {adapt}): `adapt`'s re-training has seen them by default since "
    'commit bdf0384, after they deployed best on the stuck rig (results.md, question '
    "{history}). The stuck rig's seed-0 row is still the `adapt` line of the "
    'plain-against-adapt table in results.md.',
    question='',
    setup=lambda r: 'As `adapt` in results.md, re-trained without past actions.',
    tables=(Table('adapt', ADAPT_K0),),
    conclusion=_adapt_k0_conclusion,
)


def _attempts_conclusion(r: Records) -> str:
    d = r[V5_256_ATTEMPTS]
    done = [a['training_episodes_finished'] for a in d['attempts']]
    steal = [
        a['host_steal_share_per_second']
        for a in d['attempts']
        if 'host_steal_share_per_second' in a
    ]
    return (
        f'The {len(done)} attempts at the code of `{d["code"]}` stopped in the asynchronous arm, '
        'after '
        f'{" and ".join(map(str, done))} training episodes, on repeated 3-strike trips and '
        'serial timeouts'
        + (
            f', while the host took {_span([x["mean"] * 100 for x in steal], 0, " %")} of the '
            f'CPU time on average and up to {_span([x["max"] * 100 for x in steal], 0, " %")} in '
            'one second (measured during the second attempt)'
            if steal
            else ''
        )
        + '. The run that replaced them, in a calmer hour, had no violation in that arm.'
    )


def _wide_earlier_conclusion(r: Records) -> str:
    def worn(name: str) -> dict[str, Any]:
        return r[name]['rigs']['rig_shifted_worn']

    met = '; '.join(
        f'{sum(sum(map(_met, v["runs"])) for v in r[n]["rigs"].values())} of '
        f'{sum(len(v["runs"]) for v in r[n]["rigs"].values())} at {label}'
        for n, label in zip(WIDE_EARLIER, ('8b13c2b', '9db4a66', "CAPS's full term"), strict=True)
    )
    guard = []
    for n, label in zip(WIDE_EARLIER, ('8b13c2b', '9db4a66', "CAPS's full term"), strict=True):
        cells = _cells(worn(n))
        cands = [e for c in cells for e in _candidates(c)]
        promoted = [e['return'] for e in cands if e['verdict'] == 'promoted']
        bases = [c['evaluations'][0]['return'] for c in cells]
        guard.append(
            f'{label}: {_promoted(cands)} of {len(cands)} promoted'
            + (f' ({_returns_span(promoted)})' if promoted else '')
            + f', candidates at {_returns_span([e["return"] for e in cands])} against baselines '
            f'of {_returns_span(bases)}'
        )
    early = _cells(worn(WIDE_EARLIER[0]))
    worst = min(early, key=lambda c: min(c['episode_returns']))
    rets = worst['episode_returns']
    driver = [e for e in _candidates(worst) if e['verdict'] == 'promoted'][-1]
    best = max(e['return'] for e in worst['evaluations'])
    bar = [
        (c, e)
        for c in early
        for e in _candidates(c)
        if e['verdict'] == 'rejected' and e['rejected_for'].startswith('balance')
    ]
    bar_text = '; '.join(
        f"seed {c['seed']}'s candidate v{e['policy_version']}: return {e['return']:.0f} against "
        f'a bar of {e["bar"]:.0f}, balance {e["balance_s"]:.2f} s against a bar of '
        f'{e["balance_bar_s"]:.2f} s'
        for c, e in bar
    )
    nominal = r[WIDE_EARLIER[0]]['rigs']['rig_qube_servo2']['sim_only']['longest_balance_s']
    now = r['matrix_wide_nominal.json']['rigs']['rig_qube_servo2']['sim_only']
    heavy = _cells(r[WIDE_EARLIER[0]]['rigs']['rig_shifted_heavy'])
    gain = [
        (c, e)
        for c in heavy
        for e in _candidates(c)
        if e['policy_version'] == c['best_policy_version']
    ]
    return _bullets(
        f'Goals met: {met}.',
        "The worn rig's guard: " + '; '.join(guard) + '. None beat the starting policy by the '
        'best margin.',
        f"The collapse the narrower sampling removed: at 8b13c2b the worn rig's seed "
        f'{worst["seed"]} ended with a training episode of {rets[-1]:.0f} (the first was '
        f'{rets[0]:.0f}), driven by v{driver["policy_version"]}, a policy that had evaluated at '
        f'{driver["return"]:.0f} with {driver["balance_s"]:.2f} s of balance '
        f'({_pct(driver["return"] / best)} of the best). The evaluation is deterministic and a '
        'training episode samples, so one sample took the arm to its limit.',
        f'The balance bar at 8b13c2b rejected {bar_text}. At 9db4a66, before the bar, such a '
        'candidate drove and collapsed a training episode.'
        if bar
        else '',
        f"The nominal rig's starting policy measured {nominal['mean']:.2f} s at 8b13c2b, "
        f"{now['longest_balance_s']['mean']:.2f} s in the run that replaced these: this prior's "
        'own spread. The 9db4a66 and CAPS tables are not pooled: a seed that deployed the '
        "starting policy's weights is scored from its own deployment alone, so measuring the "
        'same weights a second time reads as a gain or a loss.',
        '; '.join(
            f"The heavy rig's real gain appeared at 8b13c2b too: seed {c['seed']}'s "
            f'v{e["policy_version"]} evaluated at {e["return"]:.0f} against '
            f'{c["evaluations"][0]["return"]:.0f} and deployed at {_dep_balance(c):.2f} s'
            for c, e in gain
        )
        + '.'
        if gain
        else '',
    )


def _wide_rerun_conclusion(r: Records) -> str:
    d = r['matrix_wide_nominal_heavy.json']['rigs']['rig_qube_servo2']
    failed = [c for c in d['runs'] if 'failure' in c]
    return (
        '; '.join(f'Seed {c["seed"]} failed: "{c["failure"]}"' for c in failed)
        + '. A test run had been started beside it by mistake, with its own SCHED_FIFO '
        'emulator and control process on the same cores. The nominal rig was re-run alone '
        '(`matrix_wide_nominal.json`), and the table command lets that row replace this one.'
    )


def _eval_fix_conclusion(r: Records) -> str:
    d = r[GUARD_EVAL10]
    episodes = [e['longest_balance_s'] for e in d['deployment']['sim_only']['episodes']]
    merged = [x for x in episodes if x > d['eval_seconds']]
    return (
        "The first matrix's heavy-rig figures, its simulation-only line and one seed's "
        'deployment, came from the bug. `guard_heavy_eval10s.json` was measured before the fix '
        f'too: its simulation-only line includes {len(merged)} episode'
        f'{"s" * (len(merged) != 1)} of {_list(merged)} s in a {d["eval_seconds"]:g} s episode.'
    )


def _words(text: str) -> Text:
    """A text without numbers but the sections' (``{key}``)."""
    return lambda r: text.format(**_numbers())


HISTORY_RESULTS: tuple[tuple[str, Result], ...] = (
    ('`adapt`, re-trained without past actions', ADAPT_K0_RESULT),
    (
        'Identification before the brake ladder (7888b3d)',
        Result(
            heading='',
            superseded='the identification at commit 203dce8 (results.md, question '
            '{identification}), after the brake ladder was added to the excitation.',
            question='',
            setup=_words(
                'The excitation before the brake ladder; its record: `git show '
                '7888b3d:bench/results/identification.json`.'
            ),
            conclusion=_words(
                "It missed the stuck rig's dead zone from the excitation alone on some seeds (the "
                "rig's stiction hides the dead zone from a standing arm) and needed a deployment "
                'episode more.'
            ),
        ),
    ),
    (
        'V5 at commit 24cd7ab (nominal, worn and mild rigs)',
        Result(
            heading='',
            superseded='the runs at d17632c and 19be109 (results.md, question {v5}); the JSONs '
            'were overwritten.',
            question='',
            setup=_none,
            conclusion=_words(
                "At 24cd7ab the synchronous arm's update did not fit in a control period: it ran "
                'below the target rate, with 3-strike events in every run, while the '
                'asynchronous loop held its rate. The heavy rig was not re-run: its 24cd7ab table '
                'is still the current one in results.md. Before that, the issue that asked for '
                'V5 measured, on a mild shifted rig of its own (not in the repository), a '
                'collapse of the asynchronous arm; it reproduces on none of the rigs measured '
                'since.'
            ),
        ),
    ),
    (
        'V5 with [256, 256] networks: earlier attempts',
        Result(
            heading='',
            superseded='the run at ec3a95b (results.md, question {v5}).',
            question='',
            setup=_none,
            files=(V5_256_ATTEMPTS,),
            conclusion=_attempts_conclusion,
        ),
    ),
    (
        'The fine-tune from the wide prior, earlier configurations',
        Result(
            heading='',
            superseded='the runs at 9f06a6a (results.md, question {finetune}), which measure the '
            'shipped configuration. Each earlier table is the same command with all the rigs.',
            question='',
            setup=_none,
            tables=(
                Table(
                    'matrix',
                    (WIDE_EARLIER[0],),
                    lambda r: "**At 8b13c2b**, before the narrower sampling (SAC's own spread):",
                ),
                Table(
                    'matrix',
                    (WIDE_EARLIER[1],),
                    lambda r: (
                        '**At 9db4a66**, before the balance bar and the pooled scoring of a '
                        'seed that deployed the starting policy:'
                    ),
                ),
                Table(
                    'matrix',
                    (WIDE_EARLIER[2],),
                    lambda r: (
                        "**At 6c6d206**, with CAPS's full smoothness term and no best margin:"
                    ),
                ),
            ),
            compare=('matrix_wide_nominal.json',),
            conclusion=_wide_earlier_conclusion,
        ),
    ),
    (
        'The wide prior at 9f06a6a: the nominal rig beside a test run',
        Result(
            heading='',
            superseded='the nominal rig re-run alone (`matrix_wide_nominal.json`, results.md, '
            'question {finetune}).',
            question='',
            setup=_none,
            compare=('matrix_wide_nominal_heavy.json',),
            conclusion=_wide_rerun_conclusion,
        ),
    ),
    (
        "The standard prior's matrix: the heavy rig before the evaluation fix",
        Result(
            heading='',
            superseded='`matrix_heavy.json` at e6a11b8 (results.md, question {finetune}). Before '
            'commit eea4c63 the deployment evaluation merged an episode cut by a fault with its '
            're-run, which read as more balance than the episode was long.',
            question='',
            setup=_none,
            compare=(GUARD_EVAL10,),
            conclusion=_eval_fix_conclusion,
        ),
    ),
    (
        '`make demo`, earlier series',
        Result(
            heading='',
            superseded='the runs at d3546be (results.md, question {finetune}); the '
            'summaries were overwritten.',
            question='',
            setup=_none,
            conclusion=_words(
                "Series at commit 2d56bdf (SAC's own sampling), at 9db4a66 (before the balance "
                "bar) and with CAPS's full term (365a779 and e6a11b8) all kept every training "
                'episode above the floor and moved the best policy on. Before the regression '
                "guard, a fine-tune took the heavy rig's policy from balancing most of an "
                'episode to failing in some, and `make demo` once collapsed in its last '
                'episodes, which the next `make demo` then resumed from. Before the best margin, '
                'on the worn rig a candidate that evaluated a fraction of a percent above the '
                'starting policy (one short episode) became the best and deployed worse. Before '
                'the balance bar, on the worn rig a candidate with nearly the best return but '
                'far less balance went live and drove a training episode down.'
            ),
        ),
    ),
    (
        'Timing, before commit b79327d',
        Result(
            heading='',
            superseded='the timing table at b79327d (results.md, question {timing}).',
            question='',
            setup=_none,
            conclusion=_words(
                'The table before it, from a noisier hour of the same VM and before that '
                "session's changes, had a larger dt spread and a violation at 50 Hz. V4 before "
                "the real-time process, with the loop in the node's process, on a quieter day, "
                'held its rate with a smaller dt spread than now.'
            ),
        ),
    ),
    (
        'Several rigs, before the real-time process',
        Result(
            heading='',
            superseded='the e2e runs at 37404ae (results.md, question {e2e}).',
            question='',
            setup=_none,
            conclusion=lambda r: _bullets(
                'Earlier 3-rig runs, before the loop had a process of its own, held on a '
                'quieter day.',
                'The emulator used to wake once per physics step at SCHED_FIFO; `perf sched` in '
                'a 3-rig run showed the three emulators taking most of one CPU while the '
                "control processes' other threads (the GIL holders) waited for it, so the "
                'control threads woke late and all three watchdogs tripped. It now wakes on a '
                'request, when the deadman falls due or a stalled reply is due, and seldom '
                'otherwise; a test bounds its idle wake-up rate.',
                '`mlockall` ran at SCHED_FIFO and held its CPU while it locked; with several '
                "rigs that starved the others' emulators into serial timeouts. Memory is now "
                'locked at normal priority before SCHED_FIFO is taken.',
                'Rigs now share the control CPU at distinct FIFO priorities '
                f'({_control("fifo_priority")}, {_control("fifo_priority") - 1}, ...).',
                "Tried and not adopted: spreading the rigs' control threads over both CPUs, and "
                'the learner at SCHED_IDLE instead of nice (one of two runs stopped on serial '
                'timeouts).',
            ),
        ),
    ),
    (
        "The learner's update, commit 5c4852f",
        Result(
            heading='',
            superseded='the measurement at 9db4a66 (results.md, question {throughput}).',
            question='',
            setup=_none,
            conclusion=_words(
                "At 5c4852f, SB3's own `train()`, the shipped update (without the smoothness "
                "reference's extra pass) and the fast one all ran slower than in the "
                'measurement that replaced it, the fast and shipped updates at about the same '
                'ratio to SB3; none reached what the shipped K and rate ask that day.'
            ),
        ),
    ),
)

HISTORY: tuple[Section, ...] = tuple(
    Section(title, title, (result,)) for title, result in HISTORY_RESULTS
)
"""The sections of results_history.md, each a superseded result."""
