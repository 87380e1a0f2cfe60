"""Frames and headers: any chunking gives back the frames that were sent; a size
over socket.request.max.bytes or below zero closes the connection (Kafka's
NetworkReceive); request header v1/v2 and response header v0/v1 round trip
through kio."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rafka.protocol.errors import InvalidFrameSize, MalformedRequestHeader, ProtocolError
from rafka.protocol.framing import (SOCKET_REQUEST_MAX_BYTES_DEFAULT, FrameDecoder,
                                    decode_request_header, decode_response_header,
                                    encode_frame, encode_request_header, encode_response_header,
                                    request_header)

pytestmark = pytest.mark.core


def feed_in_chunks(decoder: FrameDecoder, data: bytes, cuts: list[int]) -> list[bytes]:
    frames, start = [], 0
    for cut in sorted(set(c % (len(data) + 1) for c in cuts)) + [len(data)]:
        frames += decoder.feed(data[start:cut])
        start = cut
    return frames


@settings(max_examples=200)
@given(payloads=st.lists(st.binary(max_size=300), max_size=8),
       cuts=st.lists(st.integers(min_value=0, max_value=10_000), max_size=30))
def test_frames__any_chunking__decode_to_the_frames_sent(payloads, cuts):
    decoder = FrameDecoder(socket_request_max_bytes=300)
    data = b"".join(encode_frame(p) for p in payloads)
    assert feed_in_chunks(decoder, data, cuts) == payloads
    assert decoder.buffered_bytes == 0


def test_frames__byte_by_byte__partial_frame_stays_buffered():
    decoder = FrameDecoder()
    data = encode_frame(b"hello") + encode_frame(b"") + encode_frame(b"x")[:3]
    frames = [f for i in range(len(data)) for f in decoder.feed(data[i:i + 1])]
    assert frames == [b"hello", b""]
    assert decoder.buffered_bytes == 3
    assert decoder.feed(b"\x01x") == [b"x"]


def test_frame_size__exactly_the_max__accepted():
    decoder = FrameDecoder(socket_request_max_bytes=10)
    assert decoder.feed(encode_frame(b"a" * 10)) == [b"a" * 10]


def test_frame_size__over_the_max__invalid_frame_size_before_buffering_the_body():
    decoder = FrameDecoder(socket_request_max_bytes=10)
    with pytest.raises(InvalidFrameSize, match=r"Invalid receive \(size = 11 larger than 10\)"):
        decoder.feed((11).to_bytes(4, "big"))
    assert decoder.buffered_bytes == 0
    with pytest.raises(InvalidFrameSize):      # the connection is done
        decoder.feed(encode_frame(b"ok"))


def test_frame_size__negative__invalid_frame_size():
    decoder = FrameDecoder()
    with pytest.raises(InvalidFrameSize, match=r"Invalid receive \(size = -1\)$"):
        decoder.feed(b"\xff\xff\xff\xff")


def test_frame_size__default_max_is_kafkas_socket_request_max_bytes():
    assert FrameDecoder().socket_request_max_bytes == SOCKET_REQUEST_MAX_BYTES_DEFAULT == 104857600
    decoder = FrameDecoder()
    with pytest.raises(InvalidFrameSize):
        decoder.feed((104857601).to_bytes(4, "big"))


def test_protocol_errors__are_kafkas_invalid_request():
    error = InvalidFrameSize("x")
    assert isinstance(error, ProtocolError) and error.kafka_name == "INVALID_REQUEST"
    assert error.code == 42 and not error.retriable


@given(header_version=st.sampled_from([1, 2]), api_key=st.integers(-2**15, 2**15 - 1),
       api_version=st.integers(-2**15, 2**15 - 1), correlation_id=st.integers(-2**31, 2**31 - 1),
       client_id=st.none() | st.text(max_size=50), body=st.binary(max_size=20))
def test_request_header__v1_v2__round_trip(header_version, api_key, api_version,
                                           correlation_id, client_id, body):
    header = request_header(header_version=header_version, api_key=api_key, api_version=api_version,
                            correlation_id=correlation_id, client_id=client_id)
    encoded = encode_request_header(header)
    decoded, body_offset = decode_request_header(encoded + body, header_version=header_version)
    assert decoded == header and type(decoded) is type(header)
    assert body_offset == len(encoded)


def test_request_header_v2__client_id_is_a_legacy_string_then_tagged_fields():
    header = request_header(header_version=2, api_key=18, api_version=3, correlation_id=7, client_id="ab")
    assert encode_request_header(header) == bytes.fromhex("0012 0003 00000007 0002 6162 00")


def test_request_header_v2__unknown_tagged_field__skipped_as_kafka_does():
    fixed = bytes.fromhex("0012 0003 00000007 ffff")
    tags = bytes.fromhex("01 05 02 beef")            # one tag, number 5, two bytes
    decoded, body_offset = decode_request_header(fixed + tags + b"BODY", header_version=2)
    assert decoded.correlation_id == 7 and decoded.client_id is None
    assert body_offset == len(fixed) + len(tags)


@pytest.mark.parametrize("raw", [b"", b"\x00\x12\x00", bytes.fromhex("0012000300000007"),
                                 bytes.fromhex("0012 0003 00000007 0005 61"),
                                 bytes.fromhex("0012 0003 00000007 ffff 01 05 09 00"),
                                 bytes.fromhex("0012 0003 00000007 ffff ffffffff0f")])
def test_request_header__truncated_or_garbage__malformed_request_header(raw):
    with pytest.raises(MalformedRequestHeader):
        decode_request_header(raw, header_version=2)


@pytest.mark.parametrize("header_version, encoded", [(0, "0000002a"), (1, "0000002a00")])
def test_response_header__v0_v1__round_trip(header_version, encoded):
    assert encode_response_header(header_version=header_version, correlation_id=42).hex() == encoded
    header, body_offset = decode_response_header(bytes.fromhex(encoded), header_version=header_version)
    assert header.correlation_id == 42 and body_offset == len(encoded) // 2
