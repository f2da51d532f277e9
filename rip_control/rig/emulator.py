"""Rig emulator: plays the rig firmware behind a pseudo-terminal, with real-time physics.

Run it as ``python -m rip_control.rig.emulator [--link /tmp/rip_rig] [--params rig.yaml]``.
It creates a pty pair, links the device at ``--link``, prints one ``READY <device> <link>``
line (ending ``plant=gap`` when the rig file's ``gap:`` section makes it serve the
reality-gap plant of :mod:`rip_control.rig.gap_plant` instead of the model's), and serves
``docs/serial_protocol.md`` until SIGINT/SIGTERM, when it removes the link.
The physics advances with the monotonic clock in fixed steps whether or not anyone talks to
it, and the firmware deadman disengages the motor when the host goes quiet, exactly as the
firmware spec requires. Command-line options inject faults for tests.
"""

from __future__ import annotations

import argparse
from collections import deque
from collections.abc import Callable
import fcntl
import math
import os
from pathlib import Path
import random
import select
import sys
import time
import tty

from rip_control.rig.dynamics import FurutaDynamics, PendulumParams
from rip_control.rig.emulator_args import (
    DEADMAN_RANGE_MS,
    FaultConfig,
    build_arg_parser,
    check_options,
    fault_config,
)
from rip_control.rig.gap_plant import GapEffects, GapPlant, load_rig
from rip_control.rig.host_firmware import refuse_gap_rig
from rip_control.rig.protocol import (
    PROTOCOL_VERSION,
    REPLY_BIT,
    REQUEST_PAYLOAD_SIZE,
    Ack,
    Cmd,
    DeviceInfo,
    ErrorCode,
    Frame,
    FrameParser,
    Nack,
    RigState,
    Status,
    encode_frame,
    unpack_deadman_ms,
    unpack_voltage_mv,
)
from rip_control.rt.realtime import try_realtime
from rip_control.signals import StopSignals

FIRMWARE_BUILD = 1
#: Two readings at most this far apart (rig time) on either side of the clock's wrap: the
#: host read across it (:data:`WRAP_EVENT`).
READ_ACROSS_S = 1.0
WRAP_EVENT = 'clock wrapped between two readings'

# Longest sleep of the serving loop (bounds one catch-up of the physics), and how far past
# the deadman's due time the loop wakes to apply it.
IDLE_WAKE_S = 0.01
DEADMAN_WAKE_SLACK_S = 0.0002


