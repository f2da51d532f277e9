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
