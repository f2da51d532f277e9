"""Process plans: which executables run with which parameters (runner, benchmarks, tests).

A :class:`ProcessSpec` is what a launch file's ``Node`` action says — executable, node name,
namespace, parameters — turned into a ``python -m`` command for machines without
``ros2 launch``. :mod:`rip_control.run.finetune` builds its plan from these, and a test compares
that plan with ``launch/finetune.launch.py``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
import os
from pathlib import Path
import sys
from typing import Any

from rip_control.rig.emulator_process import child_env
from rip_control.run.params import (
    CONTROL_PARAMETERS,
    LEARNER_PARAMETERS,
    Param,
    convert_all,
    options_help,
    parse_args,
    parse_options,
    table_by_name,
    unknown_name,
)

# console_scripts entry point -> module (setup.py declares the same pairs)
EXECUTABLES = {
    'control_node': 'rip_control.ros.control_node',
    'learner_node': 'rip_learner.learner_node',
    'rig_emulator': 'rip_control.rig.emulator',
}


def param_text(value: Any) -> str:
    """A typed value as ``--ros-args -p name:=value`` reads it back with the same type.

    rcl parses the text as YAML: a double keeps its point (``50.0``), and a string is single
    quoted, so ``run_name:=2024`` or ``yes`` stays a string.
    """
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, (list, tuple)):
        return '[' + ','.join(param_text(v) for v in value) + ']'
    if isinstance(value, str):
        return "'" + value.replace("'", "''") + "'"
    return repr(value) if isinstance(value, float) else str(value)


@dataclass
class ProcessSpec:
    """One process of a plan.

    :param label: log prefix.
    :param executable: key of :data:`EXECUTABLES`.
    :param node_name: ROS node name (None: not a node, e.g. the emulator).
    :param namespace: ROS namespace ('' for none).
    :param params: ROS parameters.
    :param args: plain command-line arguments (non-ROS processes).
    :param remaps: ROS topic remappings, ``{from: to}``.
    """

    label: str
    executable: str
    node_name: str | None = None
    namespace: str = ''
    params: dict[str, Any] = field(default_factory=dict)
    args: list[str] = field(default_factory=list)
    remaps: dict[str, str] = field(default_factory=dict)

    def command(self) -> list[str]:
        """The ``python -m`` command line that starts it."""
        cmd = [sys.executable, '-m', EXECUTABLES[self.executable], *self.args]
        if self.node_name is None:
            return cmd
        cmd += ['--ros-args', '-r', f'__node:={self.node_name}']
        if self.namespace:
            cmd += ['-r', f'__ns:=/{self.namespace.strip("/")}']
        for src, dst in self.remaps.items():
            cmd += ['-r', f'{src}:={dst}']
        for key, value in self.params.items():
            cmd += ['-p', f'{key}:={param_text(value)}']
        return cmd

    @property
    def fqn(self) -> str:
        """Fully qualified node name."""
        ns = self.namespace.strip('/')
        return f'/{ns}/{self.node_name}' if ns else f'/{self.node_name}'


def ensure_loopback_dds(default_domain: int | None = None) -> tuple[str, str]:
    """Keep DDS on this machine unless the user chose otherwise; return (range, domain)."""
    os.environ.setdefault('ROS_AUTOMATIC_DISCOVERY_RANGE', 'LOCALHOST')
    if 'ROS_DOMAIN_ID' not in os.environ:
        domain = default_domain if default_domain is not None else 51 + os.getpid() % 50
        os.environ['ROS_DOMAIN_ID'] = str(domain)
    return os.environ['ROS_AUTOMATIC_DISCOVERY_RANGE'], os.environ['ROS_DOMAIN_ID']


__all__ = [
    'EXECUTABLES',
    'ProcessSpec',
    'child_env',
    'ensure_loopback_dds',
    'options_help',
    'param_text',
    'parse_args',
    'parse_options',
]


@dataclass(frozen=True)
class LaunchArgument:
    """A launch argument and the node parameters it overrides.

    ``launch/finetune.launch.py`` declares these, and :mod:`rip_control.run.finetune` accepts
    them as ``name:=value``; both apply a value to every ``(node, parameter)`` in ``targets``
    on top of ``params_file``.
    """

    name: str
    default: str
    description: str
    targets: tuple[tuple[str, str], ...] = ()
    kind: Param | None = None  # the type of an argument that sets no node parameter

    def param(self) -> Param:
        """The table entry that types and range-checks this argument's value."""
        if self.kind is not None:
            return self.kind
        node, name = self.targets[0]
        return NODE_TABLES[node][name]

    def convert(self, text: Any) -> Any:
        """The argument's value, typed; :class:`ValueError` names ``name:=value`` if refused."""
        return self.param().convert(text, f'{self.name}:={text}')


