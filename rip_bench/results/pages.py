"""The two pages: ``docs/results.md`` (:data:`CURRENT`) and ``docs/results_history.md``.

results.md opens with how to read it (:func:`_intro`) and a list of its sections, numbered in
the order of :data:`rip_bench.results.order.ORDER`, and ends with the rigs it names
(:func:`_rigs`); results_history.md holds :data:`rip_bench.results.superseded.HISTORY`.
"""

from __future__ import annotations

from pathlib import Path
import re

from rip_bench.generated import HEADER
from rip_bench.paths import REPO
from rip_bench.results import (
    action_history,
    adapt,
    bags,
    e2e,
    finetune,
    firmware,
    identification,
    not_measured,
    pretrain,
    safeguards,
    soak,
    throughput,
    timing,
    v5,
)
from rip_bench.results.model import Section, load, render
from rip_bench.results.order import section_number
from rip_bench.results.superseded import HISTORY
from rip_bench.results.text import _control


def _slug(title: str) -> str:
    """GitHub's anchor of a heading."""
    text = re.sub(r'[^\w\- ]', '', title.lower())
    return text.replace(' ', '-')


def _header(source: str) -> str:
    return HEADER.format(source=source)


def results_page() -> str:
    """``docs/results.md``: the current results."""
    numbered = [f'{i}. {s.title}' for i, s in enumerate(CURRENT, 1)]
    parts = [
        _header('the records in `bench/results/` by `rip_bench/results/`'),
        '# Results\n',
        _intro(),
        'Contents:\n',
        '\n'.join(
            f'{i}. [{s.title}](#{_slug(n)})'
            for i, (s, n) in enumerate(zip(CURRENT, numbered, strict=True), 1)
        )
        + '\n',
    ]
    for number, section in zip(numbered, CURRENT, strict=True):
        parts.append(f'## {number}\n')
        intro = section.intro({})
        if intro:
            parts.append(intro + '\n')
        for result in section.results:
            parts.append(render(result, load(result)))
    parts.append(_rigs())
    return '\n'.join(parts).rstrip('\n') + '\n'


def history_page() -> str:
    """``docs/results_history.md``: the superseded results, each with why."""
    parts = [
        _header('the records in `bench/results/` by `rip_bench/results/`'),
        '# Results history\n',
        'Results that newer measurements replaced, kept so that a figure quoted elsewhere can '
        'be traced. Each says what replaced it and why, and which commit it measured (recorded '
        'in the JSON where the record has the field, named in the set-up where it predates '
        'it). The current results are in [results.md](results.md). Where the JSON of a result '
        'was overwritten, only what it showed is said, without its figures.\n',
    ]
    for section in HISTORY:
        parts.append(f'## {section.title}\n')
        for result in section.results:
            parts.append(render(result, load(result), level=3))
    return '\n'.join(parts).rstrip('\n') + '\n'


def _intro() -> str:
    rate, episode = _control('rate_hz'), _control('episode_seconds')
    from rip_control.rig.env import BALANCE_THRESHOLD_RAD

    return (
        '**Every figure here comes from the emulated rig** (the Python rig emulator, or the C '
        "firmware's host build, behind a pseudo-terminal with real-time physics) on one small "
        'VM; none comes from a physical rig ([hardware.md](hardware.md), "Status"). This page '
        'is generated from the JSON records in `bench/results/` (`python -m rip_bench docs`): '
        'each table is what `python -m rip_bench table KIND FILE...` prints, and each number in '
        'the text is computed from the records. Results since replaced are in '
        '[results_history.md](results_history.md); how to run the benchmarks is in '
        '[benchmarks.md](benchmarks.md).\n\n'
        f'How to read them: **balance** is the longest continuous window with the pendulum '
        f'within {BALANCE_THRESHOLD_RAD:g} rad of upright in a deterministic episode that starts '
        'hanging (so the swing-up is inside it); **return** is the sum of the rewards of an '
        f'episode, at most 1 per step, so at most {round(rate * episode)} for a training episode '
        f'of {episode:g} s at {rate:g} Hz. The task (observation, action, reward, termination), '
        'the measures and the references are in [task.md](task.md); the rigs are at the end of '
        'this page ([The rigs](#the-rigs)).\n'
    )


def _rigs() -> str:
    """The rigs the results name, each value generated from its rig file."""
    from dataclasses import fields

    from rip_control.rig.dynamics import PendulumParams

    files = {
        'nominal': 'config/rig_qube_servo2.yaml',
        'worn': 'config/rig_shifted_worn.yaml',
        'heavy': 'config/rig_shifted_heavy.yaml',
        'stuck': 'config/rig_shifted_stuck.yaml',
        'mild': 'bench/rigs/rig_mild.yaml',
    }
    rigs = {name: PendulumParams.from_yaml(REPO / path) for name, path in files.items()}
    base = PendulumParams()
    names = [
        f.name
        for f in fields(base)
        if any(getattr(p, f.name) != getattr(base, f.name) for p in rigs.values())
    ]
    rows = [
        '| parameter | ' + ' | '.join(f'{n} (`{Path(p).name}`)' for n, p in files.items()) + ' |',
        '|---|' + '---|' * len(files),
    ]
    for name in names:
        cells = []
        for rig in rigs.values():
            value, nominal = getattr(rig, name), getattr(base, name)
            cells.append(f'**{value:g}**' if value != nominal else f'{value:g}')
        rows.append(f'| `{name}` | ' + ' | '.join(cells) + ' |')
    return (
        '## The rigs\n\n'
        'All emulated. `config/rig_shifted_*.yaml` and `bench/rigs/rig_mild.yaml` list only what '
        'differs from the QUBE-Servo 2 with its pendulum module (`config/rig_qube_servo2.yaml`, '
        '"nominal"); a test checks that each shifted rig lies outside the pre-training '
        'randomisation somewhere. The worn rig has a worn gearbox and driver, a noisy encoder and '
        'a slow read-out; the heavy rig a longer, heavier pendulum on a stiffer arm bearing; the '
        'stuck rig stiction and a dead zone that swallow every small correction, and a read-out '
        'more than a tick late (the simulation-only policy cannot balance it); the mild rig '
        '(benchmarks only) stays inside or at the edge of the pre-training randomisation. The '
        'values that differ from the nominal rig, in bold:\n\n' + '\n'.join(rows) + '\n'
    )


CURRENT: tuple[Section, ...] = tuple(
    sorted(
        (
            adapt.SECTION,
            v5.SECTION,
            identification.SECTION,
            action_history.SECTION,
            timing.SECTION,
            firmware.SECTION,
            e2e.SECTION,
            finetune.SECTION,
            safeguards.SECTION,
            throughput.SECTION,
            pretrain.SECTION,
            bags.SECTION,
            *((soak.SECTION,) if soak.SOAK else ()),
            not_measured.SECTION,
        ),
        key=lambda s: section_number(s.key),
    )
)
"""The sections of results.md, in :data:`rip_bench.results.order.ORDER`'s order (the soak's
only where it has records)."""
