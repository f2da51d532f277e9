"""Framed binary serial protocol between the host and the rig firmware.

The normative description for firmware authors is ``docs/serial_protocol.md``; this module is
the host-side (and emulator-side) implementation of it. Nothing here does I/O: frames are
built with :func:`encode_frame` and recovered from an arbitrary byte stream by
:class:`FrameParser`, which resynchronises after garbage and counts what it dropped.

Frame layout (all integers little-endian)::

    0xA5 0x5A | len:u8 | seq:u8 | cmd:u8 | payload[len] | crc:u16

``crc`` is CRC-16/CCITT-FALSE over ``len, seq, cmd, payload``. Replies echo ``seq`` and set
bit 7 of ``cmd``; an error reply uses :data:`Cmd.NACK` and carries an :class:`ErrorCode`.
"""

from __future__ import annotations

from dataclasses import dataclass
import enum
import struct

PROTOCOL_VERSION = 1
SYNC = b'\xa5\x5a'
MAX_PAYLOAD = 32
HEADER_SIZE = 5  # sync (2) + len + seq + cmd
CRC_SIZE = 2
MIN_FRAME_SIZE = HEADER_SIZE + CRC_SIZE
REPLY_BIT = 0x80


class Cmd(enum.IntEnum):
    """Command codes (host to device). A reply uses ``cmd | REPLY_BIT``."""

    PING = 0x01
    GET_STATE = 0x02
    SET_VOLTAGE = 0x03
    ENGAGE = 0x04
    DISENGAGE = 0x05
    SET_DEADMAN = 0x06
    NACK = 0x7F  # only ever sent by the device, as 0xFF


class ErrorCode(enum.IntEnum):
    """Error codes carried by a NACK and reported as the device's ``last_error``."""

    NONE = 0
    BAD_CRC = 1
    UNKNOWN_COMMAND = 2
    BAD_LENGTH = 3
    NOT_ENGAGED = 4
    OUT_OF_RANGE = 5


class Status(enum.IntFlag):
    """Status flag bits reported with every state."""

    ENGAGED = 0x01
    DEADMAN_TRIPPED = 0x02  # latched until the next ENGAGE
    ARM_LIMIT = 0x04  # the arm is at its cable hard stop
    VOLTAGE_CLAMPED = 0x08  # the last commanded voltage exceeded the motor limit


# Payload formats, per command (request) and per reply.
_PING_REPLY = struct.Struct('<BHHHH')  # protocol, deadman_ms, counts_per_rev, max_mv, fw_build
_STATE_REPLY = struct.Struct('<iiIBBh')  # arm, pend, t_us, status, last_error, applied_mv
_SET_VOLTAGE = struct.Struct('<h')  # millivolts
_SET_DEADMAN = struct.Struct('<H')  # milliseconds
_ACK_REPLY = struct.Struct('<BB')  # status, last_error
_NACK_REPLY = struct.Struct('<BB')  # error code, offending command


def crc16_ccitt(data: bytes, crc: int = 0xFFFF) -> int:
    """CRC-16/CCITT-FALSE (poly 0x1021, init 0xFFFF, no reflection, no xor-out).

    Check value: ``crc16_ccitt(b'123456789') == 0x29B1``.
    """
    for byte in data:
        crc ^= byte << 8
        for _ in range(8):
            crc = ((crc << 1) ^ 0x1021) & 0xFFFF if crc & 0x8000 else (crc << 1) & 0xFFFF
    return crc


_CRC_TABLE = tuple(crc16_ccitt(bytes([i]), 0) for i in range(256))


def crc16(data: bytes) -> int:
    """Table-driven :func:`crc16_ccitt` (same result, ~8x faster)."""
    crc = 0xFFFF
    for byte in data:
        crc = ((crc << 8) & 0xFFFF) ^ _CRC_TABLE[((crc >> 8) ^ byte) & 0xFF]
    return crc


@dataclass(frozen=True)
class Frame:
    """One decoded frame."""

    seq: int
    cmd: int
    payload: bytes


