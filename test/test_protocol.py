"""The framed serial protocol: encoding, parsing, resynchronisation, fuzzing."""

import random
import struct

from hypothesis import given, settings
from hypothesis import strategies as st
import pytest

from rip_control.rig.protocol import (
    MAX_PAYLOAD,
    Ack,
    Cmd,
    DeviceInfo,
    ErrorCode,
    FrameParser,
    Nack,
    RigState,
    Status,
    crc16,
    crc16_ccitt,
    encode_frame,
    pack_deadman_ms,
    pack_voltage_mv,
    unpack_deadman_ms,
    unpack_voltage_mv,
)


def test_crc_matches_the_ccitt_false_check_value():
    assert crc16_ccitt(b'123456789') == 0x29B1
    assert crc16(b'123456789') == 0x29B1


def test_table_crc_equals_bitwise_crc_on_random_data():
    rng = random.Random(0)
    for _ in range(200):
        data = rng.randbytes(rng.randrange(0, 40))
        assert crc16(data) == crc16_ccitt(data)


@pytest.mark.parametrize(
    'payload_obj',
    [
        DeviceInfo(1, 100, 2048, 10000, 7),
        RigState(
            -123456, 789, 0xFFFFFFFF, Status.ENGAGED | Status.ARM_LIMIT, ErrorCode.BAD_CRC, -5000
        ),
        Ack(Status.DEADMAN_TRIPPED, ErrorCode.NONE),
        Nack(ErrorCode.UNKNOWN_COMMAND, 0x42),
    ],
)
def test_reply_payloads_round_trip_through_a_frame(payload_obj):
    wire = encode_frame(200, 0x81, payload_obj.pack())
    (frame,) = FrameParser().feed(wire)
    assert frame.seq == 200 and frame.cmd == 0x81
    assert type(payload_obj).unpack(frame.payload) == payload_obj


@pytest.mark.parametrize('cmd', list(Cmd))
def test_every_command_frames_and_parses(cmd):
    payload = {Cmd.SET_VOLTAGE: pack_voltage_mv(-2500), Cmd.SET_DEADMAN: pack_deadman_ms(150)}
    wire = encode_frame(7, cmd, payload.get(cmd, b''))
    (frame,) = FrameParser().feed(wire)
    assert (frame.seq, frame.cmd, frame.payload) == (7, cmd, payload.get(cmd, b''))


def test_request_payload_helpers_round_trip_and_saturate():
    assert unpack_voltage_mv(pack_voltage_mv(-2500)) == -2500
    assert unpack_voltage_mv(pack_voltage_mv(10**6)) == 32767
    assert unpack_deadman_ms(pack_deadman_ms(250)) == 250


def test_wrong_payload_size_is_a_value_error_naming_the_size():
    with pytest.raises(ValueError, match='GET_STATE reply payload must be 16 bytes, got 3'):
        RigState.unpack(b'abc')


def test_encode_rejects_oversized_payload_and_bad_seq():
    with pytest.raises(ValueError, match='exceeds MAX_PAYLOAD'):
        encode_frame(0, 1, bytes(MAX_PAYLOAD + 1))
    with pytest.raises(ValueError, match='seq must be 0..255, got 256'):
        encode_frame(256, 1)


def test_frames_split_into_single_bytes_are_reassembled():
    wire = encode_frame(1, Cmd.GET_STATE) + encode_frame(2, Cmd.PING)
    parser = FrameParser()
    frames = [f for b in wire for f in parser.feed(bytes([b]))]
    assert [f.seq for f in frames] == [1, 2]


def test_parser_resynchronises_after_garbage_and_counts_what_it_skipped():
    parser = FrameParser()
    frames = parser.feed(b'\x00\xff\xa5garbage' + encode_frame(9, Cmd.ENGAGE))
    assert [f.seq for f in frames] == [9]
    assert parser.n_bytes_skipped == len(b'\x00\xff\xa5garbage')


def test_bad_crc_frame_is_dropped_counted_and_the_next_frame_survives():
    bad = bytearray(encode_frame(3, Cmd.SET_VOLTAGE, pack_voltage_mv(1000)))
    bad[6] ^= 0x01
    parser = FrameParser()
    frames = parser.feed(bytes(bad) + encode_frame(4, Cmd.GET_STATE))
    assert [f.seq for f in frames] == [4]
    assert parser.n_crc_errors == 1


def test_impossible_length_is_counted_as_length_error():
    parser = FrameParser()
    body = bytes((MAX_PAYLOAD + 1, 0, 1))
    frames = parser.feed(b'\xa5\x5a' + body + bytes(40) + encode_frame(5, Cmd.PING))
    assert [f.seq for f in frames] == [5]
    assert parser.n_length_errors == 1


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=300))
def test_random_bytes_never_crash_the_parser(data):
    parser = FrameParser()
    for frame in parser.feed(data):
        assert len(frame.payload) <= MAX_PAYLOAD
    assert parser.pending <= len(data)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=100), st.binary(max_size=MAX_PAYLOAD), st.integers(0, 255))
def test_a_valid_frame_after_any_garbage_is_recovered(garbage, payload, seq):
    wire = encode_frame(seq, 0x55, payload)
    # Trailing padding completes any false frame the garbage may have started.
    frames = FrameParser().feed(garbage + wire + bytes(MAX_PAYLOAD + 8))
    assert any(f.seq == seq and f.cmd == 0x55 and f.payload == payload for f in frames)


@settings(max_examples=200, deadline=None)
@given(st.binary(min_size=1, max_size=MAX_PAYLOAD), st.integers(0, 8 * (MAX_PAYLOAD + 7) - 1))
def test_any_single_bit_flip_is_rejected_by_the_crc(payload, bit):
    wire = bytearray(encode_frame(1, 0x10, payload))
    bit %= 8 * len(wire)
    if bit < 16:  # flips in the sync bytes just make the frame unfindable
        return
    wire[bit // 8] ^= 1 << (bit % 8)
    frames = FrameParser().feed(bytes(wire) + bytes(MAX_PAYLOAD + 8))
    assert not any(f.payload == payload and f.cmd == 0x10 for f in frames) or (
        struct.pack('<H', crc16(bytes(wire[2:-2]))) == bytes(wire[-2:])
    )
