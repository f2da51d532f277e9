"""Question 'identification': how well a rig's physics is identified.

From an excitation episode on the shifted rigs (:data:`IDENT_RESULT`), and on the rigs outside
the model (:data:`IDENT_GAP_RESULT`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rip_bench.paths import REPO
from rip_bench.results.model import Records, Result, Section, Table
from rip_bench.results.text import _and, _bullets, _mean, _of, _span

IDENT = 'identification.json'


def _tolerances(d: dict[str, Any]) -> str:
    words = {
        'motor_dead_zone_v': ('dead zone', 1, ' V'),
        'sensing_latency_s': ('latency', 1e3, ' ms'),
    }
    parts, relative = [], set()
    for name, (how, value) in d['tolerance'].items():
        if how == 'abs':
            word, scale, unit = words[name]
            parts.append(f'{word} ±{value * scale:g}{unit}')
        else:
            relative.add(value)
    if relative:
        parts.append(
            'friction, damping and resistance ' + ', '.join(f'±{100 * v:g} %' for v in relative)
        )
    return ', '.join(parts)


def _ident_setup(r: Records) -> str:
    d = r[IDENT]
    runs = d['runs']
    episodes = sorted({x['episodes'] for x in runs})
    return (
        'Each shipped rig recorded in simulation with its physics, encoder noise and latency '
        '(the excitation, then '
        + ', '.join(map(str, episodes))
        + ' deployment episodes of the shipped policy), identified from the QUBE-Servo 2 prior. '
        'Each cell is the worst error over the seeds, in bold where a seed misses the goal '
        f'({_tolerances(d)}). One fit took {_span([x["wall_s"] for x in runs], 0, " s")}.'
    )


def _ident_conclusion(r: Records) -> str:
    runs = r[IDENT]['runs']
    parts = []
    for k in sorted({x['episodes'] for x in runs}):
        group = [x for x in runs if x['episodes'] == k]
        ok = sum(x['within_goal'] for x in group)
        data = _mean([x['seconds_of_data'] for x in group])
        what = 'the excitation alone' if k == 0 else f'{k} deployment episode{"s" * (k > 1)} more'
        parts.append(f'from {what} ({data:.0f} s of data) {_of(ok, len(group))} fits')
    return (
        'Within the goal on every parameter: '
        + '; '.join(parts)
        + '. On the emulator itself (its physics at its own rate, the real serial path) the '
        'test of `adapt` (`test_readme`) identifies the stuck rig from an excitation and one '
        "episode within these tolerances; how close the emulator's own recordings let the fit "
        'come is not yet a benchmark of its own.'
    )


IDENT_RESULT = Result(
    heading='',
    question='From an excitation episode (and a few deployment episodes), how close does '
    "`rip_learner.identify` come to each shipped rig's true physics?",
    setup=_ident_setup,
    tables=(Table('identification', (IDENT,)),),
    conclusion=_ident_conclusion,
    replicate=(
        (
            'python -m rip_bench identification --seeds 0 1 2 --episodes 0 1 3 --json '
            'bench/results/identification.json'
        ),
    ),
)


IDENT_GAP = 'identification_gap.json'


def _ident_gap_conclusion(r: Records) -> str:
    lines = []
    for run in r[IDENT_GAP]['runs']:
        sel = run['selection']
        kept = [v['term'] for v in sel['terms'].values() if v['kept']]
        base, chosen = sel['base_held_out_rms_rad'], sel['held_out_rms_rad']
        lines.append(
            f'{Path(run["rig"]).stem}: kept {_and(kept) if kept else "no term"}; held-out RMS '
            f'{1e3 * base["theta"]:.1f} / {1e3 * base["alpha"]:.1f} mrad (arm / pendulum) with '
            f'the base model, {1e3 * chosen["theta"]:.1f} / {1e3 * chosen["alpha"]:.1f} with the '
            f'chosen one; {sel["unexplained_counts"]:.1f} encoder counts left unexplained'
            + (' (expect a gap)' if sel['expect_gap'] else '')
            + f'; {run["wall_s"]:.0f} s'
        )
    return (
        _bullets(*lines)
        + "\n\nThe gap plant's effects have other forms than the model's terms (a subtractive "
        'dead zone against a cut one, switch-model friction against a smooth one, a '
        'second-order driver against a first-order lag), so no value is scored against a truth. '
        'A pure command delay is not a term of its own: in the readings it is indistinguishable '
        'from the sensing latency, which absorbs it: ' + _laggy_latency(r) + ' One seed per rig.'
    )


def _laggy_latency(r: Records) -> str:
    from rip_control.rig.gap_plant import load_rig

    run = next(x for x in r[IDENT_GAP]['runs'] if Path(x['rig']).stem == 'gap_laggy')
    params, gap = load_rig(REPO / run['rig'])
    assert gap is not None
    found = run['identified']['sensing_latency_s']['value']
    return (
        f'on the laggy rig it comes out at {1e3 * found:.0f} ms, where the rig reads '
        f'{1e3 * params.sensing_latency_s:.0f} ms late and delays each command by '
        f"{1e3 * gap.command_delay_s:.0f} ms more before its driver's own response."
    )


IDENT_GAP_RESULT = Result(
    heading='... on rigs outside the model',
    question="On the reality-gap rigs, which of the widened model's terms does the "
    'identification keep, and how much of the rig does it leave unexplained?',
    setup=lambda r: (
        "Each gap rig recorded offline behind the real firmware logic as `adapt`'s baseline "
        'records it (the excitation and five episodes of the shipped policy), then identified '
        'with the default options: the base model fitted to three quarters of the windows, '
        'each term kept only if it predicts the held-out quarter better.'
    ),
    conclusion=_ident_gap_conclusion,
    files=(IDENT_GAP,),
    replicate=(
        (
            'python -m rip_bench identification --rigs bench/rigs/gap_mild.yaml '
            'bench/rigs/gap_sticky.yaml bench/rigs/gap_laggy.yaml bench/rigs/gap_heavy_tip.yaml '
            '--seeds 0 --episodes 5 --json bench/results/identification_gap.json'
        ),
    ),
)


IDENT_LENGTH = 'identification_length.json'
ENOUGH = 0.1
"""An excitation is long enough when its fit predicts unseen data within this fraction of
what the whole excitation's fit does (the larger of the arm's and the pendulum's RMS)."""


