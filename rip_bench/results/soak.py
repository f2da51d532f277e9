"""Question 'soak': whether a fine-tune runs for hours without growing.

Memory, files and threads of every process over hours (:data:`SOAK_RESULT`), and what the
learner makes of hours on two rigs (:data:`SOAK_LEARNING_RESULT`). The section is on the
page only where soak records are (:data:`SOAK`); the benchmark is :mod:`rip_bench.soak`.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from rip_bench import soak
from rip_bench.paths import RESULTS
from rip_bench.results.model import Records, Result, Section, Table
from rip_bench.results.text import _bullets

#: The soak records (one rig, two rigs), as committed.
SOAK = tuple(sorted(p.name for p in RESULTS.glob('soak_*rig.json')))


def _soak_rigs(name: str) -> str:
    """``soak_2rig.json`` -> ``2``."""
    return name.removeprefix('soak_').removesuffix('rig.json')


def _soak_minutes(name: str) -> float:
    return float(json.loads((RESULTS / name).read_text())['minutes'])


def _soak_setup(r: Records) -> str:
    d = r[SOAK[0]]
    rigs = ' and '.join(str(r[n]['rigs']) for n in SOAK)
    return (
        f'`python -m rip_bench soak`: the whole fine-tune through the runner for '
        f'{d["minutes"]:g} minutes of rig time on {rigs} emulated '
        f'rig{"s" * (len(SOAK) > 1 or d["rigs"] > 1)} (the defaults: '
        f'{d["args"]["rate"]} Hz, the guard on, episodes until the rig-time limit), each '
        f"emulator's firmware clock set to wrap {d['wrap_after_s']:g} s in; every "
        f'{d["sample_s"]:g} s the resident memory, open files and threads of every process of '
        'the run, from `/proc`. A slope is a least-squares line through the samples after the '
        f"first {d['warmup_s']:g} s (the imports, the first fills), each process's last sample "
        '(the ordered stop) left out.'
    )


def _after_warmup(d: dict[str, Any], name: str, key: str) -> list[float]:
    """``key`` of a process's samples after the warm-up, its last (the stop) left out."""
    mine = [s for s in d['samples'] if s['process'] == name][:-1]
    return [s[key] for s in mine if s['t_s'] >= d['warmup_s']]


def _learner_growth_mib(d: dict[str, Any]) -> float:
    late = _after_warmup(d, 'learner_node', 'rss_kib')
    return (late[-1] - late[0]) / 1024 if len(late) > 1 else 0.0


def _stored_after_warmup(d: dict[str, Any]) -> float:
    """Transitions the learner received between its first and last sample after warm-up."""
    late = _after_warmup(d, 'learner_node', 't_s')
    if len(late) < 2 or not d['wall_seconds']:
        return 0.0
    return d['transitions_received'] * (late[-1] - late[0]) / d['wall_seconds']


def _soak_run(d: dict[str, Any]) -> str:
    episodes = d['episodes']
    violations = sum(e['violations'] for e in episodes)
    procs = d['processes']
    slopes = ', '.join(
        f'{name} {p["rss_slope_mib_per_h"]:+.1f}'
        for name, p in procs.items()
        if p['rss_slope_mib_per_h'] is not None
    )
    growth = ', '.join(
        f'{name} {(late[-1] - late[0]) / 1024:+.1f}'
        for name in procs
        if len(late := _after_warmup(d, name, 'rss_kib')) > 1
    )
    changed = {
        name: (min(fds), max(fds))
        for name in procs
        if (fds := _after_warmup(d, name, 'fds')) and max(fds) != min(fds)
    }
    # Older records predate the emulator's word on it (``clock_wraps_read``): the run outlasted
    # the wrap by minutes, reading every tick.
    crossed = not d['failure'] and (
        all(d['clock_wraps_read'])
        if 'clock_wraps_read' in d
        else d['wall_seconds'] > d['wrap_after_s']
    )
    from rip_control.params import LEARNER_PARAMETERS, defaults

    capacity = int(defaults(LEARNER_PARAMETERS)['buffer_size'])
    return (
        f'**{d["rigs"]} rig{"s" * (d["rigs"] > 1)}, {d["wall_seconds"] / 60:.0f} minutes:** '
        f'{len(episodes)} episodes, {violations} timing violations, {d["violation_restarts"]} '
        f're-activations, {d["serial_errors"]} serial errors'
        + (
            (
                "; the control node read every rig's firmware clock across its wrap (the "
                'emulators saw it) and the run went on. '
                if 'clock_wraps_read' in d
                else '; the firmware clock wrapped mid-run and the run went on. '
            )
            if crossed
            else '. '
        )
        + f'{d["transitions_published"]} transitions published, {d["transitions_received"]} '
        'received by the learner; '
        + (
            f'its buffer (of {capacity}) filled about {full / 60:.0f} minutes in (at the mean '
            f'rate transitions arrived) and then replaced {d["buffer_evicted"]} of its oldest; '
            "the learner's memory slope from then on, "
            f'{soak.learner_slope_when_full(d, capacity) or 0.0:+.1f} MiB per hour. '
            if (full := soak.buffer_full_s(d, capacity)) is not None
            else f'its buffer (of {capacity}) never filled: the eviction point was not reached. '
        )
        + f'Memory after the warm-up: slopes {slopes} MiB per hour; growth from the first '
        f'sample to the last, {growth} MiB'
        + (
            f' (the learner stores every transition: {1024**2 * learner / stored:.0f} B of its '
            'growth per transition stored meanwhile)'
            if not d['buffer_evicted']
            and (learner := _learner_growth_mib(d))
            and (stored := _stored_after_warmup(d))
            else ''
        )
        + '. Open files after the warm-up: '
        + (
            'the same number in every process throughout.'
            if not changed
            else ', '.join(f'{n} between {lo} and {hi}' for n, (lo, hi) in changed.items()) + '.'
        )
    )


