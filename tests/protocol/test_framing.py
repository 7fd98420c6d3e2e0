import struct
import tracemalloc

import pytest

from kgroupd.protocol.framing import (
    HAND_OVER,
    FrameDecoder,
    FrameError,
    FrameTooLarge,
    MalformedHeader,
    encode_response,
    parse_request_header,
    peek_api,
)
from kgroupd.protocol.messages import lookup
from kgroupd.protocol.types import VIEW_FROM


def frame(body: bytes) -> bytes:
    return struct.pack(">i", len(body)) + body


def test_frames_split_across_reads_come_out_whole_and_in_order() -> None:
    dec = FrameDecoder(1024)
    data = frame(b"one") + frame(b"") + frame(b"three")
    out: list[bytes] = []
    for i in range(len(data)):
        out += dec.feed(data[i : i + 1])
    assert out == [b"one", b"", b"three"]
    assert dec.buffered == 0


def test_many_frames_in_one_read() -> None:
    dec = FrameDecoder(1024)
    assert dec.feed(frame(b"a") + frame(b"bb") + frame(b"c")[:3]) == [b"a", b"bb"]
    assert dec.feed(frame(b"c")[3:]) == [b"c"]


def test_oversized_frame_is_rejected_before_it_is_buffered() -> None:
    dec = FrameDecoder(100)
    assert dec.feed(frame(b"ok") + struct.pack(">i", 101) + b"x" * 50) == [b"ok"]
    assert isinstance(dec.error, FrameTooLarge)
    assert dec.buffered == 0
    assert dec.feed(b"more") == []


def test_negative_size_is_rejected_after_the_good_frames() -> None:
    dec = FrameDecoder(100)
    assert dec.feed(frame(b"a") + struct.pack(">i", -5)) == [b"a"]
    assert isinstance(dec.error, FrameError)


def header_v1(api_key: int, version: int, corr: int, client: bytes | None) -> bytes:
    cid = struct.pack(">h", -1) if client is None else struct.pack(">h", len(client)) + client
    return struct.pack(">hhi", api_key, version, corr) + cid


def test_request_header_v1() -> None:
    raw = header_v1(3, 5, 42, b"me") + b"BODY"
    h = parse_request_header(raw, flexible=False)
    assert (h.api_key, h.api_version, h.correlation_id, h.client_id) == (3, 5, 42, "me")
    assert raw[h.body_offset :] == b"BODY"


def test_request_header_v2_skips_tagged_fields() -> None:
    tags = bytes([2, 0, 1, 0x55, 7, 2, 0xAA, 0xBB])  # two tagged fields
    raw = header_v1(18, 3, 7, None) + tags + b"BODY"
    h = parse_request_header(raw, flexible=True)
    assert h.client_id is None
    assert raw[h.body_offset :] == b"BODY"


@pytest.mark.parametrize(
    "raw",
    [
        b"\x00\x03",  # shorter than api key, version, correlation id
        struct.pack(">hhi", 3, 0, 1) + struct.pack(">h", 10) + b"abc",  # client id overruns
        struct.pack(">hhi", 3, 0, 1) + struct.pack(">h", 2) + b"\xff\xfe",  # not UTF-8
    ],
)
def test_malformed_headers_raise(raw: bytes) -> None:
    with pytest.raises(MalformedHeader):
        parse_request_header(raw, flexible=False)


def test_truncated_tagged_fields_raise() -> None:
    raw = header_v1(18, 3, 7, b"c") + bytes([1, 0, 9, 1])
    with pytest.raises(MalformedHeader):
        parse_request_header(raw, flexible=True)


def test_peek_api_reads_the_common_prefix() -> None:
    assert peek_api(struct.pack(">hhi", 1, 11, -3)) == (1, 11, -3)


def test_response_headers() -> None:
    assert encode_response(9, b"xy", header_v1=False) == struct.pack(">ii", 6, 9) + b"xy"
    assert encode_response(9, b"xy", header_v1=True) == struct.pack(">ii", 7, 9) + b"\x00xy"


def test_a_large_frame_read_in_pieces_is_the_buffer_itself_not_a_copy() -> None:
    """A frame of HAND_OVER bytes or more comes out as the bytes it was read into: the last
    read allocates about what it brings, not the frame's size again (a 100 MB copy would
    hold the event loop); the frames after it in that read come out whole."""
    body = bytes(range(256)) * (HAND_OVER // 256 + 100)
    data = frame(body) + frame(b"next") + frame(b"after")
    dec = FrameDecoder(len(body))
    split = len(frame(body)) - 1000
    for at in range(0, split, 65536):
        assert dec.feed(data[at : min(at + 65536, split)]) == []
    last = data[split:-3]  # the end of the large frame, "next", and "after" but its last bytes
    tracemalloc.start()
    try:
        big, small = dec.feed(last)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 64 * 1024, peak
    assert type(big) is bytearray and big == body
    assert small == b"next"
    assert dec.feed(data[-3:]) == [b"after"]
    assert dec.buffered == 0


def test_large_records_of_a_produce_request_are_a_view_of_its_frame() -> None:
    """The records field of a Produce request from VIEW_FROM bytes on: a read-only view of
    the frame (no copy); below it, bytes."""
    spec = lookup(0, 9)
    assert spec is not None
    for size, kind in ((VIEW_FROM, memoryview), (VIEW_FROM - 1, bytes)):
        records = bytes(range(256)) * (size // 256) + bytes(size % 256)
        body = spec.encode_request(
            {
                "transactional_id": None,
                "acks": 1,
                "timeout_ms": 1000,
                "topic_data": [{"name": "t", "partition_data": [{"index": 0, "records": records}]}],
            }
        )
        req = spec.decode_request(bytearray(body), 0)
        got = req["topic_data"][0]["partition_data"][0]["records"]
        assert type(got) is kind and got == records
        if kind is memoryview:
            assert got.readonly and got.obj is not None and len(got.obj) == len(body)