def _worst(r: dict[str, Any]) -> float:
    return max(r['validation_rms_rad'])


def _length_conclusion(r: Records) -> str:
    runs = [x for x in r[IDENT_LENGTH]['runs'] if x.get('validation_rms_rad') is not None]
    lines = []
    for rig in dict.fromkeys(x['rig'] for x in runs):
        by: dict[float, list[float]] = {}
        for x in runs:
            if x['rig'] == rig:
                by.setdefault(x['excitation_seconds'], []).append(_worst(x))
        longest = max(by)
        full = _mean(by[longest])
        enough = min(s for s, v in by.items() if _mean(v) <= (1 + ENOUGH) * full)
        lines.append(
            f'{Path(rig).stem}: {enough:g} s of the {longest:g}-s excitation predict the unseen '
            f'episodes within {100 * ENOUGH:.0f} % of what all of it does ('
            + ', '.join(f'{s:g} s: {1e3 * _mean(v):.1f} mrad' for s, v in sorted(by.items()))
            + ')'
        )
    return (
        _bullets(*lines)
        + '\n\nThe error is the multi-step prediction RMS (the larger of arm and pendulum) '
        'on two deployment episodes of the shipped policy recorded apart from the fit, in the '
        "identification's own windows. The excitation's parts come in order (a 6-s ramp, a "
        '7-s chirp, a 4-s ladder of kicks), so a cut loses the later ones: at 8 and 12 s the '
        "stuck rig's dead zone came out at 0 (true 1.2 V); the ladder, from 13 s on, shows it. "
        'One seed per rig and length: a fit can land worse with more data (the sticky gap rig '
        'at 12 s), so these lengths are where the error settled, not a bound. `adapt` still '
        'runs the whole 20-s excitation: 4 s of rig time a run that these fits say it could '
        'spare, not changed on one seed.'
    )


IDENT_LENGTH_RESULT = Result(
    heading='... from how much data',
    question='How much of the excitation does the identification need, judged on data it '
    'never saw?',
    setup=lambda r: (
        'The excitation episode cut to its first seconds, alone (no deployment episode), '
        'identified with the default options; then the fit predicts two deployment episodes '
        'recorded apart. In-model rigs recorded in simulation (their true values give the '
        'goal column), reality-gap rigs offline behind the firmware logic.'
    ),
    tables=(Table('identification-length', (IDENT_LENGTH,)),),
    conclusion=_length_conclusion,
    replicate=(
        (
            'python -m rip_bench identification --rigs config/rig_shifted_stuck.yaml '
            'config/rig_shifted_worn.yaml bench/rigs/gap_sticky.yaml bench/rigs/gap_laggy.yaml '
            '--seeds 0 --episodes 0 --excitation-seconds 8 12 16 20 --json '
            'bench/results/identification_length.json'
        ),
    ),
)


SECTION = Section(
    'identification',
    "How well is a rig's physics identified?",
    (IDENT_RESULT, IDENT_GAP_RESULT, IDENT_LENGTH_RESULT),
)
