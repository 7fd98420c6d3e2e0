"""Offsets for topics and partitions that do not exist are refused before the group
coordinator sees them, as KafkaApis refuses them: OffsetCommit and TxnOffsetCommit answer
UNKNOWN_TOPIC_OR_PARTITION per partition (UNKNOWN_TOPIC_ID for an unknown id at v10) and a
commit refused entirely creates no group; OffsetDelete answers the same per partition after
the group's own errors. On the wire, and as confluent-kafka, kafka-python and kafka-clients 4.3
see it."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio

from kgroupd.broker.config.settings import TopicSpec
from kgroupd.broker.net.server import KafkaServer
from kgroupd.broker.testing import running_server
from kgroupd.protocol.errors import ErrorCode
from tests.conftest import require
from tests.support.java import JavaClient, java_available, prepare_java_client
from tests.support.kafka_wire import WireClient

UNKNOWN = int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
OFFSET_COMMIT, OFFSET_DELETE, TXN_OFFSET_COMMIT, DESCRIBE_GROUPS, METADATA = 8, 47, 28, 15, 3


@pytest_asyncio.fixture
async def server() -> AsyncIterator[KafkaServer]:
    async with running_server(log_level="warning", create_topics=(TopicSpec("real", 2),)) as srv:
        yield srv


def errors(answer: dict[str, Any], key: str = "name") -> dict[tuple[Any, int], int]:
    out = {}
    for t in answer["topics"]:
        for p in t["partitions"]:
            out[(t[key], p["partition_index"])] = p["error_code"]
    return out


def commit_body(group: str, topics: dict[Any, list[int]], key: str = "name") -> dict[str, Any]:
    return {
        "group_id": group,
        "generation_id_or_member_epoch": -1,
        "member_id": "",
        "topics": [
            {
                key: name,
                "partitions": [
                    {"partition_index": p, "committed_offset": 5, "committed_metadata": ""}
                    for p in parts
                ],
            }
            for name, parts in topics.items()
        ],
    }


async def group_exists(wire: WireClient, group: str) -> bool:
    answer = await wire.request(DESCRIBE_GROUPS, 5, {"groups": [group]})
    return bool(answer["groups"][0]["group_state"] not in ("Dead", ""))


@pytest.mark.parametrize("version", [2, 7, 9])
async def test_offset_commit_by_name(server: KafkaServer, version: int) -> None:
    async with await WireClient.connect(server.port) as wire:
        body = commit_body("by-name", {"nope": [0, 1], "real": [1, 7]})
        answer = await wire.request(OFFSET_COMMIT, version, body)
        assert errors(answer) == {
            ("nope", 0): UNKNOWN,
            ("nope", 1): UNKNOWN,
            ("real", 1): 0,
            ("real", 7): UNKNOWN,
        }
        assert [t["name"] for t in answer["topics"]].count("real") == 1  # merged, as Kafka
        # refused entirely: the coordinator never sees it, no group is created
        answer = await wire.request(OFFSET_COMMIT, version, commit_body("never", {"nope": [0]}))
        assert errors(answer) == {("nope", 0): UNKNOWN}
        assert not await group_exists(wire, "never")
        assert await group_exists(wire, "by-name")


async def test_offset_commit_by_id(server: KafkaServer) -> None:
    async with await WireClient.connect(server.port) as wire:
        meta = await wire.request(METADATA, 12, {"topics": [{"name": "real"}]})
        real = meta["topics"][0]["topic_id"]
        ghost = uuid.uuid4()
        body = commit_body("by-id", {ghost: [0], real: [0, 5]}, key="topic_id")
        answer = await wire.request(OFFSET_COMMIT, 10, body)
        assert errors(answer, "topic_id") == {
            (ghost, 0): int(ErrorCode.UNKNOWN_TOPIC_ID),
            (real, 0): 0,
            (real, 5): UNKNOWN,
        }


async def test_txn_offset_commit_and_offset_delete(server: KafkaServer) -> None:
    async with await WireClient.connect(server.port) as wire:
        txn = {
            "transactional_id": "t",
            "group_id": "txn-never",
            "producer_id": 1,
            "producer_epoch": 0,
            "generation_id": -1,
            "member_id": "",
            "topics": commit_body("", {"nope": [0], "real": [4]})["topics"],
        }
        answer = await wire.request(TXN_OFFSET_COMMIT, 5, txn)
        assert errors(answer) == {("nope", 0): UNKNOWN, ("real", 4): UNKNOWN}
        assert not await group_exists(wire, "txn-never")
        await wire.request(OFFSET_COMMIT, 7, commit_body("del", {"real": [0]}))
        body = {
            "group_id": "del",
            "topics": [
                {"name": "nope", "partitions": [{"partition_index": 0}]},
                {"name": "real", "partitions": [{"partition_index": 0}, {"partition_index": 3}]},
            ],
        }
        answer = await wire.request(OFFSET_DELETE, 0, body)
        assert answer["error_code"] == 0
        assert errors(answer) == {("nope", 0): UNKNOWN, ("real", 0): 0, ("real", 3): UNKNOWN}
        # the group's own error comes first, without topics
        answer = await wire.request(OFFSET_DELETE, 0, body | {"group_id": "no-such-group"})
        assert answer["error_code"] == int(ErrorCode.GROUP_ID_NOT_FOUND) and not answer["topics"]


async def test_confluent_kafka(server: KafkaServer) -> None:
    from confluent_kafka import Consumer, KafkaError, TopicPartition

    def run() -> list[Any]:
        got: list[Any] = []
        consumer = Consumer(
            {
                "bootstrap.servers": f"127.0.0.1:{server.port}",
                "group.id": "cf",
                "on_commit": lambda err, parts: got.append(parts),
            }
        )
        try:
            consumer.commit(offsets=[TopicPartition("nope", 0, 5)], asynchronous=True)
            deadline = time.monotonic() + 20
            while not got and time.monotonic() < deadline:
                consumer.poll(0.1)
        finally:
            consumer.close()
        return got

    (parts,) = await asyncio.to_thread(run)
    assert [(p.topic, p.partition, p.error.code()) for p in parts] == [
        ("nope", 0, KafkaError.UNKNOWN_TOPIC_OR_PART)
    ]


@pytest.mark.filterwarnings("ignore:(read_text|open_text) is deprecated:DeprecationWarning")
async def test_kafka_python(server: KafkaServer) -> None:
    """(kafka-python 3 reads its schemas with importlib.resources.read_text, deprecated in
    Python 3.11.)"""
    from kafka import KafkaConsumer
    from kafka.errors import UnknownTopicOrPartitionError
    from kafka.structs import OffsetAndMetadata, TopicPartition

    def run() -> list[Any]:
        got: list[Any] = []
        consumer = KafkaConsumer(bootstrap_servers=f"127.0.0.1:{server.port}", group_id="kp")
        try:
            offsets = {TopicPartition("nope", 0): OffsetAndMetadata(5, "", -1)}
            consumer.commit_async(offsets, callback=lambda _offsets, result: got.append(result))
            deadline = time.monotonic() + 20
            while not got and time.monotonic() < deadline:
                consumer.poll(timeout_ms=100)
        finally:
            consumer.close()
        return got

    (result,) = await asyncio.to_thread(run)
    assert isinstance(result, UnknownTopicOrPartitionError)


@pytest.mark.java
async def test_java_admin(server: KafkaServer) -> None:
    require(java_available(), "java and javac (JDK 17) are not on PATH; the Java client needs them")
    java: JavaClient = prepare_java_client()
    command = java.command("KgroupdUnknownTopicCommit", f"127.0.0.1:{server.port}", "jv")
    proc = await asyncio.create_subprocess_exec(
        *command, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    out, err = await asyncio.wait_for(proc.communicate(), 120)
    lines = [ln for ln in out.decode().splitlines() if ln.startswith("KGROUPD_UNKNOWN_TOPIC ")]
    assert lines, err.decode()[-5000:]
    outcome = json.loads(lines[-1].split(" ", 1)[1])
    assert outcome == {
        "jv-nope-0": "UnknownTopicOrPartitionException",
        "jv-real-9": "UnknownTopicOrPartitionException",
        "jv-real-1": "ok",
    }