class Firmware:
    """The firmware's logic: command handling, motor driver state, deadman, encoders.

    Time is passed in explicitly (seconds on the monotonic clock) so tests can drive it
    without waiting; :func:`serve` feeds it wall-clock time.

    :param params: physics of the emulated rig.
    :param deadman_timeout_ms: disengage when engaged and no SET_VOLTAGE/ENGAGE arrives
        for this long.
    :param start_time_s: monotonic time of power-on; timestamps count from it.
    :param seed: seed for encoder noise.
    :param plant: the reality-gap plant to serve instead of the model's (its readings' ages
        vary beyond ``params.sensing_latency_s``); None: :class:`FurutaDynamics`.
    """

    def __init__(
        self,
        params: PendulumParams,
        *,
        deadman_timeout_ms: int = 100,
        start_time_s: float = 0.0,
        seed: int | None = None,
        plant: GapPlant | None = None,
    ) -> None:
        self.params = params
        self.dynamics: FurutaDynamics | GapPlant = (
            FurutaDynamics(params) if plant is None else plant
        )
        self._plant = plant
        # How far back the readings may reach: the rig's latency, and the gap plant's extra age.
        self._history_s = params.sensing_latency_s + (plant.max_sample_age_s if plant else 0.0)
        self.deadman_timeout_ms = deadman_timeout_ms
        self.engaged = False
        self.deadman_tripped = False
        self.voltage_clamped = False
        self.voltage_v = 0.0
        self.last_error = ErrorCode.NONE
        self.n_deadman_trips = 0
        self.n_requests = 0
        self._t0 = start_time_s
        self._sim_time_s = 0.0
        self._last_heartbeat_s = start_time_s
        self._rng = random.Random(seed)
        self._history: deque[tuple[float, int, int]] = deque()
        self._max_mv = round(params.max_voltage_v * 1000.0)
        self.on_event: Callable[[str], None] | None = None
        # Fault injection: DISENGAGE acknowledged, the driver left engaged (a stuck driver
        # stage); only the deadman (or a power-down) then stops the motor.
        self.stuck_driver = False
        # Fault injection: a deadman that never trips (a firmware bug, a timer not running);
        # what rig_check --deadman is there to find.
        self.no_deadman = False
        # Fault injection: wiring reversed ('motor': the leads swapped, the arm turns against
        # the voltage; 'arm', 'pendulum': that encoder counts the other way).
        self.reversed: frozenset[str] = frozenset()
        # The firmware clock's reading at power-on, seconds (0 on a real board): a value just
        # below 2**32 us brings its 71.6-minute wrap to the start of a run (soak benchmark).
        self.clock_offset_s = 0.0
        self._last_reading: tuple[float, int] | None = None  # (time, timestamp) last sampled
        self._zero = (0, 0)  # encoder counts at the last reset: the encoders count from there

    def power_down(self) -> None:
        """The firmware stops (SIGINT/SIGTERM): the driver stage is off before the device goes.

        The ``powered down`` event comes last, after a ``disengaged stopping`` if the motor
        was still engaged (one that is not was disengaged by the host or the deadman).
        """
        self._set_engaged(False, 'stopping')
        if self.on_event is not None:
            self.on_event('powered down')

    def _set_engaged(self, engaged: bool, cause: str) -> None:
        changed = engaged != self.engaged
        self.engaged = engaged  # first: a failing event sink never leaves the motor engaged
        if changed and self.on_event is not None:
            self.on_event(f'{"engaged" if engaged else "disengaged"} {cause}')

    # -- time ------------------------------------------------------------------------------

    def advance_to(self, now_s: float) -> None:
        """Integrate the physics in fixed steps up to ``now_s``, checking the deadman."""
        h = self.params.physics_step_s
        target = now_s - self._t0
        while self._sim_time_s + h <= target:
            self._check_deadman(self._t0 + self._sim_time_s)
            volts = -self.voltage_v if 'motor' in self.reversed else self.voltage_v
            self.dynamics.step(h, volts, self.engaged)
            self._sim_time_s += h
            if self._history_s > 0.0:
                self._record_history()
        self._check_deadman(now_s)

    def deadman_due_s(self) -> float:
        """When the deadman trips unless a heartbeat comes first (infinite while disengaged)."""
        if not self.engaged or self.no_deadman:
            return math.inf
        return self._last_heartbeat_s + self.deadman_timeout_ms / 1000.0

    def _check_deadman(self, now_s: float) -> None:
        if self.no_deadman:
            return
        if self.engaged and (now_s - self._last_heartbeat_s) * 1000.0 > self.deadman_timeout_ms:
            self._set_engaged(False, 'deadman')
            self.voltage_v = 0.0
            self.deadman_tripped = True
            self.n_deadman_trips += 1

    def _record_history(self) -> None:
        arm, pend = self.dynamics.encoder_counts()
        self._history.append((self._sim_time_s, arm, pend))
        horizon = self._history_s + 0.1
        while self._history and self._history[0][0] < self._sim_time_s - horizon:
            self._history.popleft()

    # -- status ----------------------------------------------------------------------------

    @property
    def status(self) -> Status:
        """Current status flags."""
        flags = Status(0)
        if self.engaged:
            flags |= Status.ENGAGED
        if self.deadman_tripped:
            flags |= Status.DEADMAN_TRIPPED
        if self.dynamics.at_limit:
            flags |= Status.ARM_LIMIT
        if self.voltage_clamped:
            flags |= Status.VOLTAGE_CLAMPED
        return flags

    def sample(self) -> RigState:
        """The state a GET_STATE reply carries (delayed by the sensing latency, if any)."""
        t_s = self._sim_time_s
        latency_s = self.params.sensing_latency_s
        if self._plant is not None:
            latency_s += self._plant.sample_age_s()
        if latency_s > 0.0 and self._history:
            wanted = t_s - latency_s
            if self._plant is not None and self._last_reading is not None:
                wanted = max(wanted, self._last_reading[0])  # no reading older than the last
            t_s, arm, pend = self._history[0]
            for entry in self._history:
                if entry[0] > wanted:
                    break
                t_s, arm, pend = entry
        else:
            arm, pend = self.dynamics.encoder_counts()
        arm, pend = arm - self._zero[0], pend - self._zero[1]
        if 'arm' in self.reversed:
            arm = -arm
        if 'pendulum' in self.reversed:
            pend = -pend
        if self.params.encoder_noise_counts > 0.0:
            arm += round(self._rng.gauss(0.0, self.params.encoder_noise_counts))
            pend += round(self._rng.gauss(0.0, self.params.encoder_noise_counts))
        timestamp_us = round((t_s + self.clock_offset_s) * 1e6) & 0xFFFFFFFF
        last = self._last_reading
        if last is not None and timestamp_us < last[1] and t_s - last[0] < READ_ACROSS_S:
            # The host read the clock just before its wrap and again just after: what a
            # soak shows it rides (a reset clears the last reading: not a wrap).
            if self.on_event is not None:
                self.on_event(WRAP_EVENT)
        self._last_reading = (t_s, timestamp_us)
        state = RigState(
            arm_counts=arm,
            pendulum_counts=pend,
            timestamp_us=timestamp_us,
            status=self.status,
            last_error=self.last_error,
            applied_voltage_mv=round(self.voltage_v * 1000.0) if self.engaged else 0,
        )
        self.last_error = ErrorCode.NONE  # reported once, then cleared
        return state

    def reset(self) -> None:
        """A reset of the board (a brown-out, the watchdog, the reset button) mid-run.

        It powers up again: the driver off, its clock counting from zero, and its encoders
        counting from wherever the shafts are now (the zero a host calibrated is lost).
        """
        self._set_engaged(False, 'reset')
        self.voltage_v = 0.0
        self.deadman_tripped = False
        self.clock_offset_s -= self._sim_time_s + self.clock_offset_s  # reads 0 s now
        self._zero = self.dynamics.encoder_counts()
        self._history.clear()
        self._last_reading = None

    # -- commands --------------------------------------------------------------------------

    def handle(self, frame: Frame, now_s: float) -> bytes:
        """Execute one CRC-valid request and return the reply frame's bytes."""
        self.n_requests += 1
        self.advance_to(now_s)
        try:
            cmd = Cmd(frame.cmd)
        except ValueError:
            return self._nack(frame, ErrorCode.UNKNOWN_COMMAND)
        if cmd is Cmd.NACK:
            return self._nack(frame, ErrorCode.UNKNOWN_COMMAND)
        if len(frame.payload) != REQUEST_PAYLOAD_SIZE[cmd]:
            return self._nack(frame, ErrorCode.BAD_LENGTH)
        if cmd is Cmd.PING:
            info = DeviceInfo(
                protocol_version=PROTOCOL_VERSION,
                deadman_timeout_ms=self.deadman_timeout_ms,
                counts_per_rev=self.params.encoder_counts_per_rev,
                max_voltage_mv=self._max_mv,
                firmware_build=FIRMWARE_BUILD,
            )
            return self._reply(frame, info.pack())
        if cmd is Cmd.GET_STATE:
            return self._reply(frame, self.sample().pack())
        if cmd is Cmd.SET_VOLTAGE:
            if not self.engaged:
                self.voltage_v = 0.0
                return self._nack(frame, ErrorCode.NOT_ENGAGED)
            mv = unpack_voltage_mv(frame.payload)
            self.voltage_clamped = abs(mv) > self._max_mv
            mv = max(-self._max_mv, min(self._max_mv, mv))
            self.voltage_v = mv / 1000.0
            self._last_heartbeat_s = now_s
        elif cmd is Cmd.ENGAGE:
            self._set_engaged(True, 'command')
            self.deadman_tripped = False
            self.voltage_v = 0.0
            self._last_heartbeat_s = now_s
        elif cmd is Cmd.DISENGAGE:
            if not self.stuck_driver:
                self._set_engaged(False, 'command')
                self.voltage_v = 0.0
        elif cmd is Cmd.SET_DEADMAN:
            ms = unpack_deadman_ms(frame.payload)
            if not DEADMAN_RANGE_MS[0] <= ms <= DEADMAN_RANGE_MS[1]:
                return self._nack(frame, ErrorCode.OUT_OF_RANGE)
            self.deadman_timeout_ms = ms
        return self._reply(frame, Ack(self.status, self.last_error).pack())

    def _reply(self, frame: Frame, payload: bytes) -> bytes:
        return encode_frame(frame.seq, (frame.cmd | REPLY_BIT) & 0xFF, payload)

    def _nack(self, frame: Frame, error: ErrorCode) -> bytes:
        self.last_error = error
        return encode_frame(frame.seq, Cmd.NACK | REPLY_BIT, Nack(error, frame.cmd).pack())

    def note_bad_frame(self) -> None:
        """A corrupt frame was dropped (the host learns of it through ``last_error``)."""
        self.last_error = ErrorCode.BAD_CRC