CONTROL, LEARNER = 'rip_control', 'rip_learner'
NODE_TABLES = {
    CONTROL: table_by_name(CONTROL_PARAMETERS),
    LEARNER: table_by_name(LEARNER_PARAMETERS),
}
LAUNCH_ARGUMENTS = (
    LaunchArgument(
        'rate', '50.0', 'control rate, Hz', ((CONTROL, 'rate_hz'), (LEARNER, 'rate_hz'))
    ),
    LaunchArgument(
        'serial_port',
        '',
        'rig serial device; empty starts the emulator',
        ((CONTROL, 'serial_port'),),
    ),
    LaunchArgument(
        'run_name',
        'default',
        'outputs under runs/<run_name>/',
        ((CONTROL, 'run_name'), (LEARNER, 'run_name')),
    ),
    LaunchArgument(
        'runs_dir',
        'runs',
        'parent directory of runs',
        ((CONTROL, 'runs_dir'), (LEARNER, 'runs_dir')),
    ),
    LaunchArgument(
        'episodes',
        '10',
        "training episodes to run (the guard's evaluations come on top; 0: until stopped)",
        ((CONTROL, 'episodes'),),
    ),
    LaunchArgument(
        'episode_seconds', '6.0', 'policy time per episode, s', ((CONTROL, 'episode_seconds'),)
    ),
    LaunchArgument(
        'gradient_steps', '4', 'K: SAC updates per transition', ((LEARNER, 'gradient_steps'),)
    ),
    LaunchArgument(
        'resume_buffer', '', 'replay buffer to continue from', ((LEARNER, 'resume_buffer'),)
    ),
    LaunchArgument(
        'policy',
        '',
        'initial actor (.safetensors); empty: the pre-trained policy shipped for the rate; '
        "'auto': the run's best-evaluated (its latest with the guard off), else the shipped one",
        ((CONTROL, 'policy'), (LEARNER, 'policy')),
    ),
    LaunchArgument(
        'params_file',
        '',
        "YAML with both nodes' parameters (default: the installed config/finetune.yaml)",
        kind=Param('params_file', '', 'YAML file'),
    ),
    LaunchArgument(
        'rig_params',
        '',
        'emulator physics YAML (empty: QUBE-Servo 2)',
        kind=Param('rig_params', '', 'YAML file'),
    ),
    LaunchArgument(
        'rigs',
        '1',
        'control nodes (namespaces rig0, rig1...) feeding the one learner; serial_port takes '
        'a comma-separated port per rig, or empty for an emulator each',
        kind=Param('rigs', 1, 'number of rigs', 1, 16),
    ),
    LaunchArgument(
        'violation_restarts',
        '5',
        'after a timing violation or a serial stall (motor off, its unconfirmed transitions '
        'withdrawn) re-activate the rig; '
        'this many trips in a row with no episode finished between them end the run (0: the '
        'first violation does)',
        kind=Param('violation_restarts', 5, 'restarts after a timing violation', 0, 1000),
    ),
    LaunchArgument(
        'emulator_link',
        '/tmp/rip_rig',
        'where the emulator links its pty',
        kind=Param('emulator_link', '', 'path'),
    ),
)
LAUNCH_ARGUMENT_BY_NAME = {a.name: a for a in LAUNCH_ARGUMENTS}


def default_params_file() -> Path:
    """``config/finetune.yaml``: from the source tree, else from the installed share dir."""
    here = Path(__file__).resolve().parents[2] / 'config' / 'finetune.yaml'
    if here.exists():
        return here
    try:
        from ament_index_python.packages import get_package_share_directory

        return Path(get_package_share_directory('rip_control')) / 'config' / 'finetune.yaml'
    except (ImportError, LookupError, OSError):  # no ROS 2 install and no source tree
        raise FileNotFoundError('config/finetune.yaml not found; pass params_file:=PATH') from None


