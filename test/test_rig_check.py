"""``rig_check --direction``: the motor's and the encoders' signs against the conventions.

The emulator (``--reversed``, a fault of the Python emulator) wires one part the other way
round; rig_check talks to it through the real pty, as to a rig on USB.
"""

from __future__ import annotations

import math
import re
import subprocess
import sys
import time

import numpy as np
import pytest
from ros2_cli import argv

from rip_control.procs import child_env
from rip_control.rig_check import (
    PENDULUM_SWUNG_RAD,
    DirectionFault,
    _check_hanging_still,
    expected_signs,
    swing_peak_to_peak,
)

pytestmark = pytest.mark.alone

#: The README's command ("First power-on", step 4).
README_DIRECTION = 'python -m rip_control.rig_check --port /dev/ttyACM0 --direction'

#: What ``rig_check --direction`` names for each part the emulator wires the other way round.
DIRECTION_FAULT_NAMED = {
    None: 'follow the conventions',
    'motor': 'the motor turns against the voltage: its leads are swapped',
    'arm': 'the arm encoder counts the wrong way',
    'pendulum': 'the pendulum encoder counts the wrong way',
}


@pytest.mark.parametrize(
    ('firmware', 'rig', 'wired'),
    # the stuck rig wired wrong each way (a rig wired right passes: the C firmware's case)
    [('python', 'rig_shifted_stuck', wired) for wired in DIRECTION_FAULT_NAMED if wired]
    + [('c', 'rig_qube_servo2', None)],  # the C firmware follows the same conventions
    indirect=['firmware'],
)
@pytest.mark.readme(README_DIRECTION)
def test_rig_check_direction_names_a_reversed_motor_or_encoder(start_emulator, rig, wired):
    """A swapped motor lead or encoder channel is found before a policy drives the rig.

    The emulator wires one part the other way round (``--reversed``); ``rig_check
    --direction`` turns the arm a little each way through the pty and names the part, exit
    1, with the motor disengaged by its command; a rig wired right passes. The stuck rig: a
    1.2 V dead zone and stiction the ramp has to overcome; the nominal rig on the C firmware:
    a low-friction arm that coasts.
    """
    emu = start_emulator(
        '--events', '--params', f'config/{rig}.yaml', *(['--reversed', wired] if wired else [])
    )
    proc, out = _as_documented(README_DIRECTION, emu)
    assert DIRECTION_FAULT_NAMED[wired] in out, out
    assert proc.returncode == (0 if wired is None else 1), out
    assert 'Traceback' not in out, out
    # two moves, each printed with what it expected; the arm moved both ways
    moves = [
        line
        for line in proc.stdout.splitlines()
        if line.startswith('direction: ') and ' V turned' in line
    ]
    assert (
        len(moves) == 2
        and moves[0].startswith('direction: +')
        and moves[1].startswith('direction: -')
    ), out
    # "a little": each ramp stops once the arm has turned 0.15 rad (a low-friction arm coasts
    # on to about a radian); a ramp driven to its top would take the arm to its 2 rad stop
    turned = [abs(float(m.split(' turned the arm ')[1].split()[0])) for m in moves]
    assert all(0.05 <= t < 1.5 for t in turned), moves
    assert_motor_left_off(emu)


def _as_documented(command: str, emu) -> tuple[subprocess.CompletedProcess, str]:
    """The docs' command against the emulator's pty, its 5 s read shortened."""
    proc = subprocess.run(
        argv(command.replace('/dev/ttyACM0', str(emu.link))) + ['--seconds', '0.2'],
        capture_output=True,
        text=True,
        env=child_env(),
        timeout=60,
    )
    return proc, proc.stdout + proc.stderr


def assert_motor_left_off(emu) -> None:
    """Every engage of the run was followed by the check's own disengage (bounded wait)."""
    deadline = time.monotonic() + 5
    while True:
        causes = [what for _, what in emu.events()]
        on, off = causes.count('engaged command'), causes.count('disengaged command')
        if (on and on == off) or time.monotonic() > deadline:
            break
        time.sleep(0.05)  # polling the emulator's event lines, bounded
    assert on >= 2 and on == off and causes[-1] == 'disengaged command', causes


def test_the_conventions_are_those_of_the_docs():
    # docs/serial_protocol.md, "Signs": a positive voltage turns the arm positive; the hanging
    # pendulum first swings negative. Pinned here: expected_signs reads them from the
    # dynamics, so a sign flipped there would otherwise pass every test with the emulator.
    assert expected_signs() == (1, -1)


