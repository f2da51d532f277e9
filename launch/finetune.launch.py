"""The whole fine-tune: ``ros2 launch rip_control finetune.launch.py rate:=50 [rigs:=2]``.

Starts, per rig, the rig emulator (when ``serial_port`` is empty) and the control node (a
lifecycle node), one learner, and the supervisor (:mod:`rip_control.run.supervisor`). With
``rigs:=N`` the control nodes run in namespaces ``rig0``... and their ``transitions`` and
``policy_weights`` are remapped onto the learner's ``/transitions`` and ``/policy_weights``.
Every node starts from the parameter table's defaults (what the product ships), with
``params_file`` over them (none by default; the installed ``config/finetune.yaml`` is an
example) and an argument over the file only when it is typed, all typed by the package's one
parameter table (``rate:=50`` is the double 50.0). The processes and their parameters come
from :func:`rip_control.run.launching.plan`, the same function ``python -m
rip_control.finetune`` (the runner for machines without ``ros2 launch``) starts them from, so
the two cannot drift; a bad argument is refused before any process starts. ``rig_firmware:=c``
has the C firmware's host build play the emulated rig.

Order, event-driven: the control nodes and the supervisor start once every emulator has
printed its READY line; the supervisor configures each control node, activates it once its
``transitions`` publisher has matched the learner, and when the episodes are done (or the
operator deactivated a rig) turns the motors off and waits for the learner to hold every
transition. Its exit ends the launch (the
learner saves its buffer on the way out); a failure ends it with a non-zero status. Ctrl-C
stops every process at once: each control node disengages on its own signal, the learner
saves, and the emulators wait (``--stop-grace-ms``) for the host's disengage before powering
down. The operator's stop button: ``ros2 lifecycle set /rip_control deactivate``.

``adapt:=true`` runs :mod:`rip_control.adapt`'s loop instead (identify, re-train in
simulation, fine-tune; each phase starts its own nodes), with every typed argument, adapt's
options (``rig_minutes:=``...) among them; its exit ends the launch.
"""

from launch import LaunchDescription
from launch.actions import (
    DeclareLaunchArgument,
    EmitEvent,
    ExecuteProcess,
    OpaqueFunction,
    RegisterEventHandler,
)
from launch.event_handlers import OnProcessExit, OnProcessIO
from launch.events import Shutdown
from launch.substitutions import LaunchConfiguration
from launch_ros.actions import Node
from launch_ros.parameter_descriptions import ParameterValue
from launch_ros.substitutions import FindPackagePrefix

from rip_control.adapt import LAUNCH_SWITCH, launch_argv
from rip_control.adapt import OPTIONS as ADAPT_OPTIONS
from rip_control.run.launching import LAUNCH_ARGUMENTS, plan


def _typed(params):
    """Parameters as launch_ros passes them on with their types kept.

    launch_ros reads a plain string as YAML (``run_name: '2024'`` would become an integer);
    a string marked as one stays a string. Numbers and lists are already typed by the plan.
    """
    return {
        k: ParameterValue(v, value_type=str) if isinstance(v, str) else v
        for k, v in params.items()
    }


def _when_all_ready(emulators, actions):
    """Handlers that start ``actions`` once every emulator has printed its READY line."""
    ready = set()

    def on_stdout(event):
        if event.action in ready or b'READY ' not in event.text:
            return None
        ready.add(event.action)
        return actions if len(ready) == len(emulators) else None

    return [
        RegisterEventHandler(OnProcessIO(target_action=e, on_stdout=on_stdout)) for e in emulators
    ]


def _emulator_exited(event, context):
    """An emulator that ends before the launch does leaves a rig without firmware."""
    if not context.is_shutdown:
        raise RuntimeError(f'{event.action.name} exited with status {event.returncode}')


def _supervisor_exited(event, context):
    """The run is over: end the launch (exit 0), or fail it naming the status."""
    if event.returncode != 0 and not context.is_shutdown:
        raise RuntimeError(f'the fine-tune failed (supervisor exit status {event.returncode})')
    return [EmitEvent(event=Shutdown(reason='fine-tune done'))]


