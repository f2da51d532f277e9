"""The emulator's command line: its arguments, their checks, and the fault set they make.

``python -m rip_control.rig.emulator --help`` prints them (:func:`build_arg_parser`).
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
import math
import os

from rip_control.rig.host_firmware import FIRMWARES

DEADMAN_RANGE_MS = (10, 2000)


EVENTS_FILE_ENV = 'RIP_EMULATOR_EVENTS'


@dataclass(frozen=True)
class FaultConfig:
    """Faults to inject, counted over requests received after ``start_after_s``.

    :param drop_every: leave every Nth request unanswered (0: never).
    :param garbage_every: send random garbage bytes before every Nth reply (0: never).
    :param garbage_bytes: how many garbage bytes each time.
    :param stall_every: delay every Nth reply by ``stall_ms`` (0: never).
    :param stall_ms: the delay; physics and deadman keep running meanwhile.
    :param freeze_after_s: stop answering anything after this many seconds (0: never).
    :param exit_after_s: exit abruptly (no clean-up, link left dangling) after this many
        seconds (0: never).
    :param start_after_s: faults are active only after this many seconds from start.
    :param after_replies: ... and after this many replies (counted from then; 0: at once).
    :param reset: the board resets (:meth:`Firmware.reset`) once, at the first reply of the
        fault window (``start_after_s``, ``after_replies``).
    :param for_replies: ... and for this many replies only (0: for good). With
        ``after_replies``, a fault at a point of the host's loop, whatever its start took:
        e.g. ``--stall-every 1 --stall-ms 40 --faults-after-replies 300
        --faults-for-replies 5`` stalls five replies in a row about three seconds into a
        50 Hz loop (a tick asks twice: GET_STATE, then SET_VOLTAGE).
    """

    drop_every: int = 0
    garbage_every: int = 0
    garbage_bytes: int = 16
    stall_every: int = 0
    stall_ms: float = 0.0
    freeze_after_s: float = 0.0
    exit_after_s: float = 0.0
    start_after_s: float = 0.0
    after_replies: int = 0
    for_replies: int = 0
    reset: bool = False

    def __post_init__(self) -> None:
        names = ('drop_every', 'garbage_every', 'garbage_bytes', 'stall_every')
        for name in (*names, 'after_replies', 'for_replies'):
            if getattr(self, name) < 0:
                raise ValueError(f'{name} must be >= 0, got {getattr(self, name)}')
        for name in (
            'stall_ms',
            'freeze_after_s',
            'exit_after_s',
            'start_after_s',
        ):
            if not math.isfinite(getattr(self, name)) or getattr(self, name) < 0:
                raise ValueError(f'{name} must be a finite number >= 0, got {getattr(self, name)}')


#: What ``--reversed`` can wire the other way round.
REVERSIBLE = ('motor', 'arm', 'pendulum')


def build_arg_parser() -> argparse.ArgumentParser:
    """Command-line interface (also used by the launch helpers to validate arguments)."""
    ap = argparse.ArgumentParser(
        prog='rig_emulator',
        description='Emulate the rotary inverted pendulum firmware behind a pseudo-terminal.',
    )
    _add_rig_arguments(ap)
    _add_process_arguments(ap)
    _add_event_arguments(ap)
    fault = ap.add_argument_group('fault injection')
    _add_reply_faults(fault)
    _add_hardware_faults(fault)
    _add_link_stalls(fault)
    _add_fault_window(fault)
    return ap


def _add_rig_arguments(ap: argparse.ArgumentParser) -> None:
    """The emulated rig: its link, physics, deadman, encoder noise and clock."""
    ap.add_argument(
        '--link', default='/tmp/rip_rig', help='symlink to the pty (default %(default)s)'
    )
    ap.add_argument(
        '--params', default='', help='YAML file of rig physics (default: QUBE-Servo 2)'
    )
    ap.add_argument(
        '--deadman-ms', type=int, default=100, help='deadman timeout (default %(default)s)'
    )
    ap.add_argument('--seed', type=int, default=None, help='seed for encoder noise')
    ap.add_argument(
        '--clock-offset-s',
        type=float,
        default=0.0,
        help='the firmware clock at power-on, s (default 0; e.g. 4290 puts its 71.6-minute '
        'wrap 5 s after the start)',
    )


def _add_process_arguments(ap: argparse.ArgumentParser) -> None:
    """How it runs: only checked, which firmware, real-time priority, CPU, stop grace."""
    ap.add_argument(
        '--check',
        action='store_true',
        help='check the arguments (the --params file included) and exit: 0 if it would '
        'serve, 2 naming the fault (what a runner asks before it starts anything)',
    )
    ap.add_argument(
        '--firmware',
        choices=FIRMWARES,
        default='python',
        help='python: this emulator; c: the C firmware of firmware/ built for the host '
        '(make firmware-host), which answers in microseconds as a microcontroller does '
        '(default %(default)s)',
    )
    ap.add_argument(
        '--rt-priority',
        type=int,
        default=70,
        help='SCHED_FIFO priority; 0 disables (default %(default)s)',
    )
    ap.add_argument('--cpu', type=int, default=-1, help='pin to this CPU (default: no pinning)')
    ap.add_argument(
        '--stop-grace-ms',
        type=float,
        default=0.0,
        help='on SIGINT/SIGTERM while engaged, serve up to this long so the host disengages '
        'first (a launch signals every process at once); default %(default)s',
    )


def _add_event_arguments(ap: argparse.ArgumentParser) -> None:
    """Where the EVENT lines go: stdout, a file."""
    ap.add_argument(
        '--events',
        action='store_true',
        help='print "EVENT <monotonic s> engaged|disengaged <cause>" lines, "clock wrapped '
        'between two readings" when the host read the clock on both sides of its wrap, and '
        '"powered down" last (for tests and the soak benchmark)',
    )
    ap.add_argument(
        '--events-file',
        default=os.environ.get(EVENTS_FILE_ENV, ''),
        help='also append the EVENT lines to this file, for an emulator another process '
        f'started (default: ${EVENTS_FILE_ENV})',
    )


def _add_reply_faults(fault: argparse._ArgumentGroup) -> None:
    """Replies left out or garbled."""
    fault.add_argument(
        '--drop-every', type=int, default=0, help='leave every Nth request unanswered'
    )
    fault.add_argument(
        '--garbage-every', type=int, default=0, help='prefix every Nth reply with garbage'
    )
    fault.add_argument('--garbage-bytes', type=int, default=16, help='garbage bytes per injection')


def _add_hardware_faults(fault: argparse._ArgumentGroup) -> None:
    """A stuck driver stage, a deadman that never trips, wiring the other way round."""
    fault.add_argument(
        '--stuck-driver',
        action='store_true',
        help='acknowledge DISENGAGE but leave the driver engaged (the ACK reports it); only '
        'the deadman stops the motor',
    )
    fault.add_argument(
        '--no-deadman',
        action='store_true',
        help='a deadman that never trips (a firmware bug): only a command stops the motor',
    )
    fault.add_argument(
        '--reversed',
        action='append',
        default=[],
        choices=REVERSIBLE,
        help='wire this part the other way round: the motor leads, or the arm or pendulum '
        'encoder (repeatable)',
    )


def _add_link_stalls(fault: argparse._ArgumentGroup) -> None:
    """Replies delayed, the firmware gone silent, the process gone."""
    fault.add_argument('--stall-every', type=int, default=0, help='delay every Nth reply')
    fault.add_argument('--stall-ms', type=float, default=0.0, help='delay of a stalled reply, ms')
    fault.add_argument(
        '--freeze-after', type=float, default=0.0, help='stop answering after S seconds'
    )
    fault.add_argument(
        '--exit-after', type=float, default=0.0, help='exit abruptly after S seconds'
    )


def _add_fault_window(fault: argparse._ArgumentGroup) -> None:
    """A board reset, and when the faults act: after a time, after replies, for how many."""
    fault.add_argument(
        '--reset',
        action='store_true',
        help='reset the board once, at the first reply of the fault window (--faults-after, '
        '--faults-after-replies): driver off, clock from 0, encoders zeroed where the shafts are',
    )
    fault.add_argument(
        '--faults-after', type=float, default=0.0, help='faults start after S seconds'
    )
    fault.add_argument(
        '--faults-after-replies',
        type=int,
        default=0,
        help='... and after N replies (counted from --faults-after)',
    )
    fault.add_argument(
        '--faults-for-replies', type=int, default=0, help='... for N replies only (0: for good)'
    )


def fault_config(args: argparse.Namespace) -> FaultConfig:
    """The faults the arguments ask for (a ValueError names a bad one)."""
    return FaultConfig(
        drop_every=args.drop_every,
        garbage_every=args.garbage_every,
        garbage_bytes=args.garbage_bytes,
        stall_every=args.stall_every,
        stall_ms=args.stall_ms,
        freeze_after_s=args.freeze_after,
        exit_after_s=args.exit_after,
        start_after_s=args.faults_after,
        after_replies=args.faults_after_replies,
        for_replies=args.faults_for_replies,
        reset=args.reset,
    )


def check_options(args: argparse.Namespace) -> None:
    """Raise ValueError naming an option out of range, or one the C firmware cannot serve."""
    c_firmware = args.firmware == 'c'
    if not DEADMAN_RANGE_MS[0] <= args.deadman_ms <= DEADMAN_RANGE_MS[1]:
        raise ValueError(f'--deadman-ms must be in {DEADMAN_RANGE_MS}, got {args.deadman_ms}')
    if args.stuck_driver and c_firmware:
        raise ValueError('--stuck-driver is a fault of the Python emulator only')
    if args.reversed and c_firmware:
        raise ValueError('--reversed is a fault of the Python emulator only')
    if args.no_deadman and c_firmware:
        raise ValueError('--no-deadman is a fault of the Python emulator only')
    if args.reset and c_firmware:
        raise ValueError('--reset is a fault of the Python emulator only')
    if (args.faults_after_replies or args.faults_for_replies) and c_firmware:
        raise ValueError(
            '--faults-after-replies and --faults-for-replies are faults of the Python '
            'emulator only'
        )
    if not 0.0 <= args.clock_offset_s < 2**32 / 1e6:
        raise ValueError(f'--clock-offset-s must be in [0, 4294.967), got {args.clock_offset_s}')
    if args.clock_offset_s and c_firmware:
        raise ValueError('--clock-offset-s is an option of the Python emulator only')