def encode_frame(seq: int, cmd: int, payload: bytes = b'') -> bytes:
    """Build the wire bytes of one frame.

    :param seq: sequence number, 0..255; a reply echoes the request's.
    :param cmd: command code, 0..255.
    :param payload: at most :data:`MAX_PAYLOAD` bytes.
    """
    if not 0 <= seq <= 0xFF:
        raise ValueError(f'seq must be 0..255, got {seq}')
    if not 0 <= cmd <= 0xFF:
        raise ValueError(f'cmd must be 0..255, got {cmd}')
    if len(payload) > MAX_PAYLOAD:
        raise ValueError(f'payload of {len(payload)} bytes exceeds MAX_PAYLOAD={MAX_PAYLOAD}')
    body = bytes((len(payload), seq, cmd)) + payload
    return SYNC + body + struct.pack('<H', crc16(body))


class FrameParser:
    """Recovers frames from a byte stream that may contain garbage, truncation and bit errors.

    Feed it whatever bytes arrived; it returns the complete, CRC-valid frames and keeps any
    incomplete tail for the next call. Bytes that cannot start a valid frame are skipped one
    at a time (so a sync pattern inside garbage costs at most one CRC check) and counted.
    """

    def __init__(self) -> None:
        self._buf = bytearray()
        self.n_frames = 0
        self.n_crc_errors = 0
        self.n_length_errors = 0
        self.n_bytes_skipped = 0

    @property
    def n_errors(self) -> int:
        """Total framing errors seen (bad CRC plus impossible lengths)."""
        return self.n_crc_errors + self.n_length_errors

    @property
    def pending(self) -> int:
        """Bytes held back waiting for the rest of a frame."""
        return len(self._buf)

    def reset(self) -> None:
        """Forget any partial frame (after a timeout, the rest is never coming)."""
        self.n_bytes_skipped += len(self._buf)
        self._buf.clear()

    def feed(self, data: bytes) -> list[Frame]:
        """Add received bytes; return the frames completed by them, oldest first."""
        buf = self._buf
        buf += data
        frames: list[Frame] = []
        while True:
            start = buf.find(SYNC)
            if start < 0:
                # Keep a trailing 0xA5: it may be the first half of a sync pair.
                keep = 1 if buf[-1:] == SYNC[:1] else 0
                self.n_bytes_skipped += len(buf) - keep
                del buf[: len(buf) - keep]
                return frames
            if start:
                self.n_bytes_skipped += start
                del buf[:start]
            if len(buf) < HEADER_SIZE:
                return frames
            length = buf[2]
            if length > MAX_PAYLOAD:
                self.n_length_errors += 1
                self.n_bytes_skipped += 1
                del buf[:1]
                continue
            total = HEADER_SIZE + length + CRC_SIZE
            if len(buf) < total:
                return frames
            body = bytes(buf[2 : HEADER_SIZE + length])
            (crc,) = struct.unpack_from('<H', buf, HEADER_SIZE + length)
            if crc != crc16(body):
                self.n_crc_errors += 1
                self.n_bytes_skipped += 1
                del buf[:1]
                continue
            frames.append(Frame(seq=buf[3], cmd=buf[4], payload=body[3:]))
            self.n_frames += 1
            del buf[:total]


# ---- typed payloads -------------------------------------------------------------------------


@dataclass(frozen=True)
class DeviceInfo:
    """Reply to PING."""

    protocol_version: int
    deadman_timeout_ms: int
    counts_per_rev: int
    max_voltage_mv: int
    firmware_build: int

    def pack(self) -> bytes:
        """Wire payload."""
        return _PING_REPLY.pack(
            self.protocol_version,
            self.deadman_timeout_ms,
            self.counts_per_rev,
            self.max_voltage_mv,
            self.firmware_build,
        )

    @classmethod
    def unpack(cls, payload: bytes) -> DeviceInfo:
        """Parse a PING reply payload; raises ``ValueError`` on a wrong size."""
        _check_size('PING reply', payload, _PING_REPLY.size)
        return cls(*_PING_REPLY.unpack(payload))


