"""Simulated nodes (``--nodes 3``): a Produce naming partitions of several leaders is answered
per partition, as Kafka answers it. The partitions the node leads are appended and answered as
usual; the others are NOT_LEADER_OR_FOLLOWER with their current leader and (v10+, KIP-951) its
address in ``node_endpoints``; with acks=0 the node's own partitions are appended, nothing is
answered and the connection closes, as Kafka closes it. An idempotent aiokafka producer whose
metadata is stale when a node comes back (its requests name partitions the node no longer
leads) still delivers every record once."""

from __future__ import annotations

import asyncio
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
import pytest_asyncio
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from kgroupd.broker.config.settings import TopicSpec
from kgroupd.broker.net.server import KafkaServer
from kgroupd.broker.testing import ThreadedBroker, running_server
from kgroupd.protocol.errors import ErrorCode
from tests.support.kafka_wire import WireClient, build_batch, list_offsets_request
from tests.support.nodes import leader, ports

TOPIC, PARTITIONS = "split", 6
PRODUCE, LIST_OFFSETS, API_VERSIONS = 0, 2, 18
NOT_LEADER = ErrorCode.NOT_LEADER_OR_FOLLOWER


@pytest_asyncio.fixture
async def server() -> AsyncIterator[KafkaServer]:
    async with running_server(
        log_level="warning",
        nodes=3,
        node_id=1,
        create_topics=(TopicSpec(TOPIC, PARTITIONS),),
    ) as srv:
        yield srv


def produce_body(
    parts: list[int], acks: int = -1, topic_id: uuid.UUID | None = None
) -> dict[str, Any]:
    """One Produce naming ``parts`` of the topic, each with one record ``p<index>``."""
    topic: dict[str, Any] = {"name": TOPIC} if topic_id is None else {"topic_id": topic_id}
    topic["partition_data"] = [
        {"index": p, "records": build_batch([(None, b"p%d" % p, [])])} for p in parts
    ]
    return {"transactional_id": None, "acks": acks, "timeout_ms": 10_000, "topic_data": [topic]}


async def ends(server: KafkaServer) -> dict[int, int]:
    """Each partition's log end offset, asked of its leader."""
    out = {}
    for p in range(PARTITIONS):
        async with await WireClient.connect(ports(server)[leader(p)]) as c:
            answer = await c.request(LIST_OFFSETS, 7, list_offsets_request(TOPIC, [p], -1))
        (entry,) = answer["topics"][0]["partitions"]
        assert entry["error_code"] == 0
        out[p] = entry["offset"]
    return out


def answered(answer: dict[str, Any]) -> dict[int, dict[str, Any]]:
    return {p["index"]: p for t in answer["responses"] for p in t["partition_responses"]}


@pytest.mark.parametrize("version", [9, 10, 13])
async def test_a_produce_to_several_leaders_is_answered_per_partition(
    server: KafkaServer, version: int
) -> None:
    by_node = ports(server)
    tid = server.broker.topics.topics[TOPIC].topic_id
    body = produce_body(list(range(PARTITIONS)), topic_id=tid if version >= 13 else None)
    async with await WireClient.connect(by_node[1]) as c:  # node 1 leads 0 and 3
        answer = await c.request(PRODUCE, version, body)
        again = answered(await c.request(PRODUCE, version, body))
    got = answered(answer)
    assert sorted(got) == list(range(PARTITIONS))
    for p in (0, 3):
        assert (got[p]["error_code"], got[p]["base_offset"]) == (0, 0)
        assert (again[p]["error_code"], again[p]["base_offset"]) == (0, 1)
    for p in (1, 2, 4, 5):
        assert (got[p]["error_code"], got[p]["base_offset"]) == (NOT_LEADER, -1)
        assert again[p]["error_code"] == NOT_LEADER
    if version >= 10:
        for p in (1, 2, 4, 5):
            assert got[p]["current_leader"] == {"leader_id": leader(p), "leader_epoch": 0}
        endpoints = {(e["node_id"], e["port"]) for e in answer["node_endpoints"]}
        assert endpoints == {(2, by_node[2]), (3, by_node[3])}
    if version >= 13:
        assert {t["topic_id"] for t in answer["responses"]} == {tid}
    else:
        assert {t["name"] for t in answer["responses"]} == {TOPIC}
    assert await ends(server) == {0: 2, 1: 0, 2: 0, 3: 2, 4: 0, 5: 0}


