"""Produce, Fetch and ListOffsets rules, checked with raw protocol frames.

Batches are built with aiokafka's DefaultRecordBatchBuilder and sent as ProduceRequest
frames over a plain socket (tests/support/kafka_wire.py), so each rule is exercised exactly:
idempotent de-duplication and sequence gaps, CRC and size checks, unknown partitions,
offsets out of range, leader epochs, and long polling.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
import pytest_asyncio
from aiokafka import AIOKafkaProducer

from kgroupd.broker.net.server import KafkaServer
from kgroupd.broker.testing import running_server
from kgroupd.protocol.errors import ErrorCode
from kgroupd.protocol.records import parse_header, with_base_offset
from kgroupd.protocol.types import VIEW_FROM
from tests.support.kafka_wire import (
    WireClient,
    build_batch,
    create_topic,
    fetch_request,
    iter_records,
    list_offsets_request,
    only_partition,
    produce_request,
)

PRODUCE, FETCH, LIST_OFFSETS, INIT_PRODUCER_ID, API_VERSIONS = 0, 1, 2, 22, 18
PRODUCE_V = 8
FETCH_V = 11
LIST_OFFSETS_V = 5
DEFAULT_MESSAGE_MAX_BYTES = 1048588
MIB = 1024 * 1024


@pytest_asyncio.fixture
async def wire(server: KafkaServer) -> AsyncIterator[WireClient]:
    async with await WireClient.connect(server.port) as client:
        yield client


async def produce(
    wire: WireClient, topic: str, batch: bytes, partition: int = 0, version: int = PRODUCE_V
) -> dict:
    return only_partition(
        await wire.request(PRODUCE, version, produce_request(topic, partition, batch))
    )


async def fetch(wire: WireClient, topic: str, offset: int, partition: int = 0, **kw: int) -> dict:
    return only_partition(
        await wire.request(FETCH, FETCH_V, fetch_request(topic, partition, offset, **kw))
    )


async def latest_offset(wire: WireClient, topic: str, partition: int = 0) -> int:
    resp = await wire.request(
        LIST_OFFSETS, LIST_OFFSETS_V, list_offsets_request(topic, [partition], -1)
    )
    part = only_partition(resp)
    assert part["error_code"] == 0, part
    return int(part["offset"])


async def init_producer_id(wire: WireClient) -> tuple[int, int]:
    resp = await wire.request(
        INIT_PRODUCER_ID, 0, {"transactional_id": None, "transaction_timeout_ms": 60_000}
    )
    assert resp["error_code"] == 0, resp
    return resp["producer_id"], resp["producer_epoch"]


def records(start: int, count: int) -> list[tuple[bytes, bytes, list[tuple[str, bytes]]]]:
    return [(b"k%d" % i, b"v%d" % i, [("i", b"%d" % i)]) for i in range(start, start + count)]


def values(fetched: dict) -> list[bytes]:
    return [r.value for r in iter_records(fetched["records"])]


# Idempotence -------------------------------------------------------------------------------


async def test_duplicate_batch_returns_its_original_offset(wire: WireClient) -> None:
    await create_topic(wire, "dup")
    pid, epoch = await init_producer_id(wire)
    first = build_batch(records(0, 3), producer_id=pid, producer_epoch=epoch, base_sequence=0)
    second = build_batch(records(3, 2), producer_id=pid, producer_epoch=epoch, base_sequence=3)

    assert (await produce(wire, "dup", first))["base_offset"] == 0
    assert (await produce(wire, "dup", second))["base_offset"] == 3
    # Retries of both (the producer never saw the acks): the original offsets, no new records.
    again_first = await produce(wire, "dup", first)
    assert (again_first["error_code"], again_first["base_offset"]) == (0, 0)
    again_second = await produce(wire, "dup", second)
    assert (again_second["error_code"], again_second["base_offset"]) == (0, 3)

    assert await latest_offset(wire, "dup") == 5
    assert values(await fetch(wire, "dup", 0)) == [b"v%d" % i for i in range(5)]


async def test_sequence_gap_is_out_of_order(wire: WireClient) -> None:
    await create_topic(wire, "gap")
    pid, epoch = await init_producer_id(wire)
    ok = build_batch(records(0, 3), producer_id=pid, producer_epoch=epoch, base_sequence=0)
    assert (await produce(wire, "gap", ok))["error_code"] == 0

    # Sequences 3 and 4 never arrived: 5 is a gap.
    gap = build_batch(records(5, 2), producer_id=pid, producer_epoch=epoch, base_sequence=5)
    got = await produce(wire, "gap", gap)
    assert got["error_code"] == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER == 45

    # A producer the partition has never seen must start at sequence 0.
    pid2, epoch2 = await init_producer_id(wire)
    late = build_batch(records(0, 1), producer_id=pid2, producer_epoch=epoch2, base_sequence=7)
    got = await produce(wire, "gap", late)
    assert got["error_code"] == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER

    # Nothing of the rejected batches was appended; the next in-order batch still is.
    assert await latest_offset(wire, "gap") == 3
    next_ok = build_batch(records(3, 1), producer_id=pid, producer_epoch=epoch, base_sequence=3)
    got = await produce(wire, "gap", next_ok)
    assert (got["error_code"], got["base_offset"]) == (0, 3)


async def test_real_producer_batch_replayed_is_deduplicated(
    server: KafkaServer, bootstrap: str, wire: WireClient
) -> None:
    """aiokafka's idempotent producer writes gap-free sequences; replaying one of its batches
    byte for byte (as a retry would) answers the original offset and appends nothing."""
    await create_topic(wire, "replay")
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, enable_idempotence=True, linger_ms=5)
    await producer.start()
    try:
        for round_ in range(3):
            futures = [
                await producer.send("replay", b"r%d-%d" % (round_, i), partition=0)
                for i in range(20)
            ]
            await asyncio.gather(*futures)
    finally:
        await producer.stop()

    log = server.broker.topics.partition("replay", 0)
    assert log is not None and log.high_watermark == 60

    headers = [parse_header(b.data) for b in log.batches]
    assert len(headers) >= 3
    assert len({h.producer_id for h in headers}) == 1 and headers[0].producer_id >= 0
    expected_seq = 0
    for h in headers:
        assert h.base_sequence == expected_seq
        expected_seq = h.last_sequence + 1

    for stored in log.batches[-3:]:  # the last five are remembered; replay within them
        # as the producer sent it: base offset 0 (the log wrote the offset it took)
        got = await produce(wire, "replay", bytes(with_base_offset(stored.data, 0)))
        assert (got["error_code"], got["base_offset"]) == (0, stored.base_offset)
    assert await latest_offset(wire, "replay") == 60


# Batch validation --------------------------------------------------------------------------


async def test_flipped_byte_is_corrupt_message(wire: WireClient) -> None:
    await create_topic(wire, "crc")
    batch = bytearray(build_batch(records(0, 3)))
    batch[-1] ^= 0x01  # inside the last record: covered by the CRC-32C
    got = await produce(wire, "crc", bytes(batch))
    assert got["error_code"] == ErrorCode.CORRUPT_MESSAGE == 2
    assert await latest_offset(wire, "crc") == 0
    # The intact batch is accepted.
    assert (await produce(wire, "crc", build_batch(records(0, 3))))["error_code"] == 0


async def test_batch_over_the_size_limits_is_message_too_large(wire: WireClient) -> None:
    batch = build_batch([(b"k", b"x" * 2000, [])])
    # The topic's max.message.bytes: a batch of exactly the limit fits, one byte over not.
    await create_topic(wire, "fits", configs={"max.message.bytes": str(len(batch))})
    await create_topic(wire, "too-big", configs={"max.message.bytes": str(len(batch) - 1)})
    assert (await produce(wire, "fits", batch))["error_code"] == 0
    got = await produce(wire, "too-big", batch)
    assert got["error_code"] == ErrorCode.MESSAGE_TOO_LARGE == 10
    assert await latest_offset(wire, "too-big") == 0

    # The broker's message.max.bytes (Kafka's default 1048588) with the topic default.
    await create_topic(wire, "default-limit")
    huge = build_batch([(None, bytes(DEFAULT_MESSAGE_MAX_BYTES), [])])
    got = await produce(wire, "default-limit", huge)
    assert got["error_code"] == ErrorCode.MESSAGE_TOO_LARGE
    assert await latest_offset(wire, "default-limit") == 0


async def test_a_batch_over_the_limit_is_refused_on_its_size_before_its_crc(
    wire: WireClient,
) -> None:
    """Kafka's order (UnifiedLog.analyzeAndValidateRecords): the base offset, then the size,
    then the CRC. A batch over max.message.bytes whose CRC is wrong is MESSAGE_TOO_LARGE:
    refused without a pass over its bytes (a 100 MB one as cheaply as this one)."""
    batch = bytearray(build_batch([(b"k", b"x" * 2000, [])]))
    await create_topic(wire, "order", configs={"max.message.bytes": str(len(batch) - 1)})
    batch[-1] ^= 0x01  # the CRC no longer matches
    got = await produce(wire, "order", bytes(batch))
    assert got["error_code"] == ErrorCode.MESSAGE_TOO_LARGE, got
    assert got["error_message"] == (
        f"The record batch size in the append to order-0 is {len(batch)} bytes which exceeds "
        f"the maximum configured value of {len(batch) - 1}."
    )
    # a base offset other than 0 is refused before the size, as in Kafka
    moved = with_base_offset(batch, 5)
    assert (await produce(wire, "order", bytes(moved)))["error_code"] == ErrorCode.INVALID_RECORD
    # two batches: Kafka's ProduceRequest refuses them before the log looks at any size
    small = build_batch(records(0, 1))
    await create_topic(wire, "two", configs={"max.message.bytes": str(len(small) + 1)})
    got = await produce(wire, "two", small + small)
    assert got["error_code"] == ErrorCode.INVALID_RECORD, got
    assert await latest_offset(wire, "order") == await latest_offset(wire, "two") == 0


async def test_a_batch_of_megabytes_is_stored_and_fetched_intact() -> None:
    """A Produce whose records pass protocol.types.VIEW_FROM (8 MiB) is decoded as a view of
    its frame (no copy); taken, the batch is stored whole and read back byte for byte."""
    async with (
        running_server(log_level="warning", message_max_bytes=16 * MIB) as server,
        await WireClient.connect(server.port) as wire,
    ):
        await create_topic(wire, "large", configs={"max.message.bytes": str(16 * MIB)})
        values = [bytes([i % 256]) * 1000 + b"%d" % i for i in range(9000)]  # 9 MB, each apart
        batch = build_batch([(b"k%d" % i, v, []) for i, v in enumerate(values)])
        assert len(batch) > VIEW_FROM
        assert (await produce(wire, "large", batch))["base_offset"] == 0
        got = await fetch(wire, "large", 0, max_bytes=16 * MIB, partition_max_bytes=16 * MIB)
        assert got["records"] == batch[:12] + got["records"][12:16] + batch[16:]  # but the epoch
        assert [r.value for r in iter_records(got["records"])] == values


async def test_unknown_partition_or_topic(wire: WireClient) -> None:
    await create_topic(wire, "one-part", 1)
    got = await produce(wire, "one-part", build_batch(records(0, 1)), partition=1)
    assert got["error_code"] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION == 3
    got = await produce(wire, "never-created", build_batch(records(0, 1)))
    assert got["error_code"] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert (await fetch(wire, "one-part", 0, partition=1))["error_code"] == 3


# Fetch and ListOffsets ---------------------------------------------------------------------


async def test_fetch_past_the_end_is_offset_out_of_range(wire: WireClient) -> None:
    await create_topic(wire, "oor")
    assert (await produce(wire, "oor", build_batch(records(0, 4))))["base_offset"] == 0
    at_end = await fetch(wire, "oor", 4)
    assert (at_end["error_code"], at_end["records"], at_end["high_watermark"]) == (0, b"", 4)
    past = await fetch(wire, "oor", 5)
    assert past["error_code"] == ErrorCode.OFFSET_OUT_OF_RANGE == 1
    assert past["high_watermark"] == 4
    assert (await fetch(wire, "oor", -1))["error_code"] == ErrorCode.OFFSET_OUT_OF_RANGE


@pytest.mark.parametrize("version", [9, 10, 11])
async def test_fetch_with_a_future_leader_epoch(wire: WireClient, version: int) -> None:
    await create_topic(wire, "epoch-f")
    await produce(wire, "epoch-f", build_batch(records(0, 1)))
    for epoch, code in [(-1, 0), (0, 0), (1, ErrorCode.UNKNOWN_LEADER_EPOCH)]:
        body = fetch_request("epoch-f", 0, 0, current_leader_epoch=epoch)
        part = only_partition(await wire.request(FETCH, version, body))
        assert part["error_code"] == code, (epoch, part)
    assert ErrorCode.UNKNOWN_LEADER_EPOCH == 75  # Kafka's numbering (74 is FENCED_LEADER_EPOCH)


@pytest.mark.parametrize("version", [4, 5])
async def test_list_offsets_with_a_future_leader_epoch(wire: WireClient, version: int) -> None:
    await create_topic(wire, "epoch-l")
    await produce(wire, "epoch-l", build_batch(records(0, 2)))
    for epoch, code, offset in [(-1, 0, 2), (0, 0, 2), (1, ErrorCode.UNKNOWN_LEADER_EPOCH, -1)]:
        body = list_offsets_request("epoch-l", [0], -1, current_leader_epoch=epoch)
        part = only_partition(await wire.request(LIST_OFFSETS, version, body))
        assert (part["error_code"], part["offset"]) == (code, offset), (epoch, part)


# Long polling ------------------------------------------------------------------------------


async def test_long_poll_returns_as_soon_as_a_record_arrives(
    server: KafkaServer, wire: WireClient
) -> None:
    await create_topic(wire, "lp")
    loop = asyncio.get_running_loop()
    # ApiVersions and the long poll go out in one write: once ApiVersions is answered, the
    # broker has read the Fetch too, and (nothing to return yet) parked it.
    started = loop.time()
    api_corr, fetch_corr = await wire.send_many(
        [
            (API_VERSIONS, 1, {}),
            (FETCH, FETCH_V, fetch_request("lp", 0, 0, max_wait_ms=5000)),
        ]
    )
    await wire.receive(API_VERSIONS, 1, api_corr)
    log = server.broker.topics.partition("lp", 0)
    assert log is not None and log.waiters, "the fetch should be waiting for data"

    async with await WireClient.connect(server.port) as producer:
        produced_at = loop.time()
        assert (await produce(producer, "lp", build_batch(records(0, 1))))["error_code"] == 0
    resp = only_partition(await wire.receive(FETCH, FETCH_V, fetch_corr))
    answered = loop.time()

    assert resp["error_code"] == 0
    assert values(resp) == [b"v0"]
    assert answered - started < 2.5, "the long poll ran out its max wait instead of waking"
    assert answered - produced_at < 1.0


async def test_long_poll_returns_empty_after_max_wait(wire: WireClient) -> None:
    await create_topic(wire, "lp-empty")
    loop = asyncio.get_running_loop()
    started = loop.time()
    resp = await fetch(wire, "lp-empty", 0, max_wait_ms=200)
    elapsed = loop.time() - started
    assert (resp["error_code"], resp["records"], resp["high_watermark"]) == (0, b"", 0)
    assert 0.19 <= elapsed < 2.0, elapsed