STOP_LINGER_S = 0.1  # after the host's disengage on a stop, time for it to read the reply


class _Server:
    """The pty side: reads bytes, feeds the firmware, writes replies, injects faults."""

    def __init__(
        self, firmware: Firmware, faults: FaultConfig, master_fd: int, stop: StopSignals
    ) -> None:
        self.firmware = firmware
        self.faults = faults
        self.fd = master_fd
        self.parser = FrameParser()
        self.stop = stop  # SIGINT/SIGTERM, recorded from main()'s first line on
        self.stop_grace_s = 0.0
        self._stop_seen_s: float | None = None
        self._off_since_s: float | None = None
        self._n_replies = 0  # replies since the faults' start time
        self._reset_done = False  # --reset happens once
        self.n_dropped = 0  # replies left unanswered by --drop-every
        self._pending: list[tuple[float, bytes]] = []  # (send_at, bytes), stalled replies
        self._rng = random.Random(1234)

    def run(self, start_s: float) -> None:
        firmware, faults = self.firmware, self.faults
        # Physics advances in fixed steps whenever the loop wakes: on each request, when the
        # deadman falls due, when a stalled reply is due, and at least every IDLE_WAKE_S. Waking
        # once per physics step bought nothing and cost 8 % of a core per emulator, at
        # real-time priority, which starved the other processes of a multi-rig run.
        while not self._stopped():
            now = time.monotonic()
            since_start = now - start_s
            if faults.exit_after_s and since_start >= faults.exit_after_s:
                os._exit(3)  # abrupt by design: no clean-up, as when a USB cable is pulled
            wake = min(now + IDLE_WAKE_S, firmware.deadman_due_s() + DEADMAN_WAKE_SLACK_S)
            if self._pending:
                wake = min(wake, self._pending[0][0])
            timeout = max(0.0, wake - now)
            try:
                readable, _, _ = select.select([self.fd], [], [], timeout)
            except InterruptedError:
                continue
            now = time.monotonic()
            firmware.advance_to(now)
            self._flush_pending(now)
            if not readable:
                continue
            try:
                data = os.read(self.fd, 4096)
            except BlockingIOError:
                continue
            except OSError:
                data = b''  # EIO: no process has the slave open; keep serving
            if not data:
                continue
            errors_before = self.parser.n_errors
            frames = self.parser.feed(data)
            if self.parser.n_errors != errors_before:
                firmware.note_bad_frame()
            frozen = faults.freeze_after_s and since_start >= faults.freeze_after_s
            for frame in frames:
                if frozen:
                    continue
                reply = firmware.handle(frame, time.monotonic())
                self._send(reply, since_start >= faults.start_after_s)

    def _stopped(self) -> bool:
        """A stop was asked, and the host has disengaged or the stop grace has run out.

        A launch signals every process at once; the grace lets the control node's own
        disengage (a few ms) reach the firmware before it powers down by itself, and the
        firmware then lingers a moment so the host reads the reply (closing the pty would
        discard it). The deadman still trips if the host has gone quiet.
        """
        if not self.stop.requested:
            return False
        now = time.monotonic()
        if self._stop_seen_s is None:
            self._stop_seen_s = now
        linger_s = min(STOP_LINGER_S, self.stop_grace_s)
        if self.firmware.engaged:
            self._off_since_s = None
            return now - self._stop_seen_s >= self.stop_grace_s
        if self._off_since_s is None:
            self._off_since_s = now
        return now - self._off_since_s >= linger_s

    def _send(self, reply: bytes, faults_active: bool) -> None:
        faults = self.faults
        delay_s = 0.0
        if faults_active:
            self._n_replies += 1
            n = self._n_replies - faults.after_replies
            faults_active = n > 0 and (not faults.for_replies or n <= faults.for_replies)
        if faults_active and faults.reset and not self._reset_done:
            self.firmware.reset()  # the next request meets a board that has just powered up
            self._reset_done = True
        if faults_active:
            if faults.drop_every and n % faults.drop_every == 0:
                self.n_dropped += 1
                return
            if faults.garbage_every and n % faults.garbage_every == 0:
                reply = self._rng.randbytes(faults.garbage_bytes) + reply
            if faults.stall_every and n % faults.stall_every == 0:
                delay_s = faults.stall_ms / 1000.0
        if delay_s > 0.0 or self._pending:
            self._pending.append((time.monotonic() + delay_s, reply))
            return
        self._write(reply)

    def _flush_pending(self, now: float) -> None:
        while self._pending and self._pending[0][0] <= now:
            self._write(self._pending.pop(0)[1])

    def _write(self, data: bytes) -> None:
        try:
            os.write(self.fd, data)
        except OSError:
            pass  # nobody listening: a real UART would drop these bytes too


