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
import secrets
import subprocess
import sys
from typing import Any

from rip_control import run_files
from rip_control.params import (
    CONTROL_PARAMETERS,
    LEARNER_PARAMETERS,
    Param,
    convert_all,
    table_by_name,
    unknown_name,
)
from rip_control.policy import TOPIC as WEIGHTS_TOPIC
from rip_control.rig.host_firmware import FIRMWARES
from rip_control.transitions import TOPIC as TRANSITIONS_TOPIC

# console_scripts entry point -> module (setup.py declares the same pairs)
EXECUTABLES = {
    'control_node': 'rip_control.ros.control_node',
    'learner_node': 'rip_learner.learner_node',
    'rig_emulator': 'rip_control.rig.emulator',
    'identify': 'rip_learner.identify',
    'pretrain': 'rip_learner.pretrain',
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


@dataclass(frozen=True)
class LaunchArgument:
    """A launch argument, and the node parameters it sets when it is given.

    ``launch/finetune.launch.py`` declares these, and :mod:`rip_control.finetune` accepts
    them as ``name:=value``. An argument that sets parameters (``targets``) overrides the
    params file only when it is typed: not given (or empty), the file's value stands, and
    without one the table's default. The others choose files and processes (``kind`` types
    them and holds their default).
    """

    name: str
    description: str
    targets: tuple[tuple[str, str], ...] = ()
    kind: Param | None = None  # the type and default of an argument that sets no parameter
    runner_default: str = ''  # what the runners take instead of ``kind``'s default, in words

    def param(self) -> Param:
        """The table entry that types and range-checks this argument's value."""
        if self.kind is not None:
            return self.kind
        node, name = self.targets[0]
        return NODE_TABLES[node][name]

    @property
    def default(self) -> str:
        """The launch file's default text: empty (not given) for an argument with targets."""
        if self.kind is None:
            return ''
        return (
            str(self.kind.default)
            if not isinstance(self.kind.default, bool)
            else (str(self.kind.default).lower())
        )

    def convert(self, text: Any) -> Any:
        """The argument's value, typed; :class:`ValueError` names ``name:=value`` if refused."""
        return self.param().convert(text, f'{self.name}:={text}')


CONTROL, LEARNER = 'rip_control', 'rip_learner'
NODE_TABLES = {
    CONTROL: table_by_name(CONTROL_PARAMETERS),
    LEARNER: table_by_name(LEARNER_PARAMETERS),
}
LAUNCH_ARGUMENTS = (
    LaunchArgument('rate', 'control rate, Hz', ((CONTROL, 'rate_hz'), (LEARNER, 'rate_hz'))),
    LaunchArgument(
        'serial_port',
        'rig serial device; empty starts the emulator',
        ((CONTROL, 'serial_port'),),
    ),
    LaunchArgument(
        'run_name',
        'outputs under runs/<run_name>/',
        ((CONTROL, 'run_name'), (LEARNER, 'run_name')),
    ),
    LaunchArgument(
        'runs_dir', 'parent directory of runs', ((CONTROL, 'runs_dir'), (LEARNER, 'runs_dir'))
    ),
    LaunchArgument(
        'episodes',
        "training episodes to run (the guard's evaluations come on top; 0: until stopped)",
        ((CONTROL, 'episodes'),),
    ),
    LaunchArgument(
        'episode_seconds', 'policy time per episode, s', ((CONTROL, 'episode_seconds'),)
    ),
    LaunchArgument(
        'gradient_steps', 'K: SAC updates per transition', ((LEARNER, 'gradient_steps'),)
    ),
    LaunchArgument(
        'resume_buffer',
        "replay buffer to continue from; 'auto': the run's own, if it has one",
        ((LEARNER, 'resume_buffer'),),
    ),
    LaunchArgument(
        'policy',
        'initial actor (.safetensors); empty: the pre-trained policy shipped for the rate; '
        "'auto': the run's best-evaluated (its latest with the guard off), else the shipped one",
        ((CONTROL, 'policy'), (LEARNER, 'policy')),
    ),
    LaunchArgument(
        'action_history',
        'k: past actions (beyond the previous one) in the observation; not given: the k '
        "the initial policy's file records (a typed or params-file value must equal it)",
        ((CONTROL, 'action_history'), (LEARNER, 'action_history')),
    ),
    LaunchArgument(
        'eval_every_episodes',
        'regression guard: evaluate a newer policy after this many training episodes (0: the '
        'guard off, every new policy drives at once)',
        ((CONTROL, 'eval_every_episodes'),),
    ),
    LaunchArgument(
        'eval_episodes',
        'regression guard: evaluation episodes per candidate, judged on their means',
        ((CONTROL, 'eval_episodes'),),
    ),
    LaunchArgument(
        'eval_episode_seconds',
        'regression guard: evaluation episode length, s (0: episode_seconds)',
        ((CONTROL, 'eval_episode_seconds'),),
    ),
    LaunchArgument(
        'excitation_episodes',
        'excitation episodes (for rip_learner.identify) before the first training episode',
        ((CONTROL, 'excitation_episodes'),),
    ),
    LaunchArgument(
        'seed', 'seed of the exploration noise and of SAC', ((CONTROL, 'seed'), (LEARNER, 'seed'))
    ),
    LaunchArgument(
        'params_file',
        "YAML of both nodes' parameters over the shipped defaults (config/finetune.yaml is an "
        'example); empty: none',
        kind=Param('params_file', '', 'YAML file'),
    ),
    LaunchArgument(
        'rig_params',
        'emulator physics YAML (empty: QUBE-Servo 2)',
        kind=Param('rig_params', '', 'YAML file'),
    ),
    LaunchArgument(
        'rig_firmware',
        "what plays the emulated rig: 'python' (the rig emulator) or 'c' (the C firmware's "
        'host build, compiled on first use)',
        kind=Param('rig_firmware', 'python', "'python' or 'c'"),
    ),
    LaunchArgument(
        'rigs',
        'control nodes (namespaces rig0, rig1...) feeding the one learner; serial_port takes '
        'a comma-separated port per rig, or empty for an emulator each',
        kind=Param('rigs', 1, 'number of rigs', 1, 16),
    ),
    LaunchArgument(
        'violation_restarts',
        'after a timing violation or a serial stall (motor off, its unconfirmed transitions '
        'withdrawn) re-activate the rig, this many times in a row with no episode finished '
        'between them; the next trip ends the run (0: the first does)',
        kind=Param('violation_restarts', 5, 'restarts after a timing violation', 0, 1000),
    ),
    LaunchArgument(
        'rig_seconds',
        'rig-time limit, s (engaged or resetting, every activation counted): the run ends '
        'after the episode past which the next would exceed it; 0: no limit',
        kind=Param('rig_seconds', 0.0, 'rig-time limit, s', 0.0, 1e7),
    ),
    LaunchArgument(
        'emulator_link',
        'where the emulator links its pty (the launch file: /tmp/rip_rig)',
        kind=Param('emulator_link', '/tmp/rip_rig', 'path'),
        runner_default="/tmp/rip_rig_<the runner's pid>, one per runner",
    ),
)
LAUNCH_ARGUMENT_BY_NAME = {a.name: a for a in LAUNCH_ARGUMENTS}


RIG_REMAPS = {name: '/' + name for name in (TRANSITIONS_TOPIC, WEIGHTS_TOPIC)}
"""With several rigs, every control node publishes into and listens on the learner's topics."""


def arguments_help(skip: tuple[str, ...] = (), defaults: dict[str, str] | None = None) -> str:
    """The launch arguments, one per line, for the runners' ``--help``."""
    defaults = defaults or {}

    def shown(a: LaunchArgument) -> str:
        if a.runner_default:
            return f'default {a.runner_default}'
        if a.name in defaults:
            return f'default {defaults[a.name]!r}'
        if a.kind is not None:
            return f'default {a.default!r}'
        return f"not given: the params file's, else {a.param().default!r}"

    return 'arguments (name:=value):\n' + '\n'.join(
        f'  {a.name:16s} {a.description} ({shown(a)})'
        for a in LAUNCH_ARGUMENTS
        if a.name not in skip
    )


def given_arguments(args: dict[str, str]) -> dict[str, str]:
    """The arguments the user typed with a value; unknown names refused.

    An empty value counts as not given, as in the launch file, whose arguments default to
    empty: ``ros2 launch`` cannot tell a default from a typed value otherwise.
    """
    for name in args:
        if name not in LAUNCH_ARGUMENT_BY_NAME:
            raise unknown_name(name, LAUNCH_ARGUMENT_BY_NAME, 'argument')
    return {k: v for k, v in args.items() if str(v) != ''}


def _launch_values(given: dict[str, str]) -> dict[str, Any]:
    """The arguments that choose files and processes, typed (the given text, else the default).

    :raises ValueError: a value its type or range refuses, naming the argument, the value and
        what is accepted.
    """
    out = {
        a.name: a.convert(given.get(a.name, a.kind.default))
        for a in LAUNCH_ARGUMENTS
        if a.kind is not None
    }
    if out['rig_firmware'] not in FIRMWARES:
        raise ValueError(
            f'rig_firmware:={out["rig_firmware"]}: expected one of {", ".join(FIRMWARES)}'
        )
    return out


@dataclass(frozen=True)
class RunnerInput:
    """The runner's input, parsed once: the arguments, the params file, what the user set.

    Built by :meth:`parse` from the ``name:=value`` text (every name and value checked, the
    params file read once) and handed to :func:`plan`, :func:`preflight` and adapt.

    :param args: the arguments as given, text (an empty value counts as not given).
    :param typed: the arguments given with a value.
    :param values: the arguments that choose files and processes, typed (given, else default).
    :param file: each node's section of the params file, typed (empty without a file).
    :param nodes: each node's parameters, typed: the table's defaults, the params file over
        them, the typed arguments over both (an argument overrides the file only when typed).
    """

    args: dict[str, str]
    typed: dict[str, str]
    values: dict[str, Any]
    file: dict[str, dict[str, Any]]
    nodes: dict[str, dict[str, Any]]

    @classmethod
    def parse(cls, args: dict[str, str]) -> RunnerInput:
        """All of it from the text arguments, converted by the nodes' parameter tables.

        So ``rate_hz: 50`` in the file and ``rate:=50`` on the command line are the double
        50.0, and a name no node declares is refused rather than silently ignored.

        :raises ValueError: naming the bad argument, file key or value.
        """
        typed = given_arguments(args)
        values = _launch_values(typed)
        file = read_params_file(Path(values['params_file'])) if values['params_file'] else {}
        nodes = {
            node: {p.name: p.default for p in table.values()}
            for node, table in NODE_TABLES.items()
        }
        for node, section in file.items():
            nodes[node].update(section)
        for a in LAUNCH_ARGUMENTS:
            if a.name in typed and a.targets:
                value = a.convert(typed[a.name])
                for node, param in a.targets:
                    nodes[node][param] = value
        return cls(dict(args), typed, values, file, nodes)

    def set_by_user(self, name: str) -> bool:
        """Whether ``name`` was typed as an argument or is in the params file."""
        return name in self.typed or any(name in s for s in self.file.values())


def read_params_file(path: Path) -> dict[str, dict[str, Any]]:
    """Each node's section of a params file (``node: ros__parameters: {...}``), typed.

    :raises ValueError: naming the file, and the key or value it cannot use.
    """
    import yaml

    try:
        doc = yaml.safe_load(path.read_text()) or {}
    except OSError as exc:
        raise ValueError(f'params_file:={path}: {exc.strerror or exc}') from None
    except yaml.YAMLError as exc:
        raise ValueError(f'params_file:={path}: not valid YAML ({exc})') from None
    if not isinstance(doc, dict):
        raise ValueError(f'params_file:={path}: expected node names at the top level')
    unknown = sorted(str(k) for k in doc if k not in NODE_TABLES)
    if unknown:  # a typo, a namespaced or a wildcard section would otherwise do nothing
        raise ValueError(
            f'params_file:={path}: {unknown[0]!r} is not a node of the fine-tune; its sections '
            f'are {" and ".join(NODE_TABLES)} (with several rigs every control node reads '
            'the rip_control section)'
        )
    out: dict[str, dict[str, Any]] = {}
    for node, table in NODE_TABLES.items():
        section = doc.get(node) or {}
        given = section.get('ros__parameters') if isinstance(section, dict) else None
        out[node] = convert_all(
            dict(given or {}), table.values(), f'{node} parameter', f'params_file:={path}: '
        )
    return out


def plan(
    given: RunnerInput | dict[str, str], pid: int | None = None, learn: bool = True
) -> tuple[list[ProcessSpec], dict[str, Any]]:
    """The processes the fine-tune runs, with their parameters, as the launch file would.

    :param given: the runner's input, or its text arguments (parsed here, once).
    :param learn: False plans a deployment (:mod:`rip_control.evaluate`): no learner, the
        control node acting deterministically with the given policy and nothing else.
    :returns: (process specs in start order, resolved argument values).
    """
    inp = given if isinstance(given, RunnerInput) else RunnerInput.parse(given)
    params = {node: dict(section) for node, section in inp.nodes.items()}
    values = dict(inp.values)
    rigs = int(values['rigs'])
    specs = []
    control, learner = params[CONTROL], params[LEARNER]
    # What the run reports under: the control node's rate and run folder.
    values.update(
        rate=control['rate_hz'], run_name=control['run_name'], runs_dir=control['runs_dir']
    )
    ports = [x.strip() for x in str(control.get('serial_port') or '').split(',') if x.strip()]
    if ports and len(ports) != rigs:
        raise ValueError(f'serial_port lists {len(ports)} port(s) but rigs:={rigs}')
    link = values['emulator_link']
    if 'emulator_link' not in inp.args and pid is not None:
        link = f'/tmp/rip_rig_{pid}'  # one per runner: concurrent runs never share a rig
    run_dir = Path(str(learner.get('runs_dir', 'runs'))) / str(learner['run_name'])
    if learner.get('resume_buffer') == 'auto':
        candidate = run_dir / run_files.BUFFER
        learner['resume_buffer'] = str(candidate) if candidate.exists() else ''
    rate_hz = float(control['rate_hz'])
    if control.get('policy') == 'auto':
        guarded = int(control.get('eval_every_episodes', 0)) > 0 and rigs == 1
        control['policy'] = str(resolve_auto_policy(run_dir, rate_hz, guarded))
    elif not control.get('policy') and not control.get('allow_random_policy'):
        control['policy'] = str(shipped_policy(rate_hz))
    learner['policy'] = control['policy']
    if not inp.set_by_user('run_id'):
        # A fresh identity per run, shared by its nodes: weights and transitions of any other
        # run in this DDS domain are refused (a second runner, a stray learner).
        # Letters first: an all-digit or '1e5'-like text would reach a node as a number.
        control['run_id'] = learner['run_id'] = 'run' + secrets.token_hex(8)
    if control['policy'] and not inp.set_by_user('action_history'):
        # Not typed and not in the params file: the k the initial policy was trained with.
        k = recorded_action_history(str(control['policy']), int(control['action_history']))
        control['action_history'] = learner['action_history'] = k
    preflight(control, learner, values, ports, learn)
    if learn:  # refused here, before anything starts, as the learner itself would refuse it
        from rip_control.buffer_file import check_run_dir_is_free

        check_run_dir_is_free(run_dir, str(learner.get('resume_buffer') or ''))
    else:
        control.update(stochastic_actions=False, allow_random_policy=False, eval_every_episodes=0)
    emulators, controls = _rig_specs(control, values, ports, link, rigs)
    specs.extend(emulators)
    if learn:
        specs.append(ProcessSpec('learner', 'learner_node', 'rip_learner', params=learner))
    specs.extend(controls)
    return specs, values


def _rig_specs(
    control: dict[str, Any], values: dict[str, Any], ports: list[str], link: str, rigs: int
) -> tuple[list[ProcessSpec], list[ProcessSpec]]:
    """Each rig's emulator (where no serial port is given) and control node."""
    specs: list[ProcessSpec] = []
    controls = []
    for i in range(rigs):
        one = rigs == 1
        rig = dict(control)
        if ports:
            rig['serial_port'] = ports[i]
        else:
            rig_link = link if one else f'{link}_{i}'
            # --events: engage/disengage lines with their cause in the log; a grace so that,
            # when a launch signals every process at once, the host's disengage comes first.
            emu_args = ['--link', rig_link, '--events', '--stop-grace-ms', '500']
            if values['rig_params']:
                emu_args += ['--params', values['rig_params']]
            if values['rig_firmware'] != 'python':
                emu_args += ['--firmware', values['rig_firmware']]
            label = 'emulator' if one else f'emulator{i}'
            specs.append(ProcessSpec(label, 'rig_emulator', args=emu_args))
            rig['serial_port'] = rig_link
        if not one:
            rig['run_name'] = f'{control["run_name"]}/rig{i}'
            rig['seed'] = int(control.get('seed', 0)) + i  # exploration differs per rig
            # Distinct FIFO priorities: equal-priority FIFO threads on one CPU do not
            # time-slice, so one's final spin-wait to its deadline would hold another off.
            # (Spreading the rigs over both CPUs of this 2-core machine measured worse: the
            # one on CPU 0 tripped its watchdog among the emulators and the learner.)
            rig['fifo_priority'] = max(1, int(control.get('fifo_priority', 80)) - i)
        controls.append(
            ProcessSpec(
                'control' if one else f'control{i}',
                'control_node',
                'rip_control',
                namespace='' if one else f'rig{i}',
                params=rig,
                remaps={} if one else dict(RIG_REMAPS),
            )
        )
    return specs, controls


def recorded_action_history(policy: str, fallback: int) -> int:
    """The ``action_history`` a policy file records (0 for files from before it existed).

    ``fallback`` when the file cannot be read: :func:`preflight` then names the problem.
    """
    from rip_control.policy import read_metadata

    try:  # PolicyRejected is a ValueError
        return int(read_metadata(Path(policy).read_bytes()).get('action_history', '0'))
    except (OSError, ValueError):
        return fallback


def resolve_auto_policy(run_dir: Path, rate_hz: float, guarded: bool = True) -> Path:
    """``policy:=auto``: the run's best-evaluated policy, else its latest, else the shipped one.

    The best is what the regression guard kept (:data:`run_files.POLICY_BEST`): a run whose last
    updates made the policy worse resumes from before them. With the guard off
    (``guarded`` False: ``eval_every_episodes`` 0, or several rigs, whose bests are each
    rig's own) the latest is taken: it is what the run went on to learn.

    :raises ValueError: no pre-trained policy ships for ``rate_hz`` (it names the command
        that makes one).
    """
    best = run_dir / run_files.POLICY_BEST
    if guarded and best.exists():
        return best
    latest = run_dir / run_files.POLICY_LATEST
    return latest if latest.exists() else shipped_policy(rate_hz, f'{latest} does not exist and ')


def shipped_policy(rate_hz: float, why: str = '') -> Path:
    """The pre-trained policy shipped for ``rate_hz`` (``policies/sim_<rate>hz/``).

    :raises ValueError: none ships for that rate; the message says how to make one.
    """
    packaged = run_files.packaged_policy(rate_hz)
    if packaged.exists():
        return packaged
    raise ValueError(
        f'rate:={rate_hz:g}: {why}no pre-trained policy ships for {rate_hz:g} Hz '
        f'({packaged}); make one with python -m rip_learner.pretrain rate:={rate_hz:g} '
        f'out:={packaged.parent}, or pass policy:=PATH trained at {rate_hz:g} Hz'
    )


def preflight(
    control: dict[str, Any],
    learner: dict[str, Any],
    values: dict[str, Any],
    ports: list[str],
    learn: bool,
) -> None:
    """Refuse, before any process starts, what a process would refuse after starting.

    Serial ports, files and the rate of the initial policy and of a resumed buffer; each
    error names the argument, the value and what is accepted. It writes nothing but the C
    firmware's host build when ``rig_firmware:=c`` asks for it.
    """
    _check_rig(values, ports)
    _check_files(control, learner, learn)


def _check_rig(values: dict[str, Any], ports: list[str]) -> None:
    """The serial ports exist; the rig file passes the emulator's check; the C host builds."""
    for port in ports:
        if not os.path.exists(port):
            raise ValueError(
                f'serial_port:={port}: no such device (is the rig plugged in and powered? '
                'leave serial_port empty to use the emulator)'
            )
    if values['rig_params']:
        # Checked by the emulator's own program, in a process of its own: the rig's physics
        # reach no process but the emulator's (what adapt's identification must not see).
        from rip_control.procs import child_env

        try:
            check = subprocess.run(
                [sys.executable, '-m', EXECUTABLES['rig_emulator'], '--check']
                + ['--params', str(values['rig_params'])]
                + ['--firmware', str(values['rig_firmware'])],
                env=child_env(),
                capture_output=True,
                text=True,
                timeout=120,
            )
        except subprocess.TimeoutExpired:
            raise ValueError(
                f'rig_params:={values["rig_params"]}: its check did not finish within 120 s'
            ) from None
        if check.returncode != 0:
            lines = check.stderr.strip().splitlines() or [f'exit {check.returncode}']
            why = lines[-1].removeprefix('rig_emulator: error: ')
            raise ValueError(f'rig_params:={values["rig_params"]}: {why}')
    if values['rig_firmware'] == 'c' and not ports:
        from rip_control.rig.host_firmware import FirmwareNotBuilt, build_host_binary

        try:  # make keeps it up to date: a no-op once built
            build_host_binary()
        except FirmwareNotBuilt as exc:
            raise ValueError(f'rig_firmware:=c: {exc}') from None


def _check_files(control: dict[str, Any], learner: dict[str, Any], learn: bool) -> None:
    """The nodes agree on rate and action history; the policy and a resumed buffer load."""
    rate_hz = float(control['rate_hz'])
    if float(learner['rate_hz']) != rate_hz:
        raise ValueError(
            f'params_file: rip_control runs at {rate_hz:g} Hz but rip_learner at '
            f'{float(learner["rate_hz"]):g} Hz; set both with rate:=R'
        )
    k = int(control['action_history'])
    if int(learner['action_history']) != k:
        raise ValueError(
            f'params_file: rip_control has action_history {k} but rip_learner '
            f'{int(learner["action_history"])}; set both with action_history:=K'
        )
    from rip_control.rig.env import ACTION_SIZE, obs_size

    checked = [('policy', control.get('policy'))]
    for name, path in checked:
        if not path:
            continue
        from rip_control.policy import PolicyRejected, load_actor_file

        try:
            load_actor_file(
                path,
                rate_hz=rate_hz,
                obs_size=obs_size(k),
                action_size=ACTION_SIZE,
                action_history=k,
            )
        except PolicyRejected as exc:
            hint = ''
            if 'trained at' in str(exc):
                hint = (
                    f'; pass a policy trained at {rate_hz:g} Hz, or make one with '
                    f'python -m rip_learner.pretrain rate:={rate_hz:g} out:=DIR'
                )
            raise ValueError(f'{name}:={path}: {exc}{hint}') from None
    resume = str(learner.get('resume_buffer') or '') if learn else ''
    if resume:
        from rip_control.buffer_file import BufferRejected, load

        try:  # the learner's own checks: format, checksum, rate, sizes, finite values
            load(resume, rate_hz=rate_hz, obs_size=obs_size(k), action_size=ACTION_SIZE)
        except BufferRejected as exc:
            raise ValueError(f'resume_buffer:={resume}: {exc}') from None
    for bag in str(learner.get('resume_bag') or '').split(','):
        if learn and bag.strip() and not Path(bag.strip()).exists():
            raise ValueError(f'resume_bag: {bag.strip()} does not exist')