def test_a_still_pendulum_read_through_a_noisy_encoder_is_not_taken_for_a_swing():
    # The stuck rig's encoder noise (1 count std, 2048 counts a turn) over the half second
    # at rest, 25 readings: max - min passed PENDULUM_SWUNG_RAD once in about 600 checks (a CI
    # run failed on it); the swing's measure never does, and a real swing still shows.
    rng = np.random.default_rng(0)
    count = 2.0 * math.pi / 2048
    still = np.round(rng.normal(0.0, 1.0, (5000, 25))) * count
    assert max(np.ptp(still, axis=1)) > PENDULUM_SWUNG_RAD  # the old rule trips on these
    assert max(swing_peak_to_peak(list(r)) for r in still) < 0.75 * PENDULUM_SWUNG_RAD
    t = np.arange(25) / 50.0
    for peak_to_peak in (1.5 * PENDULUM_SWUNG_RAD, 0.3):
        swing = 0.5 * peak_to_peak * np.sin(2 * math.pi * t / 0.55) + still[0]
        assert swing_peak_to_peak(list(swing)) > PENDULUM_SWUNG_RAD, peak_to_peak
    # The check as rig_check runs it, half a second of readings at 50 Hz: the noisiest still
    # readings pass; a swing, or a pendulum hanging off its zero, is refused by name.
    worst = still[int(np.argmax(np.ptp(still, axis=1)))]
    _check_hanging_still(_Readings(worst), 50.0)
    for readings, reads in ((swing, r'reads [+-]0\.0\d\d rad'), (worst + 0.15, r'reads \+0\.15')):
        with pytest.raises(DirectionFault, match='not hanging still at its zero') as info:
            _check_hanging_still(_Readings(readings), 50.0)
        assert re.search(reads, str(info.value)), info.value


class _Readings:
    """rig_check's ticks, reading the pendulum angles given (the arm at 0)."""

    def __init__(self, pendulum: np.ndarray) -> None:
        self.left = list(pendulum)

    def tick(self, voltage: float) -> tuple[float, float]:
        assert voltage == 0.0
        return 0.0, float(self.left.pop(0))


def test_rig_check_direction_says_when_the_arm_does_not_move(start_emulator):
    # The stuck rig's 1.2 V dead zone against a 1 V ramp: nothing moves, and it says why.
    emu = start_emulator('--events', '--params', 'config/rig_shifted_stuck.yaml')
    proc = subprocess.run(
        [sys.executable, '-m', 'rip_control.rig_check', '--port', str(emu.link)]
        + ['--seconds', '0.2', '--direction', '--direction-v', '1'],
        capture_output=True,
        text=True,
        env=child_env(),
        timeout=60,
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert 'the arm did not move 0.05 rad at up to 1 V' in proc.stderr, proc.stderr
    assert_motor_left_off(emu)


def test_rig_check_refuses_a_direction_ramp_above_the_voltage_limit():
    proc = subprocess.run(
        [sys.executable, '-m', 'rip_control.rig_check', '--direction', '--direction-v', '9']
        + ['--max-action-v', '4'],
        capture_output=True,
        text=True,
        env=child_env(),
        timeout=60,
    )
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert '--direction-v must be in (0, --max-action-v 4], got 9' in proc.stderr


#: docs/hardware.md's deadman step of the bring-up ladder.
README_DEADMAN = 'python -m rip_control.rig_check --port /dev/ttyACM0 --deadman'


@pytest.mark.parametrize(
    ('firmware', 'fault'),
    [('python', None), ('c', None), ('python', '--no-deadman')],
    indirect=['firmware'],
)
@pytest.mark.readme(README_DEADMAN)
def test_rig_check_deadman_fails_when_the_firmwares_deadman_does_not_act(start_emulator, fault):
    """The heartbeat stops with the motor engaged: the firmware's deadman must turn it off.

    A firmware whose deadman works passes (the Python emulator and the C firmware's own
    code, each with its 100 ms): the motor off by the deadman, within its setting and the
    check's margin. One whose deadman never trips (``--no-deadman``) fails, exit 1, named,
    and the check's own command turns the motor off.
    """
    from rip_control.rig_check import DEADMAN_LATE_MS

    emu = start_emulator('--events', *([fault] if fault else []))
    proc, out = _as_documented(README_DEADMAN, emu)
    assert 'Traceback' not in out, out
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and not (
        emu.events() and emu.events()[-1][1].startswith('disengaged')
    ):
        time.sleep(0.05)  # polling the emulator's event lines, bounded
    causes = [what for _, what in emu.events()]
    if fault is None:
        assert proc.returncode == 0, out
        off_ms = float(out.split('deadman: the motor went off ')[1].split()[0])
        # Not before the 100 ms setting (counted from the heartbeat's answer: a little after
        # it), by the deadman. "In time" is the check's own verdict (status 0: it reads the
        # state until DEADMAN_LATE_MS past the setting, the fault case below): a number here
        # would also count a pause of this VM's host (up to 100 ms) as the firmware's.
        assert off_ms >= 80, out
        assert causes[-2:] == ['engaged command', 'disengaged deadman'], causes
    else:
        assert proc.returncode == 1, out
        assert 'DeadmanFault' in out and 'it does not act' in out, out
        still_ms = float(out.split('the motor was still engaged ')[1].split()[0])
        assert still_ms >= 100 + DEADMAN_LATE_MS, out  # it waited out the setting and margin
        assert causes[-2:] == ['engaged command', 'disengaged command'], causes
