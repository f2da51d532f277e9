"""Host side of the rig's serial link: :class:`LowLevelClient`.

One request, one reply, under one lock per transaction, so a ``disengage_motor`` from a
safety thread never interleaves its bytes with the control thread's ``get_state``. Every
transaction is bounded by ``timeout_s``, which bounds how long the lock is ever held.
Failures are named: :class:`RigTimeout` (no valid reply in time), :class:`RigProtocolError`
(the device answered with an error, or with something that is not the reply asked for),
:class:`RigDisconnected` (the port is gone).
"""

from __future__ import annotations

from dataclasses import dataclass
import logging
import os
from pathlib import Path
import select
import threading
import time
from typing import TypeVar

import serial

from rip_control.rig.protocol import (
    PROTOCOL_VERSION,
    REPLY_BIT,
    Ack,
    Cmd,
    DeviceInfo,
    ErrorCode,
    FrameParser,
    Nack,
    RigState,
    Status,
    encode_frame,
    pack_deadman_ms,
    pack_voltage_mv,
)

_log = logging.getLogger(__name__)
_Reply = TypeVar('_Reply', DeviceInfo, RigState, Ack)


OPEN_PING_TRIES = 3  # the handshake at open: timeouts tried again (the loop's are not)


class RigError(Exception):
    """Base of every rig communication failure."""


class RigTimeout(RigError):
    """No valid reply within the transaction timeout."""


class RigProtocolError(RigError):
    """The device refused a command, or replied with something malformed or unexpected."""

    def __init__(self, message: str, error: ErrorCode | int | None = None) -> None:
        super().__init__(message)
        self.error = error


class RigEngageRefused(RigProtocolError):
    """ENGAGE acknowledged with the driver still off: the emergency stop is pressed.

    (Or its sense wire is broken.) Not a link fault: nothing is retried.
    """


class RigClockJump(RigError):
    """The rig's clock moved unlike the host's: a firmware reset, or a corrupt reading.

    After a reset the encoder zero is wherever the arm was. Not a link hiccup: the
    activation ends.
    """


class RigDisconnected(RigError):
    """The serial device is missing, was closed, or vanished."""


@dataclass
class LinkStats:
    """Counters of one client; read them from any thread (plain ints, updated under the lock)."""

    transactions: int = 0
    timeouts: int = 0
    nacks: int = 0
    stale_replies: int = 0  # frames that answered an earlier, timed-out request
    last_rtt_s: float = 0.0
    max_rtt_s: float = 0.0


def _decode(kind: type[_Reply], payload: bytes, port: str) -> _Reply:
    try:
        return kind.unpack(payload)
    except ValueError as exc:
        raise RigProtocolError(f'{port}: malformed reply: {exc}') from exc


def read_latency_timer_ms(port: str) -> int | None:
    """The FTDI/usb-serial ``latency_timer`` of a ``ttyUSB*`` port (ms), or ``None``."""
    name = Path(os.path.realpath(port)).name
    if not name.startswith('ttyUSB'):
        return None
    path = Path('/sys/bus/usb-serial/devices') / name / 'latency_timer'
    try:
        return int(path.read_text().strip())
    except (OSError, ValueError):
        return None


