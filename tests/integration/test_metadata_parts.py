"""Metadata answers built from the cached encoding of each topic
(``kgroupd.broker.handlers.metadata_parts``): every version's answer is exactly what the codec
writes for the same fields, and stays right after topics are created, grown, deleted and
recreated, including a request answered in slices (many partitions not yet encoded)."""

from __future__ import annotations

import struct
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest_asyncio

from kgroupd.broker.handlers.metadata_parts import SLICE_PARTITIONS
from kgroupd.broker.net.server import KafkaServer
from kgroupd.broker.testing import running_server
from kgroupd.protocol.messages import lookup
from tests.support.kafka_wire import WireClient

METADATA, CREATE_TOPICS, DELETE_TOPICS, CREATE_PARTITIONS = 3, 19, 20, 37
_INT32 = struct.Struct(">i")


@pytest_asyncio.fixture
async def server() -> AsyncIterator[KafkaServer]:
    async with running_server(log_level="warning") as srv:
        yield srv


@pytest_asyncio.fixture
async def wire(server: KafkaServer) -> AsyncIterator[WireClient]:
    async with await WireClient.connect(server.port) as client:
        yield client


async def metadata(wire: WireClient, version: int, body: dict[str, Any]) -> dict[str, Any]:
    """One Metadata round trip, the answer decoded strictly (every byte read) and checked to
    be byte for byte what the codec writes for the decoded fields."""
    spec = lookup(METADATA, version)
    assert spec is not None
    corr = await wire.send(METADATA, version, body)
    frame = await wire.read_frame()
    start = 5 if spec.response_header_v1 else 4
    assert _INT32.unpack_from(frame)[0] == corr
    answer = spec.decode_response(frame, start)
    assert spec.encode_response(answer) == frame[start:]
    return answer


def all_topics(version: int) -> dict[str, Any]:
    return {"topics": [] if version == 0 else None, "allow_auto_topic_creation": False}


async def create(wire: WireClient, name: str, partitions: int) -> uuid.UUID:
    resp = await wire.request(
        CREATE_TOPICS,
        7,
        {
            "topics": [{"name": name, "num_partitions": partitions, "replication_factor": 1}],
            "timeout_ms": 5000,
        },
    )
    assert resp["topics"][0]["error_code"] == 0
    return uuid.UUID(str(resp["topics"][0]["topic_id"]))


def shape(answer: dict[str, Any]) -> dict[str, tuple[int, int]]:
    """topic -> (partition count, error code), with every partition led by node 0."""
    out = {}
    for t in answer["topics"]:
        parts = t["partitions"]
        assert [p["partition_index"] for p in parts] == list(range(len(parts)))
        assert all(p["leader_id"] == 0 and p["replica_nodes"] == [0] for p in parts)
        out[t["name"]] = (len(parts), t["error_code"])
    return out


async def test_every_version_answers_as_the_codec_writes(wire: WireClient) -> None:
    await create(wire, "one", 1)
    await create(wire, "three", 3)
    await create(wire, "forty", 40)  # partitions encoded once, their index spliced in
    for version in range(14):
        for _ in range(2):  # encoded, then from the cache
            got = await metadata(wire, version, all_topics(version))
            assert shape(got) == {"one": (1, 0), "three": (3, 0), "forty": (40, 0)}
            assert got["brokers"][0]["node_id"] == 0
        if version >= 4:  # before v4 an unknown topic is created when asked for
            asked = [{"name": "three"}, {"name": "nope"}]
            named = {"topics": asked, "allow_auto_topic_creation": False}
            got = await metadata(wire, version, named)
            assert shape(got) == {"three": (3, 0), "nope": (0, 3)}  # UNKNOWN_TOPIC_OR_PARTITION
        if version >= 8:
            asked = {**all_topics(version), "include_topic_authorized_operations": True}
            with_ops = await metadata(wire, version, asked)
            assert {t["topic_authorized_operations"] for t in with_ops["topics"]} != {-(2**31)}


async def test_answers_follow_topic_changes(wire: WireClient) -> None:
    first = await create(wire, "grows", 2)
    for version in (1, 9, 12):
        assert shape(await metadata(wire, version, all_topics(version))) == {"grows": (2, 0)}
    resp = await wire.request(
        CREATE_PARTITIONS,
        3,
        {"topics": [{"name": "grows", "count": 5, "assignments": None}], "timeout_ms": 5000},
    )
    assert resp["results"][0]["error_code"] == 0
    for version in (1, 9, 12):
        assert shape(await metadata(wire, version, all_topics(version))) == {"grows": (5, 0)}
    await wire.request(DELETE_TOPICS, 6, {"topics": [{"name": "grows"}], "timeout_ms": 5000})
    for version in (1, 9, 12):
        assert shape(await metadata(wire, version, all_topics(version))) == {}
    second = await create(wire, "grows", 1)
    assert second != first
    got = await metadata(wire, 12, all_topics(12))
    assert shape(got) == {"grows": (1, 0)}
    assert got["topics"][0]["topic_id"] == second
    by_id = await metadata(wire, 12, {"topics": [{"topic_id": second, "name": None}]})
    assert shape(by_id) == {"grows": (1, 0)}


async def test_many_partitions_not_yet_encoded_are_answered_whole(
    server: KafkaServer, wire: WireClient
) -> None:
    """More than SLICE_PARTITIONS partitions to encode: answered by a coroutine, a topic at
    a time, and the answer is the same as the next one (from the cache)."""
    sizes = {f"big-{i}": SLICE_PARTITIONS // 2 + 1 for i in range(3)}
    sizes["small"] = 1
    for name, n in sizes.items():
        await create(wire, name, n)
    other = await WireClient.connect(server.port)
    async with other:
        # both connections ask at once (the second may be answered between the slices)
        await wire.send(METADATA, 12, all_topics(12))
        answered = await metadata(other, 12, {"topics": [{"name": "small"}]})
        assert shape(answered) == {"small": (1, 0)}
        frame = await wire.read_frame()
    spec = lookup(METADATA, 12)
    assert spec is not None
    sliced = spec.decode_response(frame, 5)
    assert spec.encode_response(sliced) == frame[5:]
    assert {n: c for n, (c, _e) in shape(sliced).items()} == sizes
    cached = await metadata(wire, 12, all_topics(12))
    assert cached == sliced