class LinkInUse(OSError):
    """Another live emulator serves the link."""


def claim_link(link: Path) -> int:
    """Lock ``.<name>.lock`` beside ``link`` for this process's life; the lock's descriptor.

    A second emulator (or host firmware) on the same link is refused instead of silently
    taking it over from a live one, which a client already talking to it would not notice.
    The lock goes with the process, however it ends. :func:`release_link` removes the file
    while still holding it; a claim that locked a file so removed (opened just before) finds
    it no longer at the path and claims afresh. (The C host firmware, which inherits the
    lock, leaves its file: the next claim of that link takes it over.)
    """
    lock = _lock_path(link)
    while True:
        fd = os.open(lock, os.O_RDONLY | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise LinkInUse(
                f'{link} is served by a running emulator (it holds {lock}): stop it first, or '
                'pass another --link'
            ) from None
        try:
            if os.stat(lock).st_ino == os.fstat(fd).st_ino:
                return fd
        except FileNotFoundError:
            pass
        os.close(fd)  # its holder removed it as we locked it: claim the file there now


def release_link(link: Path, fd: int) -> None:
    """End :func:`claim_link`'s claim: its file removed (no ``.lock`` per run piles up)."""
    try:
        os.unlink(_lock_path(link))
    except FileNotFoundError:
        pass
    finally:
        os.close(fd)


def _lock_path(link: Path) -> Path:
    return link.with_name(f'.{link.name}.lock')


def _make_link(link: Path, device: str) -> None:
    tmp = link.with_name(f'.{link.name}.{os.getpid()}')
    if tmp.is_symlink() or tmp.exists():
        tmp.unlink()
    os.symlink(device, tmp)
    os.replace(tmp, link)  # atomic: a client never sees a half-made link


def _remove_link(link: Path, device: str) -> None:
    try:
        if link.is_symlink() and os.readlink(link) == device:
            link.unlink()
    except OSError:
        pass


def _print_line(text: str) -> None:
    """Print a line; if whoever read stdout has gone (a killed runner), carry on without it.

    The firmware must not stop serving (or die in the middle of a disengage) because its log
    reader died: stdout then goes to /dev/null.
    """
    try:
        print(text, flush=True)
    except BrokenPipeError:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)


