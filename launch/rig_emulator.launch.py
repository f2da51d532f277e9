"""Start the rig emulator alone: ``ros2 launch rip_control rig_emulator.launch.py``."""

from launch import LaunchDescription
from launch.actions import DeclareLaunchArgument, ExecuteProcess
from launch.substitutions import LaunchConfiguration
from launch_ros.substitutions import FindPackagePrefix


def generate_launch_description():
    """Emulator on a pseudo-terminal linked at ``link``."""
    link = LaunchConfiguration('link')
    params = LaunchConfiguration('rig_params')
    return LaunchDescription(
        [
            DeclareLaunchArgument('link', default_value='/tmp/rip_rig', description='pty symlink'),
            DeclareLaunchArgument(
                'rig_params',
                default_value='',
                description='rig physics YAML (empty: QUBE-Servo 2)',
            ),
            ExecuteProcess(
                cmd=[
                    [FindPackagePrefix('rip_control'), '/lib/rip_control/rig_emulator'],
                    '--link',
                    link,
                    '--params',
                    params,
                ],
                output='screen',
            ),
        ]
    )
