"""The fields the newest Produce, Fetch, ListOffsets and InitProducerId versions add, each
honoured on the wire."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest_asyncio

from kgroupd.broker.net.server import KafkaServer
from kgroupd.protocol.errors import ErrorCode
from tests.support.kafka_wire import (
    WireClient,
    build_batch,
    create_topic,
    iter_records,
    list_offsets_request,
    only_partition,
)

PRODUCE, FETCH, LIST_OFFSETS, INIT_PRODUCER_ID = 0, 1, 2, 22


@pytest_asyncio.fixture
async def wire(server: KafkaServer) -> AsyncIterator[WireClient]:
    async with await WireClient.connect(server.port) as client:
        await create_topic(client, "d", 1)
        yield client


def topic_id(server: KafkaServer, name: str = "d") -> uuid.UUID:
    topic = server.broker.topics.get(name)
    assert topic is not None
    return topic.topic_id


def produce_by_id(key: uuid.UUID, batch: bytes) -> dict[str, Any]:
    return {
        "acks": -1,
        "timeout_ms": 5000,
        "topic_data": [{"topic_id": key, "partition_data": [{"index": 0, "records": batch}]}],
    }


def fetch_by_id(key: uuid.UUID, offset: int = 0) -> dict[str, Any]:
    return {
        "max_wait_ms": 0,
        "min_bytes": 1,
        "max_bytes": 1 << 20,
        "topics": [
            {
                "topic_id": key,
                "partitions": [
                    {"partition": 0, "fetch_offset": offset, "partition_max_bytes": 1 << 20}
                ],
            }
        ],
    }


async def test_produce_v13_and_fetch_v13_plus_name_topics_by_id(
    server: KafkaServer, wire: WireClient
) -> None:
    known = topic_id(server)
    batch = build_batch([(b"k", b"v1", []), (b"k", b"v2", [])])
    resp = await wire.request(PRODUCE, 13, produce_by_id(known, batch))
    (topic,) = resp["responses"]
    assert topic["topic_id"] == known
    assert (
        topic["partition_responses"][0]["error_code"],
        topic["partition_responses"][0]["base_offset"],
    ) == (0, 0)
    ghost = uuid.uuid4()
    missing = await wire.request(PRODUCE, 13, produce_by_id(ghost, batch))
    assert only_partition(missing)["error_code"] == ErrorCode.UNKNOWN_TOPIC_ID
    assert server.broker.topics.partition("d", 0).high_watermark == 2  # type: ignore[union-attr]

    for version in (13, 16, 18):
        fetched = await wire.request(FETCH, version, fetch_by_id(known))
        (t,) = fetched["responses"]
        assert t["topic_id"] == known
        part = t["partitions"][0]
        assert (part["error_code"], part["high_watermark"]) == (0, 2)
        assert [r.value for r in iter_records(part["records"])] == [b"v1", b"v2"]
        unknown = await wire.request(FETCH, version, fetch_by_id(ghost))
        assert only_partition(unknown)["error_code"] == ErrorCode.UNKNOWN_TOPIC_ID


async def test_list_offsets_v7_to_v11_special_timestamps(wire: WireClient) -> None:
    batch = build_batch([(None, b"a", [], 1000), (None, b"b", [], 5000), (None, b"c", [], 3000)])
    produced = await wire.request(
        PRODUCE,
        12,
        {
            "acks": -1,
            "timeout_ms": 5000,
            "topic_data": [{"name": "d", "partition_data": [{"index": 0, "records": batch}]}],
        },
    )
    assert only_partition(produced)["error_code"] == 0

    async def at(timestamp: int, version: int) -> tuple[int, int, int]:
        part = only_partition(
            await wire.request(LIST_OFFSETS, version, list_offsets_request("d", [0], timestamp))
        )
        return part["error_code"], part["offset"], part["timestamp"]

    assert await at(-3, 7) == (0, 1, 5000)  # MAX_TIMESTAMP: the record with the largest
    assert await at(-4, 8) == (0, 0, -1)  # EARLIEST_LOCAL: no tiered storage, the start
    assert await at(-5, 9) == (0, -1, -1)  # LATEST_TIERED: nothing tiered
    assert await at(-6, 11) == (0, -1, -1)  # EARLIEST_PENDING_UPLOAD: nothing pending
    assert await at(-1, 11) == (0, 3, -1)
    assert await at(-2, 10) == (0, 0, -1)


async def test_init_producer_id_v3_plus_bumps_an_idempotent_producers_epoch(
    wire: WireClient,
) -> None:
    first = await wire.request(INIT_PRODUCER_ID, 5, {"transactional_id": None})
    assert first["error_code"] == 0 and first["producer_epoch"] == 0
    bumped = await wire.request(
        INIT_PRODUCER_ID,
        5,
        {"transactional_id": None, "producer_id": first["producer_id"], "producer_epoch": 0},
    )
    assert (bumped["error_code"], bumped["producer_id"], bumped["producer_epoch"]) == (
        0,
        first["producer_id"],
        1,
    )
    exhausted = await wire.request(
        INIT_PRODUCER_ID,
        5,
        {"transactional_id": None, "producer_id": first["producer_id"], "producer_epoch": 32767},
    )
    assert exhausted["error_code"] == 0 and exhausted["producer_id"] != first["producer_id"]
    assert exhausted["producer_epoch"] == 0
