"""Question 'adapt': whether a rig the simulation does not cover can be made to balance.

``adapt`` on the shifted rigs (:data:`ADAPT`) and on rigs outside the model
(:data:`GAP_ADAPT_RESULT`), the policies it deployed there held for a minute and pushed
(:data:`LONG_RESULT`), and fine-tuning alone on the stuck rig (:data:`PLAIN_RESULT`), longer
and from a wider prior (:data:`MOONSHOT_RESULT`). Its readers of an ``adapt`` record
(:func:`_after`, :func:`_before`, :func:`_promoted`...) serve other sections too.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
import re
from typing import Any

from rip_bench.results.goals import (
    BUDGET_WALL_S,
    FLOOR_S,
    RESCUE_BALANCE_S,
    RESCUE_WALL_S,
    RESET_SHARE,
)
from rip_bench.results.model import Records, Result, Section, Table
from rip_bench.results.text import (
    _and,
    _bullets,
    _control,
    _list,
    _mean,
    _minutes,
    _of,
    _overrides,
    _q,
    _returns_span,
    _rig,
    _span,
)
from rip_control.rig.env import QUIET_S

ADAPT_K2 = {
    'stuck': tuple(f'adapt_stuck_k2_seed{s}.json' for s in (0, 1, 2)),
    'worn': tuple(f'adapt_worn_k2_seed{s}.json' for s in (0, 1, 2)),
    'nominal': ('adapt_qube_servo2_k2_seed0.json',),
    'heavy': ('adapt_heavy_k2_seed0.json',),
}
ADAPT_K0 = (
    *(f'adapt_stuck_seed{s}.json' for s in (0, 1, 2)),
    *(f'adapt_{rig}_seed0.json' for rig in ('worn', 'qube_servo2', 'heavy')),
)


def _after(d: dict[str, Any]) -> float:
    return float(d['deployment']['adapted_balance_s'])


def _before(d: dict[str, Any]) -> float:
    return float(d['deployment']['prior_balance_s'])


def _candidate_at_s(d: dict[str, Any]) -> float:
    return float(next(c['rig_s'] for c in d['curve'] if c['what'] == '2_candidate'))


def _promoted(evaluations: Sequence[dict[str, Any]]) -> int:
    return sum(e['verdict'] == 'promoted' for e in evaluations)


def _phase_rig_s(d: dict[str, Any], phase: str) -> float:
    return sum(p['rig_seconds'] for p in d['phases'] if p['phase'] == phase)


def _adapt_setup(r: Records) -> str:
    one = r[ADAPT_K2['stuck'][0]]
    o = one['options']
    k = re.search(r'_k(\d+)_', ADAPT_K2['stuck'][0])
    return (
        f'One `adapt` run per rig and seed with its defaults (`rig_minutes` '
        f'{o["rig_minutes"]:g}, `retrain_minutes` {o["retrain_minutes"]:g}, deployments of '
        f'{one["deployment"]["episodes"]} x {o["deployment_episode_seconds"]:g} s from hanging), '
        'from the shipped policy; "before" is the baseline deployment of the same run. The '
        f're-training sees {k.group(1) if k else "?"} past actions (`action_history`, the `k` of '
        f"the records' names; {_q('history')}). Each run from a clean checkout of its commit; "
        f'the {sum("reidentification" in r[n] for names in ADAPT_K2.values() for n in names)} '
        'whose records hold a `reidentification` ran with the brake ladder in the excitation '
        'and the second identification. '
        f'The goals: the stuck rig at least {RESCUE_BALANCE_S:g} s within the '
        f'{one["rig_budget_s"] / 60:g}-minute rig-time budget and {RESCUE_WALL_S / 60:g} minutes '
        f'of wall time (the rescue); the worn rig {FLOOR_S:g} s; the nominal and heavy rigs at '
        f"least the prior's balance minus {_slack():g} s."
    )


def _slack() -> float:
    from rip_bench.matrix import BALANCE_SLACK_S

    return BALANCE_SLACK_S


def _adapt_conclusion(r: Records) -> str:
    stuck = [r[n] for n in ADAPT_K2['stuck']]
    worn = [r[n] for n in ADAPT_K2['worn']]
    everyone = [r[n] for names in ADAPT_K2.values() for n in names]

    def rescued(d: dict[str, Any]) -> bool:
        return (
            _after(d) >= RESCUE_BALANCE_S
            and d['rig_seconds'] <= d['rig_budget_s']
            and d['wall_seconds'] <= RESCUE_WALL_S
        )

    n_rescued = sum(map(rescued, stuck))
    episodes = [e for d in stuck for e in d['deployment']['adapted_episodes_s']]
    stuck_text = (
        f'**Rescue, stuck rig: met on {_of(n_rescued, len(stuck))} seeds**, '
        f'{_span([_after(d) for d in stuck], 2, " s")} within '
        f'{_span([d["rig_seconds"] / 60 for d in stuck], 1)} minutes of rig time and '
        f'{_span([d["wall_seconds"] / 60 for d in stuck], 0)} minutes of wall time, every '
        f'deployment episode {_span(episodes, 1, " s")}. The re-trained policy balanced '
        f'{_span([d["candidate"]["balance_s"] for d in stuck], 2, " s")} at its first deployment, '
        f'{_span([_candidate_at_s(d) / 60 for d in stuck], 1)} minutes into the rig time; the '
        'fine-tune after it kept that (the guard).'
    )
    n_worn = sum(_after(d) >= FLOOR_S for d in worn)
    worn_text = (
        f'**Worn rig: {FLOOR_S:g} s met on {_of(n_worn, len(worn))} seeds**, '
        f'{_list([_after(d) for d in worn])} s (mean {_mean([_after(d) for d in worn]):.2f} s) '
        f'from {_span([_before(d) for d in worn], 2, " s")}, within '
        f'{_span([d["rig_seconds"] / 60 for d in worn], 1)} minutes of rig time and '
        f'{_span([d["wall_seconds"] / 60 for d in worn], 0)} minutes of wall time; the '
        f're-trained policy balanced '
        f'{_span([d["candidate"]["balance_s"] for d in worn], 2, " s")} '
        f'from its first deployment, {_span([_candidate_at_s(d) / 60 for d in worn], 1)} minutes '
        'in.'
    )
    kept = []
    for rig in ('nominal', 'heavy'):
        runs = [r[n] for n in ADAPT_K2[rig]]
        ok = sum(_after(d) >= _before(d) - _slack() for d in runs)
        evs = [e for d in runs for e in d['finetune']['evaluations']]
        kept.append(
            f'{rig} {_list([_before(d) for d in runs])} → {_list([_after(d) for d in runs])} s '
            f'({"met" if ok == len(runs) else f"met on {ok} of {len(runs)}"}; the guard '
            f'promoted {_promoted(evs)} of {len(evs)} fine-tune evaluations)'
        )
    seeds = {len(ADAPT_K2[rig]) for rig in ('nominal', 'heavy')}
    kept.append('one seed each' if seeds == {1} else 'over their seeds')
    again = [d for d in everyone if 'reidentification' in d]
    moved = sum(len(d['reidentification']['moved']) for d in again)
    retrained = sum(bool(d['reidentification'].get('retrain')) for d in again)
    data_s = [
        d['reidentification']['seconds_of_data']
        for d in again
        if 'seconds_of_data' in d['reidentification']
    ]
    again_text = (
        f"In the {len(again)} runs with the second identification (from the baseline's and the "
        f"candidate's transitions, {_span(data_s, 0)} s of data), it moved "
        + ('no parameter' if moved == 0 else f'{moved} parameters')
        + ' beyond its resolution, so '
        + (
            'no second re-training ran: that branch has its test (`test_adapt`) but has not '
            'run in a benchmark.'
            if retrained == 0
            else f'{retrained} second re-trainings ran.'
        )
    )
    dep_s = [_phase_rig_s(d, '4_deployment') for d in stuck]
    n_dep = stuck[0]['deployment']['episodes']
    dep_len = stuck[0]['options']['deployment_episode_seconds']
    reset_s = [(s - n_dep * dep_len) / n_dep for s in dep_s]
    dead_zone = _rig(stuck[0]['rig']).motor_dead_zone_v
    resets = (
        f'The rig time is mostly resets: on the stuck rig a deployment of {n_dep} x '
        f'{dep_len:g} s took {_span(dep_s, 0)} s of rig time, {_span(reset_s, 0)} s of reset per '
        f'episode. Its arm cannot calm a small swing (every correction is inside its '
        f'{dead_zone:g} V dead zone), so the pendulum settles on its own damping. That bounds '
        'how far below the budget this can go.'
    )
    return _bullets(
        stuck_text,
        worn_text,
        '**Never worse, nominal and heavy rigs**: ' + '; '.join(kept[:-1]) + f', {kept[-1]}.',
        again_text,
        resets,
        'The re-trained policy is judged as it came from simulation. An earlier version let the '
        'learner update it before the guard saw it, and on the stuck rig the updates unlearned '
        'it (not recorded).',
        'A wrong identification stays off the rig: given a rig file with the wrong motor '
        'winding resistance (`identification:=FILE`), the guard rejects the policy re-trained '
        'at it and the fine-tune goes on from the prior (`test/test_launch_file.py`, under '
        '`ros2 launch`).',
    )


ADAPT = Result(
    heading='`adapt`: identify, re-train in simulation, fine-tune',
    question="Does `rip_control.adapt` (identify the rig's physics from its own transitions, "
    're-train in simulation at it, then a guarded fine-tune) make a rig balance that the '
    'simulation-only policy cannot, within its rig-time budget, and leave the rigs the policy '
    'already balances no worse?',
    setup=_adapt_setup,
    tables=(Table('adapt', tuple(n for names in ADAPT_K2.values() for n in names)),),
    conclusion=_adapt_conclusion,
    replicate=(
        'python -m rip_bench adapt --rig config/rig_shifted_stuck.yaml --seed N --json FILE',
    ),
)

#: ``adapt`` within a small budget: 2 rig-minutes on the rigs built from the model, 4 on rigs
#: outside it; each beside the 10-minute records of the same rig and seed (:data:`TEN_MINUTES`).
BUDGET = (
    *(f'adapt_budget2_stuck_seed{s}.json' for s in (0, 1, 2)),
    *(f'adapt_budget2_worn_seed{s}.json' for s in (0, 1, 2)),
    'adapt_budget2_qube_servo2_seed0.json',
    'adapt_budget2_heavy_seed0.json',
    *(f'adapt_budget4_gap_sticky_seed{s}.json' for s in (0, 1, 2)),
    *(f'adapt_budget4_gap_laggy_seed{s}.json' for s in (0, 1, 2)),
    *(f'adapt_budget4_gap_heavy_tip_seed{s}.json' for s in (0, 1, 2)),
)
TEN_MINUTES = {
    'stuck': ADAPT_K2['stuck'],
    'worn': ADAPT_K2['worn'],
    'qube_servo2': ADAPT_K2['nominal'],
    'heavy': ADAPT_K2['heavy'],
    'gap_sticky': ('adapt_gap_sticky_seed0.json', 'adapt_gap_sticky_seed1.json'),
    'gap_laggy': ('adapt_gap_laggy_seed0.json',),
    'gap_heavy_tip': tuple(f'adapt_gap_heavy_tip_seed{s}.json' for s in (0, 1, 2)),
}


def _budget_setup(r: Records) -> str:
    return (
        '`adapt` as typed with a small `rig_minutes` (`python -m rip_bench adapt --rig-minutes '
        'M`), its other options the defaults: 2 minutes on the rigs built from the model, 4 on '
        'three rigs outside it. The plan fits the excitation and two deployments into the budget '
        '(as many 10-s episodes each as fit) and leaves the rest out. What the run deployed is '
        "then measured again, 5 x 10 s from hanging on the same rig (the record's `check`, "
        "not counted as the run's rig time): the goal's measure, whatever the budget let the "
        "run's own deployments hold. Beside each rig its 10-minute records (the same seeds "
        'where there are; earlier commits: the reset before the braking one). Where identifying '
        'again moves the physics, or where what goes on falls short of the target (then '
        're-trained from the prior with the next seed: another draw), a second candidate runs if '
        "its deployment fits and takes no fine-tune's place (`reidentification` in the record)."
    )


def _second_candidates(runs: list[dict[str, Any]]) -> str:
    """What identifying again did, over the runs that tried it."""
    tried = [d for d in runs if (d.get('reidentification') or {}).get('identified')]
    if not tried:
        return ''
    deployed = [d for d in tried if d['reidentification'].get('candidate')]
    return (
        f'Identified again in {_of(len(tried), len(runs))} runs; a second candidate deployed '
        f'in {len(deployed)}'
        + ''.join(
            f'; {_rig_key(d)} (seed {d["seed"]}): {c["balance_s"]:.2f} s, {c["verdict"]}'
            + _another_draw(d)
            for d in deployed
            for c in (d['reidentification']['candidate'],)
        )
        + '. '
    )


def _another_draw(d: dict[str, Any]) -> str:
    """Where the second candidate was another draw from the prior: after what it followed."""
    again = d['reidentification']
    if again.get('retrain_seed') in (None, d['seed']):
        return ''
    return (
        f' (another draw from the prior, seed {again["retrain_seed"]}, after the first '
        f"candidate's {d['candidate']['balance_s']:.2f} s)"
    )


def _rig_key(d: dict[str, Any]) -> str:
    return Path(d['rig']).stem.removeprefix('rig_shifted_').removeprefix('rig_')


def _budget_line(d: dict[str, Any]) -> str:
    dep, reached = d['deployment'], d.get('target_rig_seconds')
    over = d['rig_seconds'] - d['rig_budget_s']
    return (
        f'{_rig_key(d)} (seed {d["seed"]}, {_minutes(d["rig_budget_s"], 0)} minutes): '
        f'{_before(d):.2f} s -> {d["check"]["balance_s"]:.2f} s in the check '
        f'({_after(d):.2f} s over its own {len(dep["adapted_episodes_s"])} episodes); '
        f'{_minutes(d["rig_seconds"], 2)} rig-minutes '
        + (f'({over:+.0f} s over)' if over > 0 else '(within)')
        + f', {100 * d["reset_seconds"] / d["rig_seconds"]:.0f} % of it resets; '
        + (
            f'{FLOOR_S:g} s first reached at {_minutes(reached, 2)} rig-minutes; '
            if reached is not None
            else f'{FLOOR_S:g} s reached in no deployment; '
        )
        + f'{_minutes(d["wall_seconds"])} minutes of wall time'
    )


def _budget_conclusion(r: Records) -> str:
    runs = [r[n] for n in BUDGET]
    by_rig: dict[str, list[dict[str, Any]]] = {}
    for d in runs:
        by_rig.setdefault(_rig_key(d), []).append(d)
    beside = []
    for rig, mine in by_rig.items():
        checks = [d['check']['balance_s'] for d in mine]
        ten = [_after(r[n]) for n in TEN_MINUTES[rig]]
        beside.append(
            f'{rig}: {_span(checks)} s in {_minutes(mine[0]["rig_budget_s"], 0)} rig-minutes '
            f'against {_span(ten)} s in 10'
        )
    checks = [d['check']['balance_s'] for d in runs]
    walls = [d['wall_seconds'] / 60 for d in runs]
    resets = [100 * d['reset_seconds'] / d['rig_seconds'] for d in runs]
    overs = [d['rig_seconds'] - d['rig_budget_s'] for d in runs]
    met = sum(c >= FLOOR_S for c in checks)
    stuck = [d['wall_seconds'] / 60 for d in by_rig.get('stuck', [])]
    return (
        _bullets(*(_budget_line(d) for d in runs))
        + '\n\n'
        + f'{_of(met, len(runs))} runs balance {FLOOR_S:g} s or more in the check; by rig, the '
        'small budget against 10 minutes (final deployments): '
        + '; '.join(beside)
        + (
            f'. No run passed its budget (the nearest ended {-max(overs):.0f} s inside it). '
            if max(overs) <= 0
            else f'. The most a run passed its budget by: {max(overs):.0f} s. '
        )
        + ''.join(
            f'On {_rig_key(d)} (seed {d["seed"]}) the re-trained candidate balanced '
            f"{d['candidate']['balance_s']:.2f} s against the prior's {_before(d):.2f} s and was "
            f'rejected ({d["candidate"]["reason"]}); no fine-tune fitted what was left. '
            for d in runs
            if d['candidate']['verdict'] == 'rejected'
        )
        + _second_candidates(runs)
        + 'Resets are '
        f'{_span(resets, 0)} % of the rig time (the goal: {100 * RESET_SHARE:.0f} % at most). '
        f'The wall time is {_span(walls, 1)} minutes, on the stuck rig {_span(stuck, 1)} (the '
        f'goal: {BUDGET_WALL_S / 60:.0f}).'
    )


BUDGET_RESULT = Result(
    heading='... within a budget of minutes',
    question='Does `adapt` rescue a rig with a fifth of the rig time (2 minutes; 4 outside the '
    'model), never worse where the policy already balances, and where does the rig time go?',
    setup=_budget_setup,
    tables=(Table('adapt-budget', BUDGET),),
    conclusion=_budget_conclusion,
    compare=tuple(n for names in TEN_MINUTES.values() for n in names if n not in BUDGET),
    replicate=(
        'python -m rip_bench adapt --rig config/rig_shifted_stuck.yaml --seed N '
        '--rig-minutes 2 --check-episodes 5 --json FILE',
    ),
)

#: ``adapt`` on the reality-gap rigs (``bench/rigs/gap_*.yaml``: a plant outside the model).
RESET = 'reset_offline.json'


def _reset_conclusion(r: Records) -> str:
    by: dict[str, list[float]] = {}
    timed_out: dict[str, int] = {}
    for runs_by in r[RESET]['rigs'].values():
        for name, runs in runs_by.items():
            by.setdefault(name, []).extend(x['seconds'] for x in runs)
            timed_out[name] = timed_out.get(name, 0) + sum(not x['settled'] for x in runs)
    n = len(next(iter(by.values())))
    return (
        _bullets(
            *(
                f'{name}: {_mean(s):.2f} s on average over the {n} resets, the longest '
                f'{max(s):.1f} s' + (f', {timed_out[name]} timed out' if timed_out[name] else '')
                for name, s in by.items()
            )
        )
        + '\n\nThe reset the rig env runs is the first row. Its floor learns the least '
        'voltage that moves a still arm and gives it back while the arm moves; a floor that '
        'held once the arm moved kept growing at the turning points of a small swing on the '
        "laggy gap rig and kept arm and pendulum swinging (that rig's reset from upright never "
        'settled before). Offline on the firmware logic, with no serial link: on the emulated '
        "rig the same controller's resets are what adapt's records count (`reset_seconds`)."
    )


RESET_RESULT = Result(
    heading='The reset between episodes, offline',
    question='How long does the reset take from what episodes leave behind, and what does '
    'each part of it add?',
    setup=lambda r: (
        "The rig env's reset controller (`ResetController`: centring with its integral, the "
        "brake on the pendulum's angle and velocity, the brake's floor), tick by tick at "
        f"{_control('rate_hz'):g} Hz against each rig's plant on an explicit clock, from each "
        'start of `rip_bench.reset.STARTS` (the arm off centre or moving, the pendulum '
        'swinging wide, upright and still, falling), until the quiet rule has held for '
        f'{QUIET_S:g} s; compared with itself without the floor and with the brake on the '
        'velocity alone.'
    ),
    tables=(Table('reset', (RESET,)),),
    conclusion=_reset_conclusion,
    replicate=('python -m rip_bench reset --json bench/results/reset_offline.json',),
)


GAP_ADAPT = tuple(
    f'adapt_gap_{rig}_seed{seed}.json'
    for rig, seed in (
        ('sticky', 0),
        ('sticky', 1),
        ('laggy', 0),
        ('heavy_tip', 0),
        ('heavy_tip', 1),
        ('heavy_tip', 2),
    )
)


def _gap_adapt_setup(r: Records) -> str:
    return (
        '**Rigs outside the model** (a reality gap): the Python emulator plays the gap plant '
        '([reality_gap.md](reality_gap.md)), whose friction, dead zone, cable, actuator, '
        'pendulum, backlash and sensing have forms the identification and the simulator do not '
        'contain; the loop and its budget as above. The shipped policy balances under a second '
        'on the sticky rig and the laggy one.'
    )


def _gain_text(d: dict[str, Any]) -> str:
    """What the fine-tune on the rig added over the policy it started from, with its interval."""
    if 'finetune_gain_s' not in d:  # a record from before the gain was measured
        episodes = (d.get('finetune') or {}).get('episodes') or 0
        return f'{episodes} fine-tune episodes (their gain not measured in this record); '
    g = d['finetune_gain_s']
    if not g or g.get('mean') is None:
        return 'no fine-tune episode (the candidate is the result); '
    interval = (
        f' (90 % interval {g["ci90_low"]:+.2f} to {g["ci90_high"]:+.2f})'
        if g.get('ci90_low') is not None
        else ''
    )
    return f'the fine-tune {g["mean"]:+.2f} s over its start{interval}; '


def _gap_adapt_conclusion(r: Records) -> str:
    runs = [r[n] for n in GAP_ADAPT]
    lines = []
    for d in runs:
        sel = (d.get('identification') or {}).get('selection') or {}
        kept = [v['term'] for v in sel.get('terms', {}).values() if v['kept']]
        lines.append(
            f'{Path(d["rig"]).stem} (seed {d["seed"]}): {_before(d):.2f} s -> {_after(d):.2f} s; '
            f'the re-trained candidate {d["candidate"]["balance_s"]:.2f} s '
            f'({d["candidate"]["verdict"]}) at {_minutes(_candidate_at_s(d))} rig-minutes; '
            f'{_minutes(d["rig_seconds"])} rig-minutes in all; '
            + _gain_text(d)
            + 'the identification kept '
            + (_and(kept) if kept else 'no term')
            + (
                f' and left {sel["unexplained_counts"]:.1f} encoder counts unexplained'
                if 'unexplained_counts' in sel
                else ''
            )
        )
    by_rig: dict[str, list[float]] = {}
    for d in runs:
        by_rig.setdefault(Path(d['rig']).stem, []).append(_after(d))
    spread = [
        f'{rig}: {len(v)} seeds, final balances {_list(v)} s, {max(v) - min(v):.2f} s apart'
        + (
            f' ({"within" if max(v) - min(v) <= 1.0 else "not within"} a second; '
            f'{"every" if min(v) >= FLOOR_S else "not every"} seed at {FLOOR_S:g} s or more)'
            if len(v) >= 3
            else ''
        )
        for rig, v in by_rig.items()
        if len(v) > 1
    ]
    few = sorted(rig for rig, v in by_rig.items() if len(v) < 3)
    return (
        _bullets(*lines)
        + '\n\n'
        + (('Over seeds: ' + '; '.join(spread) + '. ') if spread else '')
        + (
            f'Too few seeds on {_and(few)} to call the outcome dependable there (the goal: three '
            'seeds per rig within a second of each other). '
            if few
            else ''
        )
        + 'A 10-s deployment from hanging caps balance near 9 s: the minute-long deployments '
        'below show what these policies hold.'
    )


GAP_ADAPT_RESULT = Result(
    heading='... on rigs outside the model',
    question='Does `adapt` rescue a rig whose physics the identification and the simulator do '
    'not contain?',
    setup=_gap_adapt_setup,
    tables=(Table('adapt', GAP_ADAPT),),
    conclusion=_gap_adapt_conclusion,
    replicate=('python -m rip_bench adapt --rig bench/rigs/gap_RIG.yaml --seed N --json FILE',),
)

#: Long offline deployments with a push, on the gap rigs, of the policies ``adapt`` deployed.
LONG = tuple(f'long_deployment_gap_{rig}.json' for rig in ('sticky', 'laggy', 'heavy_tip'))


def _long_line(name: str, p: dict[str, Any]) -> str:
    m = p['measures']
    after, tv, flips = (
        m[k] for k in ('balanced_after_swing_up', 'action_tv_per_s', 'sign_changes_per_s')
    )
    interval = (
        f' (90 % interval {after["ci90_low"]:.0%}-{min(after["ci90_high"], 1.0):.0%})'
        if after['ci90_low'] is not None
        else ''
    )
    return (
        f'{name}: balanced {after["mean"]:.0%} of the time after its swing-up{interval}, '
        f'longest balance {m["longest_balance_s"]["mean"]:.1f} s; chatter {tv["mean"]:.1f}/s '
        f'of total variation, {flips["mean"]:.1f} sign changes/s; recovered from '
        f'{p["recovered"]} of {p["pushes"]} pushes'
    )


def _long_conclusion(r: Records) -> str:
    blocks = []
    for name in LONG:
        d = r[name]
        lines = [_long_line(n, p) for n, p in d['policies'].items()]
        blocks.append(f'**{Path(d["rig"]).stem}** ({d["kind"]}):\n\n' + _bullets(*lines))
    held, smooth, rigs = [], [], []
    for name in LONG:
        d = r[name]
        rig = Path(d['rig']).stem
        rigs.append(rig)
        shipped = d['policies']['shipped']['measures']['action_tv_per_s']['mean']
        adapted = [p for n, p in d['policies'].items() if n != 'shipped']
        if all(p['measures']['balanced_after_swing_up']['mean'] >= 0.9 for p in adapted):
            held.append(rig)
        ratio = max(p['measures']['action_tv_per_s']['mean'] for p in adapted) / shipped
        smooth.append(f'{rig} {ratio:.1f} times')
    d0 = r[LONG[0]]
    verdict = (
        f'Against the goals: the adapted policies held at least 90 % after swing-up on '
        f'{len(held)} of {len(rigs)} gap rigs ({_and(held) or "none"}); their chatter '
        "(total variation per second) against the shipped policy's on the same rig: "
        + '; '.join(smooth)
        + ' (the goal: at most once). The shipped policy balances little on the sticky and '
        "laggy rigs, so its chatter there is a swinging policy's, not a balancing one's."
    )
    return (
        '\n\n'.join(blocks)
        + '\n\n'
        + verdict
        + f'\n\n{d0["episodes"]} episodes of {d0["seconds"]:g} s per policy; a push changes the '
        f"pendulum's angular velocity by {d0['kick_rad_s']:g} rad/s once it has balanced "
        f'{d0["kick_after_s"]:g} s (an episode that never balanced that long gets none); '
        f'recovered: balanced again within {d0["recover_within_s"]:g} s and at the end. The goal '
        'is at least 90 % of a 60-s deployment after swing-up, on at least half of the gap rigs, '
        "and no more chatter than the shipped policy's on the same rig."
    )


LONG_RESULT = Result(
    heading='... held for a minute, and pushed',
    question='Do the policies `adapt` deployed on the gap rigs hold balance for a minute, as '
    'smoothly as the shipped policy, and recover from a push?',
    setup=lambda r: (
        'Offline, behind the real firmware logic (`rip_bench.offline_rig`): the shipped policy '
        'and the policies the gap-rig `adapt` records above deployed (their `deployed_policy`), '
        'deterministic, from hanging, on the same gap rig.'
    ),
    conclusion=_long_conclusion,
    files=LONG,
    replicate=(
        'python -m rip_bench long-deployment --rig bench/rigs/gap_RIG.yaml --policy '
        'shipped=policies/sim_50hz/policy.safetensors --policy NAME=DEPLOYED_POLICY --json FILE',
    ),
)

PLAIN = ('plain_stuck_seed0_b1a5e48.json', 'plain_stuck_seed0.json', 'adapt_stuck_seed0.json')


def _plain_conclusion(r: Records) -> str:
    first, second, adapt = (r[n] for n in PLAIN)
    plain = (first, second)
    moved = any(_after(d) >= RESCUE_BALANCE_S for d in plain)
    verdict = 'moves' if moved else 'does not move'
    return (
        f'The plain fine-tune {verdict} the stuck rig: it deployed at '
        f'{_list([_after(d) for d in plain])} s from {_list([_before(d) for d in plain])} s; '
        f'`adapt` on the same rig and seed reached {_after(adapt):.2f} s. The first plain run '
        f'used {_minutes(first["rig_seconds"])} minutes of rig time against its '
        f'{first["rig_budget_s"] / 60:g}: it ran before the rig time counted every activation, '
        'so its plan overran the budget. The second, with the rig-time limit, stopped its '
        f"fine-tune after {second['finetune']['episodes']} episodes, when a serial stall's re-run "
        'would not have fitted in what was left.'
    )


PLAIN_RESULT = Result(
    heading='Fine-tuning alone, on the same rig and budget',
    question='Does the guarded SAC fine-tune from the shipped policy, with nothing before it, '
    'move the stuck rig within the same budget?',
    setup=lambda r: (
        'The same rig, seed, deployments and rig-time budget as `adapt`; the '
        '`adapt` row is the run re-trained without past actions '
        '([results_history.md](results_history.md)).'
    ),
    tables=(Table('adapt-vs-plain', PLAIN),),
    conclusion=_plain_conclusion,
    replicate=(
        (
            'python -m rip_bench adapt --arm plain --rig config/rig_shifted_stuck.yaml --seed 0 '
            '--json FILE'
        ),
    ),
)

MOONSHOT = ('moonshot_stuck.json', 'sim_finetune_stuck_sim_50hz_wide_moonshot.json')


def _moonshot_setup(r: Records) -> str:
    rig, sim = (r[n] for n in MOONSHOT)
    ft = rig['finetune']['async']
    o = _overrides(rig)
    return (
        f'No table; {len(MOONSHOT)} attempts. On the emulated stuck rig, the fine-tune as '
        'shipped then '
        "(SAC's own sampling: there was no `train_noise_scale` yet), "
        f'{rig["episode_seconds"]:g} s episodes, the guard turned into a periodic measurement '
        f'(after every {rig["guard_eval_every_episodes"]} training episodes an evaluation of '
        f'{float(o["eval_episode_seconds"]):g} s, and `eval_margin` {o["eval_margin"]} lets the '
        'candidate drive whatever it scores), stopped by hand after '
        f'{_minutes(ft["rig_seconds"])} minutes of rig time ({len(ft["episode_returns"])} '
        f'training and {len(ft["evaluations"])} evaluation episodes; balance over rig time in '
        '`bench/results/v5_rig_shifted_stuck_rig_time.png`). In simulation, from the wide prior '
        f'(`policies/sim_50hz_wide/`), with the smoothness reference, {sim["episodes"]} episodes '
        f'of {sim["episode_seconds"]:g} s with the same periodic, always-promoting guard; code '
        "of commit 323b824, SAC's own sampling."
    )


def _moonshot_conclusion(r: Records) -> str:
    rig, sim = (r[n] for n in MOONSHOT)
    ft = rig['finetune']['async']
    base, *cands = ft['evaluations']
    rets = ft['episode_returns']
    every = rig['guard_eval_every_episodes']
    learner = ft['learner']
    updates, transitions = (
        int(learner['gradient_steps_done']),
        int(learner['transitions_accepted']),
    )
    beat = any(c['return'] > base['return'] for c in cands)
    dep = rig['deployment']
    s = sim['runs'][0]
    evs = s['evaluations']
    best_i = max(range(len(evs)), key=lambda i: evs[i]['return'])
    fell = [e for e in evs[-3:] if e['balance_s'] == 0] or evs[-3:]
    return _bullets(
        f'On the rig, the first candidate evaluated at {cands[0]["return"]:.0f} against the '
        f"starting policy's {base['return']:.0f} and balanced {cands[0]['balance_s']:.2f} s; the "
        f'training returns fell from {_returns_span(rets[:every])} to {min(rets):.0f}: the '
        'unlearning step of the worn rig. From there it climbed back (evaluations '
        f'{_list([c["return"] for c in cands[1:]], 0)}; the last training returns '
        f'{_returns_span(rets[-every:])}), but the longest balance stayed at or under '
        f'{max(e["balance_s"] for e in ft["episodes"]):.2f} s in every episode. '
        + (
            "No candidate beat the starting policy's evaluation, so its deployment "
            f'({dep["async_finetuned"]["summary"]["longest_balance_s"]["mean"]:.2f} s, against '
            f'{dep["sim_only"]["summary"]["longest_balance_s"]["mean"]:.2f} s for the same policy '
            "measured first) shows only this rig's spread."
            if not beat
            else "A candidate beat the starting policy's evaluation."
        ),
        f'The learner kept up: {updates} updates over {transitions} transitions '
        f'({updates / transitions:.1f} per transition, {float(learner["updates_per_s"]):.0f} '
        f"updates/s), because the stuck rig's resets are long ({len(ft['episodes'])} episodes). "
        'The bound is not the update rate.',
        f'In simulation the wide prior starts at {sim["starting_policy"]["balance_s"]:.2f} s on '
        f'this rig. The evaluation returns climbed from {evs[0]["return"]:.0f} to '
        f'{evs[best_i]["return"]:.0f} (evaluation {best_i + 1} of {len(evs)}), but the longest '
        f'balance stayed at or below {max(e["balance_s"] for e in evs):.2f} s in every '
        f'evaluation, and {len(fell)} of the last three evaluations fell back to '
        f'{_returns_span([e["return"] for e in fell])} with 0 s of balance. Its best policy '
        'deployed at '
        f'{s["deployed"]["balance_s"]:.2f} s ({s["updates"]} updates).',
        f"So neither {_minutes(ft['rig_seconds'])} minutes of the rig's own data nor "
        f'{sim["episodes"] * sim["episode_seconds"] / 60:g} simulated minutes buy a balancing '
        'policy by fine-tuning alone, with this learner, from either prior. The bound is what '
        'the learner makes of the data. `adapt` (above) is what reaches the goals.',
    )


MOONSHOT_RESULT = Result(
    heading='Fine-tuning alone, longer, and from a wider prior',
    question='With more rig time, a wider pre-training, or an update that does not unlearn '
    'first, does fine-tuning alone rescue the stuck rig?',
    setup=_moonshot_setup,
    files=MOONSHOT,
    conclusion=_moonshot_conclusion,
    replicate=(
        (
            'python -m rip_bench v5 --rig config/rig_shifted_stuck.yaml --skip-sync --episodes 45 '
            '--episode-seconds 10 --guard 3 --set rip_control.eval_margin=0.99 --set '
            'rip_control.eval_episode_seconds=10 --label moonshot --json '
            'bench/results/moonshot_stuck.json --plots bench/results'
        ),
        (
            'python -m rip_bench sim-finetune --rig config/rig_shifted_stuck.yaml --policy '
            'policies/sim_50hz_wide/policy.safetensors --seeds 0 --episodes 60 --episode-seconds '
            '10 '
            '--guard 3 --set rip_control.eval_margin=0.99 --set '
            'rip_control.eval_episode_seconds=10 '
            '--json bench/results/sim_finetune_stuck_sim_50hz_wide_moonshot.json'
        ),
    ),
)


SECTION = Section(
    'adapt',
    'Can a rig the simulation does not cover be made to balance?',
    (
        ADAPT,
        BUDGET_RESULT,
        RESET_RESULT,
        GAP_ADAPT_RESULT,
        LONG_RESULT,
        PLAIN_RESULT,
        MOONSHOT_RESULT,
    ),
)
