"""Numbers in the hand-written pages' prose are facts of the code, each checked here.

Measured results live only in generated pages and blocks (``python -m rip_bench docs``:
``docs/results.md``, ``docs/results_history.md``, ``docs/parameters.md``, the README's
headline results). In the pages written by hand, a number with a decimal point or a range,
and a unit, outside code, is a fact of the package (a default, a constant, a bound of the
protocol) or of a named test (what it injects or asserts): :data:`FACTS` holds each by the
phrase it stands in, with the one source it must match. This test fails on a number no phrase
holds, on one that no longer matches its source, and on a phrase no page says any more.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
import re

REPO = Path(__file__).resolve().parent.parent
GENERATED = {'parameters.md', 'results.md', 'results_history.md'}

# A decimal number or a range (0–72), then a unit (or a hyphen and one: "71.6-minute").
NUMBER = re.compile(
    r'(?<![\w.])(\d+(?:\.\d+)?(?:[–-]\d+(?:\.\d+)?)?)(?: |-)?'
    r'(Hz|ms|s|min|minute|%|MiB|KiB|V|rad)(?!\w)'
)


def _package(value: Callable[[], float], digits: int) -> Callable[[str], bool]:
    """The text (a number) is the package's value, at the page's precision."""

    def check(text: str) -> bool:
        return text.replace('.', '', 1).isdigit() and float(text) == round(value(), digits)

    return check


def _test_source(name: str) -> str:
    return (REPO / 'test' / name).read_text()


def _in_test(name: str, template: str) -> Callable[[str], bool]:
    """The test named injects or asserts this value (``template``, the number at ``{}``)."""
    return lambda text: template.format(text) in _test_source(name)


def _control(name: str) -> float:
    from rip_control.params import CONTROL_PARAMETERS, defaults

    return float(defaults(CONTROL_PARAMETERS)[name])


def _rig_check(name: str) -> float:
    from rip_control import rig_check

    return float(getattr(rig_check, name))


def _env(name: str) -> float:
    from rip_control.rig import env

    return float(getattr(env, name))


def _unwrapper(name: str) -> float:
    from rip_control.rig.env import _TimestampUnwrapper

    return float(getattr(_TimestampUnwrapper, name))


def _swing_up_hold() -> float:
    from rip_control.run.evaluation import SWING_UP_HOLD_S

    return SWING_UP_HOLD_S


def _state_round_trip_ms(baud: int) -> float:
    """A GET_STATE request and its reply, 10 bits a byte (8N1) at ``baud``."""
    from rip_control.rig import protocol

    size = (
        2 * protocol.MIN_FRAME_SIZE
        + protocol.REQUEST_PAYLOAD_SIZE[protocol.Cmd.GET_STATE]
        + protocol._STATE_REPLY.size
    )
    return size * 10 / baud * 1e3


def _tick_delay_ms() -> float:
    """The watchdog test's injected stretch of every tick (``fault_tick_delay_ms``)."""
    found = re.search(r'fault_tick_delay_ms=(\d+)', _test_source('test_control_node.py'))
    assert found, 'test_control_node.py no longer injects fault_tick_delay_ms'
    return float(found.group(1))


#: About half a millisecond: the control tick's own work (the watchdog row's "~" figures).
TICK_WORK_MS = 0.5


def _signal_moments(text: str) -> bool:
    """test_signals sends its signal at ``i * 0.008`` s for ``i`` in ``range(10)``."""
    src = _test_source('test_signals.py')
    return 'for i in range(10):' in src and 'i * 0.008' in src and text == f'0–{9 * 8}'


def _deadman_range(text: str) -> bool:
    from rip_control.rig.emulator_args import DEADMAN_RANGE_MS

    return text == '–'.join(str(v) for v in DEADMAN_RANGE_MS)


