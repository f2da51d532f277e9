"""The C firmware on the host: ``python -m rip_control.rig.emulator --firmware c``.

``firmware/`` holds the rig firmware in portable C (``docs/serial_protocol.md``) and a host
build of it (``firmware/build/host/rip_fw_host``) that serves the protocol behind a
pseudo-terminal with the plant simulated in C. It answers as a microcontroller would: in
microseconds, not the Python emulator's milliseconds, so the host side can be tested at
500 Hz - 1 kHz against a realistic device.

This module takes the Python emulator's command line, reads the rig YAML here (with the same
validation as :class:`~rip_control.rig.dynamics.PendulumParams`), and replaces itself with
the C program (``exec``: same process, so signals and exit codes reach it directly).
"""

from __future__ import annotations

from dataclasses import fields
import os
from pathlib import Path
import shutil
import signal
import subprocess
import sys

from rip_control.rig.dynamics import PendulumParams

FIRMWARE_DIR = Path(__file__).resolve().parents[2] / 'firmware'
FIRMWARES = ('python', 'c')
"""What can play the rig behind the emulator's pty: the Python emulator, or the C firmware's
host build (``rig_emulator --firmware c``)."""
BINARY_ENV = 'RIP_FIRMWARE_HOST'
HOST_BINARY = FIRMWARE_DIR / 'build' / 'host' / 'rip_fw_host'

# Options passed through unchanged (the C program parses the same names).
_PASSED = (
    'link',
    'deadman_ms',
    'seed',
    'rt_priority',
    'cpu',
    'stop_grace_ms',
    'events_file',
    'drop_every',
    'garbage_every',
    'garbage_bytes',
    'stall_every',
    'stall_ms',
    'freeze_after',
    'exit_after',
    'faults_after',
)


def refuse_gap_rig(params_path: str) -> None:
    """Refuse a rig file with a ``gap:`` section: the C plant plays the model's terms only."""
    raise ValueError(
        f"{params_path} has a gap: section, and the C firmware's plant does not play the gap "
        'effects (rip_control.rig.gap_plant): use the Python firmware (--firmware python)'
    )


class FirmwareNotBuilt(RuntimeError):
    """The host firmware binary is missing."""


def host_binary() -> Path:
    """The host firmware program: ``$RIP_FIRMWARE_HOST``, else the one ``make`` builds."""
    override = os.environ.get(BINARY_ENV, '')
    path = Path(override) if override else HOST_BINARY
    if not path.is_file() or not os.access(path, os.X_OK):
        how = (
            f'${BINARY_ENV} points at {path}, which is not an executable file'
            if override
            else f'{path} is not built: run `make firmware-host` (needs a C compiler)'
        )
        raise FirmwareNotBuilt(f'the host C firmware is missing: {how}')
    return path


def build_host_binary(quiet: bool = True) -> Path:
    """Build (or bring up to date) the host firmware with the system C compiler."""
    make = shutil.which('make')
    if make is None:
        raise FirmwareNotBuilt('building the host firmware needs `make` and a C compiler')
    out = subprocess.run(
        [make, '-C', str(FIRMWARE_DIR), 'host'], capture_output=True, text=True, check=False
    )
    if out.returncode != 0:
        raise FirmwareNotBuilt(f'building the host firmware failed:\n{out.stdout}{out.stderr}')
    if not quiet:
        print(out.stdout, end='')
    return host_binary()


def command_line(args: object, params: PendulumParams, binary: Path) -> list[str]:
    """The C program's argv for parsed emulator arguments and loaded rig parameters."""
    argv = [str(binary)]
    for name in _PASSED:
        value = getattr(args, name)
        if value is None or value == '':
            continue
        argv += [f'--{name.replace("_", "-")}', str(value)]
    if getattr(args, 'events', False):
        argv.append('--events')
    for f in fields(params):
        argv += ['--param', f'{f.name}={float(getattr(params, f.name))!r}']
    return argv


def exec_host_firmware(args: object, params: PendulumParams) -> int:
    """Replace this process with the host firmware; returns only on failure (exit status)."""
    try:
        binary = host_binary()
    except FirmwareNotBuilt as exc:
        print(f'rig_emulator: error: {exc}', file=sys.stderr)
        return 2
    argv = command_line(args, params, binary)
    sys.stdout.flush()
    sys.stderr.flush()
    # A SIGINT/SIGTERM from here on stays pending across exec; the C program unblocks it
    # after installing its own handlers, so it stops cleanly instead of being lost.
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
    try:
        os.execv(argv[0], argv)
    except OSError as exc:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGTERM})
        print(f'rig_emulator: error: cannot start {argv[0]}: {exc}', file=sys.stderr)
        return 2
    return 1  # not reached
