"""Process plans: which executables run with which parameters (runner, benchmarks, tests).

A :class:`ProcessSpec` is what a launch file's ``Node`` action says — executable, node name,
namespace, parameters — turned into a ``python -m`` command for machines without
``ros2 launch``. :mod:`rip_control.finetune` builds its plan from these, and a test compares
that plan with ``launch/finetune.launch.py``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
import os
from pathlib import Path
import sys
from typing import Any

from rip_control.emulator_process import child_env
from rip_control.node_params import Param

# console_scripts entry point -> module (setup.py declares the same pairs)
EXECUTABLES = {
    'control_node': 'rip_control.control_node',
    'learner_node': 'rip_learner.learner_node',
    'rig_emulator': 'rip_control.rig_emulator',
}


def param_text(value: Any) -> str:
    """A parameter value as ``--ros-args -p name:=value`` wants it (YAML scalars/lists)."""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, (list, tuple)):
        return '[' + ','.join(param_text(v) for v in value) + ']'
    if isinstance(value, str):
        return value if value else "''"
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
        domain = default_domain if default_domain is not None else 100 + os.getpid() % 100
        os.environ['ROS_DOMAIN_ID'] = str(domain)
    return os.environ['ROS_AUTOMATIC_DISCOVERY_RANGE'], os.environ['ROS_DOMAIN_ID']


__all__ = ['EXECUTABLES', 'ProcessSpec', 'child_env', 'ensure_loopback_dds', 'param_text']


@dataclass(frozen=True)
class LaunchArgument:
    """A launch argument and the node parameters it overrides.

    ``launch/finetune.launch.py`` declares these, and :mod:`rip_control.finetune` accepts
    them as ``name:=value``; both apply a value to every ``(node, parameter)`` in ``targets``
    on top of ``params_file``.
    """

    name: str
    default: str
    description: str
    targets: tuple[tuple[str, str], ...] = ()


CONTROL, LEARNER = 'rip_control', 'rip_learner'
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
        'episodes', '10', 'episodes to run (0: until stopped)', ((CONTROL, 'episodes'),)
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
        "initial actor (.safetensors); the runner's 'auto' picks the run's latest or the "
        'packaged pre-trained one',
        ((CONTROL, 'policy'), (LEARNER, 'policy')),
    ),
    LaunchArgument(
        'params_file',
        '',
        "YAML with both nodes' parameters (default: the installed config/finetune.yaml)",
    ),
    LaunchArgument('rig_params', '', 'emulator physics YAML (empty: QUBE-Servo 2)'),
    LaunchArgument(
        'rigs',
        '1',
        'control nodes (namespaces rig0, rig1...) feeding the one learner; serial_port takes '
        'a comma-separated port per rig, or empty for an emulator each',
    ),
    LaunchArgument('emulator_link', '/tmp/rip_rig', 'where the emulator links its pty'),
)


def default_params_file() -> Path:
    """``config/finetune.yaml``: from the source tree, else from the installed share dir."""
    here = Path(__file__).resolve().parent.parent / 'config' / 'finetune.yaml'
    if here.exists():
        return here
    try:
        from ament_index_python.packages import get_package_share_directory

        return Path(get_package_share_directory('rip_control')) / 'config' / 'finetune.yaml'
    except ImportError:  # pragma: no cover - no ROS 2 install and no source tree
        raise FileNotFoundError('config/finetune.yaml not found; pass params_file:=PATH') from None


def packaged_policy(rate_hz: float) -> Path:
    """Where the pre-trained policy for ``rate_hz`` ships: ``policies/sim_<rate>hz/``."""
    name = f'sim_{rate_hz:g}hz'
    here = Path(__file__).resolve().parent.parent / 'policies' / name / 'policy.safetensors'
    if here.exists():
        return here
    try:
        from ament_index_python.packages import get_package_share_directory

        share = Path(get_package_share_directory('rip_control'))
        return share / 'policies' / name / 'policy.safetensors'
    except ImportError:  # no ROS 2 install: the source tree's path (may not exist)
        return here


RIG_REMAPS = {'transitions': '/transitions', 'policy_weights': '/policy_weights'}
"""With several rigs, every control node publishes into and listens on the learner's topics."""