def packaged_policy(rate_hz: float) -> Path:
    """Where the pre-trained policy for ``rate_hz`` ships: ``policies/sim_<rate>hz/``."""
    name = f'sim_{rate_hz:g}hz'
    here = Path(__file__).resolve().parents[2] / 'policies' / name / 'policy.safetensors'
    if here.exists():
        return here
    try:
        from ament_index_python.packages import get_package_share_directory

        share = Path(get_package_share_directory('rip_control'))
        return share / 'policies' / name / 'policy.safetensors'
    except (ImportError, LookupError, OSError):  # not installed: the source tree's path
        return here


RIG_REMAPS = {'transitions': '/transitions', 'policy_weights': '/policy_weights'}
"""With several rigs, every control node publishes into and listens on the learner's topics."""


def launch_default(a: LaunchArgument) -> str:
    """The value an argument takes when not given, in the launch file and the runner alike.

    ``params_file`` defaults to the installed ``config/finetune.yaml``; the rest to their
    table default (an empty ``policy`` is resolved by the plan, for the rate).
    """
    if a.name == 'params_file':
        return str(default_params_file())
    return a.default


def help_requested(argv: list[str], doc: str | None, table: tuple[Param, ...]) -> bool:
    """Print ``doc`` and the option table if ``-h``/``--help`` is in ``argv``; say whether."""
    if not any(a in ('-h', '--help') for a in argv):
        return False
    print(doc)
    print('options (name:=value):\n' + options_help(table))
    return True


def arguments_help(skip: tuple[str, ...] = (), defaults: dict[str, str] | None = None) -> str:
    """The launch arguments, one per line, for the runners' ``--help``."""
    defaults = defaults or {}
    return 'arguments (name:=value):\n' + '\n'.join(
        f'  {a.name:16s} {a.description} (default {defaults.get(a.name, a.default)!r})'
        for a in LAUNCH_ARGUMENTS
        if a.name not in skip
    )


def launch_values(args: dict[str, str]) -> dict[str, Any]:
    """Every launch argument's value, typed: the given text converted, else the default.

    :raises ValueError: an unknown argument, or a value its type or range refuses, naming the
        argument, the value and what is accepted.
    """
    for name in args:
        if name not in LAUNCH_ARGUMENT_BY_NAME:
            raise unknown_name(name, LAUNCH_ARGUMENT_BY_NAME, 'argument')
    return {a.name: a.convert(args.get(a.name, launch_default(a))) for a in LAUNCH_ARGUMENTS}


def node_parameters(args: dict[str, str]) -> dict[str, dict[str, Any]]:
    """Parameters of each node, typed: the params file, then the launch arguments over it.

    Both are converted by the nodes' parameter tables, so ``rate_hz: 50`` in the file and
    ``rate:=50`` on the command line are the double 50.0, and a name no node declares is
    refused rather than silently ignored.

    :param args: launch arguments given by the user, as text.
    :raises ValueError: naming the bad argument, file key or value.
    """
    import yaml

    values = launch_values(args)
    path = Path(values['params_file'])
    try:
        doc = yaml.safe_load(path.read_text()) or {}
    except OSError as exc:
        raise ValueError(f'params_file:={path}: {exc.strerror or exc}') from None
    except yaml.YAMLError as exc:
        raise ValueError(f'params_file:={path}: not valid YAML ({exc})') from None
    if not isinstance(doc, dict):
        raise ValueError(f'params_file:={path}: expected node names at the top level')
    out: dict[str, dict[str, Any]] = {}
    for node, table in NODE_TABLES.items():
        section = doc.get(node) or {}
        given = section.get('ros__parameters') if isinstance(section, dict) else None
        out[node] = convert_all(
            dict(given or {}), table.values(), f'{node} parameter', f'params_file:={path}: '
        )
    for a in LAUNCH_ARGUMENTS:
        for node, param in a.targets:
            out[node][param] = values[a.name]
    return out