@dataclass(frozen=True)
class RigState:
    """Reply to GET_STATE: raw encoder counts, firmware time and status."""

    arm_counts: int
    pendulum_counts: int
    timestamp_us: int  # u32, wraps every ~71.6 minutes
    status: Status
    last_error: ErrorCode | int
    applied_voltage_mv: int

    @property
    def engaged(self) -> bool:
        """Motor driver enabled."""
        return bool(self.status & Status.ENGAGED)

    def pack(self) -> bytes:
        """Wire payload."""
        return _STATE_REPLY.pack(
            self.arm_counts,
            self.pendulum_counts,
            self.timestamp_us & 0xFFFFFFFF,
            int(self.status),
            int(self.last_error),
            self.applied_voltage_mv,
        )

    @classmethod
    def unpack(cls, payload: bytes) -> RigState:
        """Parse a GET_STATE reply payload; raises ``ValueError`` on a wrong size."""
        _check_size('GET_STATE reply', payload, _STATE_REPLY.size)
        arm, pend, t_us, status, err, mv = _STATE_REPLY.unpack(payload)
        return cls(arm, pend, t_us, Status(status), _error_code(err), mv)


@dataclass(frozen=True)
class Ack:
    """Reply to SET_VOLTAGE, ENGAGE, DISENGAGE and SET_DEADMAN."""

    status: Status
    last_error: ErrorCode | int

    def pack(self) -> bytes:
        """Wire payload."""
        return _ACK_REPLY.pack(int(self.status), int(self.last_error))

    @classmethod
    def unpack(cls, payload: bytes) -> Ack:
        """Parse an ACK payload; raises ``ValueError`` on a wrong size."""
        _check_size('ACK', payload, _ACK_REPLY.size)
        status, err = _ACK_REPLY.unpack(payload)
        return cls(Status(status), _error_code(err))


@dataclass(frozen=True)
class Nack:
    """Error reply: what went wrong with which command."""

    error: ErrorCode | int
    command: int

    def pack(self) -> bytes:
        """Wire payload."""
        return _NACK_REPLY.pack(int(self.error), self.command)

    @classmethod
    def unpack(cls, payload: bytes) -> Nack:
        """Parse a NACK payload; raises ``ValueError`` on a wrong size."""
        _check_size('NACK', payload, _NACK_REPLY.size)
        err, cmd = _NACK_REPLY.unpack(payload)
        return cls(_error_code(err), cmd)


def pack_voltage_mv(millivolts: int) -> bytes:
    """SET_VOLTAGE payload (signed millivolts, saturated to the int16 range)."""
    return _SET_VOLTAGE.pack(max(-32768, min(32767, int(millivolts))))


def unpack_voltage_mv(payload: bytes) -> int:
    """Parse a SET_VOLTAGE payload."""
    _check_size('SET_VOLTAGE', payload, _SET_VOLTAGE.size)
    return int(_SET_VOLTAGE.unpack(payload)[0])


def pack_deadman_ms(timeout_ms: int) -> bytes:
    """SET_DEADMAN payload."""
    return _SET_DEADMAN.pack(int(timeout_ms))


def unpack_deadman_ms(payload: bytes) -> int:
    """Parse a SET_DEADMAN payload."""
    _check_size('SET_DEADMAN', payload, _SET_DEADMAN.size)
    return int(_SET_DEADMAN.unpack(payload)[0])


REQUEST_PAYLOAD_SIZE = {
    Cmd.PING: 0,
    Cmd.GET_STATE: 0,
    Cmd.SET_VOLTAGE: _SET_VOLTAGE.size,
    Cmd.ENGAGE: 0,
    Cmd.DISENGAGE: 0,
    Cmd.SET_DEADMAN: _SET_DEADMAN.size,
}


def _check_size(what: str, payload: bytes, size: int) -> None:
    if len(payload) != size:
        raise ValueError(f'{what} payload must be {size} bytes, got {len(payload)}')


def _error_code(value: int) -> ErrorCode | int:
    try:
        return ErrorCode(value)
    except ValueError:
        return value
