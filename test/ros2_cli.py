"""What the ``ros2`` CLI and a colcon workspace give a user, for machines without ROS 2 (tests).

``colcon build`` of this package into a temporary workspace (the real colcon), then
``ros2 run PKG EXE`` (the installed executable under ``lib/PKG``) and ``ros2 launch PKG FILE``
(:mod:`launch_as_ros2`, ros2launch's code path) against that install, with the environment
``source install/setup.bash`` would set. The README's ``ros2`` commands run through these.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path
import shlex
import shutil
import subprocess
import sys

import pytest

REPO = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent


def missing_launch() -> list[str]:
    """What is missing to run a launch file here ([] if nothing)."""
    missing = [m for m in ('launch', 'launch_ros') if importlib.util.find_spec(m) is None]
    if not (BIN / 'colcon').exists() and shutil.which('colcon') is None:
        missing.append('colcon')
    return missing


def require_launch() -> None:
    """Skip (fail with CI=true) unless the ROS 2 launch packages and colcon are here."""
    missing = missing_launch()
    if missing:
        why = (
            f'{", ".join(missing)} not installed: source a ROS 2 install, or run '
            '`make launch-deps` (installs the upstream launch sources from ../shared/ros2_launch)'
        )
        if os.environ.get('CI'):
            pytest.fail(why)
        pytest.skip(why)


def colcon_build(ws: Path) -> Path:
    """Build the package into workspace ``ws``; its install prefix."""
    ignore = shutil.ignore_patterns(
        '.venv', '.git', 'build', 'install', 'log', '__pycache__', 'runs'
    )
    shutil.copytree(REPO, ws / 'src' / 'rip_control', ignore=ignore)
    env = dict(os.environ, PATH=f'{BIN}{os.pathsep}{os.environ["PATH"]}')
    proc = subprocess.run(
        [shutil.which('colcon', path=env['PATH']) or 'colcon', 'build'],
        cwd=ws,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return ws / 'install' / 'rip_control'


def sourced_env(prefix: Path) -> dict[str, str]:
    """The environment after ``source install/setup.bash``: the installed package only."""
    from rip_control.procs import child_env

    site = next((prefix / 'lib').glob('python3*/site-packages'))
    return child_env(
        {
            'AMENT_PREFIX_PATH': str(prefix),
            'PYTHONPATH': str(site),  # the source tree is not on the path
            'PATH': f'{prefix / "bin"}{os.pathsep}{BIN}{os.pathsep}{os.environ["PATH"]}',
        }
    )


def argv(command: str, prefix: Path | None = None) -> list[str]:
    """A README command line as a process's argv, run as a user would run it.

    ``python`` is this interpreter; ``ros2 run PKG EXE`` the installed executable;
    ``ros2 launch PKG FILE`` the launch through ros2launch's code path.
    """
    words = shlex.split(command)
    if words[0] == 'python':
        return [sys.executable, *words[1:]]
    if words[:2] == ['ros2', 'run']:
        assert prefix is not None, 'ros2 run needs an install prefix'
        return [str(prefix / 'lib' / words[2] / words[3]), *words[4:]]
    if words[:2] == ['ros2', 'launch']:
        return [sys.executable, str(REPO / 'test' / 'launch_as_ros2.py'), *words[2:]]
    return words
