"""docs/serial_protocol.md, byte for byte, against both firmwares through a real pty.

The same tests run against the Python emulator and the host build of the C firmware
(``firmware/``): raw frames in, raw frames out, so every NACK, flag and ``last_error`` rule
of the document is checked on the wire, not through the host's client.
"""

from __future__ import annotations

import struct
import time

import pytest
import serial

from rip_control.rig.protocol import (
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
    pack_deadman_ms,
    pack_voltage_mv,
)

pytestmark = [
    pytest.mark.alone,
    pytest.mark.parametrize('firmware', ('python', 'c'), indirect=True),
]

REPLY_TIMEOUT_S = 0.5


class Wire:
    """Raw frames over the pty: what a firmware author's bench test would do."""

    def __init__(self, link: str) -> None:
        self.port = serial.Serial(link, baudrate=1_000_000, timeout=0)
        self.parser = FrameParser()
        self.seq = 0

    def send(self, data: bytes) -> None:
        self.port.write(data)

    def frame(self, cmd: int, payload: bytes = b'') -> bytes:
        self.seq = (self.seq + 1) & 0xFF
        return encode_frame(self.seq, cmd, payload)

    def replies(self, n: int, timeout_s: float = REPLY_TIMEOUT_S) -> list[Frame]:
        """The next ``n`` reply frames (fails if they do not all come in time)."""
        frames: list[Frame] = []
        deadline = time.monotonic() + timeout_s
        while len(frames) < n:
            assert time.monotonic() < deadline, f'only {len(frames)} of {n} replies came'
            data = self.port.read(4096)
            if data:
                frames += self.parser.feed(data)
            else:
                time.sleep(0.0005)
        return frames

    def silent_for(self, seconds: float) -> bool:
        """No byte at all arrives for ``seconds`` (a reply that must not come)."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if self.port.read(4096):
                return False
            time.sleep(0.001)
        return True

    def request(self, cmd: int, payload: bytes = b'') -> Frame:
        wire = self.frame(cmd, payload)
        self.send(wire)
        (reply,) = self.replies(1)
        assert reply.seq == self.seq, 'the reply echoes the request seq'
        return reply

    def state(self) -> RigState:
        reply = self.request(Cmd.GET_STATE)
        assert reply.cmd == Cmd.GET_STATE | 0x80
        return RigState.unpack(reply.payload)

    def ack(self, cmd: int, payload: bytes = b'') -> Ack:
        reply = self.request(cmd, payload)
        assert reply.cmd == cmd | 0x80, f'expected an ACK of {cmd:#x}, got {reply}'
        return Ack.unpack(reply.payload)

    def nack(self, cmd: int, payload: bytes = b'') -> Nack:
        reply = self.request(cmd, payload)
        assert reply.cmd == 0xFF, f'expected a NACK, got {reply}'
        return Nack.unpack(reply.payload)

    def close(self) -> None:
        self.port.close()


@pytest.fixture
def wire(emulator):
    w = Wire(str(emulator.link))
    yield w
    w.close()


def test_ping_reports_the_protocol_its_deadman_and_limits(wire, firmware):
    reply = wire.request(Cmd.PING)
    assert reply.cmd == 0x81
    info = DeviceInfo.unpack(reply.payload)
    assert (info.protocol_version, info.deadman_timeout_ms) == (1, 100)
    assert (info.counts_per_rev, info.max_voltage_mv) == (2048, 10000)
    assert info.firmware_build == {'python': 1, 'c': 2}[firmware]


@pytest.mark.parametrize('cmd', [0x00, 0x07, 0x42, 0x7F, 0x80, 0x81, 0xFF])
def test_an_unknown_command_is_nacked_and_reported_once(wire, cmd):
    nack = wire.nack(cmd)
    assert (nack.error, nack.command) == (ErrorCode.UNKNOWN_COMMAND, cmd)
    assert wire.state().last_error == ErrorCode.UNKNOWN_COMMAND
    assert wire.state().last_error == ErrorCode.NONE, 'cleared once reported'


WRONG_LENGTHS = sorted(
    {
        (cmd, n)
        for cmd, size in REQUEST_PAYLOAD_SIZE.items()
        for n in (size - 1, size + 1, 32)
        if n >= 0
    },
)


@pytest.mark.parametrize(('cmd', 'length'), WRONG_LENGTHS)
def test_a_wrong_payload_length_is_nacked_and_never_acted_on(wire, cmd, length):
    wire.ack(Cmd.SET_DEADMAN, pack_deadman_ms(1500))
    engage = cmd is not Cmd.ENGAGE  # ENGAGE's own case starts disengaged
    if engage:
        wire.ack(Cmd.ENGAGE)
        wire.ack(Cmd.SET_VOLTAGE, pack_voltage_mv(700))
    try:
        nack = wire.nack(cmd, bytes([0x40]) * length)
        assert (nack.error, nack.command) == (ErrorCode.BAD_LENGTH, cmd)
        state = wire.state()
        assert state.last_error == ErrorCode.BAD_LENGTH
        assert state.engaged == engage, 'a wrong ENGAGE/DISENGAGE must not act'
        assert state.applied_voltage_mv == (700 if engage else 0), 'nor a wrong SET_VOLTAGE'
        info = DeviceInfo.unpack(wire.request(Cmd.PING).payload)
        assert info.deadman_timeout_ms == 1500, 'nor a wrong SET_DEADMAN'
    finally:
        wire.ack(Cmd.DISENGAGE)


def test_voltage_while_disengaged_is_nacked_and_the_motor_stays_off(wire):
    nack = wire.nack(Cmd.SET_VOLTAGE, pack_voltage_mv(4000))
    assert nack.error == ErrorCode.NOT_ENGAGED
    state = wire.state()
    assert (state.engaged, state.applied_voltage_mv) == (False, 0)
    assert state.last_error == ErrorCode.NOT_ENGAGED


@pytest.mark.parametrize('ms', [0, 9, 2001, 65535])
def test_a_deadman_outside_10_to_2000_ms_is_refused(wire, ms):
    nack = wire.nack(Cmd.SET_DEADMAN, pack_deadman_ms(ms))
    assert (nack.error, nack.command) == (ErrorCode.OUT_OF_RANGE, Cmd.SET_DEADMAN)
    assert wire.state().last_error == ErrorCode.OUT_OF_RANGE
    assert DeviceInfo.unpack(wire.request(Cmd.PING).payload).deadman_timeout_ms == 100


@pytest.mark.parametrize('ms', [10, 2000])
def test_the_deadman_range_ends_are_accepted_and_reported_by_ping(wire, ms):
    wire.ack(Cmd.SET_DEADMAN, pack_deadman_ms(ms))
    assert DeviceInfo.unpack(wire.request(Cmd.PING).payload).deadman_timeout_ms == ms


def test_an_ack_reports_the_status_and_the_pending_error(wire):
    wire.nack(0x42)
    ack = wire.ack(Cmd.ENGAGE)
    assert ack.status & Status.ENGAGED and ack.last_error == ErrorCode.UNKNOWN_COMMAND
    ack = wire.ack(Cmd.DISENGAGE)
    assert not ack.status & Status.ENGAGED
    assert ack.last_error == ErrorCode.UNKNOWN_COMMAND, 'an ACK does not clear it'
    assert wire.state().last_error == ErrorCode.UNKNOWN_COMMAND
    assert wire.ack(Cmd.DISENGAGE).last_error == ErrorCode.NONE, 'always accepted'


@pytest.mark.parametrize(
    ('mv', 'applied', 'clamped'),
    [
        (-25000, -10000, True),
        (25000, 10000, True),
        (-32768, -10000, True),
        (10001, 10000, True),
        (10000, 10000, False),
        (-10000, -10000, False),
    ],
)
def test_voltage_beyond_the_limit_is_clamped_and_flagged_until_an_in_range_one(
    wire, mv, applied, clamped
):
    wire.ack(Cmd.SET_DEADMAN, pack_deadman_ms(1000))
    wire.ack(Cmd.ENGAGE)
    try:
        ack = wire.ack(Cmd.SET_VOLTAGE, pack_voltage_mv(mv))
        assert bool(ack.status & Status.VOLTAGE_CLAMPED) == clamped
        assert wire.state().applied_voltage_mv == applied
        ack = wire.ack(Cmd.SET_VOLTAGE, pack_voltage_mv(1500))
        assert not ack.status & Status.VOLTAGE_CLAMPED
        assert wire.state().applied_voltage_mv == 1500
    finally:
        wire.ack(Cmd.DISENGAGE)
    state = wire.state()
    assert (state.engaged, state.applied_voltage_mv) == (False, 0)


def test_a_corrupt_frame_gets_no_reply_and_is_reported_as_bad_crc(wire):
    bad = bytearray(wire.frame(Cmd.ENGAGE))
    bad[-1] ^= 0x01
    wire.send(bytes(bad))
    assert wire.silent_for(0.1)
    state = wire.state()
    assert not state.engaged, 'a corrupt ENGAGE never engages'
    assert state.last_error == ErrorCode.BAD_CRC


def test_an_impossible_length_is_dropped_and_the_next_frame_is_served(wire):
    good = wire.frame(Cmd.GET_STATE)
    wire.send(b'\xa5\x5a\x21\x00' + good)  # len 33: discard the sync byte, scan again
    (reply,) = wire.replies(1)
    assert reply.seq == wire.seq and RigState.unpack(reply.payload).last_error == ErrorCode.BAD_CRC


def test_a_frame_inside_a_bad_candidate_is_recovered(wire):
    # A sync pair and a long length swallow the real frame; the CRC fails, one byte is
    # dropped at a time, and the real frame inside is found and answered.
    good = wire.frame(Cmd.PING)
    filler = bytes(range(1, 40 - len(good)))
    wire.send(b'\xa5\x5a\x20\x01\x01' + good + filler)
    (reply,) = wire.replies(1)
    assert reply.cmd == 0x81 and reply.seq == wire.seq


def test_garbage_split_frames_and_stale_bytes_never_stop_the_service(wire):
    import random

    rng = random.Random(7)
    for i in range(30):
        junk = bytes(b for b in rng.randbytes(rng.randrange(1, 50)) if b != 0xA5)
        frame = wire.frame(Cmd.GET_STATE)
        data = junk + frame
        cut = rng.randrange(1, len(data))
        wire.send(data[:cut])
        time.sleep(0.001 * (i % 3))  # a frame split across reads, sometimes
        wire.send(data[cut:])
        (reply,) = wire.replies(1)
        assert reply.seq == wire.seq
    wire.ack(Cmd.SET_DEADMAN, pack_deadman_ms(2000))
    wire.ack(Cmd.ENGAGE)
    wire.send(b'\xa5\x5a\x02\x09\x03\x88')  # half a SET_VOLTAGE, then nothing more
    assert wire.silent_for(0.05)
    wire.send(b'\xa5')  # and a stray sync byte before the next frame
    state = wire.state()  # found after the stale bytes fail their CRC: served again
    assert state.engaged and state.applied_voltage_mv == 0, 'the half frame never acted'
    assert not wire.ack(Cmd.DISENGAGE).status & Status.ENGAGED


def test_pipelined_requests_are_answered_in_order(wire):
    frames = [wire.frame(Cmd.GET_STATE) for _ in range(5)] + [wire.frame(Cmd.PING)]
    wire.send(b''.join(frames))
    replies = wire.replies(6)
    assert [r.seq for r in replies] == [f[3] for f in frames]
    assert replies[-1].cmd == 0x81


def test_a_shorter_deadman_trips_on_its_own_timeout_and_engage_clears_the_latch(wire):
    # The heartbeat was processed between its send and its ACK, each state between its
    # request's send and its reply: bracketing keeps the bounds free of reply delays.
    wire.ack(Cmd.SET_DEADMAN, pack_deadman_ms(30))
    wire.ack(Cmd.ENGAGE)
    heartbeat_sent = time.monotonic()
    wire.ack(Cmd.SET_VOLTAGE, pack_voltage_mv(500))
    heartbeat_acked = last_engaged_sent = time.monotonic()
    while True:
        sent = time.monotonic()
        state = wire.state()
        got = time.monotonic()
        if not state.engaged:
            break
        last_engaged_sent = sent
        assert got - heartbeat_sent < 0.5, 'the deadman never tripped'
    assert state.status & Status.DEADMAN_TRIPPED and state.applied_voltage_mv == 0
    assert got - heartbeat_sent >= 0.030, 'tripped before its timeout'
    assert last_engaged_sent - heartbeat_acked <= 0.030 + 0.02, 'tripped late'
    assert not wire.ack(Cmd.ENGAGE).status & Status.DEADMAN_TRIPPED
    wire.ack(Cmd.DISENGAGE)


def test_driving_the_arm_into_its_cable_stop_sets_arm_limit(wire):
    wire.ack(Cmd.SET_DEADMAN, pack_deadman_ms(500))
    wire.ack(Cmd.ENGAGE)
    try:
        deadline = time.monotonic() + 3.0
        while not wire.ack(Cmd.SET_VOLTAGE, pack_voltage_mv(6000)).status & Status.ARM_LIMIT:
            assert time.monotonic() < deadline, 'the arm never reached its stop'
            time.sleep(0.01)
        arm = wire.state().arm_counts
    finally:
        wire.ack(Cmd.DISENGAGE)
    assert arm == pytest.approx(2.0 * 2048 / (2 * 3.141592653589793), abs=3)


def test_state_is_sampled_at_its_timestamp_and_applied_voltage_follows_engage(wire):
    a = wire.state()
    time.sleep(0.05)
    b = wire.state()
    assert 0.045 <= (b.timestamp_us - a.timestamp_us) / 1e6 <= 0.1
    wire.ack(Cmd.ENGAGE)
    wire.ack(Cmd.SET_VOLTAGE, pack_voltage_mv(-700))
    assert wire.state().applied_voltage_mv == -700
    wire.ack(Cmd.DISENGAGE)
    assert wire.state().applied_voltage_mv == 0


def test_a_stuck_serial_handler_still_has_its_motor_stopped_by_the_deadman(start_emulator):
    # --freeze-after: the firmware stops serving (the C firmware's main loop hangs for good);
    # the deadman runs from the timer, so the engaged motor still stops on time.
    emu = start_emulator('--events', '--freeze-after', '1.0')
    wire = Wire(str(emu.link))
    try:
        wire.ack(Cmd.ENGAGE)
        last_sent = last_acked = time.monotonic()
        deadline = last_sent + 5.0
        while time.monotonic() < deadline:  # heartbeats every ~10 ms until it stops answering
            sent = time.monotonic()
            wire.send(wire.frame(Cmd.SET_VOLTAGE, pack_voltage_mv(300)))
            try:
                wire.replies(1, timeout_s=0.5)  # a slow reply is not yet a frozen firmware
            except AssertionError:
                break
            last_sent, last_acked = sent, time.monotonic()
            time.sleep(0.01)
        else:
            pytest.fail('the firmware never froze')
        trip = emu.wait_for_event('disengaged deadman', timeout_s=2.0)
    finally:
        wire.close()
    assert trip is not None, f'no deadman trip: {emu.events()}'
    assert trip - last_sent >= 0.1, 'tripped before its timeout'
    assert trip - last_acked <= 0.1 + 0.05, 'tripped late'


def test_a_state_is_as_old_as_the_rigs_sensing_latency(start_emulator, tmp_path):
    # sensing_latency_s: a reply reports the state that long ago, with that sample's time.
    # With 3 s of latency, every reply in the first seconds reports the very first sample.
    rig = tmp_path / 'slow_rig.yaml'
    rig.write_text('rig:\n  sensing_latency_s: 3.0\n')
    emu = start_emulator('--params', str(rig))
    wire = Wire(str(emu.link))
    try:
        first = wire.state()
        time.sleep(0.2)  # the span being measured
        second = wire.state()
    finally:
        wire.close()
    assert first.timestamp_us == second.timestamp_us == 500  # the first 0.5 ms physics step


def test_a_ping_frame_is_exactly_as_the_document_draws_it(wire):
    wire.send(bytes.fromhex('a55a0007012a45'))  # len 0, seq 7, PING, CRC-16 of 00 07 01
    (reply,) = wire.replies(1)
    assert (reply.seq, reply.cmd, len(reply.payload)) == (7, 0x81, 9)
    assert struct.unpack('<BHHHH', reply.payload)[0] == 1
