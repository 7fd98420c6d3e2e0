"""The fields the newest OffsetCommit/OffsetFetch versions add, each honoured on the wire."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest_asyncio

from kgroupd.broker.net.server import KafkaServer
from kgroupd.protocol.errors import ErrorCode
from tests.support.kafka_wire import WireClient, create_topic

OFFSET_COMMIT, OFFSET_FETCH = 8, 9


@pytest_asyncio.fixture
async def wire(server: KafkaServer) -> AsyncIterator[WireClient]:
    async with await WireClient.connect(server.port) as client:
        await create_topic(client, "t", 2)
        yield client


def commit_topic(key: dict[str, Any], offsets: dict[int, int]) -> dict[str, Any]:
    return {
        **key,
        "partitions": [
            {"partition_index": p, "committed_offset": o, "committed_metadata": f"m{o}"}
            for p, o in offsets.items()
        ],
    }


async def test_offset_commit_and_fetch_v10_name_topics_by_id(
    server: KafkaServer, wire: WireClient
) -> None:
    topic = server.broker.topics.get("t")
    assert topic is not None
    ghost = uuid.uuid4()
    resp = await wire.request(
        OFFSET_COMMIT,
        10,
        {
            "group_id": "g10",
            "generation_id_or_member_epoch": -1,
            "member_id": "",
            "topics": [
                commit_topic({"topic_id": topic.topic_id}, {0: 5, 1: 6}),
                commit_topic({"topic_id": ghost}, {0: 1}),
            ],
        },
    )
    got = {
        t["topic_id"]: {p["partition_index"]: p["error_code"] for p in t["partitions"]}
        for t in resp["topics"]
    }
    assert got == {topic.topic_id: {0: 0, 1: 0}, ghost: {0: ErrorCode.UNKNOWN_TOPIC_ID}}
    # Committed under the topic's name: a v7 fetch by name sees them.
    by_name = await wire.request(
        OFFSET_FETCH, 7, {"group_id": "g10", "topics": [{"name": "t", "partition_indexes": [0, 1]}]}
    )
    assert [p["committed_offset"] for p in by_name["topics"][0]["partitions"]] == [5, 6]

    fetched = await wire.request(
        OFFSET_FETCH,
        10,
        {
            "groups": [
                {
                    "group_id": "g10",
                    "topics": [
                        {"topic_id": topic.topic_id, "partition_indexes": [0, 1]},
                        {"topic_id": ghost, "partition_indexes": [0]},
                    ],
                },
                {"group_id": "g10", "topics": None},  # all of its topics
            ]
        },
    )
    asked, every = fetched["groups"]
    offsets = {
        t["topic_id"]: [(p["committed_offset"], p["error_code"]) for p in t["partitions"]]
        for t in asked["topics"]
    }
    assert offsets == {topic.topic_id: [(5, 0), (6, 0)], ghost: [(-1, ErrorCode.UNKNOWN_TOPIC_ID)]}
    assert [t["topic_id"] for t in every["topics"]] == [topic.topic_id]


async def test_offset_fetch_v8_answers_every_group_of_a_request(wire: WireClient) -> None:
    for group, offset in (("ga", 3), ("gb", 4)):
        resp = await wire.request(
            OFFSET_COMMIT,
            8,
            {
                "group_id": group,
                "generation_id_or_member_epoch": -1,
                "member_id": "",
                "topics": [commit_topic({"name": "t"}, {0: offset})],
            },
        )
        assert resp["topics"][0]["partitions"][0]["error_code"] == 0
    fetched = await wire.request(
        OFFSET_FETCH,
        8,
        {
            "groups": [
                {"group_id": g, "topics": [{"name": "t", "partition_indexes": [0]}]}
                for g in ("ga", "gb", "nobody")
            ]
        },
    )
    got = {
        g["group_id"]: (g["error_code"], g["topics"][0]["partitions"][0]["committed_offset"])
        for g in fetched["groups"]
    }
    assert got == {"ga": (0, 3), "gb": (0, 4), "nobody": (0, -1)}


async def test_offset_commit_v9_unknown_group_with_a_generation_is_not_found(
    wire: WireClient,
) -> None:
    body = {
        "group_id": "never-joined",
        "generation_id_or_member_epoch": 3,
        "member_id": "m",
        "topics": [commit_topic({"name": "t"}, {0: 1})],
    }
    v8 = await wire.request(OFFSET_COMMIT, 8, body)
    assert v8["topics"][0]["partitions"][0]["error_code"] == ErrorCode.ILLEGAL_GENERATION
    v9 = await wire.request(OFFSET_COMMIT, 9, body)
    assert v9["topics"][0]["partitions"][0]["error_code"] == ErrorCode.GROUP_ID_NOT_FOUND