def _event_sink(to_stdout: bool, path: str) -> Callable[[str], None] | None:
    """Where ``EVENT <monotonic s> <what>`` lines go: stdout, a file (appended), both or none.

    One ``os.write`` per line on an ``O_APPEND`` descriptor: several emulators may share the
    file, and a reader never sees half a line.
    """
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644) if path else -1
    if not to_stdout and fd < 0:
        return None

    def emit(what: str) -> None:
        line = f'EVENT {time.monotonic():.6f} {what}'
        if fd >= 0:
            os.write(fd, (line + '\n').encode())
        if to_stdout:
            _print_line(line)

    return emit


def _open_pty() -> tuple[int, int, str]:
    """A raw, non-blocking pseudo-terminal pair: ``(master, slave, slave's device path)``."""
    master, slave = os.openpty()
    tty.setraw(slave)  # no echo, no line discipline: bytes pass through untouched
    os.set_blocking(master, False)
    return master, slave, os.ttyname(slave)


def _build_firmware(
    args: argparse.Namespace, params: PendulumParams, gap: GapEffects | None, start_s: float
) -> Firmware:
    """The firmware powered on at ``start_s``, its plant the gap's if any, faults injected."""
    plant = GapPlant(params, gap, seed=args.seed) if gap is not None else None
    firmware = Firmware(
        params,
        deadman_timeout_ms=args.deadman_ms,
        start_time_s=start_s,
        seed=args.seed,
        plant=plant,
    )
    firmware.stuck_driver = args.stuck_driver
    firmware.no_deadman = args.no_deadman
    firmware.reversed = frozenset(args.reversed)
    firmware.clock_offset_s = args.clock_offset_s
    return firmware


