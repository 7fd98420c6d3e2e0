"""Produce validates batches as Kafka's LogValidator does: a batch whose CRC-32C is right but
whose records lie (a record's length, the record count, the offset deltas, a compressed body
that does not decompress) is refused with Kafka's code and nothing of it is stored, so a
consumer of the partition reads every good record before and after it. A bad batch stored
anyway (by an older version, in a data dir) makes ListOffsets by timestamp answer an error
code for that partition, not an internal error.

Batches are built with aiokafka's builder and broken byte by byte over raw Produce frames
(tests/support/kafka_wire.py), their CRC made right again; the bystander is aiokafka's
consumer.
"""

from __future__ import annotations

import struct
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest
import pytest_asyncio
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from crc32c import crc32c

from kgroupd.broker.log import codecs
from kgroupd.broker.log.partition import now_ms
from kgroupd.broker.net.server import KafkaServer
from kgroupd.broker.testing import running_server
from kgroupd.protocol.errors import ErrorCode
from kgroupd.protocol.records import HEADER_SIZE, parse_header, zigzag
from kgroupd.protocol.records import build_batch as offsets_batch
from tests.support.kafka_wire import (
    WireClient,
    build_batch,
    create_topic,
    list_offsets_request,
    only_partition,
    produce_request,
)