async def test_with_acks_0_the_own_partitions_are_appended_and_the_connection_closed(
    server: KafkaServer,
) -> None:
    """As Kafka closes an acks=0 producer's connection on any partition's error (so that it
    refreshes its metadata): nothing is answered, the node's own partitions are appended."""
    for parts in ([0, 1, 2, 4], [0, 2]):  # node 2 leads 1 and 4; then none of its own
        async with await WireClient.connect(ports(server)[2]) as c:
            await c.send(PRODUCE, 9, produce_body(parts, acks=0))
            with pytest.raises(asyncio.IncompleteReadError):
                await c.read_frame()  # closed, unanswered
    async with await WireClient.connect(ports(server)[2]) as c:  # its own only: no closing
        await c.send(PRODUCE, 9, produce_body([1], acks=0))
        software = {"client_software_name": "t", "client_software_version": "1"}
        corr = await c.send(API_VERSIONS, 3, software)
        await c.receive(API_VERSIONS, 3, corr)  # the next answer is this one's
    assert await ends(server) == {0: 0, 1: 2, 2: 0, 3: 0, 4: 1, 5: 0}


async def test_with_acks_0_a_batch_checked_off_the_loop_is_appended_before_closing(
    server: KafkaServer,
) -> None:
    """A compressed batch expanding past 1 MiB is checked on a worker thread: the connection
    closes once it is appended."""
    big = build_batch([(None, bytes(2 << 20), [])], compression=1)  # gzip
    body = produce_body([0, 1], acks=0)
    body["topic_data"][0]["partition_data"][1]["records"] = big
    async with await WireClient.connect(ports(server)[2]) as c:  # node 2 leads 1, not 0
        await c.send(PRODUCE, 9, body)
        with pytest.raises(asyncio.IncompleteReadError):
            await c.read_frame()
    assert await ends(server) == dict.fromkeys(range(PARTITIONS), 0) | {1: 1}


@pytest.fixture
def threaded() -> Iterator[ThreadedBroker]:
    with ThreadedBroker(nodes=3, create_topics=[f"{TOPIC}:{PARTITIONS}"]) as broker:
        yield broker


async def test_an_idempotent_producer_with_stale_leaders_delivers_every_record_once(
    threaded: ThreadedBroker,
) -> None:
    """Node 1 down: node 2 leads partitions 1, 2, 4 and 5. Node 1 comes back and leads 1 and 4
    again; the producer, not yet told, sends node 2 one request for all four: node 2 appends 2
    and 5, refuses 1 and 4, and the producer sends those to node 1. Every record is there
    once, in the order sent."""
    producer = AIOKafkaProducer(
        bootstrap_servers=threaded.bootstrap,
        enable_idempotence=True,
        linger_ms=20,
        retry_backoff_ms=50,
        metadata_max_age_ms=600_000,
    )
    sent: list[tuple[int, bytes]] = []

    async def send_round(name: str) -> None:
        waiting = []
        for i in range(PARTITIONS * 4):
            value = f"{name}-{i}".encode()
            waiting.append(await producer.send(TOPIC, value, partition=i % PARTITIONS))
            sent.append((i % PARTITIONS, value))
        await asyncio.gather(*waiting)

    await producer.start()
    try:
        await send_round("a")
        threaded.controls.node_down(1)
        await send_round("b")
        threaded.controls.node_up(1)
        await send_round("c")
        await send_round("d")
    finally:
        await producer.stop()
    consumer = AIOKafkaConsumer(bootstrap_servers=threaded.bootstrap, enable_auto_commit=False)
    await consumer.start()
    seen: list[tuple[int, bytes]] = []
    try:
        parts = [TopicPartition(TOPIC, p) for p in range(PARTITIONS)]
        consumer.assign(parts)
        await consumer.seek_to_beginning()
        ends = await consumer.end_offsets(parts)
        assert sum(ends.values()) == len(sent)  # nothing appended twice
        while len(seen) < len(sent):
            for records in (await consumer.getmany(timeout_ms=500)).values():
                seen.extend((r.partition, r.value) for r in records if r.value is not None)
    finally:
        await consumer.stop()
    assert Counter(seen) == Counter(sent)
    for p in range(PARTITIONS):  # in the order sent on each partition
        assert [v for q, v in seen if q == p] == [v for q, v in sent if q == p]