def launch_default(a: LaunchArgument) -> str:
    """The value an argument takes when not given, in the launch file and the runner alike.

    ``params_file`` defaults to the installed ``config/finetune.yaml`` and ``policy`` to the
    shipped 50 Hz pre-trained policy (at another rate the nodes refuse it, naming both
    rates: pass a policy pre-trained at that rate); the rest to their table default.
    """
    if a.name == 'params_file':
        return str(default_params_file())
    if a.name == 'policy':
        packaged = packaged_policy(50.0)
        return str(packaged) if packaged.exists() else ''
    return a.default


def parse_args(argv: list[str]) -> dict[str, str]:
    """``name:=value`` pairs (the launch-file syntax); anything else is refused by name."""
    out = {}
    for item in argv:
        name, sep, value = item.partition(':=')
        if not sep or not name:
            raise ValueError(f'argument {item!r} is not name:=value')
        out[name] = value
    return out


def parse_value(text: str) -> Any:
    """A ``name:=value`` value typed the way ROS 2 types it (YAML scalar or list)."""
    import yaml

    if text == '':
        return ''
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError:
        return text


def parse_options(argv: list[str], table: tuple[Param, ...]) -> dict[str, Any]:
    """``name:=value`` command-line options typed and range-checked against a table.

    Tools that start no node (pre-training, evaluation) take their options this way too, so
    every command of the package reads the same. Every error names the option and the value.
    """
    given = parse_args(argv)
    known = {p.name: p for p in table}
    unknown = sorted(set(given) - set(known))
    if unknown:
        raise ValueError(f'unknown option(s) {unknown}; known: {sorted(known)}')
    out = {p.name: p.default for p in table}
    for name, text in given.items():
        p = known[name]
        value = parse_value(text)
        default = p.default
        if isinstance(default, bool):
            ok = isinstance(value, bool)
        elif isinstance(default, int):
            ok = isinstance(value, int) and not isinstance(value, bool)
        elif isinstance(default, float):
            ok = isinstance(value, (int, float)) and not isinstance(value, bool)
            value = float(value) if ok else value
        elif isinstance(default, list):
            ok = isinstance(value, list)
        else:
            ok, value = True, text
        if not ok:
            raise ValueError(
                f'{name}:={text} is not a {type(default).__name__} (default {default!r})'
            )
        if p.lo is not None and p.hi is not None and not p.lo <= value <= p.hi:
            raise ValueError(f'{name}:={text} is outside [{p.lo:g}, {p.hi:g}]')
        out[name] = value
    return out


def options_help(table: tuple[Param, ...]) -> str:
    """One line per option: ``name:=default  description``."""
    return '\n'.join(f'  {p.name}:={p.default!r:<14} {p.description}' for p in table)


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


def node_parameters(args: dict[str, str]) -> dict[str, dict[str, Any]]:
    """Parameters of each node: the params file, then the launch arguments over it.

    :param args: launch arguments given by the user (unknown names are refused).
    """
    import yaml

    known = {a.name: a for a in LAUNCH_ARGUMENTS}
    unknown = sorted(set(args) - set(known))
    if unknown:
        raise ValueError(f'unknown argument(s) {unknown}; known: {sorted(known)}')
    values = {a.name: args.get(a.name, launch_default(a)) for a in LAUNCH_ARGUMENTS}
    path = Path(values['params_file']) if values['params_file'] else default_params_file()
    try:
        doc = yaml.safe_load(path.read_text()) or {}
    except OSError as exc:
        raise ValueError(f'params_file {path}: {exc}') from exc
    out: dict[str, dict[str, Any]] = {}
    for node in (CONTROL, LEARNER):
        out[node] = dict((doc.get(node) or {}).get('ros__parameters') or {})
    for a in LAUNCH_ARGUMENTS:
        for node, param in a.targets:
            out[node][param] = parse_value(values[a.name])
    return out
