"""The whole fine-tune: ``ros2 launch rip_control finetune.launch.py rate:=50``.

Starts the rig emulator (when ``serial_port`` is empty), the learner, and the control node
as a lifecycle node that is configured and then activated automatically. Both nodes read
``params_file`` (default: the installed ``config/finetune.yaml``); the arguments override it.
The argument table and the parameters each argument sets live in
``rip_control.launching.LAUNCH_ARGUMENTS``, shared with ``python -m rip_control.finetune``
(the runner for machines without ``ros2 launch``), so both start the same processes with the
same parameters. Stop with Ctrl-C: the control node disengages on SIGINT, the learner saves
its buffer. The operator's stop button: ``ros2 lifecycle set /rip_control deactivate``.
"""

from launch import LaunchDescription
from launch.actions import DeclareLaunchArgument, EmitEvent, ExecuteProcess, RegisterEventHandler
from launch.conditions import IfCondition
from launch.events import matches_action
from launch.substitutions import LaunchConfiguration, PythonExpression
from launch_ros.actions import LifecycleNode, Node
from launch_ros.event_handlers import OnStateTransition
from launch_ros.events.lifecycle import ChangeState
from launch_ros.substitutions import FindPackagePrefix
import lifecycle_msgs.msg

from rip_control.launching import CONTROL, LAUNCH_ARGUMENTS, LEARNER, launch_default


def generate_launch_description():
    """Declare the arguments, start the emulator, the learner and the control node."""
    arg = {a.name: LaunchConfiguration(a.name) for a in LAUNCH_ARGUMENTS}
    declared = [
        DeclareLaunchArgument(
            a.name,
            default_value=launch_default(a),
            description=a.description,
        )
        for a in LAUNCH_ARGUMENTS
    ]
    overrides = {CONTROL: {}, LEARNER: {}}
    for a in LAUNCH_ARGUMENTS:
        for node, param in a.targets:
            overrides[node][param] = arg[a.name]
    no_port = PythonExpression(["'", arg['serial_port'], "' == ''"])
    # With the emulator, the control node talks to its pty link.
    overrides[CONTROL]['serial_port'] = PythonExpression(
        [
            "'",
            arg['emulator_link'],
            "' if '",
            arg['serial_port'],
            "' == '' else '",
            arg['serial_port'],
            "'",
        ]
    )
    emulator = ExecuteProcess(
        cmd=[
            [FindPackagePrefix('rip_control'), '/lib/rip_control/rig_emulator'],
            '--link',
            arg['emulator_link'],
            '--params',
            arg['rig_params'],
        ],
        condition=IfCondition(no_port),
        output='screen',
    )
    learner = Node(
        package='rip_control',
        executable='learner_node',
        name=LEARNER,
        parameters=[arg['params_file'], overrides[LEARNER]],
        output='screen',
    )
    control = LifecycleNode(
        package='rip_control',
        executable='control_node',
        name=CONTROL,
        namespace='',
        parameters=[arg['params_file'], overrides[CONTROL]],
        output='screen',
    )
    configure = EmitEvent(
        event=ChangeState(
            lifecycle_node_matcher=matches_action(control),
            transition_id=lifecycle_msgs.msg.Transition.TRANSITION_CONFIGURE,
        )
    )
    activate_when_configured = RegisterEventHandler(
        OnStateTransition(
            target_lifecycle_node=control,
            start_state='configuring',
            goal_state='inactive',
            entities=[
                EmitEvent(
                    event=ChangeState(
                        lifecycle_node_matcher=matches_action(control),
                        transition_id=lifecycle_msgs.msg.Transition.TRANSITION_ACTIVATE,
                    )
                )
            ],
        )
    )
    return LaunchDescription(
        [*declared, emulator, learner, activate_when_configured, control, configure]
    )
