"""Question 'throughput': how fast the learner updates.

SB3's ``train()`` alone (:data:`SB3_RESULT`) and the learner's own update
(:data:`FAST_RESULT`).
"""

from __future__ import annotations

from rip_bench.results.model import Records, Result, Section, Table
from rip_bench.results.text import _learner, _q, _slashed, _span

SB3_ALONE = 'learner_throughput.json'
FAST_SAC = 'learner_throughput_fast_sac.json'


def _sb3_conclusion(r: Records) -> str:
    d = r[SB3_ALONE]
    rows: dict[str, dict[int, float]] = {}
    for x in d['sb3_train_alone']:
        rows.setdefault(str(x['hidden_sizes']), {})[x['torch_threads']] = x['updates_per_s']
    nets = '; '.join(
        f'{nets} ' + ' / '.join(f'{v:.0f}' for _, v in sorted(by.items()))
        for nets, by in rows.items()
    )
    threads = sorted({t for by in rows.values() for t in by})
    sweep = sorted(d['batch_sweep_64x64_1_thread'], key=lambda x: x['batch_size'])
    full = next(
        x['updates_per_s']
        for x in d['sb3_train_alone']
        if x['hidden_sizes'] == [64, 64] and x['torch_threads'] == 1
    )
    batches = [x['batch_size'] for x in sweep] + [_learner('batch_size')]
    speeds = [x['updates_per_s'] for x in sweep] + [full]
    swept = sweep[0]['hidden_sizes']
    asked = _learner('gradient_steps') * _learner('rate_hz')
    best = max(rows, key=lambda n: max(rows[n].values()))
    reached = max(v for by in rows.values() for v in by.values()) >= asked
    return (
        f'Updates/s by network ({_slashed(threads, 0)} torch threads): {nets}. '
        + ('One of these' if reached else 'None of these')
        + f' reached the {asked:g}/s that K = {_learner("gradient_steps")} at '
        f'{_learner("rate_hz"):g} Hz asks, so the learner falls behind during episodes and '
        f'catches up during resets. The default is {_learner("hidden_sizes")} with '
        f'{_learner("torch_threads")} thread, '
        + (
            'the fastest measured here'
            if str(_learner('hidden_sizes')) == best
            else 'not the fastest here'
        )
        + ', and it has the '
        f'capacity for the swing-up ({_q("pretrain")}). A smaller batch does not help: '
        f'{swept} with {_learner("torch_threads")} thread and batch '
        f'{" / ".join(map(str, batches))} ran '
        f'{" / ".join(f"{v:.0f}" for v in speeds)} updates/s.'
    )


SB3_RESULT = Result(
    heading="SB3's `train()` alone",
    question="How many SAC updates per second does SB3's own `train()` make on these cores, "
    'and does it reach what the shipped K and rate ask?',
    setup=lambda r: (
        '`bench learner-throughput`: SB3 `train()` alone on a filled buffer, batch '
        + ' / '.join(sorted({str(x['batch_size']) for x in r[SB3_ALONE]['sb3_train_alone']}))
        + ', one network size and thread count at a time.'
    ),
    files=(SB3_ALONE,),
    conclusion=_sb3_conclusion,
)


def _fast_conclusion(r: Records) -> str:
    rows = r[FAST_SAC]['rows']
    by: dict[str, dict[int, float]] = {}
    for x in rows:
        by.setdefault(x['impl'], {})[x.get('repeat', 0)] = x['updates_per_s']
    asked = _learner('gradient_steps') * _learner('rate_hz')

    def ratio(impl: str) -> str:
        return _span([by[impl][k] / by['sb3'][k] for k in by[impl]], 2)

    shipped, fast, sb3 = (list(by[k].values()) for k in ('shipped', 'fast', 'sb3'))
    reached = min(shipped) >= asked
    return (
        f'The shipped update ran at {_span(shipped, 0)} updates/s, the fast one at '
        f"{_span(fast, 0)}, SB3's own `train()` at {_span(sb3, 0)}: the {asked:g}/s that K = "
        f'{_learner("gradient_steps")} asks was '
        + ('reached by the shipped update in every repeat' if reached else 'not always reached')
        + ". That says more about the machine than about the code: SB3's `train()` alone ran "
        'slower in the measurement before ([results_history.md](results_history.md)). The ratio '
        f'to SB3 in the same minute is the figure that carries over: {ratio("shipped")}x for '
        f'the shipped update, {ratio("fast")}x for the fast one. On a slow day the shipped '
        'update stays below what K asks, and the learner catches up during resets. Every '
        'learning result on this page uses the shipped update.'
    )


FAST_RESULT = Result(
    heading="The learner's own update",
    question="How much faster is the learner's own update (`rip_learner/fast_sac.py`, "
    "`fast_updates`, on by default) than SB3's `train()`, beside a control loop?",
    setup=lambda r: (
        "SB3's `train()` mathematics on SB3's own networks and optimizers (a test "
        "checks it ends where SB3's `train()` ends from the same state and seeds), with a call's "
        'batches drawn at once, the squashed Gaussian computed directly, fused Adam and one '
        '`torch._foreach_lerp_` for the target critics. `shipped` is the same update with what '
        'the shipped defaults add (half of each batch from the prior data, the smoothness term '
        f'and its reference pass). Measured beside a {r[FAST_SAC]["control_loop"]}, '
        f'{len({x.get("repeat", 0) for x in r[FAST_SAC]["rows"]})} runs of each, the '
        'implementations back to back in each repeat; code of commit 9db4a66.'
    ),
    tables=(Table('learner-throughput', (FAST_SAC,)),),
    conclusion=_fast_conclusion,
    replicate=(
        (
            'python -m rip_bench learner-throughput --hidden 64,64 --threads 1 --repeat 3 '
            '--seconds '
            '10 --control-loop-hz 50 --impl sb3 fast shipped --json '
            'bench/results/learner_throughput_fast_sac.json'
        ),
    ),
)


SECTION = Section('throughput', 'How fast does the learner update?', (SB3_RESULT, FAST_RESULT))
