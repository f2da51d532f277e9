"""Packaging and code-quality checks: colcon build of the ament_python package, lint, types."""

import os
from pathlib import Path
import shutil
import subprocess
import sys

import pytest

REPO = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent


def _tool(name):
    path = BIN / name
    if not path.exists():
        found = shutil.which(name)
        if found is None:
            pytest.fail(f'{name} is not installed (make test installs it into .venv)')
        path = Path(found)
    return str(path)


def test_colcon_build_installs_executables_launch_and_config(colcon_install):
    prefix = colcon_install
    share = prefix / 'share' / 'rip_control'
    assert (
        prefix / 'share' / 'ament_index' / 'resource_index' / 'packages' / 'rip_control'
    ).exists()
    assert (share / 'package.xml').exists()
    assert {p.name for p in (share / 'launch').glob('*.launch.py')} == {
        'finetune.launch.py',
        'rig_emulator.launch.py',
    }
    assert (share / 'config' / 'finetune.yaml').exists()
    assert (share / 'policies' / 'sim_50hz' / 'policy.safetensors').exists()
    # Every console script setup.py declares, where `ros2 run` looks for it.
    for exe in (
        'control_node',
        'learner_node',
        'finetune',
        'adapt',
        'finetune_supervisor',
        'rig_emulator',
        'rig_check',
    ):
        assert os.access(prefix / 'lib' / 'rip_control' / exe, os.X_OK), exe


def test_ruff_lint_is_clean():
    proc = subprocess.run(
        [_tool('ruff'), 'check', '.'], cwd=REPO, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.slow
def test_mypy_on_the_package_is_clean():
    proc = subprocess.run(
        [sys.executable, '-m', 'mypy'], cwd=REPO, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_the_workspace_requirements_hold_every_library_the_package_imports_but_ros():
    """Every third-party module the package imports is in requirements-workspace.txt or ROS 2.

    A ROS 2 workspace installs requirements-workspace.txt with pip (docs/getting_started.md)
    and gets ROS 2 itself from rosdep (a fresh-clone trial found matplotlib missing from the
    pip line the docs had then).
    """
    import ast
    from importlib.metadata import packages_distributions
    import re

    def norm(name: str) -> str:  # PEP 503
        return re.sub(r'[-_.]+', '-', name).lower()

    ros = {'rclpy', 'std_msgs', 'diagnostic_msgs', 'lifecycle_msgs', 'rcl_interfaces'}
    ros |= {'ament_index_python', 'launch', 'launch_ros'}  # from the ROS 2 install
    modules = set()
    for package in ('rip_control', 'rip_learner'):
        for path in (REPO / package).rglob('*.py'):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.Import):
                    modules |= {a.name.split('.')[0] for a in node.names}
                elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                    modules.add(node.module.split('.')[0])
    own = {'rip_control', 'rip_learner', 'rip_bench'}
    third = {m for m in modules if m not in sys.stdlib_module_names | own | ros}
    listed = {
        norm(re.split(r'[=<>\[]', line)[0].strip())
        for line in (REPO / 'requirements-workspace.txt').read_text().splitlines()
        if line.strip() and not line.startswith('#')
    }
    by_module = packages_distributions()
    missing = {
        m: by_module.get(m) for m in third if not {norm(d) for d in by_module.get(m, [])} & listed
    }
    assert not missing, f'imported but not in requirements-workspace.txt: {missing}'
    assert 'torch' in third and 'matplotlib' in third  # the scan sees the package's imports
    assert not any(name.startswith('ros-') for name in listed)  # rosdep's, not pip's