class LowLevelClient:
    """Serial client of the rig firmware (``docs/serial_protocol.md``).

    :param port: device path, e.g. ``/dev/ttyUSB0`` or the emulator's ``/tmp/rip_rig``.
    :param timeout_s: bound on one transaction (write plus reply); also bounds lock holding.
    :param baudrate: line rate; ignored by pseudo-terminals and USB CDC devices.
    :param retries: extra attempts after a timeout or corrupt reply, for idempotent commands.
    """

    def __init__(
        self,
        port: str,
        *,
        timeout_s: float = 0.01,
        baudrate: int = 1_000_000,
        retries: int = 0,
    ) -> None:
        if not timeout_s > 0:
            raise ValueError(f'timeout_s must be > 0, got {timeout_s!r}')
        if retries < 0:
            raise ValueError(f'retries must be >= 0, got {retries!r}')
        self.port = port
        self.timeout_s = timeout_s
        self.baudrate = baudrate
        self.retries = retries
        self.stats = LinkStats()
        self.device_info: DeviceInfo | None = None
        self._serial: serial.Serial | None = None
        self._lock = threading.Lock()
        self._parser = FrameParser()
        self._seq = 0

    # -- lifecycle -------------------------------------------------------------------------

    def open(self) -> DeviceInfo:
        """Open the port, check the protocol version; return the device's information."""
        if not os.path.exists(self.port):
            raise RigDisconnected(f'serial port {self.port!r} does not exist')
        latency = read_latency_timer_ms(self.port)
        if latency is not None and latency > 1:
            _log.warning(
                'USB serial latency_timer of %s is %d ms (adds up to that to every reply); '
                'set it to 1: echo 1 | sudo tee /sys/bus/usb-serial/devices/%s/latency_timer',
                self.port,
                latency,
                Path(os.path.realpath(self.port)).name,
            )
        try:
            self._serial = serial.Serial(
                self.port, self.baudrate, timeout=0, write_timeout=self.timeout_s, exclusive=True
            )
        except (serial.SerialException, OSError) as exc:
            raise RigDisconnected(f'cannot open serial port {self.port!r}: {exc}') from exc
        try:
            info = self._first_ping()
        except RigError:
            self.close()
            raise
        if info.protocol_version != PROTOCOL_VERSION:
            self.close()
            raise RigProtocolError(
                f'{self.port}: firmware speaks protocol v{info.protocol_version}, '
                f'this client v{PROTOCOL_VERSION}'
            )
        self.device_info = info
        return info

    def _first_ping(self) -> DeviceInfo:
        """The handshake: a few tries, since a first answer is not time-critical.

        A device just powered up, or an emulator that has just started (or whose machine
        paused), may miss the first deadline; a timeout here is tried again, up to
        ``OPEN_PING_TRIES`` times. Any other error (a NACK, a wrong protocol) is final.
        """
        for attempt in range(1, OPEN_PING_TRIES + 1):
            try:
                return self.ping()
            except RigTimeout:
                if attempt == OPEN_PING_TRIES:
                    raise
                _log.warning(
                    '%s: no answer to the first PING (try %d), asking again', self.port, attempt
                )
        raise AssertionError('unreachable')

    def close(self) -> None:
        """Close the port (idempotent)."""
        with self._lock:
            if self._serial is not None:
                try:
                    self._serial.close()
                except (serial.SerialException, OSError):
                    pass
                self._serial = None

    @property
    def is_open(self) -> bool:
        """Whether the port is open."""
        return self._serial is not None

    def __enter__(self) -> LowLevelClient:
        self.open()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- commands --------------------------------------------------------------------------

    def ping(self) -> DeviceInfo:
        """Version and limits of the firmware."""
        return _decode(DeviceInfo, self._transact(Cmd.PING, b'', retries=self.retries), self.port)

    def get_state(self) -> RigState:
        """Encoder counts, firmware timestamp and status flags."""
        return _decode(
            RigState, self._transact(Cmd.GET_STATE, b'', retries=self.retries), self.port
        )

    def set_voltage(self, voltage_v: float) -> Ack:
        """Command the motor voltage; also the deadman heartbeat. Needs an engaged driver."""
        payload = pack_voltage_mv(round(voltage_v * 1000.0))
        return _decode(
            Ack, self._transact(Cmd.SET_VOLTAGE, payload, retries=self.retries), self.port
        )

    def engage(self) -> Ack:
        """Enable the motor driver at 0 V (clears a latched deadman trip).

        :raises RigEngageRefused: the ACK's status says the driver stayed off (the firmware
            refuses ENGAGE while its emergency-stop input says pressed).
        """
        ack = _decode(Ack, self._transact(Cmd.ENGAGE, b'', retries=self.retries), self.port)
        if not ack.status & Status.ENGAGED:
            raise RigEngageRefused(
                f'{self.port}: the rig refused ENGAGE, its driver stays off: is the emergency '
                'stop pressed (or its sense wire broken)?'
            )
        return ack

    def set_deadman_ms(self, timeout_ms: int) -> Ack:
        """Change the firmware's deadman timeout (10..2000 ms)."""
        reply = self._transact(Cmd.SET_DEADMAN, pack_deadman_ms(timeout_ms), retries=self.retries)
        return _decode(Ack, reply, self.port)

    def disengage_motor(self) -> Ack:
        """Disable the motor driver; safe to call from any thread at any time.

        Waits at most one transaction timeout for the lock (any holder releases it within
        that) and one for the reply, so it returns or raises within ``2 * timeout_s``. Only an
        ACK whose status has the ENGAGED bit clear confirms the motor off; one that has it set
        raises :class:`RigError`. If it raises, the firmware deadman still disengages within
        its own timeout.
        """
        reply = self._transact(Cmd.DISENGAGE, b'', retries=1, lock_timeout_s=self.timeout_s)
        ack = _decode(Ack, reply, self.port)
        if ack.status & Status.ENGAGED:  # the ACK alone is not "off": its status must say so
            raise RigError(
                f'{self.port}: DISENGAGE acknowledged but the rig reports its driver still '
                'engaged (a stuck driver stage?)'
            )
        return ack

    # -- transport -------------------------------------------------------------------------

    def _transact(
        self, cmd: Cmd, payload: bytes, *, retries: int, lock_timeout_s: float = -1.0
    ) -> bytes:
        if not self._lock.acquire(timeout=lock_timeout_s):
            raise RigTimeout(
                f'{self.port}: serial link busy for {lock_timeout_s * 1e3:.1f} ms ({cmd.name})'
            )
        try:
            for attempt in range(retries + 1):
                try:
                    return self._transact_locked(cmd, payload)
                except RigTimeout:
                    if attempt == retries:
                        raise
            raise AssertionError('unreachable')
        finally:
            self._lock.release()

    def _transact_locked(self, cmd: Cmd, payload: bytes) -> bytes:
        port = self._serial
        if port is None:
            raise RigDisconnected(f'serial port {self.port!r} is not open')
        self._seq = (self._seq + 1) & 0xFF
        seq = self._seq
        want = (cmd | REPLY_BIT) & 0xFF
        nack = (Cmd.NACK | REPLY_BIT) & 0xFF
        self._parser.reset()  # bytes of an abandoned reply are no use now
        t0 = time.monotonic()
        deadline = t0 + self.timeout_s
        try:
            port.write(encode_frame(seq, cmd, payload))
            fd = port.fileno()
            while True:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    self.stats.timeouts += 1
                    raise RigTimeout(
                        f'{self.port}: no valid reply to {cmd.name} within '
                        f'{self.timeout_s * 1e3:.1f} ms ({self._parser.pending} bytes pending)'
                    )
                ready, _, _ = select.select([fd], [], [], remaining)
                if not ready:
                    continue
                for frame in self._parser.feed(port.read(4096)):
                    if frame.seq != seq:
                        self.stats.stale_replies += 1
                        continue
                    if frame.cmd == want:
                        rtt = time.monotonic() - t0
                        self.stats.transactions += 1
                        self.stats.last_rtt_s = rtt
                        self.stats.max_rtt_s = max(self.stats.max_rtt_s, rtt)
                        return frame.payload
                    if frame.cmd == nack:
                        self.stats.nacks += 1
                        try:
                            err = Nack.unpack(frame.payload)
                        except ValueError as exc:
                            raise RigProtocolError(f'{self.port}: malformed NACK: {exc}') from exc
                        name = getattr(err.error, 'name', str(err.error))
                        raise RigProtocolError(
                            f'{self.port}: device refused {cmd.name}: {name}', err.error
                        )
                    self.stats.stale_replies += 1
        except serial.SerialTimeoutException as exc:
            raise RigTimeout(f'{self.port}: write of {cmd.name} timed out') from exc
        except (serial.SerialException, OSError, ValueError, TypeError) as exc:
            # pyserial raises ValueError/TypeError when the fd was closed under it.
            raise RigDisconnected(
                f'{self.port}: serial link lost during {cmd.name}: {exc}'
            ) from exc

    @property
    def parser_errors(self) -> int:
        """Corrupt frames dropped by the receive parser so far."""
        return self._parser.n_errors

    @property
    def bytes_skipped(self) -> int:
        """Bytes between frames (line noise, garbage) the receive parser skipped so far."""
        return self._parser.n_bytes_skipped
