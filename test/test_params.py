"""The one parameter table: how ``name:=value`` text and YAML values become typed values."""

import math
from typing import Any

import pytest

from rip_control.params import CONTROL_PARAMETERS, LEARNER_PARAMETERS, From, Param, parse_options

RATE = Param('rate_hz', 50.0, 'control rate, Hz', 1.0, 1000.0)
EPISODES = Param('episodes', 0, 'episodes', 0, 100)
NAME = Param('run_name', 'default', 'run name')
FLAG = Param('gc_off', True, 'flag')
SIZES = Param('hidden_sizes', [64, 64], 'layers')


@pytest.mark.parametrize('given', ['50', '50.0', '5e1', 50, 50.0])
def test_a_whole_number_is_a_double_for_a_double_parameter(given):
    value = RATE.convert(given)
    assert value == 50.0 and isinstance(value, float)


@pytest.mark.parametrize('given', ['3', '3.0', 3, 3.0])
def test_an_integral_value_is_an_integer_for_an_integer_parameter(given):
    value = EPISODES.convert(given)
    assert value == 3 and type(value) is int


@pytest.mark.parametrize('given', ['2024', 'yes', 'true', '1e3', '[1]', ''])
def test_a_string_parameter_keeps_the_text_as_typed(given):
    assert NAME.convert(given) == given


def test_a_yaml_number_for_a_string_parameter_is_its_text():
    assert NAME.convert(2024) == '2024'


@pytest.mark.parametrize(
    ('param', 'given', 'says'),
    [
        (RATE, 'abc', 'rate_hz:=abc: expected a double'),
        (RATE, 'nan', 'rate_hz:=nan: expected a double'),
        (RATE, 'inf', 'rate_hz:=inf: expected a double'),
        (RATE, 'true', 'rate_hz:=true: expected a double'),
        (RATE, '0', r'rate_hz:=0: expected a value in \[1, 1000\]'),
        (EPISODES, '2.5', 'episodes:=2.5: expected an integer'),
        (EPISODES, '-1', r'episodes:=-1: expected a value in \[0, 100\]'),
        (EPISODES, True, 'expected an integer'),
        (FLAG, 'maybe', 'gc_off:=maybe: expected a bool'),
        (FLAG, 1, 'expected a bool'),
        (SIZES, '[64, 6.5]', 'expected an integer array'),
        (SIZES, '64', 'expected an integer array'),
        (NAME, True, 'expected a string'),
    ],
)
def test_a_value_of_the_wrong_type_or_range_is_refused_naming_it(param, given, says):
    with pytest.raises(ValueError, match=says):
        param.convert(given)


@pytest.mark.parametrize(('given', 'value'), [('true', True), ('False', False), ('yes', True)])
def test_bools_take_the_yaml_spellings(given, value):
    assert FLAG.convert(given) is value


def test_integer_arrays_parse_lists():
    assert SIZES.convert('[256,256]') == [256, 256]
    assert SIZES.convert([32, 32.0]) == [32, 32]


def test_every_default_of_both_tables_converts_to_itself():
    for p in CONTROL_PARAMETERS + LEARNER_PARAMETERS:
        assert p.convert(p.default) == p.default, p.name


def test_options_are_parsed_typed_with_unknown_names_refused_with_a_suggestion():
    table = (RATE, EPISODES, NAME)
    opts = parse_options(['rate_hz:=50', 'run_name:=2024'], table)
    assert opts == {'rate_hz': 50.0, 'episodes': 0, 'run_name': '2024'}
    with pytest.raises(ValueError, match="option 'episode' does not exist; did you mean episodes"):
        parse_options(['episode:=3'], table)
    with pytest.raises(ValueError, match="'episodes=3' is not name:=value"):
        parse_options(['episodes=3'], table)


def _mapped(config_classes):
    """``[(class, field, parameter)]`` of every field a parameter sets, nested configs too."""
    import dataclasses

    out = []
    for cls in config_classes:
        sources = cls.sources()
        for name, source in sources.items():
            out.append((cls, name, source.param))
        # Every field without a default of its own is set by a parameter, or is a nested config.
        for f in dataclasses.fields(cls):
            no_default = (
                f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
            )
            if no_default and f.name not in sources:
                assert f.name in cls.NESTED, f'{cls.__name__}.{f.name} has no source'
                assert f.name in ('task', 'loop', 'sac'), f'{cls.__name__}.{f.name}'
    return out