PRODUCE, LIST_OFFSETS = 0, 2
CORRUPT, INVALID, TOO_LARGE = (
    ErrorCode.CORRUPT_MESSAGE,
    ErrorCode.INVALID_RECORD,
    ErrorCode.MESSAGE_TOO_LARGE,
)
CODECS = {"gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}
# baseOffset q, length i, leader epoch i, magic b, crc I, attributes h, lastOffsetDelta i,
# baseTimestamp q, maxTimestamp q, producerId q, producerEpoch h, baseSequence i, count i
HEADER = struct.Struct(">qiibIhiqqqhii")
FIELDS = {"base_offset": 0, "attributes": 5, "last_delta": 6, "pid": 9, "seq": 11, "count": 12}


def crc_right(batch: bytes | bytearray) -> bytes:
    """The batch with its length and CRC-32C made to match its bytes."""
    out = bytearray(batch)
    struct.pack_into(">i", out, 8, len(out) - 12)
    struct.pack_into(">I", out, 17, crc32c(memoryview(out)[21:]))
    return bytes(out)


def header_set(batch: bytes, **fields: int) -> bytes:
    f = list(HEADER.unpack_from(batch, 0))
    for name, value in fields.items():
        f[FIELDS[name]] = value
    return crc_right(HEADER.pack(*f) + batch[HEADER_SIZE:])


def with_body(template: bytes, body: bytes) -> bytes:
    """``template``'s header over another body."""
    return crc_right(template[:HEADER_SIZE] + body)


def three() -> bytes:
    return build_batch([(b"k%d" % i, b"value-%d" % i, []) for i in range(3)])


def lying_length() -> bytes:
    """The first record claims two bytes more than it has (CRC right)."""
    out = bytearray(three())
    length = out[HEADER_SIZE] >> 1  # a one-byte zigzag varint
    out[HEADER_SIZE] = (length + 2) << 1
    return crc_right(out)


def lying_key_length() -> bytes:
    """The first record's key claims more bytes than the record holds; its length is right."""
    out = bytearray(three())
    # length, attributes, timestamp delta, offset delta: one byte each here
    assert out[HEADER_SIZE + 4] == 2 << 1  # b"k0"
    out[HEADER_SIZE + 4] = 40 << 1
    return crc_right(out)


def negative_header_count() -> bytes:
    batch = build_batch([(b"k", b"v", [])])
    assert batch[-1] == 0  # the header count, last byte of the only record
    return crc_right(batch[:-1] + zigzag(-2))


def gapped_offsets() -> bytes:
    """Two records at offset deltas 0 and 2; count and last offset delta say 2 and 1."""
    ts = now_ms()
    batch = offsets_batch([(0, b"a", b"1", ts), (2, b"b", b"2", ts)])
    return header_set(batch, last_delta=1)


# (name, batch, code): every one has its CRC right
UNCOMPRESSED: list[tuple[str, Callable[[], bytes], ErrorCode]] = [
    ("record length past its fields", lying_length, INVALID),
    ("key length past its record", lying_key_length, INVALID),
    ("negative header count", negative_header_count, INVALID),
    ("count above the records", lambda: header_set(three(), count=4, last_delta=3), INVALID),
    ("count below the records", lambda: header_set(three(), count=2, last_delta=1), INVALID),
    ("count against last offset delta", lambda: header_set(three(), count=2), INVALID),
    ("count zero", lambda: header_set(three(), count=0, last_delta=-1), INVALID),
    ("offset deltas with a gap", gapped_offsets, INVALID),
    ("bytes after the records", lambda: crc_right(three() + b"\x00\x01\x02"), INVALID),
    ("a control batch", lambda: header_set(three(), attributes=0x20), INVALID),
    ("base offset not zero", lambda: header_set(three(), base_offset=7), INVALID),
    ("producer id without a sequence", lambda: header_set(three(), pid=5, seq=-1), INVALID),
    ("unknown codec", lambda: header_set(three(), attributes=5), CORRUPT),
]


def compressed_cases(codec: int) -> list[tuple[str, Callable[[], bytes], ErrorCode]]:
    good = build_batch([(b"k%d" % i, b"v" * 50, []) for i in range(3)], compression=codec)
    plain = three()

    def garbage() -> bytes:
        return with_body(good, bytes(range(256)) * 2)

    def cut_short() -> bytes:  # decompresses, to records that end before the count says
        return with_body(good, codecs.compress(codec, plain[HEADER_SIZE:-4]))

    def trailing() -> bytes:
        return with_body(good, codecs.compress(codec, plain[HEADER_SIZE:] + b"\x00\x00"))

    def not_its_codec() -> bytes:  # another codec's data under this codec's bit
        other = 4 if codec != 4 else 1
        return with_body(good, codecs.compress(other, plain[HEADER_SIZE:]))

    return [
        ("garbage", garbage, CORRUPT),
        ("another codec's data", not_its_codec, CORRUPT),
        ("records cut short", cut_short, INVALID),
        ("bytes after the records", trailing, INVALID),
    ]


@pytest_asyncio.fixture
async def wire(server: KafkaServer) -> AsyncIterator[WireClient]:
    async with await WireClient.connect(server.port) as client:
        yield client


async def produce(wire: WireClient, topic: str, batch: bytes, version: int = 8) -> dict:
    return only_partition(await wire.request(PRODUCE, version, produce_request(topic, 0, batch)))


async def latest(wire: WireClient, topic: str) -> int:
    part = only_partition(await wire.request(LIST_OFFSETS, 5, list_offsets_request(topic, [0], -1)))
    assert part["error_code"] == 0, part
    return int(part["offset"])


async def consume_all(bootstrap: str, topic: str, count: int) -> list[bytes]:
    consumer = AIOKafkaConsumer(
        topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest", group_id=None
    )
    await consumer.start()
    try:
        got: list[bytes] = []
        while len(got) < count:
            batches = await consumer.getmany(timeout_ms=5000)
            assert batches, f"the consumer stalled after {len(got)} records"
            for records in batches.values():
                got += [r.value for r in records]
        return got
    finally:
        await consumer.stop()


async def test_lying_batches_are_refused_and_a_bystander_reads_every_good_record(
    server: KafkaServer, wire: WireClient
) -> None:
    bootstrap = f"127.0.0.1:{server.port}"
    await create_topic(wire, "v", 1)
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=0)
    await producer.start()
    sent: list[bytes] = []
    try:
        cases = list(UNCOMPRESSED)
        for name, codec in CODECS.items():
            cases += [(f"{name}: {n}", make, code) for n, make, code in compressed_cases(codec)]
        for name, make, code in cases:
            value = f"before {name}".encode()
            await producer.send_and_wait("v", value, partition=0)
            sent.append(value)
            end = await latest(wire, "v")
            got = await produce(wire, "v", make())
            assert (got["error_code"], name) == (code, name), got
            assert got["error_message"], name
            assert got["base_offset"] == -1
            assert await latest(wire, "v") == end, f"{name}: the log moved"
        await producer.send_and_wait("v", b"after", partition=0)
        sent.append(b"after")
    finally:
        await producer.stop()
    assert await consume_all(bootstrap, "v", len(sent)) == sent


@pytest.mark.parametrize("codec", ["gzip", "lz4", "zstd"])
async def test_a_batch_decompressing_past_the_bound_is_message_too_large(
    wire: WireClient, codec: str
) -> None:
    """80 MiB of zeros compress to well under a MiB: more than the 64 MiB the broker
    decompresses (snappy cannot pack that much under message.max.bytes)."""
    await create_topic(wire, f"big-{codec}", 1)
    good = build_batch([(b"k", b"v", [])], compression=CODECS[codec])
    bomb = with_body(good, codecs.compress(CODECS[codec], bytes(80 * 1024 * 1024)))
    got = await produce(wire, f"big-{codec}", bomb)
    assert got["error_code"] == TOO_LARGE
    assert await latest(wire, f"big-{codec}") == 0
    assert (await produce(wire, f"big-{codec}", good))["error_code"] == 0


