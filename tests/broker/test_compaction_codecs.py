"""Compressed batches in the log cleaner (kgroupd.broker.log.compaction,
kgroupd.broker.log.codecs): compacted
as Kafka's cleaner does (records decompressed, the kept ones written again with the batch's own
codec at their offsets), decompression bounded, an unreadable batch kept whole."""

from __future__ import annotations

import gzip
import os
import time

import lz4.frame
import pytest
import snappy
import zstandard
from aiokafka.codec import snappy_decode
from aiokafka.record.default_records import DefaultRecordBatchBuilder

from kgroupd.broker.log import codecs
from kgroupd.broker.log.compaction import (
    DELETE_HORIZON_BIT,
    AbortedRanges,
    Cleaning,
    Expander,
    OffsetMap,
    keyless_record,
)
from kgroupd.protocol.records import (
    COMPRESSION_MASK,
    HEADER_SIZE,
    InvalidBatch,
    check_crc,
    parse_header,
    split_batches,
    with_base_offset,
)
from tests.support.kafka_wire import iter_records

NOW = 1_700_000_000_000
CODECS = {"gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}


def batch(
    base: int,
    recs: list[tuple[int, bytes | None, bytes | None]],
    compression: int,
    pid: int = -1,
    seq: int = -1,
    transactional: int = 0,
) -> bytes:
    """A batch at ``base`` of (offset delta, key, value) records, written by aiokafka (its
    codecs are not kgroupd's: what a client sends)."""
    builder = DefaultRecordBatchBuilder(2, compression, transactional, pid, 3, seq, 1 << 24)
    for delta, key, value in recs:
        builder.append(delta, NOW + delta, key, value, [("h", b"%d" % delta)])
    return bytes(with_base_offset(bytes(builder.build()), base))


def clean(
    batches: list[bytes], now: int = NOW, limit: int | None = None
) -> tuple[list[bytes | memoryview | None], Cleaning]:
    expander = Expander() if limit is None else Expander(limit)
    offsets = OffsetMap(AbortedRanges(), expander=expander)
    for b in batches:
        offsets.add(b)
    cleaning = Cleaning(offsets, now, 1000)
    return [cleaning.clean(b) for b in batches], cleaning


def records(data: bytes) -> list[tuple[int, bytes | None, bytes | None, int, list[object]]]:
    return [(r.offset, r.key, r.value, r.timestamp, list(r.headers)) for r in iter_records(data)]


@pytest.mark.parametrize("codec", CODECS.values(), ids=list(CODECS))
def test_a_compressed_batch_keeps_the_latest_of_each_key_with_its_own_codec(codec: int) -> None:
    filler = b"%0100d" % 7  # compressible values: the batch is smaller compressed
    first = batch(
        10,
        [(0, b"a", b"a1" + filler), (1, b"b", b"b1" + filler), (3, b"a", b"a2" + filler)],
        codec,
        pid=42,
        seq=17,
        transactional=0,
    )
    second = batch(20, [(0, b"b", b"b2" + filler), (2, b"c", None)], codec)
    out, cleaning = clean([first, second], now=NOW + 5)
    new_first, new_second = out
    assert isinstance(new_first, bytes) and isinstance(new_second, bytes)
    h = parse_header(new_first)
    # the batch keeps its codec, base offset, last offset delta (the last sequence with it),
    # producer id, epoch and base sequence; its one record left at its offset
    assert h.attributes & COMPRESSION_MASK == codec
    assert (h.base_offset, h.last_offset_delta, h.record_count) == (10, 3, 1)
    assert (h.producer_id, h.producer_epoch, h.base_sequence) == (42, 3, 17)
    assert h.max_timestamp == parse_header(first).max_timestamp
    assert records(new_first) == [(13, b"a", b"a2" + filler, NOW + 3, [("h", b"3")])]
    assert len(new_first) < HEADER_SIZE + 100  # compressed again
    # the tombstone's batch: written again for its delete horizon, still compressed
    h2 = parse_header(new_second)
    assert h2.attributes & COMPRESSION_MASK == codec and h2.attributes & DELETE_HORIZON_BIT
    assert h2.base_timestamp == NOW + 5 + 1000 == cleaning.next_horizon
    assert records(new_second) == [
        (20, b"b", b"b2" + filler, NOW, [("h", b"0")]),
        (22, b"c", None, NOW + 2, [("h", b"2")]),
    ]
    for b in (new_first, new_second):
        split_batches(b)
        check_crc(b, 0, parse_header(b))
    assert cleaning.records_removed == 2 and not cleaning.offsets.expander.failed
    # a second pass over the clean batches keeps them as they are (the same objects)
    again, _ = clean([new_first, new_second], now=NOW + 6)
    assert again[0] is new_first and again[1] is new_second
    # past the horizon the tombstone goes; a batch left empty goes
    later, _ = clean([new_first, new_second], now=NOW + 5 + 1000)
    assert later[0] is new_first
    assert records(bytes(later[1] or b"")) == [(20, b"b", b"b2" + filler, NOW, [("h", b"0")])]
    gone, cleaning = clean([first, batch(30, [(0, b"a", b"a3"), (1, b"b", b"b3")], codec)])
    assert gone[0] is None and cleaning.batches_removed == 1


@pytest.mark.parametrize("codec", CODECS.values(), ids=list(CODECS))
def test_compressed_and_uncompressed_batches_supersede_each_other(codec: int) -> None:
    plain = batch(0, [(0, b"a", b"1"), (1, b"b", b"1")], 0)
    packed = batch(2, [(0, b"a", b"2"), (1, b"c", b"1")], codec)
    plain2 = batch(4, [(0, b"c", b"2")], 0)
    out, _ = clean([plain, packed, plain2])
    assert [r[:3] for b in out if b for r in records(bytes(b))] == [
        (1, b"b", b"1"),
        (2, b"a", b"2"),
        (4, b"c", b"2"),
    ]
    assert parse_header(bytes(out[1] or b"")).attributes & COMPRESSION_MASK == codec


@pytest.mark.parametrize("codec", CODECS.values(), ids=list(CODECS))
def test_keyless_records_in_compressed_batches_are_found(codec: int) -> None:
    assert keyless_record(batch(0, [(0, b"a", b"1"), (1, None, b"x")], codec))
    assert not keyless_record(batch(0, [(0, b"a", b"1"), (1, b"b", b"x")], codec))


def _with_body(template: bytes, body: bytes) -> bytes:
    """``template``'s header over another (compressed) body: length and CRC set to match."""
    from crc32c import crc32c

    out = bytearray(template[:HEADER_SIZE] + body)
    out[8:12] = (len(out) - 12).to_bytes(4, "big")
    out[17:21] = crc32c(memoryview(out)[21:]).to_bytes(4, "big")
    return bytes(out)


@pytest.mark.parametrize("codec", CODECS.values(), ids=list(CODECS))
def test_an_unreadable_or_enormous_compressed_batch_is_kept_whole(codec: int) -> None:
    good = batch(0, [(0, b"a", b"1"), (1, b"b", b"1")], codec)
    garbage = _with_body(good, os.urandom(200))
    # decompresses to 80 MB (a few hundred KB compressed at most): more than the limit
    enormous = _with_body(good, codecs.compress(codec, bytes(80 * 1024 * 1024)))
    # decompresses fine, but to no well-formed records
    nonsense = _with_body(good, codecs.compress(codec, b"\x07" * 1000))
    newer = batch(10, [(0, b"a", b"2"), (1, b"b", b"2")], 0)
    started = time.monotonic()
    out, cleaning = clean([garbage, enormous, nonsense, good, newer])
    assert time.monotonic() - started < 5
    assert out[0] is garbage and out[1] is enormous and out[2] is nonsense
    assert out[3] is None  # the readable batch, superseded
    assert out[4] is newer
    failed = cleaning.offsets.expander.failed
    assert set(failed) == {0}  # every one is at base offset 0: named once
    for bad in (garbage, enormous, nonsense):
        with pytest.raises(InvalidBatch):
            keyless_record(bad)
    # a batch just over a small limit is kept whole, just under it is compacted
    size = len(codecs.decompress(codec, good[HEADER_SIZE:], 1 << 20))
    assert clean([good, newer], limit=size - 1)[0][0] is good
    assert clean([good, newer], limit=size)[0][0] is None


def test_enormous_claims_take_no_memory_beyond_the_limit() -> None:
    """A snappy block claiming 4 GB, an lz4 frame claiming its content is 1 TB: refused before
    anything that large is allocated."""
    claim = bytes([0xFF, 0xFF, 0xFF, 0xFF, 0x0F]) + b"\x00" * 10  # varint length 2**32-1
    with pytest.raises(codecs.TooLarge):
        codecs.decompress(codecs.SNAPPY, claim, 1 << 20)
    frame = lz4.frame.compress(b"x" * 100, store_size=True)
    assert frame[4] & 0x08  # the content size is in the frame descriptor
    linked = frame[:4] + bytes([frame[4] & ~0x20]) + frame[5:6]  # blocks linked
    with pytest.raises(codecs.TooLarge):
        codecs.decompress(codecs.LZ4, linked + (1 << 40).to_bytes(8, "little") + frame[14:], 1000)
    # a block longer than the frame's block size
    huge_block = frame[:15] + (1 << 30).to_bytes(4, "little") + frame[19:]
    with pytest.raises(codecs.BadCompression):
        codecs.decompress(codecs.LZ4, huge_block, 1 << 20)


@pytest.mark.parametrize("size", [0, 1, 100, 70_000, 300_000])
def test_codecs_read_what_clients_write_and_write_what_they_read(size: int) -> None:
    data = (b"kgroupd" * (size // 14 + 1))[: size // 2] + os.urandom(size - size // 2)
    written = {c: codecs.compress(c, data) for c in CODECS.values()}
    assert gzip.decompress(written[1]) == data
    assert written[2].startswith(b"\x82SNAPPY\x00\x00\x00\x00\x01\x00\x00\x00\x01")
    if data:  # aiokafka's xerial reader
        assert snappy_decode(written[2]) == data
    assert written[3][:7] == bytes.fromhex("04224d18604082")  # Kafka's LZ4 frame header
    assert lz4.frame.decompress(written[3]) == data
    dctx = zstandard.ZstdDecompressor()
    assert dctx.decompress(written[4], max_output_size=1 << 20) == data
    for codec, blob in written.items():
        assert codecs.decompress(codec, blob, size) == data
    theirs = {
        1: [gzip.compress(data)],
        2: [snappy.compress(data)],
        3: [
            lz4.frame.compress(data),
            lz4.frame.compress(data, block_linked=True, content_checksum=True, store_size=True),
        ],
        4: [zstandard.ZstdCompressor().compress(data)],
    }
    for codec, blobs in theirs.items():
        for blob in blobs:
            assert codecs.decompress(codec, blob, size) == data


@pytest.mark.parametrize("codec", [0, *CODECS.values()], ids=["none", *CODECS])
def test_an_idempotent_producers_last_batch_is_kept_empty(codec: int) -> None:
    """As Kafka's BatchRetention.RETAIN_EMPTY: the last batch of each idempotent producer
    stays, emptied of its records, so its last sequence and epoch stay in the log."""
    earlier = batch(0, [(0, b"a", b"1"), (1, b"b", b"1")], codec, pid=9, seq=0)
    last = batch(2, [(0, b"a", b"2"), (1, b"b", b"2")], codec, pid=9, seq=2)
    newer = batch(4, [(0, b"a", b"3"), (1, b"b", b"3")], 0)
    offsets = OffsetMap(AbortedRanges())
    for b in (earlier, last, newer):
        offsets.add(b)
    cleaning = Cleaning(offsets, NOW, 1000, retain=frozenset({0, 2}))
    out = [cleaning.clean(b) for b in (earlier, last, newer)]
    assert out[0] is not None and out[1] is not None and out[2] is newer
    for kept, old in zip(out[:2], (earlier, last), strict=True):
        h, o = parse_header(kept), parse_header(old)
        assert len(kept) == HEADER_SIZE and h.record_count == 0
        assert h.attributes & COMPRESSION_MASK == 0  # written uncompressed, as Kafka
        assert (h.base_offset, h.last_offset_delta) == (o.base_offset, 1)
        assert (h.producer_id, h.producer_epoch, h.base_sequence) == (9, 3, o.base_sequence)
        assert h.base_timestamp == h.max_timestamp == o.max_timestamp
        check_crc(bytes(kept), 0, h)
        assert list(iter_records(bytes(kept))) == []
    assert cleaning.batches_removed == 0 and cleaning.records_removed == 4
    # a later pass keeps the empty batch as it is while it is still the producer's last...
    empty = bytes(out[1] or b"")
    offsets = OffsetMap(AbortedRanges())
    again = Cleaning(offsets, NOW, 1000, retain=frozenset({2}))
    assert again.clean(empty) is empty
    # ...and removes it once the producer wrote another
    assert Cleaning(offsets, NOW, 1000, retain=frozenset({9})).clean(empty) is None
    # without the producer (retain empty) the batches go, as do transactional ones
    assert Cleaning(offsets, NOW, 1000).clean(empty) is None
    txn = batch(2, [(0, b"a", b"2")], codec, pid=9, seq=2, transactional=1)
    offsets = OffsetMap(AbortedRanges())
    for b in (txn, newer):
        offsets.add(b)
    assert Cleaning(offsets, NOW, 1000, retain=frozenset({2})).clean(txn) is None
