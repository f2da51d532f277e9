"""Shared fixtures: loopback-only DDS with a domain per test session, emulator processes."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from rip_control.emulator_process import EmulatorProcess

REPO = Path(__file__).resolve().parent.parent

# Every test, and every process a test starts, stays on loopback in a domain of its own.
os.environ['ROS_AUTOMATIC_DISCOVERY_RANGE'] = 'LOCALHOST'
os.environ.setdefault('ROS_DOMAIN_ID', str(100 + os.getpid() % 100))


@pytest.fixture
def start_emulator(tmp_path):
    """Factory: start a rig emulator with extra arguments; all are stopped at teardown."""
    started: list[EmulatorProcess] = []

    def _start(*args: str, name: str = 'rig') -> EmulatorProcess:
        emu = EmulatorProcess(tmp_path / name, list(args)).start()
        started.append(emu)
        return emu

    yield _start
    for emu in started:
        emu.stop()


@pytest.fixture
def emulator(start_emulator):
    """One emulator with default physics and a 100 ms deadman."""
    return start_emulator()