def _soak_learning(d: dict[str, Any]) -> str:
    """What the guard made of the learner's candidates, per rig ('' for an older record)."""
    if not d['episodes'] or 'verdict' not in d['episodes'][0]:
        return ''
    parts = []
    for rig in sorted({e['rig'] for e in d['episodes']}):
        judged = [
            e
            for e in d['episodes']
            if e['rig'] == rig and e['kind'] == 'evaluation' and e['verdict'] != 'baseline'
        ]
        if not judged:
            continue
        promoted = [i for i, e in enumerate(judged) if e['verdict'] == 'promoted']
        tail = judged[promoted[-1] + 1 :] if promoted else judged
        text = (
            f'{rig}: {len(promoted)} of {len(judged)} candidates promoted, '
            f'{len(judged) - len(promoted)} rejected'
        )
        if len(tail) >= 10:
            live = tail[-1]['live_version']
            text += (
                f'; the last promotion was at candidate {promoted[-1] + 1 if promoted else 0}, '
                f'and the {len(tail)} after it were all rejected (returns from '
                f'{min(e["return"] for e in tail):.1f} to {max(e["return"] for e in tail):.1f}, '
                f'median {float(np.median([e["return"] for e in tail])):.1f}; longest balance '
                f'{max(e["balance_s"] for e in tail):.2f} s), the rig running v{live} to the end'
            )
        parts.append(text)
    return f'{_soak_label(d)}, per rig: ' + '; '.join(parts) + '.'


def _soak_conclusion(r: Records) -> str:
    d = r[SOAK[0]]
    trace_mib_h = 24 * float(d['args']['rate']) * 3600 / 2**20  # a traced tick: 3 doubles
    return _bullets(
        *(_soak_run(r[n]) for n in SOAK),
        "The control node's tick trace fills a fixed ring as the run goes "
        f'({trace_mib_h:.1f} MiB an hour at this rate, up to its end): growth of that size is '
        'its pages being touched, not a leak.',
        'Memory against time, each process: '
        + ', '.join(
            f'![soak, {_soak_rigs(n)} rig](../bench/results/{n.removesuffix(".json")}.png)'
            for n in SOAK
        )
        + '.',
    )


SOAK_RESULT = Result(
    heading='',
    question='Does a fine-tune run for hours without growing: memory, files and threads of '
    "every process, the rate, every transition delivered, across the firmware clock's wrap "
    "and the replay buffer's eviction point?",
    setup=_soak_setup,
    tables=(Table('soak', SOAK),),
    conclusion=_soak_conclusion,
    replicate=tuple(
        f'python -m rip_bench soak --minutes 120 --rigs {_soak_rigs(name)} '
        f'--json bench/results/{name}'
        for name in SOAK
    ),
)


#: Soaks that ask what the learner makes of an hour: the two-hour two-rig record, then the
#: runs after it on two rigs (``soak_2rig_<label>.json``).
SOAK_LEARNING = ('soak_2rig.json', *sorted(p.name for p in RESULTS.glob('soak_2rig_*.json')))


def _soak_label(d: dict[str, Any]) -> str:
    """``commit`` and the runner arguments given beyond the soak's own."""
    return f'`{d["commit"]}`' + (f' ({", ".join(d["set"])})' if d.get('set') else '')