def main(argv: list[str] | None = None) -> int:
    """Entry point: serve until SIGINT/SIGTERM; the link is removed on every way out."""
    # First: a signal from here on ends in the clean stop below (motor off, link removed),
    # whenever it comes; before READY too (the serving loop then returns at once).
    stop = StopSignals().install()
    args = build_arg_parser().parse_args(argv)
    link = Path(args.link)
    try:
        params, gap = load_rig(args.params) if args.params else (PendulumParams(), None)
        if gap is not None and args.firmware == 'c':
            refuse_gap_rig(args.params)
        faults = fault_config(args)
        check_options(args)
        if args.check:
            return 0
        claim = claim_link(link)
    except (ValueError, OSError, TypeError) as exc:
        print(f'rig_emulator: error: {exc}', file=sys.stderr)
        return 2
    try:
        if args.firmware == 'c':
            from rip_control.rig.host_firmware import exec_host_firmware

            if stop.requested:  # stopped before it started: nothing to serve, nothing to undo
                release_link(link, claim)
                return 0
            os.set_inheritable(claim, True)  # the lock lives on in the C program
            status = exec_host_firmware(args, params)  # returns only if it did not start
            release_link(link, claim)
            return status
        on_event = _event_sink(args.events, args.events_file)
        master, slave, device = _open_pty()
    except (ValueError, OSError, TypeError) as exc:
        release_link(link, claim)
        print(f'rig_emulator: error: {exc}', file=sys.stderr)
        return 2

    rt_note = try_realtime(args.rt_priority, cpu=args.cpu if args.cpu >= 0 else None)
    start = time.monotonic()
    firmware = _build_firmware(args, params, gap, start)
    server = _Server(firmware, faults, master, stop)
    server.stop_grace_s = max(0.0, args.stop_grace_ms) / 1000.0
    firmware.on_event = on_event
    ready = f'READY {device} {link} physics={params.physics_rate_hz:.0f}Hz {rt_note}'
    if gap is not None:
        ready += ' plant=gap'
    try:
        _make_link(link, device)
        print(ready, flush=True)
        server.run(start)  # returns at once if a signal came before
    finally:
        firmware.power_down()
        _remove_link(link, device)
        release_link(link, claim)
        os.close(master)
        os.close(slave)
    _print_line(
        f'rig_emulator: stopped after {firmware.n_requests} requests, '
        f'{firmware.n_deadman_trips} deadman trip(s), {server.parser.n_errors} bad frame(s), '
        f'{server.n_dropped} reply(s) dropped'
    )
    return 0


if __name__ == '__main__':
    sys.exit(main())
