"""Question 'history': whether past actions in the observation help a late rig."""

from __future__ import annotations

from typing import Any

from rip_bench.results.goals import FLOOR_S, RESCUE_BALANCE_S
from rip_bench.results.model import Records, Result, Section, Table
from rip_bench.results.text import _control, _mean, _of, _rig, _span

HISTORY_K = tuple(f'action_history_stuck_seed{s}.json' for s in (0, 1, 2))


def _history_setup(r: Records) -> str:
    docs = [r[n] for n in HISTORY_K]
    arms = [a for d in docs for a in d['arms']]
    one = docs[0]
    return (
        'The observation ends with the previous action; `action_history:=k` appends the k '
        'actions before it, newest first ([task.md](task.md)). A policy file records its k, '
        'and the nodes refuse weights of another k. For each k, a re-training as `adapt` '
        f're-trains (warm from the shipped policy, {one["steps"]} simulated steps, the same seed '
        f"for every k) at the stuck rig's exact physics (randomisation `{one['randomization']}`, "
        'so the model is not what differs between the k), then deployed on the emulated stuck '
        f'rig, {one["eval_episodes"]} x {one["eval_seconds"]:g} s from hanging, '
        'deterministically. Every re-training ran its steps '
        f'({_span([a["retrain_wall_s"] / 60 for a in arms], 1)} minutes of one CPU). The '
        "`-dirty` runs had uncommitted edits to the runner's automatic k, pretrain's default k "
        "and this benchmark's deploy call; the benchmark types each k, so none changes what it "
        'runs.'
    )


def _history_conclusion(r: Records) -> str:
    docs = sorted((r[n] for n in HISTORY_K), key=lambda d: d['seed'])
    by_k: dict[int, list[dict[str, Any]]] = {}
    for d in docs:
        for a in d['arms']:
            by_k.setdefault(a['action_history'], []).append(a)
    best = max(by_k, key=lambda k: _mean([a['balance_s'] for a in by_k[k]]))
    parts = []
    for k, arms in by_k.items():
        vals = [a['balance_s'] for a in arms]
        reached = sum(v >= FLOOR_S for v in vals)
        parts.append(
            f'k = {k}: {FLOOR_S:g} s on {_of(reached, len(vals))} seeds '
            f'({_span(vals, 2, " s")}, mean {_mean(vals):.2f} s, worst episode '
            f'{min(a["balance_min_s"] for a in arms):.1f} s)'
        )
    rig = _rig(docs[0]['rig'])
    rate = _control('rate_hz')
    from rip_control.params import table_by_name
    from rip_learner.pretrain import OPTIONS as PRETRAIN

    return (
        '; '.join(parts)
        + f". k = {best} deployed best, its mean above the rescue's {RESCUE_BALANCE_S:g} s. The "
        f'rig reports its state {rig.sensing_latency_s * 1e3:g} ms late '
        f'({rig.sensing_latency_s * rate:g} ticks at {rate:g} Hz), so the last commanded '
        'voltages have acted on a state the observation does not show yet; with them in it, '
        "the policy does not have to guess. New pre-trainings, and `adapt`'s re-training, "
        f"default to k = {table_by_name(PRETRAIN)['action_history'].default}; the nodes' default "
        f'and the shipped `policies/sim_50hz` stay k = {_control("action_history")} (re-made, it '
        'would change every baseline here).'
    )


HISTORY_RESULT = Result(
    heading='',
    question='On a rig that reads its state late and swallows small voltages (the stuck rig), '
    'does a policy that also sees the k actions before the previous one balance better?',
    setup=_history_setup,
    tables=(Table('action-history', HISTORY_K),),
    conclusion=_history_conclusion,
    replicate=(
        (
            'python -m rip_bench action-history --rig config/rig_shifted_stuck.yaml --seed N '
            '--json '
            'FILE'
        ),
    ),
)


SECTION = Section(
    'history', 'Do past actions in the observation help a late rig?', (HISTORY_RESULT,)
)