def _episode_s(d: dict[str, Any]) -> float:
    """A soak's training episode length: its runner arguments', else the parameter default."""
    from rip_control.params import CONTROL_PARAMETERS, defaults

    return float(d['args'].get('episode_seconds', defaults(CONTROL_PARAMETERS)['episode_seconds']))


def _soak_learning_setup(r: Records) -> str:
    runs = [r[n] for n in SOAK_LEARNING]
    return (
        'The soaks of two emulated rigs (nominal physics, the guard on unless the arguments say '
        'otherwise), read for what the learner made of them: per '
        f'{soak.BIN_EPISODES} training episodes of each rig (each '
        f'{_episode_s(runs[0]):g} s of rig time and a reset), '
        "their mean balance, how many of the learner's candidates the guard promoted of those "
        "it judged meanwhile, and the candidates' median evaluation return (the arm run to its "
        'limit at once returns about -10, the termination penalty). Runs: '
        + '; '.join(f'{_soak_label(d)}, {d["minutes"]:g} minutes' for d in runs)
        + f". In the first ({_soak_label(runs[0])}) an evaluation's transitions never reached "
        'the learner; in the later ones they do.'
    )


def _soak_learning_conclusion(r: Records) -> str:
    parts = []
    for n in SOAK_LEARNING:
        d = r[n]
        bins = soak.learning_bins(d)
        if soak.guard_off(d):
            balance = [b['training_balance_s'] for b in bins]
            parts.append(
                f'{_soak_label(d)}: the guard off, every new policy drove the training episodes '
                f'at once, {bins[-1]["training_episodes"][1]} per rig over {d["minutes"]:g} '
                f'minutes; their mean balance per {soak.BIN_EPISODES} from {min(balance):.2f} '
                f'to {max(balance):.2f} s, the last {balance[-1]:.2f} s.'
            )
            continue
        last = max((b['training_episodes'] for b in bins if b['promoted']), default=None)
        after = [b for b in bins if last and b['training_episodes'][0] > last[1] and b['judged']]
        parts.append(
            f'{_soak_label(d)}: {sum(b["promoted"] for b in bins)} of '
            f'{sum(b["judged"] for b in bins)} candidates promoted over {d["minutes"]:g} minutes'
            + (
                f', the last among training episodes {last[0]}-{last[1]} of '
                f'{bins[-1]["training_episodes"][1]}'
                if last
                else ', none'
            )
            + (
                f"; after them, 0 of {sum(b['judged'] for b in after)}, the candidates' median "
                f'return from {min(b["candidate_return_median"] for b in after):.1f} to '
                f'{max(b["candidate_return_median"] for b in after):.1f} per '
                f'{soak.BIN_EPISODES} training episodes'
                if after
                else ''
            )
            + '.'
        )
        parts.append(_soak_learning(d))
    first = soak.learning_bins(r[SOAK_LEARNING[0]])
    stopped = max((b['training_episodes'][1] for b in first if b['promoted']), default=0)
    for n in SOAK_LEARNING[1:]:
        later = [b for b in soak.learning_bins(r[n]) if b['training_episodes'][0] > stopped]
        if later and not soak.guard_off(r[n]):
            parts.append(
                f'Past training episode {stopped}, where the first run promoted its last, '
                f'{_soak_label(r[n])} promoted {sum(b["promoted"] for b in later)} of '
                f'{sum(b["judged"] for b in later)} candidates (the first: 0 of '
                f'{sum(b["judged"] for b in first if b["training_episodes"][0] > stopped)}). '
                'One run each, so this shows the collapse is not what the learner must do, '
                'not that it cannot happen'
                + (
                    '.'
                    if any(soak.guard_off(r[m]) for m in SOAK_LEARNING)
                    else '; the guard-off soak was not run.'
                )
            )
    return _bullets(*parts)


SOAK_LEARNING_RESULT = Result(
    heading='What the learner makes of hours on two rigs',
    question="Does the learner's candidate stay good over an hour and more of two rigs' data, "
    'with the guard keeping the rigs on the last good one?',
    setup=_soak_learning_setup,
    tables=(Table('soak-learning', SOAK_LEARNING),),
    conclusion=_soak_learning_conclusion,
    replicate=(
        'python -m rip_bench soak --minutes 120 --rigs 2 --json bench/results/soak_2rig.json',
        'python -m rip_bench soak --minutes 60 --rigs 2 --json bench/results/'
        'soak_2rig_eval_transitions.json',
    ),
)


SECTION = Section(
    'soak',
    'Does a fine-tune run for hours without growing?',
    (SOAK_RESULT, SOAK_LEARNING_RESULT),
)
