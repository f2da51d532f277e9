"""``ros2 launch PKG FILE name:=value ...`` for machines without the ros2 CLI (tests only).

The same code path as ros2launch: find FILE under ``share/PKG/launch`` of the package's
install prefix (ament index: ``AMENT_PREFIX_PATH``), then run it in a ``LaunchService`` with
the arguments, until every process has exited or SIGINT.
"""

import os
import sys

from ament_index_python.packages import get_package_share_directory
from launch import LaunchService
from launch.actions import IncludeLaunchDescription
from launch.launch_description_sources import PythonLaunchDescriptionSource


def main(argv: list[str]) -> int:
    """``PKG FILE [name:=value ...]``; the launch's own exit status."""
    package, name, *args = argv
    path = os.path.join(get_package_share_directory(package), 'launch', name)
    service = LaunchService(argv=args)
    service.include_launch_description(
        IncludeLaunchDescription(
            PythonLaunchDescriptionSource(path),
            launch_arguments=[tuple(a.split(':=', 1)) for a in args],
        )
    )
    return service.run()


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
