"""Every parameter of the package in one ROS-free table: name, type, default, range, text.

The defaults are what the product ships: a bare ``ros2 run rip_control control_node`` and
``make demo`` run the same values, and a params file holds only what a user changes. The
config dataclasses (:class:`~rip_control.rig.env.TaskConfig`,
:class:`~rip_control.rt.loop.LoopConfig`, the nodes' settings, ``SacConfig``) are built from
these tables by :class:`FromParams`; none of them restates a default.

The nodes declare their parameters from :data:`CONTROL_PARAMETERS` and
:data:`LEARNER_PARAMETERS` (:mod:`rip_control.ros.node_params` adds the ROS descriptors), and
every entry point — the launch file, the runner, ``evaluate``, ``record``, the benchmarks,
pre-training — converts ``name:=value`` text and params-file values with :meth:`Param.convert`.
One conversion everywhere is what makes ``rate:=50`` the double 50.0 (ROS 2 would type it
INTEGER and the node would refuse it), keeps ``run_name:=2024`` a string, refuses
``episodes:=2.5`` naming the argument, and accepts ``rate_hz: 50`` in a YAML file.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
import dataclasses
from dataclasses import MISSING, dataclass
import difflib
import math
import re
from typing import Any, ClassVar

DOUBLE, INTEGER, BOOL, STRING, INTEGER_ARRAY = 'double', 'integer', 'bool', 'string', 'integer[]'

_TRUE = ('true', 'yes', 'on')
_FALSE = ('false', 'no', 'off')


def type_of(default: Any) -> str:
    """The parameter type a default value stands for."""
    if isinstance(default, bool):
        return BOOL
    if isinstance(default, int):
        return INTEGER
    if isinstance(default, float):
        return DOUBLE
    if isinstance(default, str):
        return STRING
    if isinstance(default, (list, tuple)) and all(
        isinstance(v, int) and not isinstance(v, bool) for v in default
    ):
        return INTEGER_ARRAY
    raise TypeError(f'no parameter type for default {default!r}')


_EXPECTED = {
    DOUBLE: 'a double: a number such as 50 or 0.5',
    INTEGER: 'an integer: a whole number such as 10',
    BOOL: 'a bool: true or false',
    STRING: 'a string',
    INTEGER_ARRAY: 'an integer array such as [64,64]',
}


def bound_text(x: float) -> str:
    """A bound as typed: 200, 0.5, 1000000."""
    return str(int(x)) if float(x).is_integer() else f'{x:g}'


@dataclass(frozen=True)
class Param:
    """One parameter: name, default (its type gives the parameter's type), text, range.

    :param name: parameter (or option) name.
    :param default: default value; a float default makes a double, an int an integer, a
        list of ints an integer array.
    :param description: one line for ``--help`` and ``ros2 param describe``.
    :param lo: inclusive lower bound (numbers only).
    :param hi: inclusive upper bound (numbers only).
    """

    name: str
    default: Any
    description: str
    lo: float | None = None
    hi: float | None = None

    @property
    def type(self) -> str:
        """``double``, ``integer``, ``bool``, ``string`` or ``integer[]``."""
        return type_of(self.default)

    def convert(self, value: Any, shown_as: str | None = None) -> Any:
        """``value`` as this parameter's type, range-checked.

        :param value: command-line text (``'50'``), or a value a YAML file gave (``50``).
        :param shown_as: how the value is named in errors (default ``name:=value``).
        :raises ValueError: naming the parameter, the value and what is accepted.
        """
        shown = shown_as or f'{self.name}:={value}'
        kind = self.type
        out = _convert(kind, value)
        if out is None:
            raise ValueError(f'{shown}: expected {_EXPECTED[kind]} ({self.description})')
        if kind in (DOUBLE, INTEGER) and self.lo is not None and self.hi is not None:
            if not self.lo <= out <= self.hi:
                raise ValueError(
                    f'{shown}: expected a value in [{bound_text(self.lo)}, {bound_text(self.hi)}] '
                    f'({self.description})'
                )
        return out


def _convert(kind: str, value: Any) -> Any:
    """The converted value, or None when ``value`` is not of ``kind``."""
    text = value.strip() if isinstance(value, str) else None
    if kind == STRING:
        if isinstance(value, str):
            return value
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return str(value)  # run_name: 2024 in a YAML file is the name '2024'
        return None
    if kind == BOOL:
        if isinstance(value, bool):
            return value
        if text is not None and text.lower() in _TRUE + _FALSE:
            return text.lower() in _TRUE
        return None
    if kind == INTEGER_ARRAY:
        if text is not None:
            import yaml

            try:
                value = yaml.safe_load(text)
            except yaml.YAMLError:
                return None
        if not isinstance(value, (list, tuple)):
            return None
        items = [_convert(INTEGER, v) for v in value]
        return None if any(v is None for v in items) else items
    number: Any = value
    if text is not None:
        try:
            number = int(text)
        except ValueError:
            try:
                number = float(text)
            except ValueError:
                return None
    if isinstance(number, bool) or not isinstance(number, (int, float)):
        return None
    if not math.isfinite(number):
        return None
    if kind == DOUBLE:
        return float(number)
    if isinstance(number, float):  # 3.0 is the integer 3; 2.5 is no integer
        return int(number) if number.is_integer() else None
    return number


def table_by_name(table: Iterable[Param]) -> dict[str, Param]:
    """``{name: Param}`` of a table."""
    return {p.name: p for p in table}


def unknown_name(name: str, known: Iterable[str], what: str) -> ValueError:
    """The error for a name that is not in a table, with the closest ones as a hint."""
    known = sorted(known)
    close = difflib.get_close_matches(name, known, n=2)
    hint = f'did you mean {" or ".join(close)}?' if close else f'known: {", ".join(known)}'
    return ValueError(f'{what} {name!r} does not exist; {hint}')


def convert_all(
    values: dict[str, Any], table: Iterable[Param], what: str, source: str = ''
) -> dict[str, Any]:
    """Every value of ``values`` converted by its table entry; unknown names refused.

    :param what: how a name is called in errors (``'rip_control parameter'``).
    :param source: prefix for errors (e.g. the params file).
    """
    known = table_by_name(table)
    out = {}
    for name, value in values.items():
        if name not in known:
            raise ValueError(source + str(unknown_name(name, known, what)))
        shown = f'{source}{name}: {value!r}' if source else None
        out[name] = known[name].convert(value, shown)
    return out


def parse_options(argv: list[str], table: tuple[Param, ...]) -> dict[str, Any]:
    """``name:=value`` command-line options, typed and range-checked against a table.

    Tools that start no node (pre-training, recording) take their options this way too, so
    every command of the package reads the same. Every error names the option and the value.
    """
    given = parse_args(argv)
    out = {p.name: p.default for p in table}
    out.update(convert_all(given, table, 'option'))
    return out


def parse_args(argv: list[str]) -> dict[str, str]:
    """``name:=value`` pairs (the launch-file syntax); anything else is refused by name."""
    out = {}
    for item in argv:
        name, sep, value = item.partition(':=')
        if not sep or not name:
            raise ValueError(f'argument {item!r} is not name:=value')
        out[name] = value
    return out


def options_help(table: tuple[Param, ...]) -> str:
    """One line per option: ``name:=default  (type) description``, the types aligned."""
    shown = [f'{p.name}:={_shown_default(p)}' for p in table]
    width = max((len(s) for s in shown), default=0)
    return '\n'.join(
        f'  {s:<{width}}  ({p.type}) {p.description}' for s, p in zip(shown, table, strict=True)
    )


_ROLE = re.compile(r':[a-z]+:`(~?)([^`]+)`')


def help_text(doc: str | None) -> str:
    """A module docstring as ``--help`` prints it: its reST markup read as plain text.

    ``:mod:`a.b``` reads ``a.b`` (``~a.b.c``: ``c``), ````code```` reads ```code```.
    """
    text = _ROLE.sub(lambda m: m[2].rsplit('.', 1)[-1] if m[1] else m[2], doc or '')
    return text.replace('``', '`')


def help_requested(argv: list[str], doc: str | None, table: tuple[Param, ...]) -> bool:
    """Print ``doc`` and the option table if ``-h``/``--help`` is in ``argv``; say whether."""
    if not any(a in ('-h', '--help') for a in argv):
        return False
    print(help_text(doc))
    print('options (name:=value):\n' + options_help(table))
    return True


def _shown_default(p: Param) -> str:
    if isinstance(p.default, bool):
        return str(p.default).lower()
    if isinstance(p.default, list):
        return '[' + ','.join(str(v) for v in p.default) + ']'
    return repr(p.default) if isinstance(p.default, str) else str(p.default)


def defaults(table: Iterable[Param]) -> dict[str, Any]:
    """``{name: default}`` of a table: what the product ships."""
    return {p.name: p.default for p in table}


@dataclass(frozen=True)
class From:
    """Where a config field's value comes from: one parameter, scaled or cast.

    :param param: the parameter's name in the node's table.
    :param scale: multiplies a number (``1e-3`` makes a ``_ms`` parameter a ``_s`` field).
    :param cast: applied last (``tuple`` for a list parameter held as a tuple).
    """

    param: str
    scale: float | None = None
    cast: Callable[[Any], Any] | None = None

    def read(self, values: Mapping[str, Any]) -> Any:
        """The field's value from the parameters' values."""
        value = values[self.param]
        if self.scale is not None:
            value = value * self.scale
        return self.cast(value) if self.cast is not None else value


def int_tuple(value: Any) -> tuple[int, ...]:
    """A list parameter's integers as a tuple (``From(..., cast=int_tuple)``)."""
    return tuple(int(v) for v in value)


class FromParams:
    """A frozen config dataclass built from a node's parameter table, and only from it.

    The class names its table (``TABLE``). A field without a default of its own is set by the
    parameter of its own name, unless ``PARAMS`` says where else it comes from (field ->
    :class:`From`: another name, a unit's scale, a cast) or it is a nested config
    (``NESTED``); the table holds its default, once. Fields with a default are not
    parameters (task constants, the pacer's spin window).
    """

    TABLE: ClassVar[tuple[Param, ...]]
    PARAMS: ClassVar[Mapping[str, From]] = {}
    NESTED: ClassVar[tuple[str, ...]] = ()

    @classmethod
    def sources(cls) -> dict[str, From]:
        """Where each field a parameter sets comes from: field -> :class:`From`."""
        out = {}
        for f in dataclasses.fields(cls):  # type: ignore[arg-type]
            own_default = f.default is not MISSING or f.default_factory is not MISSING
            if f.name in cls.PARAMS:
                out[f.name] = cls.PARAMS[f.name]
            elif f.name not in cls.NESTED and not own_default:
                out[f.name] = From(f.name)
        return out

    @classmethod
    def field_values(cls, values: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """The fields a parameter sets, from ``values`` over the table's defaults."""
        merged = {**defaults(cls.TABLE), **dict(values or {})}
        return {name: source.read(merged) for name, source in cls.sources().items()}

    @classmethod
    def from_params(cls, values: Mapping[str, Any] | None = None, **fields: Any) -> Any:
        """The config for ``values`` (parameter names; the table's defaults for the rest).

        :param fields: field values set directly, over what the parameters give (tests).
        :raises ValueError: from the class's own validation, naming the field.
        """
        return cls(**{**cls.field_values(values), **fields})


# ---- the two nodes ------------------------------------------------------------------------

# Facts both nodes hold, one entry each: the rate they must agree on, the network size, the
# initial policy and where the run writes.
_RATE_HZ = Param('rate_hz', 50.0, 'control rate, Hz (both nodes; buffers are tagged)', 1.0, 1000.0)
_HIDDEN_SIZES = Param('hidden_sizes', [64, 64], 'hidden layers of the actor (and critics)')
_POLICY = Param('policy', '', 'initial actor weights (.safetensors)')
ACTION_HISTORY = Param(
    'action_history',
    0,
    'k: actions before the previous one appended to the observation (the policy file records '
    'it; 0: the 6-float observation of the shipped policies, buffers and bags)',
    0,
    8,
)
# New pre-trainings see the two actions before the previous one: on the stuck rig (1.5 ticks
# of latency, a 1.2 V dead zone) k = 2 deployed best (bench/results/
# action_history_stuck_seed*.json, README). The nodes' own default stays 0 (the shipped
# policy's); the runner takes a policy's k from its file. Read by rip_learner.pretrain (its
# option) and rip_control.adapt (what its re-trainings get unless the user typed one).
PRETRAIN_ACTION_HISTORY = Param(
    'action_history',
    2,
    ACTION_HISTORY.description + '; a warm start from a smaller k gets zero weights',
    ACTION_HISTORY.lo,
    ACTION_HISTORY.hi,
)
_RUN_NAME = Param('run_name', 'default', 'outputs under runs/<run_name>')
_RUNS_DIR = Param('runs_dir', 'runs', 'parent directory of runs')
_RUN_ID = Param(
    'run_id',
    '',
    "the run's identity: weights and transitions tagged with another are refused, counted "
    "('': take any; the runner and the launch file give each run a fresh one)",
)

CONTROL_PARAMETERS = (
    _RATE_HZ,
    Param('serial_port', '', 'rig serial device'),
    Param('serial_timeout_ms', 10.0, 'bound on one serial transaction', 0.5, 500.0),
    Param('timing_violation_threshold_ms', 5.0, 'overrun that counts as a strike', 0.1, 1000.0),
    Param('max_strikes', 3, 'consecutive strikes to trip', 1, 100),
    Param(
        'hung_timeout_ms',
        300.0,
        'silence of the real-time process (beyond one period) before the node kills it and '
        'disengages the motor itself',
        5.0,
        10000.0,
    ),
    Param(
        'node_timeout_ms',
        1000.0,
        'silence of the node after which the real-time process disengages and exits',
        50.0,
        60000.0,
    ),
    Param('max_serial_errors', 3, 'consecutive failed ticks', 1, 100),
    Param('episode_seconds', 6.0, 'policy time per episode, s', 0.02, 3600.0),
    Param(
        'episodes',
        10,
        'stop after this many training episodes, over every activation (guard evaluations not '
        'counted; 0: unlimited)',
        0,
        1_000_000,
    ),
    Param(
        'excitation_episodes',
        0,
        'excitation episodes (rip_control.rig.excitation: pendulum hanging, for '
        'rip_learner.identify) run before the first training episode, over every activation; '
        'not counted in episodes',
        0,
        10,
    ),
    Param('max_action_v', 8.0, 'volts at action +/-1', 0.1, 24.0),
    Param(
        'max_deadman_ms',
        200,
        "configure refuses a rig whose firmware deadman is longer (the motor's time driven "
        'after the host stalls)',
        10,
        2000,
    ),
    Param('arm_limit_rad', 1.6, 'episode ends beyond this arm angle', 0.1, 3.14),
    _POLICY,
    Param('allow_random_policy', False, 'activate with an untrained actor'),
    _HIDDEN_SIZES,
    ACTION_HISTORY,
    Param('stochastic_actions', True, 'sample actions (exploration)'),
    Param(
        'train_noise_scale',
        0.5,
        "multiplies the policy's standard deviation when a training episode samples an action "
        "(1: SAC's own sampling; 0: the mean action)",
        0.0,
        1.0,
    ),
    Param(
        'eval_every_episodes',
        2,
        'regression guard: a newer policy gets a deterministic evaluation episode after this '
        'many training episodes and drives the rig only if it scores within eval_margin of the '
        'best evaluation (0: off, every new policy drives at once)',
        0,
        100_000,
    ),
    Param(
        'eval_margin',
        0.05,
        'regression guard: fraction of the best evaluation return a candidate may fall short by',
        0.0,
        0.99,
    ),
    Param(
        'eval_best_margin',
        0.02,
        'regression guard: fraction of the best evaluation return a candidate must beat it by '
        'to become policy_best (one evaluation is noisy; 0: any higher return)',
        0.0,
        0.99,
    ),
    Param(
        'eval_balance_margin',
        0.25,
        'regression guard: fraction of the longest balance a promoted evaluation has shown that '
        "a candidate's may fall short by and still go live (1: no balance requirement)",
        0.0,
        1.0,
    ),
    Param(
        'eval_episodes',
        1,
        'regression guard: evaluation episodes in a row per candidate, judged on their mean '
        'return and mean longest balance (one episode spreads wider than the differences it '
        'judges)',
        1,
        100,
    ),
    Param(
        'eval_episode_seconds',
        0.0,
        'regression guard: evaluation episode length, s (0: episode_seconds; may be longer)',
        0.0,
        3600.0,
    ),
    _RUN_NAME,
    _RUNS_DIR,
    _RUN_ID,
    Param('control_cpu', -1, 'CPU of the real-time control process (-1: the last one)', -1, 4095),
    Param(
        'fifo_priority', 80, 'SCHED_FIFO priority of the real-time control process (0: off)', 0, 99
    ),
    Param(
        'gil_holders_fifo_priority',
        0,
        "SCHED_FIFO priority of the node process's threads (executor, pump, DDS), which no "
        'longer share a GIL with the loop (0: off)',
        0,
        98,
    ),
    Param(
        'cpu_idle_latency_us',
        0,
        'while configured, the idle exit latency every CPU is held to (/dev/cpu_dma_latency, root '
        'only; -1: not requested): at 0 idle CPUs poll instead of halting and the pacer wakes on '
        'time (a VM halting idle vCPUs wakes it milliseconds late); idle CPUs spin while held',
        -1,
        100000,
    ),
    Param('switch_interval_us', 500, 'Python switch interval of the real-time process', 50, 5000),
    Param('tick_topic_max_hz', 100.0, 'rate cap of the per-tick topic', 0.0, 10000.0),
    Param('gc_off', True, 'freeze and disable the garbage collector of the real-time process'),
    Param(
        'tick_trace',
        '',
        "benchmarks: write each tick's dt/overrun (the newest 2**20) to this .npz on deactivate",
    ),
    Param('seed', 0, 'exploration noise seed', 0, 2**31 - 1),
    Param(
        'fault_tick_delay_ms',
        0.0,
        'FAULT INJECTION (tests only): stretch each tick by this long',
        0.0,
        10000.0,
    ),
    Param('fault_after_ticks', 0, 'FAULT INJECTION: ticks before the stretch', 0, 10**9),
)

LEARNER_PARAMETERS = (
    _RATE_HZ,
    Param('gradient_steps', 4, 'K: SAC updates per received transition', 0, 1000),
    Param('batch_size', 256, 'SAC minibatch', 1, 65536),
    Param('learning_starts', 256, 'stored transitions before the first update', 0, 10**9),
    _HIDDEN_SIZES,
    ACTION_HISTORY,
    Param('learning_rate', 3e-4, 'Adam learning rate', 1e-7, 1.0),
    Param('gamma', 0.99, 'discount', 0.0, 1.0),
    Param('tau', 0.005, 'target smoothing', 0.0, 1.0),
    Param('buffer_size', 200_000, 'replay buffer capacity', 1, 10**8),
    Param('torch_threads', 1, 'torch intra-op threads', 1, 256),
    Param('max_chunk', 32, 'largest train() call, in gradient steps', 1, 10000),
    Param(
        'fast_updates',
        True,
        "SAC updates by rip_learner.fast_sac (SB3's train() mathematics with batched sampling, "
        'fused Adam and one Polyak kernel; same checkpoints): 1.2-1.4x updates/s measured on '
        '[64, 64]; the safeguards below need it',
    ),
    Param(
        'critic_warmup_updates',
        1000,
        'safeguard: the first this many updates train the critics only (the actor waits for a '
        'critic fitted to the rig)',
        0,
        10**9,
    ),
    Param(
        'prior_data',
        'auto',
        "safeguard: replay buffer file (same rate) mixed into every batch; 'auto': the "
        "prior_data.safetensors beside the policy, else the shipped policy's; empty: none",
    ),
    Param('prior_ratio', 0.5, 'safeguard: share of each batch drawn from prior_data', 0.0, 0.99),
    Param(
        'smoothness',
        5.0,
        "safeguard: weight of the action-smoothness term |a(s) - a(s')|^2 in the actor loss",
        0.0,
        1000.0,
    ),
    Param(
        'smoothness_reference',
        'initial',
        "'initial': the smoothness term penalises only chatter beyond that of the actor the "
        "learner starts from (the policy, or a resumed run's networks) on the same states: it "
        "may not grow, and is not pushed below where it started; 'none': all of it (CAPS)",
    ),
    Param('device', 'auto', "torch device: 'auto' (CUDA when present), 'cpu' or 'cuda'"),
    Param('dt_tolerance_ms', 5.0, 'largest |dt - 1/rate_hz| a transition may have', 0.01, 1e4),
    Param('resume_buffer', '', 'replay buffer file to continue from'),
    Param('resume_bag', '', 'rosbag2 directories of transitions to import (comma-separated)'),
    _POLICY,
    _RUN_NAME,
    _RUNS_DIR,
    _RUN_ID,
    Param('publish_every_steps', 200, 'publish the actor every this many updates', 1, 10**9),
    Param('publish_every_s', 2.0, '... or this often while training', 0.01, 3600.0),
    Param('checkpoint_every_s', 30.0, 'save buffer and checkpoint this often', 1.0, 86400.0),
    Param('nice', 10, 'niceness added to this process (the control loop has priority)', 0, 19),
    Param('cpus', [-1], 'pin this process to these CPUs ([-1]: no pinning)'),
    Param('seed', 0, 'SAC seed', 0, 2**31 - 1),
    Param(
        'fault_train_error_after_updates',
        0,
        'FAULT INJECTION (tests): the training thread raises after this many updates (0: off)',
        0,
        10**9,
    ),
)