@pytest.mark.parametrize('node', ['control', 'learner'])
def test_every_parameter_sets_exactly_one_config_field_and_every_field_has_one(node):
    import dataclasses

    from rip_control.params import CONTROL_PARAMETERS, LEARNER_PARAMETERS

    if node == 'control':
        from rip_control.rig.env import TaskConfig
        from rip_control.ros.control_settings import NodeSettings
        from rip_control.rt.loop import LoopConfig

        table, classes = CONTROL_PARAMETERS, (TaskConfig, LoopConfig, NodeSettings)
    else:
        from rip_learner.learner_settings import LearnerSettings
        from rip_learner.sac import SacConfig

        table, classes = LEARNER_PARAMETERS, (SacConfig, LearnerSettings)
    mapped = _mapped(classes)
    params = [p for _, _, p in mapped]
    assert sorted(params) == sorted(p.name for p in table)  # each parameter once, none left out
    for cls in classes:  # every mapped name is a field of the class, with no default of its own
        fields = {f.name: f for f in dataclasses.fields(cls)}
        for name in cls.PARAMS:
            assert name in fields, f'{cls.__name__}.PARAMS names {name}, not a field'
            assert fields[name].default is dataclasses.MISSING, f'{cls.__name__}.{name}'
            # PARAMS holds the exceptions only: a field named as its parameter needs no entry.
            assert cls.PARAMS[name] != From(name), f'{cls.__name__}.PARAMS restates {name}'
    # Units: a _ms parameter becomes a _s field (x 1e-3), a _us one too (x 1e-6).
    for cls, name, param in mapped:
        source = cls.sources()[name]
        for unit, scale in (('_ms', 1e-3), ('_us', 1e-6)):
            if param.endswith(unit) and name.endswith('_s'):
                assert source.scale == scale, (cls.__name__, name, param)
            elif param.endswith(unit):
                assert name.endswith(unit) and source.scale is None, (cls.__name__, name)


def test_configs_built_from_the_table_carry_its_defaults_scaled_to_their_units():
    from rip_control.params import CONTROL_PARAMETERS, LEARNER_PARAMETERS, defaults
    from rip_control.ros.control_settings import NodeSettings
    from rip_learner.learner_settings import LearnerSettings

    control = defaults(CONTROL_PARAMETERS)
    s = NodeSettings.from_params({'serial_port': '/dev/null'})
    assert s.loop.hung_timeout_s == pytest.approx(control['hung_timeout_ms'] / 1e3)
    assert s.loop.eval_every_episodes == control['eval_every_episodes']
    assert s.task.rate_hz == control['rate_hz'] and s.serial_timeout_s == pytest.approx(0.01)
    learner = LearnerSettings.from_params()
    assert learner.sac.device == defaults(LEARNER_PARAMETERS)['device']
    assert learner.dt_tolerance_s == pytest.approx(0.005)
    with pytest.raises(ValueError, match='serial_port is empty'):
        NodeSettings.from_params()


def _other_value(p: Param) -> Any:
    """A valid value of ``p`` other than its default."""
    d = p.default
    if isinstance(d, bool):
        return not d
    if isinstance(d, list):
        return [max(1, int(v) // 2) for v in d] if d and d != [1] * len(d) else [2]
    if isinstance(d, (int, float)):
        lo = p.lo if p.lo is not None else -math.inf
        hi = p.hi if p.hi is not None else math.inf
        for x in (
            d + 1,
            d * 2 + 1,
            d - 1,
            lo,
            hi,
            (lo + hi) / 2 if math.isfinite(hi) else d + 0.5,
        ):
            if not math.isfinite(x):
                continue
            x = type(d)(x)
            if lo <= x <= hi and x != d:
                return x
        raise AssertionError(f'no other value for {p.name}')
    return 'other'


def _leaves(obj: Any, prefix: str = '') -> dict[str, Any]:
    """Every field of a config, nested configs' fields by their path."""
    import dataclasses

    out = {}
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        if dataclasses.is_dataclass(value):
            out.update(_leaves(value, f'{prefix}{f.name}.'))
        else:
            out[prefix + f.name] = value
    return out


@pytest.mark.parametrize('node', ['control', 'learner'])
def test_each_parameters_value_reaches_its_one_field(node):
    """A value other than the default, given for one parameter, changes one field: its own.

    Built as the node builds its settings (nested configs included), with the values the
    table's defaults give for the rest: a config that dropped what it was given, or read
    another parameter, fails here.
    """
    from rip_control.params import defaults

    if node == 'control':
        from rip_control.ros.control_settings import NodeSettings as Settings

        table = CONTROL_PARAMETERS
        base_values = {**defaults(table), 'serial_port': '/dev/null'}
    else:
        from rip_learner.learner_settings import LearnerSettings as Settings

        table = LEARNER_PARAMETERS
        base_values = defaults(table)
    assert Settings.TABLE is table
    base = _leaves(Settings.from_params(base_values))
    refused = []
    for p in table:
        other = _other_value(p)
        try:
            changed = _leaves(Settings.from_params({**base_values, p.name: other}))
        except ValueError:  # a combination the config refuses (named): not this test's
            refused.append(p.name)
            continue
        moved = sorted(k for k in base if changed[k] != base[k])
        assert len(moved) == 1, (p.name, other, moved)
    assert len(refused) <= 3, refused  # not vacuous: nearly every parameter was tried
