"""Numbers in the hand-written pages' prose are facts of the code, each checked here.

Measured results live only in generated pages and blocks (``python -m rip_bench docs``:
``docs/results.md``, ``docs/results_history.md``, ``docs/parameters.md``, the README's
headline results). In the pages written by hand, a number with a decimal point or a range,
and a unit, outside code, is a fact of the package (a default, a constant, a bound of the
protocol) or of a named test (what it injects or asserts): :data:`FACTS` holds each with
where it comes from, and this test fails on one it does not hold, or on one that no longer
matches its source.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
import re

REPO = Path(__file__).resolve().parent.parent
GENERATED = {'parameters.md', 'results.md', 'results_history.md'}

# A decimal number or a range (0–72), then a unit.
NUMBER = re.compile(
    r'(?<![\w.])(\d+(?:\.\d+)?(?:[–-]\d+(?:\.\d+)?)?) ?(Hz|ms|s|min|%|MiB|KiB|V|rad)(?!\w)'
)


def _package(value: Callable[[], float], digits: int) -> Callable[[str], bool]:
    """The text (a number) is the package's value, at the page's precision."""

    def check(text: str) -> bool:
        return text.replace('.', '', 1).isdigit() and float(text) == round(value(), digits)

    return check


def _in_test(name: str, literal: str) -> Callable[[str], bool]:
    """The test named injects or asserts this value (its source holds the literal)."""
    return lambda text: literal in (REPO / 'test' / name).read_text()


def _control(name: str) -> float:
    from rip_control.params import CONTROL_PARAMETERS, defaults

    return float(defaults(CONTROL_PARAMETERS)[name])


def _rig_check(name: str) -> float:
    from rip_control import rig_check

    return float(getattr(rig_check, name))


def _balance() -> float:
    from rip_control.rig.env import BALANCE_THRESHOLD_RAD

    return BALANCE_THRESHOLD_RAD


def _unwrap_tolerance() -> float:
    from rip_control.rig.env import _TimestampUnwrapper

    return _TimestampUnwrapper.TOLERANCE_S


# text as written (number and unit) -> checks; it is a fact if any holds
FACTS: dict[str, list[Callable[[str], bool]]] = {
    '0.2 rad': [_package(_balance, 1)],
    '1.6 rad': [_package(lambda: _control('arm_limit_rad'), 1)],
    '0.15 rad': [_package(lambda: _rig_check('MOVE_RAD'), 2)],
    '0.5 s': [
        _package(lambda: _rig_check('RAMP_S'), 1),
        _package(lambda: _rig_check('HOLD_S'), 1),
        _package(_unwrap_tolerance, 1),
    ],
    '20.000 ms': [_package(lambda: 1e3 / _control('rate_hz'), 3)],
    '71.6 min': [_package(lambda: 2**32 / 1e6 / 60, 1)],
    # a GET_STATE round trip: 30 bytes of 10 bits at 115 200 baud
    '2.6 ms': [_package(lambda: 30 * 10 / 115_200 * 1e3, 1)],
    '0.1 %': [_package(lambda: 100 * 1e-3, 1)],  # the unwrapper's share of the host's gap
    # the learner-killed test's bounds on the tick rate, over the reports and per report
    '0.5 Hz': [_in_test('test_finetune.py', '- 50.0) < 0.5')],
    # the runner's start: signals at delays growing to 1.8 s
    '1.8 s': [_in_test('test_runner_signals.py', '0.9, 1.8)')],
    # the watchdog trip: every tick stretched by 21 ms: the overrun grows by 21 - 20 + ~0.5
    # (the tick's own work) a tick, and a held-back tick's dt is about 21.5 ms
    '1.5 ms': [_in_test('test_control_node.py', 'fault_tick_delay_ms=21')],
    '21.5 ms': [_in_test('test_control_node.py', 'fault_tick_delay_ms=21')],
    # the signal at an activation: 10 moments, 8 ms apart
    '0–72 ms': [_in_test('test_signals.py', 'i * 0.008')],
    # the deadman a firmware accepts (SET_DEADMAN)
    '10–2000 ms': [lambda text: _deadman_range() == text],
}


def _deadman_range() -> str:
    from rip_control.rig.emulator import DEADMAN_RANGE_MS

    return '–'.join(str(v) for v in DEADMAN_RANGE_MS)


def _prose(text: str) -> str:
    """``text`` without generated blocks, code blocks and inline code."""
    text = re.sub(r'<!-- ([^:]+): generated.*?<!-- end \1 -->', '', text, flags=re.S)
    text = re.sub(r'```.*?```', '', text, flags=re.S)
    return re.sub(r'`[^`]*`', '', text)


def hand_written() -> list[Path]:
    pages = [REPO / 'README.md', *sorted((REPO / 'docs').glob('*.md'))]
    return [p for p in pages if p.name not in GENERATED]


def test_every_number_in_the_hand_written_prose_is_a_checked_fact() -> None:
    unknown, wrong = [], []
    for page in hand_written():
        for m in NUMBER.finditer(_prose(page.read_text())):
            number, unit = m.groups()
            if '.' not in number and not re.search('[–-]', number):
                continue  # a whole number: a count or a round default, read as such
            text = f'{number} {unit}'
            checks = FACTS.get(text)
            if checks is None:
                unknown.append(f'{page.name}: {text}')
            elif not any(check(number) for check in checks):
                wrong.append(f'{page.name}: {text}')
    assert not unknown, f'numbers FACTS does not hold (generate them, or add the fact): {unknown}'
    assert not wrong, f'numbers that no longer match their source: {wrong}'


def test_a_number_that_drifted_from_its_source_is_caught() -> None:
    check = FACTS['1.6 rad'][0]
    assert check('1.6') and not check('1.7')
    assert FACTS['0–72 ms'][0]('0–72') and FACTS['10–2000 ms'][0]('10–2000')
    assert not FACTS['10–2000 ms'][0]('10–1000')
    found = [m.group(0) for m in NUMBER.finditer(_prose('past 1.6 rad, 0.1 %; `2.5 s` in code'))]
    assert found == ['1.6 rad', '0.1 %']


# "`name` (N" in prose gives a parameter's default: it must be the table's (a value "in the
# test" is the test's own, not a default; a percentage is the fraction's).
DEFAULT_IN_PROSE = re.compile(r'`(\w+)` \((\d+(?:\.\d+)?)( ?%| in the test)?')


def test_every_default_named_in_the_hand_written_prose_is_the_tables() -> None:
    from rip_control.params import CONTROL_PARAMETERS, LEARNER_PARAMETERS, defaults

    table = {**defaults(LEARNER_PARAMETERS), **defaults(CONTROL_PARAMETERS)}
    seen, wrong = 0, []
    for page in hand_written():
        for m in DEFAULT_IN_PROSE.finditer(page.read_text()):
            name, number, suffix = m.groups()
            if name not in table or suffix == ' in the test':
                continue
            value = float(number) / (100 if suffix and '%' in suffix else 1)
            seen += 1
            if abs(value - float(table[name])) > 1e-9:
                wrong.append(
                    f'{page.name}: `{name}` ({number}{suffix or ""}), the table has {table[name]}'
                )
    assert not wrong, wrong
    assert seen >= 5  # the pattern still finds the docs' defaults
