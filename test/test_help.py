"""Each program's ``--help`` says the default the program uses when the argument is left out.

Every default a program prints is read back from its ``--help`` output (run as a user runs
it) and compared with what the program's own parsing gives for an argument not typed: the
option tables' defaults, and for the runners the value the plan gets (their own defaults,
the nodes' tables). What a default *does* where the table alone cannot say (``policy`` empty
in ``evaluate``) has a run of its own: ``test_v5``.
"""

import re
import subprocess
import sys

import pytest

from rip_control.params import parse_options
from rip_control.procs import child_env

OPTION_LINE = re.compile(r'^  (\w+):=(\S*)\s+\(([\w\[\]]+)\) ', re.M)
ARGUMENT_LINE = re.compile(
    r"^  (\w+)\s+.*\((?:default '(.*)'|not given: the params file's, else (.*)"
    r"|default ([^'].*))\)$",
    re.M,
)


def _help(module: str) -> str:
    proc = subprocess.run(
        [sys.executable, '-m', module, '--help'],
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def _tables() -> dict[str, tuple]:
    from rip_control import adapt, record
    from rip_learner import identify, pretrain

    return {
        'rip_learner.pretrain': pretrain.OPTIONS,
        'rip_learner.identify': identify.OPTIONS,
        'rip_control.record': record.OPTIONS,
        'rip_control.adapt': adapt.OPTIONS,
    }


@pytest.mark.parametrize(
    'module',
    ['rip_learner.pretrain', 'rip_learner.identify', 'rip_control.record', 'rip_control.adapt'],
)
def test_an_options_printed_default_is_what_the_program_takes_when_it_is_left_out(module):
    from rip_control.adapt import split_arguments

    table = _tables()[module]
    shown = {m.group(1): m.group(2) for m in OPTION_LINE.finditer(_help(module))}
    assert set(shown) == {p.name for p in table}, shown  # every option, each once
    # What the program itself takes with nothing typed (adapt splits its own from the runner's).
    left_out = (
        split_arguments([])[0] if module == 'rip_control.adapt' else parse_options([], table)
    )
    for p in table:
        text = shown[p.name]
        if text.startswith("'") and text.endswith("'"):
            text = text[1:-1]
        assert p.convert(text, p.name) == left_out[p.name], (module, p.name, shown[p.name])


@pytest.mark.parametrize(
    'module', ['rip_control.finetune', 'rip_control.evaluate', 'rip_control.adapt']
)
def test_a_runners_printed_default_is_what_its_plan_takes_when_it_is_left_out(module):
    from rip_control import adapt, evaluate
    from rip_control.run.launching import LAUNCH_ARGUMENT_BY_NAME, RunnerInput

    # The arguments each runner hands its plan when nothing is typed, assembled as it does.
    assembled = {
        'rip_control.finetune': {},
        'rip_control.evaluate': evaluate.with_defaults({}),
        'rip_control.adapt': adapt.split_arguments([])[1],
    }[module]
    got = RunnerInput.parse(assembled)
    lines = list(ARGUMENT_LINE.finditer(_help(module)))
    skipped = evaluate.LEARNER_ONLY if module == 'rip_control.evaluate' else ()
    # Every argument the runner takes is read back, each once.
    assert sorted(m.group(1) for m in lines) == sorted(set(LAUNCH_ARGUMENT_BY_NAME) - set(skipped))
    for m in lines:
        name, default, else_ = m.group(1), m.group(2), m.group(3)
        if name == 'emulator_link':  # resolved per runner (its pid): the help says so
            assert "default /tmp/rip_rig_<the runner's pid>" in m.group(0), m.group(0)
            continue
        argument = LAUNCH_ARGUMENT_BY_NAME[name]
        if argument.targets:
            node, param = argument.targets[0]
            taken = got.nodes[node][param]
        else:
            taken = got.values[name]
        shown = default if default is not None else else_
        if shown.startswith("'") and shown.endswith("'"):
            shown = shown[1:-1]
        assert argument.convert(shown) == taken, (module, name, shown, taken)


@pytest.mark.parametrize(
    'module',
    [
        'rip_control.finetune',
        'rip_control.evaluate',
        'rip_control.adapt',
        'rip_control.record',
        'rip_learner.pretrain',
        'rip_learner.identify',
    ],
)
def test_help_reads_as_plain_text_not_as_the_docstrings_markup(module):
    import importlib

    from rip_control.params import help_text

    text = _help(module)
    first = help_text((importlib.import_module(module).__doc__ or '').strip().split('\n')[0])
    assert first and text.startswith(first), text  # the docstring, as plain text
    assert '``' not in text and not re.search(r':(mod|class|func|meth|data|attr):`', text), text
    assert '`~' not in text, text  # a shortened reference reads as its last name


def test_the_options_types_line_up_in_one_column():
    from rip_control import adapt
    from rip_control.params import options_help

    lines = options_help(adapt.OPTIONS).splitlines()
    assert len(lines) == len(adapt.OPTIONS)
    assert len({line.index(' (') for line in lines}) == 1, lines
