"""Partition counts that would take the broker down are refused before anything is allocated,
as Kafka 4 refuses them: more than 10,000 new partitions in one CreateTopics or
CreatePartitions request is POLICY_VIOLATION "Excessively large number of partitions per
request." for every topic of it (a 30-byte request asking for 2^31-1 partitions once made
the broker allocate until it died), and ``--max-partitions`` bounds the total. The broker
answers at once and keeps serving."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import Any

import pytest_asyncio

from kgroupd.broker.net.server import KafkaServer
from kgroupd.broker.testing import running_server
from kgroupd.protocol.errors import ErrorCode
from tests.support.kafka_wire import WireClient

CREATE_TOPICS, CREATE_PARTITIONS, METADATA = 19, 37, 3
POLICY = int(ErrorCode.POLICY_VIOLATION)
EXCESSIVE = "Excessively large number of partitions per request."


@pytest_asyncio.fixture
async def server() -> AsyncIterator[KafkaServer]:
    async with running_server(log_level="warning", max_partitions=50) as srv:
        yield srv


def create(*topics: tuple[str, int], validate_only: bool = False) -> dict[str, Any]:
    return {
        "topics": [
            {
                "name": name,
                "num_partitions": n,
                "replication_factor": 1,
                "assignments": [],
                "configs": [],
            }
            for name, n in topics
        ],
        "timeout_ms": 5000,
        "validate_only": validate_only,
    }


def grow(name: str, count: int) -> dict[str, Any]:
    return {
        "topics": [{"name": name, "count": count, "assignments": None}],
        "timeout_ms": 5000,
        "validate_only": False,
    }


async def topic_names(wire: WireClient) -> set[str]:
    answer = await wire.request(METADATA, 12, {"topics": None, "allow_auto_topic_creation": False})
    return {t["name"] for t in answer["topics"]}


async def test_more_than_10000_partitions_in_one_request(server: KafkaServer) -> None:
    async with await WireClient.connect(server.port) as wire:
        t0 = time.monotonic()
        answer = await wire.request(CREATE_TOPICS, 7, create(("huge", 2**31 - 1)))
        assert time.monotonic() - t0 < 1.0  # nothing allocated
        (topic,) = answer["topics"]
        assert (topic["error_code"], topic["error_message"]) == (POLICY, EXCESSIVE)
        # the limit counts the request as a whole: every topic of it is refused
        answer = await wire.request(CREATE_TOPICS, 7, create(("a", 6000), ("b", 5000), ("c", 1)))
        assert {t["name"]: t["error_code"] for t in answer["topics"]} == dict.fromkeys(
            "abc", POLICY
        )
        assert not {"huge", "a", "b", "c"} & await topic_names(wire)
        # CreatePartitions the same, counting only the new partitions
        ok = await wire.request(CREATE_TOPICS, 7, create(("small", 2)))
        assert ok["topics"][0]["error_code"] == 0
        answer = await wire.request(CREATE_PARTITIONS, 3, grow("small", 2**31 - 1))
        (result,) = answer["results"]
        assert (result["error_code"], result["error_message"]) == (POLICY, EXCESSIVE)
        meta = await wire.request(METADATA, 12, {"topics": [{"name": "small"}]})
        assert len(meta["topics"][0]["partitions"]) == 2


async def test_max_partitions_bounds_the_total(server: KafkaServer) -> None:
    async with await WireClient.connect(server.port) as wire:
        ok = await wire.request(CREATE_TOPICS, 7, create(("forty", 40)))
        assert ok["topics"][0]["error_code"] == 0
        over = await wire.request(CREATE_TOPICS, 7, create(("eleven", 11)))
        (topic,) = over["topics"]
        assert topic["error_code"] == POLICY and "--max-partitions" in topic["error_message"]
        grown = await wire.request(CREATE_PARTITIONS, 3, grow("forty", 51))
        assert grown["results"][0]["error_code"] == POLICY
        # up to the limit is fine
        fits = await wire.request(CREATE_TOPICS, 7, create(("ten", 10)))
        assert fits["topics"][0]["error_code"] == 0
        assert {"forty", "ten"} <= await topic_names(wire)