#: Each number in the hand-written prose, by the phrase it stands in (whitespace as one
#: space, inline code left out: ``passes `arm_limit_rad` (1.6 rad)`` reads "passes (1.6
#: rad)"), with the one source it must match. A phrase holds one such number.
FACTS: dict[str, Callable[[str], bool]] = {
    '|φ| < 0.2 rad': _package(lambda: _env('BALANCE_THRESHOLD_RAD'), 1),
    '|φ| below 0.2 rad': _package(lambda: _env('BALANCE_THRESHOLD_RAD'), 1),
    '|θ| > 1.6 rad': _package(lambda: _control('arm_limit_rad'), 1),
    'passes (1.6 rad)': _package(lambda: _control('arm_limit_rad'), 1),
    'and 1.6 rad is': _package(lambda: _control('arm_limit_rad'), 1),
    'arm beyond (1.6 rad)': _package(lambda: _control('arm_limit_rad'), 1),
    'ramp over 0.5 s': _package(lambda: _rig_check('RAMP_S'), 1),
    'turned 0.15 rad': _package(lambda: _rig_check('MOVE_RAD'), 2),
    'then 0 V for 0.5 s': _package(lambda: _rig_check('HOLD_S'), 1),
    'quiet for 0.5 s': _package(lambda: _env('QUIET_S'), 1),
    'balance held 0.5 s': _package(_swing_up_hold, 1),
    'within 0.5 s and': _package(lambda: _unwrapper('TOLERANCE_S'), 1),
    '0.1 % of the gap': _package(lambda: 100 * _unwrapper('DRIFT'), 1),
    'every 71.6 min': _package(lambda: 2**32 / 1e6 / 60, 1),
    'the 71.6-minute wrap': _package(lambda: 2**32 / 1e6 / 60, 1),
    'ticks at 20.000 ms': _package(lambda: 1e3 / _control('rate_hz'), 3),
    '2.6 ms at 115 200 baud': _package(lambda: _state_round_trip_ms(115_200), 1),
    '10–2000 ms': _deadman_range,
    # the learner-killed test's bound on the mean tick rate
    '50 Hz within 0.5 Hz': _in_test('test_finetune.py', '- 50.0) < {}, rates'),
    # the runner's start: signals at delays growing to 1.8 s
    'from 0 to 1.8 s': _in_test('test_runner_signals.py', ', {})'),
    # the watchdog trip: every tick stretched, the overrun growing by the stretch past a tick
    # and the tick's own work; a held-back tick's dt is the stretch and that work
    'grows ~1.5 ms a tick': _package(
        lambda: _tick_delay_ms() - 1e3 / _control('rate_hz') + TICK_WORK_MS, 1
    ),
    'dt ~21.5 ms': _package(lambda: _tick_delay_ms() + TICK_WORK_MS, 1),
    # the signal at an activation: 10 moments, 8 ms apart
    '0–72 ms': _signal_moments,
}


def _positions(prose: str) -> tuple[dict[int, tuple[str, str]], list[str]]:
    """Where each phrase's number is in ``prose`` (start -> phrase, number); unused phrases."""
    at: dict[int, tuple[str, str]] = {}
    unused = []
    for phrase in FACTS:
        inner = [m for m in NUMBER.finditer(phrase) if _checked(m.group(1))]
        assert len(inner) == 1, f'FACTS phrase {phrase!r} holds {len(inner)} numbers, not 1'
        found = [m.start() for m in re.finditer(re.escape(phrase), prose)]
        for start in found:
            at[start + inner[0].start()] = (phrase, inner[0].group(1))
        if not found:
            unused.append(phrase)
    return at, unused


def _checked(number: str) -> bool:
    """A decimal or a range: checked. A whole number is a count or a round default."""
    return '.' in number or bool(re.search('[–-]', number))


def _prose(text: str) -> str:
    """``text`` without generated blocks, code blocks and inline code."""
    text = re.sub(r'<!-- ([^:]+): generated.*?<!-- end \1 -->', '', text, flags=re.S)
    text = re.sub(r'```.*?```', '', text, flags=re.S)
    return re.sub(r'`[^`]*`', '', text)


def hand_written() -> list[Path]:
    pages = [REPO / 'README.md', *sorted((REPO / 'docs').glob('*.md'))]
    return [p for p in pages if p.name not in GENERATED]


def test_every_number_in_the_hand_written_prose_is_a_checked_fact() -> None:
    unknown, wrong, said = [], [], set()
    for page in hand_written():
        prose = ' '.join(_prose(page.read_text()).split())
        at, unused = _positions(prose)
        said |= set(FACTS) - set(unused)
        for m in NUMBER.finditer(prose):
            if not _checked(m.group(1)):
                continue
            where = f'{page.name}: ...{prose[max(0, m.start() - 30) : m.end()]}'
            if m.start() not in at:
                unknown.append(where)
            elif not FACTS[at[m.start()][0]](m.group(1)):
                wrong.append(where)
    assert not unknown, f'numbers FACTS does not hold (generate them, or add the fact): {unknown}'
    assert not wrong, f'numbers that no longer match their source: {wrong}'
    assert said == set(FACTS), f'FACTS phrases no page says any more: {set(FACTS) - said}'


def test_a_number_that_drifted_from_its_source_is_caught() -> None:
    assert FACTS['|θ| > 1.6 rad']('1.6') and not FACTS['|θ| > 1.6 rad']('1.7')
    assert FACTS['0–72 ms']('0–72') and not FACTS['0–72 ms']('0–80')
    assert FACTS['10–2000 ms']('10–2000') and not FACTS['10–2000 ms']('10–1000')
    assert not FACTS['50 Hz within 0.5 Hz']('0.4') and not FACTS['dt ~21.5 ms']('22.5')
    found = [
        m.group(0) for m in NUMBER.finditer(_prose('past 1.6 rad, a 71.6-minute; `2.5 s` here'))
    ]
    assert found == ['1.6 rad', '71.6-minute']
    # A number the right size in the wrong phrase is not a fact.
    at, _ = _positions('a ramp over 0.5 s and a pause of 0.5 s')
    assert sorted(at) == [12]


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
