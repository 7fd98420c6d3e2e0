"""Many partitions (issue 26): a CreateTopics over ``CREATE_SLICE`` partitions makes them a slice
at a time, and the topic is known only once whole (its name is taken meanwhile); with
``--data-dir`` a partition's directory is made at its first write, and a restart after SIGKILL
brings back every partition with its data and every committed offset."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest_asyncio

from kgroupd.broker.handlers.admin import CREATE_SLICE
from kgroupd.broker.net.server import KafkaServer
from kgroupd.broker.testing import running_server
from kgroupd.protocol.errors import ErrorCode
from tests.support.broker_process import broker_process
from tests.support.kafka_wire import (
    WireClient,
    build_batch,
    create_topics_request,
    fetch_request,
    iter_records,
    list_offsets_request,
    produce_request,
)

PRODUCE, FETCH, LIST_OFFSETS, METADATA, OFFSET_COMMIT, OFFSET_FETCH = 0, 1, 2, 3, 8, 9
CREATE_TOPICS, DELETE_TOPICS, CREATE_PARTITIONS = 19, 20, 37
EXISTS = int(ErrorCode.TOPIC_ALREADY_EXISTS)


@pytest_asyncio.fixture
async def server() -> AsyncIterator[KafkaServer]:
    async with running_server(log_level="warning") as srv:
        yield srv


async def partitions_of(wire: WireClient) -> dict[str, int]:
    resp = await wire.request(METADATA, 12, {"topics": None, "allow_auto_topic_creation": False})
    return {t["name"]: len(t["partitions"]) for t in resp["topics"] if not t["is_internal"]}


async def test_a_large_create_and_a_rival_for_its_name(server: KafkaServer) -> None:
    big = CREATE_SLICE * 3 + 7
    async with (
        await WireClient.connect(server.port) as one,
        await WireClient.connect(server.port) as other,
    ):
        first = await one.send(CREATE_TOPICS, 7, create_topics_request("big", big))
        second = await other.send(CREATE_TOPICS, 7, create_topics_request("big", 1))
        answers = [
            (await one.receive(CREATE_TOPICS, 7, first))["topics"][0],
            (await other.receive(CREATE_TOPICS, 7, second))["topics"][0],
        ]
        codes = sorted(a["error_code"] for a in answers)
        assert codes == [0, EXISTS]  # one made it, the other was told it exists
        won = next(a for a in answers if a["error_code"] == 0)
        assert await partitions_of(one) == {"big": won["num_partitions"]}
        topic = server.broker.topics.get("big")
        assert topic is not None and topic.topic_id == won["topic_id"]
        assert server.broker.topics.creating == {}
        # the partitions count as they are: a second big topic fits only under the limit
        again = await one.request(CREATE_TOPICS, 7, create_topics_request("big", 2))
        assert again["topics"][0]["error_code"] == EXISTS


def _grow(name: str, count: int) -> dict[str, Any]:
    return {
        "topics": [{"name": name, "count": count, "assignments": None}],
        "timeout_ms": 5000,
        "validate_only": False,
    }


async def test_partitions_added_in_slices_and_rivals(server: KafkaServer) -> None:
    """CreatePartitions over CREATE_SLICE: the partitions appear all at once; a rival
    CreatePartitions meanwhile is REASSIGNMENT_IN_PROGRESS (retriable), or answered as if
    before or after; a DeleteTopics meanwhile wins and the growth is answered as unknown."""
    big = CREATE_SLICE * 3 + 7
    async with (
        await WireClient.connect(server.port) as one,
        await WireClient.connect(server.port) as other,
    ):
        for name in ("grown", "doomed"):
            resp = await one.request(CREATE_TOPICS, 7, create_topics_request(name, 1))
            assert resp["topics"][0]["error_code"] == 0
        first = await one.send(CREATE_PARTITIONS, 3, _grow("grown", big))
        second = await other.send(CREATE_PARTITIONS, 3, _grow("grown", 5))
        grew = (await one.receive(CREATE_PARTITIONS, 3, first))["results"][0]
        rival = (await other.receive(CREATE_PARTITIONS, 3, second))["results"][0]
        assert grew["error_code"] == 0
        in_progress, invalid = ErrorCode.REASSIGNMENT_IN_PROGRESS, ErrorCode.INVALID_PARTITIONS
        assert rival["error_code"] in (0, int(in_progress), int(invalid))
        first = await one.send(CREATE_PARTITIONS, 3, _grow("doomed", big))
        second = await other.send(DELETE_TOPICS, 6, {"topics": [{"name": "doomed"}]})
        doomed = (await one.receive(CREATE_PARTITIONS, 3, first))["results"][0]
        deleted = (await other.receive(DELETE_TOPICS, 6, second))["responses"][0]
        assert deleted["error_code"] == 0
        assert doomed["error_code"] in (0, int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION))
        assert await partitions_of(one) == {"grown": big}
        assert server.broker.topics.creating == {}


async def test_a_deleted_topic_leaves_no_data_to_its_successor(tmp_path: Path) -> None:
    """DeleteTopics renames the partitions' directories ``-delete`` and removes them on a
    thread: a topic of the same name made at once starts empty, before and after a crash."""
    topics = tmp_path / "data" / "topics"
    async with broker_process(tmp_path / "data") as broker:
        await broker.start()
        async with await WireClient.connect(broker.port) as wire:
            for value in (b"old", b"new"):
                resp = await wire.request(CREATE_TOPICS, 7, create_topics_request("again", 2))
                assert resp["topics"][0]["error_code"] == 0
                for p in (0, 1):
                    batch = build_batch([(b"k", value, [])])
                    resp = await wire.request(PRODUCE, 9, produce_request("again", p, batch))
                    assert resp["responses"][0]["partition_responses"][0]["base_offset"] == 0
                if value == b"old":
                    body = {"topics": [{"name": "again"}], "timeout_ms": 5000}
                    resp = await wire.request(DELETE_TOPICS, 6, body)
                    assert resp["responses"][0]["error_code"] == 0
        assert {"again-0", "again-1"} <= {p.name for p in topics.iterdir()}
        await broker.kill()
        await broker.start()
        async with await WireClient.connect(broker.port) as wire:
            for p in (0, 1):
                resp = await wire.request(FETCH, 12, fetch_request("again", p, 0))
                data = resp["responses"][0]["partitions"][0]["records"]
                assert [r.value for r in iter_records(data)] == [b"new"]
        await broker.stop()
    assert sorted(p.name for p in topics.iterdir() if not p.name.endswith("-delete")) == [
        "again-0",
        "again-1",
    ]


def _commit(topic: str, offsets: dict[int, int]) -> dict[str, Any]:
    return {
        "group_id": "g",
        "generation_id_or_member_epoch": -1,
        "member_id": "",
        "topics": [
            {
                "name": topic,
                "partitions": [
                    {"partition_index": p, "committed_offset": o, "committed_metadata": ""}
                    for p, o in offsets.items()
                ],
            }
        ],
    }


async def test_restart_keeps_every_partition_with_its_data_and_offsets(tmp_path: Path) -> None:
    topics = {f"wide-{i}": CREATE_SLICE * 2 + 1 for i in range(3)}
    # (topic, partition) -> batches written: the first, one inside and the last partition
    written = {(name, p): p % 3 + 1 for name, n in topics.items() for p in (0, 7, n - 1)}
    async with broker_process(tmp_path / "data") as broker:
        await broker.start()
        async with await WireClient.connect(broker.port) as wire:
            for name, n in topics.items():
                resp = await wire.request(CREATE_TOPICS, 7, create_topics_request(name, n))
                assert resp["topics"][0]["error_code"] == 0
            for (name, p), count in written.items():
                for i in range(count):
                    batch = build_batch([(b"k", f"{name}/{p}/{i}".encode(), [])])
                    resp = await wire.request(PRODUCE, 9, produce_request(name, p, batch))
                    part = resp["responses"][0]["partition_responses"][0]
                    assert (part["error_code"], part["base_offset"]) == (0, i)
            for name in topics:
                offsets = {p: c for (t, p), c in written.items() if t == name}
                resp = await wire.request(OFFSET_COMMIT, 8, _commit(name, offsets))
                assert all(p["error_code"] == 0 for t in resp["topics"] for p in t["partitions"])
        # only the partitions written to have a directory
        made = {p.name for p in (tmp_path / "data" / "topics").iterdir()}
        assert made == {f"{name}-{p}" for name, p in written}
        await broker.kill()
        await broker.start()
        async with await WireClient.connect(broker.port) as wire:
            assert await partitions_of(wire) == topics
            for name, n in topics.items():
                resp = await wire.request(LIST_OFFSETS, 7, list_offsets_request(name, range(n), -1))
                ends = {p["partition_index"]: p["offset"] for p in resp["topics"][0]["partitions"]}
                expected = {p: written.get((name, p), 0) for p in range(n)}
                assert ends == expected
            for (name, p), count in written.items():
                resp = await wire.request(FETCH, 12, fetch_request(name, p, 0))
                data = resp["responses"][0]["partitions"][0]["records"]
                values = [r.value for r in iter_records(data)]
                assert values == [f"{name}/{p}/{i}".encode() for i in range(count)]
            body = {
                "group_id": "g",
                "topics": [{"name": name, "partition_indexes": [0, 7]} for name in topics],
                "require_stable": False,
            }
            resp = await wire.request(OFFSET_FETCH, 7, body)
            got = {
                (t["name"], p["partition_index"]): p["committed_offset"]
                for t in resp["topics"]
                for p in t["partitions"]
            }
            assert got == {(name, p): written[(name, p)] for name in topics for p in (0, 7)}
            # a partition never written to before the crash takes writes after it
            batch = build_batch([(b"k", b"late", [])])
            resp = await wire.request(PRODUCE, 9, produce_request("wide-0", 5, batch))
            assert resp["responses"][0]["partition_responses"][0]["base_offset"] == 0
        await broker.stop()