def _adapt_exited(event, context):
    """The loop is over: end the launch (exit 0), or fail it naming the status."""
    if event.returncode != 0 and not context.is_shutdown:
        raise RuntimeError(f'the adapt loop failed (exit status {event.returncode})')
    return [EmitEvent(event=Shutdown(reason='adapt done'))]


def _adapt_actions(args):
    """``adapt:=true``: the loop's one process (it starts each phase's nodes itself)."""
    loop = ExecuteProcess(
        cmd=[[FindPackagePrefix('rip_control'), '/lib/rip_control/adapt'], *args],
        name='adapt',
        output='screen',
    )
    return [loop, RegisterEventHandler(OnProcessExit(target_action=loop, on_exit=_adapt_exited))]


def _actions(context):
    """The plan's processes as launch actions, started in the runner's order."""
    given = {a.name: LaunchConfiguration(a.name).perform(context) for a in LAUNCH_ARGUMENTS}
    own = {p.name: LaunchConfiguration(p.name).perform(context) for p in ADAPT_OPTIONS}
    if LAUNCH_SWITCH.convert(LaunchConfiguration(LAUNCH_SWITCH.name).perform(context), None):
        return _adapt_actions(launch_argv(given, own))  # bad arguments raise here
    typed = [f'{name}:={value}' for name, value in own.items() if value != '']
    if typed:
        raise ValueError(f'{", ".join(typed)}: options of the adapt loop; add adapt:=true')
    specs, values = plan(given)  # a bad argument raises here, before any process starts
    emulators, learners, controls = [], [], []
    for spec in specs:
        if spec.executable == 'rig_emulator':
            emulators.append(
                ExecuteProcess(
                    cmd=[[FindPackagePrefix('rip_control'), '/lib/rip_control/rig_emulator']]
                    + spec.args,
                    name=spec.label,
                    output='screen',
                )
            )
        elif spec.executable == 'learner_node':
            learners.append(
                Node(
                    package='rip_control',
                    executable='learner_node',
                    name=spec.node_name,
                    parameters=[_typed(spec.params)],
                    output='screen',
                )
            )
        elif spec.executable == 'control_node':
            controls.append(
                (
                    spec,
                    Node(
                        package='rip_control',
                        executable='control_node',
                        name=spec.node_name,
                        namespace=spec.namespace,
                        parameters=[_typed(spec.params)],
                        remappings=list(spec.remaps.items()),
                        output='screen',
                    ),
                )
            )
    episodes = int(controls[0][0].params.get('episodes', 0))
    supervisor = Node(
        package='rip_control',
        executable='finetune_supervisor',
        name='rip_supervisor',
        arguments=[
            'controls:=' + ','.join(spec.fqn for spec, _ in controls),
            f'episodes:={episodes}',
            f'learn:={"true" if learners else "false"}',
            f'violation_restarts:={values["violation_restarts"]}',
            f'rig_seconds:={values["rig_seconds"]}',
        ],
        output='screen',
    )
    after_ready = [node for _, node in controls] + [supervisor]
    actions = [
        *emulators,
        *learners,
        RegisterEventHandler(OnProcessExit(target_action=supervisor, on_exit=_supervisor_exited)),
    ]
    for emulator in emulators:
        actions.append(
            RegisterEventHandler(OnProcessExit(target_action=emulator, on_exit=_emulator_exited))
        )
    if emulators:
        actions += _when_all_ready(emulators, after_ready)
    else:
        actions += after_ready
    return actions


def generate_launch_description():
    """Declare the arguments; the processes follow from their values."""
    declared = [
        DeclareLaunchArgument(a.name, default_value=a.default, description=a.description)
        for a in LAUNCH_ARGUMENTS
    ]
    declared.append(
        DeclareLaunchArgument(
            LAUNCH_SWITCH.name, default_value='false', description=LAUNCH_SWITCH.description
        )
    )
    declared += [
        DeclareLaunchArgument(
            p.name, default_value='', description=f'adapt:=true: {p.description} ({p.default})'
        )
        for p in ADAPT_OPTIONS
    ]
    return LaunchDescription([*declared, OpaqueFunction(function=_actions)])
