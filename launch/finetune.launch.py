"""The whole fine-tune: ``ros2 launch rip_control finetune.launch.py rate:=50 [rigs:=2]``.

Starts, per rig, the rig emulator (when ``serial_port`` is empty) and the control node as a
lifecycle node that is configured and then activated automatically, and one learner. With
``rigs:=N`` the control nodes run in namespaces ``rig0``... and their ``transitions`` and
``policy_weights`` are remapped onto the learner's ``/transitions`` and ``/policy_weights``.
All nodes read ``params_file`` (default: the installed ``config/finetune.yaml``) with the
arguments over it. The processes and their parameters come from
``rip_control.finetune.plan``, the same function ``python -m rip_control.finetune`` (the
runner for machines without ``ros2 launch``) starts them from, so the two cannot drift.
Stop with Ctrl-C: the control nodes disengage on SIGINT, the learner saves its buffer. The
operator's stop button: ``ros2 lifecycle set /rip_control deactivate``.
"""

from launch import LaunchDescription
from launch.actions import (
    DeclareLaunchArgument,
    EmitEvent,
    ExecuteProcess,
    OpaqueFunction,
    RegisterEventHandler,
)
from launch.events import matches_action
from launch.substitutions import LaunchConfiguration
from launch_ros.actions import LifecycleNode, Node
from launch_ros.event_handlers import OnStateTransition
from launch_ros.events.lifecycle import ChangeState
from launch_ros.substitutions import FindPackagePrefix
import lifecycle_msgs.msg

from rip_control.finetune import plan
from rip_control.launching import LAUNCH_ARGUMENTS, launch_default


def _lifecycle_to_active(node):
    """Configure ``node`` now and activate it once it is inactive."""
    configure = EmitEvent(
        event=ChangeState(
            lifecycle_node_matcher=matches_action(node),
            transition_id=lifecycle_msgs.msg.Transition.TRANSITION_CONFIGURE,
        )
    )
    activate = RegisterEventHandler(
        OnStateTransition(
            target_lifecycle_node=node,
            start_state='configuring',
            goal_state='inactive',
            entities=[
                EmitEvent(
                    event=ChangeState(
                        lifecycle_node_matcher=matches_action(node),
                        transition_id=lifecycle_msgs.msg.Transition.TRANSITION_ACTIVATE,
                    )
                )
            ],
        )
    )
    return [activate, node, configure]


def _actions(context):
    """The plan's processes as launch actions (emulators, learner, control nodes)."""
    given = {a.name: LaunchConfiguration(a.name).perform(context) for a in LAUNCH_ARGUMENTS}
    specs, _ = plan(given)
    actions = []
    for spec in specs:
        if spec.executable == 'rig_emulator':
            actions.append(
                ExecuteProcess(
                    cmd=[[FindPackagePrefix('rip_control'), '/lib/rip_control/rig_emulator']]
                    + spec.args,
                    name=spec.label,
                    output='screen',
                )
            )
        elif spec.executable == 'learner_node':
            actions.append(
                Node(
                    package='rip_control',
                    executable='learner_node',
                    name=spec.node_name,
                    parameters=[spec.params],
                    output='screen',
                )
            )
        elif spec.executable == 'control_node':
            node = LifecycleNode(
                package='rip_control',
                executable='control_node',
                name=spec.node_name,
                namespace=spec.namespace,
                parameters=[spec.params],
                remappings=list(spec.remaps.items()),
                output='screen',
            )
            actions.extend(_lifecycle_to_active(node))
    return actions


def generate_launch_description():
    """Declare the arguments; the processes follow from their values."""
    declared = [
        DeclareLaunchArgument(a.name, default_value=launch_default(a), description=a.description)
        for a in LAUNCH_ARGUMENTS
    ]
    return LaunchDescription([*declared, OpaqueFunction(function=_actions)])
