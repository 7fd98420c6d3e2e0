"""Topic ids and the other fields the newest Metadata, CreateTopics and DeleteTopics add, on the
wire: a UUID per topic, stable across restarts with --data-dir, new when a topic is recreated."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest_asyncio

from kgroupd.broker.handlers.authorized import CLUSTER_OPERATIONS, NOT_REQUESTED, TOPIC_OPERATIONS
from kgroupd.broker.net.server import KafkaServer
from kgroupd.protocol.errors import ErrorCode
from tests.support.broker_process import broker_process
from tests.support.kafka_wire import WireClient

METADATA, CREATE_TOPICS, DELETE_TOPICS = 3, 19, 20


@pytest_asyncio.fixture
async def wire(server: KafkaServer) -> AsyncIterator[WireClient]:
    async with await WireClient.connect(server.port) as client:
        yield client


async def create(wire: WireClient, name: str, partitions: int = 2) -> uuid.UUID:
    resp = await wire.request(
        CREATE_TOPICS,
        7,
        {
            "topics": [{"name": name, "num_partitions": partitions, "replication_factor": 1}],
            "timeout_ms": 5000,
        },
    )
    (t,) = resp["topics"]
    assert (t["error_code"], t["num_partitions"], t["replication_factor"]) == (0, partitions, 1)
    assert {c["name"] for c in t["configs"]} >= {"retention.ms", "cleanup.policy"}
    assert t["topic_id"] != uuid.UUID(int=0)
    return t["topic_id"]


async def metadata_ids(wire: WireClient, version: int = 12) -> dict[str, uuid.UUID]:
    resp = await wire.request(METADATA, version, {"topics": None})
    return {t["name"]: t["topic_id"] for t in resp["topics"]}


async def test_metadata_names_topics_by_id_and_answers_requests_by_id(
    server: KafkaServer, wire: WireClient
) -> None:
    topic_id = await create(wire, "ids")
    assert server.broker.topics.get("ids").topic_id == topic_id  # type: ignore[union-attr]
    assert (await metadata_ids(wire, 13)) == {"ids": topic_id}
    ghost = uuid.uuid4()
    resp = await wire.request(
        METADATA,
        12,
        # by id: a null name, or an empty one as the Java client sends
        {"topics": [{"topic_id": topic_id, "name": None}, {"topic_id": ghost, "name": ""}]},
    )
    known, unknown = resp["topics"]
    assert (known["name"], known["topic_id"], len(known["partitions"])) == ("ids", topic_id, 2)
    assert (unknown["error_code"], unknown["name"], unknown["topic_id"]) == (
        ErrorCode.UNKNOWN_TOPIC_ID,
        None,
        ghost,
    )


async def test_metadata_authorized_operations_when_asked(wire: WireClient) -> None:
    await create(wire, "ops")
    body = {
        "topics": [{"name": "ops"}],
        "include_cluster_authorized_operations": True,
        "include_topic_authorized_operations": True,
    }
    asked = await wire.request(METADATA, 10, body)
    assert asked["cluster_authorized_operations"] == CLUSTER_OPERATIONS
    assert asked["topics"][0]["topic_authorized_operations"] == TOPIC_OPERATIONS
    not_asked = await wire.request(METADATA, 10, {"topics": [{"name": "ops"}]})
    assert not_asked["cluster_authorized_operations"] == NOT_REQUESTED
    assert not_asked["topics"][0]["topic_authorized_operations"] == NOT_REQUESTED


async def test_delete_topics_v6_by_id_and_a_recreated_topic_gets_a_new_id(
    wire: WireClient,
) -> None:
    first = await create(wire, "again")
    ghost = uuid.uuid4()
    resp = await wire.request(
        DELETE_TOPICS,
        6,
        {"topics": [{"name": None, "topic_id": first}, {"topic_id": ghost}], "timeout_ms": 5000},
    )
    deleted, unknown = resp["responses"]
    assert (deleted["name"], deleted["topic_id"], deleted["error_code"]) == ("again", first, 0)
    assert (unknown["topic_id"], unknown["error_code"]) == (ghost, ErrorCode.UNKNOWN_TOPIC_ID)
    assert "again" not in await metadata_ids(wire)
    second = await create(wire, "again")
    assert second != first
    by_name = await wire.request(
        DELETE_TOPICS, 5, {"topic_names": ["again", "never"], "timeout_ms": 5000}
    )
    assert [(r["name"], r["error_code"]) for r in by_name["responses"]] == [
        ("again", 0),
        ("never", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
    ]


async def test_topic_ids_survive_a_restart_with_a_data_dir(tmp_path: Path) -> None:
    async with broker_process(tmp_path / "data") as broker:
        await broker.start()
        async with await WireClient.connect(broker.port) as wire:
            topic_id = await create(wire, "kept")
        await broker.kill()
        await broker.start()
        async with await WireClient.connect(broker.port) as wire:
            assert (await metadata_ids(wire))["kept"] == topic_id
        await broker.stop()