async def test_good_batches_of_every_shape_are_taken(wire: WireClient) -> None:
    """Multi-byte varints (long values, many records, negative timestamp deltas), headers,
    null keys and values, every codec: taken whole."""
    await create_topic(wire, "shapes", 1)
    now = now_ms()
    records = [
        (b"k" * (i % 200) if i % 3 else None, None if i % 7 == 0 else b"x" * (i * 11), h, ts)
        for i, h, ts in (
            (i, [(f"h{j}", b"y" * j if j % 2 else None) for j in range(i % 4)], now - i * 997)
            for i in range(300)
        )
    ]
    offset = 0
    for codec in (0, *CODECS.values()):
        got = await produce(wire, "shapes", build_batch(records, compression=codec))
        assert (got["error_code"], got["base_offset"]) == (0, offset)
        offset += len(records)


async def test_keyless_records_in_a_compacted_topic_get_kafkas_record_errors(
    wire: WireClient,
) -> None:
    await create_topic(wire, "compacted", 1, {"cleanup.policy": "compact"})
    batch = build_batch([(b"a", b"1", []), (None, b"2", []), (b"c", b"3", []), (None, b"4", [])])
    got = await produce(wire, "compacted", batch)
    assert got["error_code"] == INVALID
    message = "Compacted topic cannot accept message without key in topic partition compacted-0"
    assert [(e["batch_index"], e["batch_index_error_message"]) for e in got["record_errors"]] == [
        (1, message),
        (3, message),
    ]
    assert got["error_message"] == (
        "One or more records have been rejected due to 2 record errors in total, and only "
        f"showing the first three errors at most: [RecordError(batchIndex=1, message='{message}'"
        f"), RecordError(batchIndex=3, message='{message}')]"
    )
    assert await latest(wire, "compacted") == 0


# A bad batch stored anyway ----------------------------------------------------------------


@pytest.mark.parametrize("where", ["memory", "data-dir"])
async def test_a_stored_batch_that_lies_makes_list_offsets_answer_corrupt_message(
    tmp_path: Path, where: str
) -> None:
    settings = {"data_dir": str(tmp_path)} if where == "data-dir" else {}
    async with (
        running_server(log_level="critical", **settings) as server,
        await WireClient.connect(server.port) as wire,
    ):
        await create_topic(wire, "stored", 2)
        t0 = now_ms() - 10_000
        first = build_batch([(b"a", b"1", [], t0)])
        assert (await produce(wire, "stored", first))["error_code"] == 0
        # as an older version would have stored it: the records lie, the CRC is right
        log = server.broker.topics.partition("stored", 0)
        assert log is not None
        bad = bytearray(build_batch([(b"b", b"2", [], t0 + 1000)] * 2))
        bad[HEADER_SIZE] = ((bad[HEADER_SIZE] >> 1) + 5) << 1  # the first record's length
        stored = header_set(crc_right(bad), base_offset=log.high_watermark)
        log.append(stored, parse_header(stored), t0)
        later = build_batch([(b"c", b"3", [], t0 + 2000)])
        assert (await produce(wire, "stored", later))["error_code"] == 0

        async def lookup(timestamp: int) -> list[dict]:
            body = list_offsets_request("stored", [0, 1], timestamp)
            resp = await wire.request(LIST_OFFSETS, 5, body)
            return [dict(p) for p in resp["topics"][0]["partitions"]]

        before, other = await lookup(t0)
        assert (before["error_code"], before["offset"]) == (0, 0)  # the first batch
        assert other["error_code"] == 0
        bad_part, other = await lookup(t0 + 500)  # the bad batch is the first to reach it
        assert bad_part["error_code"] == CORRUPT, bad_part
        assert (bad_part["offset"], bad_part["timestamp"]) == (-1, -1)
        assert (other["error_code"], other["offset"]) == (0, -1)  # the other partition
        newest, _ = await lookup(-3)  # MAX_TIMESTAMP
        if where == "memory":  # every batch is read, the bad one too
            assert newest["error_code"] == CORRUPT, newest
        else:  # only the batch with the segment's largest timestamp
            assert (newest["error_code"], newest["offset"]) == (0, 3), newest
        for latest_or_earliest in (-1, -2):
            part, _ = await lookup(latest_or_earliest)
            assert part["error_code"] == 0
