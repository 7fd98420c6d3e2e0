"""Simulated nodes (``--nodes N``, issue 28), over real sockets: three nodes each on its own
port, listed in Metadata, partitions' leaders and group coordinators spread over them; a
request to a node that does not lead a partition answered NOT_LEADER_OR_FOLLOWER, a group
request to one that does not coordinate the group NOT_COORDINATOR (FindCoordinator names the
right node); a node taken down closes its connections, refuses new ones, and its leaderships
move (leader epochs bumped) until it comes back; the controls' bad requests answered 400 with
the reason, and 404 without --test-controls; an aiokafka producer and consumer across a node
down and up; a librdkafka consumer (confluent-kafka) whose coordinator goes down and comes
back; kafkajs reading Metadata of three nodes. The Java consumer whose coordinator goes
down is in test_nodes_java.py."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import pytest_asyncio
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from confluent_kafka import Consumer, Producer
from confluent_kafka import TopicPartition as ConfluentPartition

from kgroupd.broker.config.settings import TopicSpec
from kgroupd.broker.coordinator.placement import partition_for
from kgroupd.broker.net.connection import KafkaConnection
from kgroupd.broker.net.nodes import NodeConnection
from kgroupd.broker.net.server import KafkaServer
from kgroupd.broker.testing import ThreadedBroker, running_server
from kgroupd.protocol.errors import ErrorCode
from tests.conftest import require
from tests.support.kafka_wire import (
    WireClient,
    build_batch,
    fetch_request,
    list_offsets_request,
    produce_request,
)
from tests.support.nodes import ports

TOPIC, PARTITIONS = "spread", 6
METADATA, OFFSET_COMMIT, OFFSET_FETCH, FIND_COORDINATOR, HEARTBEAT = 3, 8, 9, 10, 12
LIST_GROUPS = 16
PRODUCE, FETCH, LIST_OFFSETS = 0, 1, 2


@pytest_asyncio.fixture
async def server() -> AsyncIterator[KafkaServer]:
    async with running_server(
        log_level="warning",
        test_controls=True,
        nodes=3,
        node_id=1,
        create_topics=(TopicSpec(TOPIC, PARTITIONS),),
    ) as srv:
        yield srv


async def http(server: KafkaServer, method: str, path: str) -> tuple[int, Any]:
    assert server.http is not None
    url = f"http://127.0.0.1:{server.http.port}{path}"
    async with aiohttp.ClientSession() as session, session.request(method, url) as r:
        text = await r.text()
        try:
            return r.status, json.loads(text)
        except ValueError:
            return r.status, text


async def metadata(port: int) -> dict[str, Any]:
    async with await WireClient.connect(port) as c:
        return await c.request(
            METADATA,
            12,
            {
                "topics": [{"name": TOPIC, "topic_id": None}],
                "allow_auto_topic_creation": False,
                "include_topic_authorized_operations": False,
            },
        )


def leaders(meta: dict[str, Any]) -> dict[int, tuple[int, int]]:
    (topic,) = meta["topics"]
    return {p["partition_index"]: (p["leader_id"], p["leader_epoch"]) for p in topic["partitions"]}


async def produce(port: int, partition: int) -> int:
    batch = build_batch([(None, b"v", [])])
    async with await WireClient.connect(port) as c:
        answer = await c.request(PRODUCE, 9, produce_request(TOPIC, partition, batch))
    return answer["responses"][0]["partition_responses"][0]["error_code"]


async def test_three_nodes_on_their_own_ports_lead_partitions_round_robin(
    server: KafkaServer,
) -> None:
    by_node = ports(server)
    assert list(by_node) == [1, 2, 3]  # ids from --node-id
    assert by_node[1] == server.port and len(set(by_node.values())) == 3
    for port in by_node.values():  # every node answers Metadata alike, with its addresses
        meta = await metadata(port)
        assert [(b["node_id"], b["port"]) for b in meta["brokers"]] == sorted(by_node.items())
        assert meta["controller_id"] == 1
        assert leaders(meta) == {p: (1 + p % 3, 0) for p in range(PARTITIONS)}
        (topic,) = meta["topics"]
        assert topic["partitions"][1]["replica_nodes"] == [2, 3, 1]
    for p in range(PARTITIONS):  # the leader takes the write, the others refuse it
        for node, port in by_node.items():
            code = await produce(port, p)
            expected = ErrorCode.NONE if node == 1 + p % 3 else ErrorCode.NOT_LEADER_OR_FOLLOWER
            assert code == expected, (p, node)


async def test_group_requests_go_to_the_coordinator_find_coordinator_names(
    server: KafkaServer,
) -> None:
    by_node = ports(server)
    group = "spread-group"
    coordinator = 1 + partition_for(group, server.config.offsets_partitions) % 3
    for port in by_node.values():
        async with await WireClient.connect(port) as c:
            found = await c.request(
                FIND_COORDINATOR, 4, {"key_type": 0, "coordinator_keys": [group]}
            )
        (entry,) = found["coordinators"]
        assert (entry["node_id"], entry["port"]) == (coordinator, by_node[coordinator])
    body = {"group_id": group, "generation_id": 1, "member_id": "m", "group_instance_id": None}
    for node, port in by_node.items():
        async with await WireClient.connect(port) as c:
            answer = await c.request(HEARTBEAT, 4, body)
        expected = ErrorCode.UNKNOWN_MEMBER_ID if node == coordinator else ErrorCode.NOT_COORDINATOR
        assert answer["error_code"] == expected, node
    wrong = next(port for node, port in by_node.items() if node != coordinator)
    async with await WireClient.connect(wrong) as c:  # OffsetFetch: v1 per partition, v8 per group
        old = await c.request(
            OFFSET_FETCH,
            1,
            {"group_id": group, "topics": [{"name": TOPIC, "partition_indexes": [0]}]},
        )
        new = await c.request(
            OFFSET_FETCH,
            8,
            {"groups": [{"group_id": group, "topics": None}], "require_stable": False},
        )
    listed = {}  # ListGroups: each node lists the groups it coordinates
    owners = {
        g: 1 + partition_for(g, server.config.offsets_partitions) % 3
        for g in (f"listed-{n}" for n in range(6))
    }
    for g, owner in owners.items():  # a commit makes a group, at its coordinator
        async with await WireClient.connect(by_node[owner]) as c:
            committed = await c.request(
                OFFSET_COMMIT,
                2,
                {
                    "group_id": g,
                    "generation_id_or_member_epoch": -1,
                    "member_id": "",
                    "retention_time_ms": -1,
                    "topics": [
                        {
                            "name": TOPIC,
                            "partitions": [
                                {
                                    "partition_index": 0,
                                    "committed_offset": 0,
                                    "committed_metadata": "",
                                }
                            ],
                        }
                    ],
                },
            )
        assert committed["topics"][0]["partitions"][0]["error_code"] == 0
    for node, port in by_node.items():
        async with await WireClient.connect(port) as c:
            answer = await c.request(LIST_GROUPS, 4, {"states_filter": []})
        listed[node] = sorted(g["group_id"] for g in answer["groups"])
    assert listed == {n: sorted(g for g, o in owners.items() if o == n) for n in by_node}
    assert old["topics"][0]["partitions"][0]["error_code"] == ErrorCode.NOT_COORDINATOR
    assert new["groups"] == [
        {"group_id": group, "topics": [], "error_code": ErrorCode.NOT_COORDINATOR}
    ]


async def test_a_node_down_closes_refuses_and_moves_its_leadership_then_comes_back(
    server: KafkaServer,
) -> None:
    by_node = ports(server)
    idle = await WireClient.connect(by_node[2])
    status, answer = await http(server, "POST", "/api/test/nodes/2/down")
    assert status == 200 and answer == {"id": 2, "up": False, "moved": answer["moved"]}
    assert answer["moved"] > 0
    assert await idle.reader.read() == b""  # its connection was closed
    await idle.close()
    refused = await WireClient.connect(by_node[2])  # accepted and closed at once
    assert await refused.reader.read() == b""
    await refused.close()
    meta = await metadata(by_node[1])
    assert [b["node_id"] for b in meta["brokers"]] == [1, 3]
    moved = leaders(meta)
    for p in (1, 4):  # node 2's partitions: the next preferred node, epoch 1
        assert moved[p] == (3, 1)
        assert await produce(by_node[3], p) == ErrorCode.NONE
    assert moved[0] == (1, 0) and moved[2] == (3, 0)  # the others did not move
    (topic,) = meta["topics"]
    assert topic["partitions"][1]["offline_replicas"] == [2]
    assert topic["partitions"][1]["isr_nodes"] == [3, 1]
    # a fetch with the old epoch is fenced; with the new one it reads
    async with await WireClient.connect(by_node[3]) as c:
        old = await c.request(FETCH, 12, fetch_request(TOPIC, 1, 0, current_leader_epoch=0))
        new = await c.request(FETCH, 12, fetch_request(TOPIC, 1, 0, current_leader_epoch=1))
        by_id = fetch_request(TOPIC, 1, 0, current_leader_epoch=1)  # v13+: topics by id
        by_id["topics"][0]["topic_id"] = server.broker.topics.topics[TOPIC].topic_id
        new_by_id = await c.request(FETCH, 17, by_id)
        ahead = await c.request(
            LIST_OFFSETS, 7, list_offsets_request(TOPIC, [1], -1, current_leader_epoch=2)
        )
    assert old["responses"][0]["partitions"][0]["error_code"] == ErrorCode.FENCED_LEADER_EPOCH
    fetched = new["responses"][0]["partitions"][0]
    assert fetched["error_code"] == ErrorCode.NONE and fetched["high_watermark"] == 1
    assert new_by_id["responses"][0]["partitions"][0]["records"] == fetched["records"]
    code = ahead["topics"][0]["partitions"][0]["error_code"]
    assert code == ErrorCode.UNKNOWN_LEADER_EPOCH
    status, listed = await http(server, "GET", "/api/test/nodes")
    assert [(n["id"], n["up"]) for n in listed["nodes"]] == [(1, True), (2, False), (3, True)]
    assert listed["nodes"][1]["listeners"] == {"PLAINTEXT": f"127.0.0.1:{by_node[2]}"}
    status, answer = await http(server, "POST", "/api/test/nodes/2/up")
    assert status == 200 and answer["up"] is True
    back = leaders(await metadata(by_node[2]))
    assert back[1] == (2, 2) and back[4] == (2, 2)  # led again, a new epoch
    assert await produce(by_node[2], 1) == ErrorCode.NONE
    assert await produce(by_node[3], 1) == ErrorCode.NOT_LEADER_OR_FOLLOWER


async def test_a_fetch_of_partitions_of_two_leaders_is_answered_for_both(
    server: KafkaServer,
) -> None:
    """Partition 0 is led by node 1, partition 1 by node 2: node 1 answers 0 (no records this
    time, its offsets as they are) and refuses 1, with its leader (KIP-951)."""
    assert await produce(ports(server)[1], 0) == ErrorCode.NONE
    body = fetch_request(TOPIC, 0, 0)
    body["topics"][0]["partitions"].append({**body["topics"][0]["partitions"][0], "partition": 1})
    async with await WireClient.connect(server.port) as c:
        answer = await c.request(FETCH, 12, body)
    first, second = answer["responses"][0]["partitions"]
    assert (first["error_code"], first["high_watermark"]) == (0, 1)
    assert second["error_code"] == ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert second["current_leader"] == {"leader_id": 2, "leader_epoch": 0}
    assert second["records"] == b""  # empty, not null: librdkafka refuses a null record set


@pytest.mark.parametrize(
    ("path", "status", "reason"),
    [
        ("/api/test/nodes/x/down", 400, "a node id is an integer"),
        ("/api/test/nodes/7/down", 404, "no node 7 (nodes: 1, 2, 3)"),
        ("/api/test/nodes/0/up", 404, "no node 0"),
    ],
)
async def test_bad_node_controls_are_answered_with_the_reason(
    server: KafkaServer, path: str, status: int, reason: str
) -> None:
    got, answer = await http(server, "POST", path)
    assert got == status and reason in answer["reason"], answer


async def test_the_last_live_node_stays_up(server: KafkaServer) -> None:
    assert (await http(server, "POST", "/api/test/nodes/1/down"))[0] == 200
    assert (await http(server, "POST", "/api/test/nodes/2/down"))[0] == 200
    status, answer = await http(server, "POST", "/api/test/nodes/3/down")
    assert status == 409 and "the last one up" in answer["reason"]
    assert (await http(server, "POST", "/api/test/nodes/1/down"))[1]["moved"] == 0  # already


async def test_one_node_is_as_before_and_refuses_node_controls() -> None:
    async with running_server(log_level="warning", test_controls=True) as one:
        assert one.broker.nodes is None
        async with await WireClient.connect(one.port) as c:
            await c.request(HEARTBEAT, 4, {"group_id": "g", "generation_id": 1, "member_id": "m"})
        assert {type(conn) for conn in one.connections} <= {KafkaConnection}
        status, answer = await http(one, "POST", "/api/test/nodes/0/down")
        assert status == 409 and "--nodes N" in answer["reason"]
        status, listed = await http(one, "GET", "/api/test/nodes")
        assert status == 200 and [n["id"] for n in listed["nodes"]] == [0]
    async with running_server(log_level="warning", nodes=3) as off:  # no --test-controls
        for method, path in [("GET", "/api/test/nodes"), ("POST", "/api/test/nodes/1/down")]:
            assert (await http(off, method, path))[0] == 404
        async with await WireClient.connect(off.port):
            pass
        assert off.broker.nodes is not None


def test_consecutive_ports_from_a_fixed_one() -> None:
    probe = ThreadedBroker(nodes=2).start()  # a free port, then the fixed one after it
    base = probe.server.port if probe.server is not None else 0
    probe.stop()
    try:
        broker = ThreadedBroker(nodes=3, port=base).start()
    except OSError:
        pytest.skip(f"ports {base}-{base + 2} were taken meanwhile")
    try:
        listed = broker.controls.nodes()
        assert [n["listeners"]["PLAINTEXT"] for n in listed] == [
            f"127.0.0.1:{base + k}" for k in range(3)
        ]
    finally:
        broker.stop()


# --- real clients ----------------------------------------------------------------------------


@pytest.fixture
def threaded() -> Iterator[ThreadedBroker]:
    with ThreadedBroker(
        nodes=3, create_topics=[f"{TOPIC}:{PARTITIONS}"], initial_rebalance_delay_ms=0
    ) as broker:
        yield broker


async def test_aiokafka_produces_and_consumes_across_a_node_down_and_up(
    threaded: ThreadedBroker,
) -> None:
    controls = threaded.controls
    producer = AIOKafkaProducer(
        bootstrap_servers=threaded.bootstrap, enable_idempotence=True, retry_backoff_ms=50
    )
    consumer = AIOKafkaConsumer(
        TOPIC,
        bootstrap_servers=threaded.bootstrap,
        group_id="nodes-aiokafka",
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        retry_backoff_ms=50,
    )
    await producer.start()
    await consumer.start()
    seen: list[bytes] = []

    async def send_round(name: str) -> None:
        for i in range(PARTITIONS * 3):
            await producer.send_and_wait(TOPIC, f"{name}-{i}".encode(), partition=i % PARTITIONS)

    async def read_until(count: int) -> None:
        while len(seen) < count:
            for records in (await consumer.getmany(timeout_ms=500)).values():
                seen.extend(r.value for r in records if r.value is not None)
        await consumer.commit()

    try:
        await send_round("a")
        await asyncio.wait_for(read_until(18), 30)
        down = controls.node_down(1)  # node 1 leads partitions 1 and 4
        assert down["moved"] > 0
        await send_round("b")
        await asyncio.wait_for(read_until(36), 30)
        controls.node_up(1)
        await send_round("c")
        await asyncio.wait_for(read_until(54), 30)
        committed = {p: await consumer.committed(TopicPartition(TOPIC, p)) for p in range(6)}
    finally:
        await consumer.stop()
        await producer.stop()
    assert sorted(seen) == sorted(f"{r}-{i}".encode() for r in "abc" for i in range(18))
    assert committed == dict.fromkeys(range(PARTITIONS), 9)  # 3 rounds of 3 records each


def test_librdkafka_consumes_and_commits_across_its_coordinator_going_down(
    threaded: ThreadedBroker,
) -> None:
    bootstrap = threaded.bootstrap_all
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "nodes-rdkafka",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    consumer.subscribe([TOPIC])
    seen: list[bytes] = []

    def send_round(name: str) -> None:
        for i in range(PARTITIONS * 2):
            producer.produce(TOPIC, f"{name}-{i}".encode(), partition=i % PARTITIONS)
        assert producer.flush(30) == 0

    def read_until(count: int) -> None:
        deadline = time.monotonic() + 60  # a bound for a broken run, not a timing check
        while len(seen) < count and time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is not None and msg.error() is None:
                seen.append(msg.value())
        consumer.commit(asynchronous=False)

    try:
        send_round("a")
        read_until(12)
        coordinator = threaded.controls.coordinator("nodes-rdkafka")
        threaded.controls.node_down(coordinator)
        send_round("b")
        read_until(24)
        threaded.controls.node_up(coordinator)
        send_round("c")
        read_until(36)
        committed = consumer.committed(
            [ConfluentPartition(TOPIC, p) for p in range(PARTITIONS)], timeout=30
        )
    finally:
        consumer.close()
    assert sorted(seen) == sorted(f"{r}-{i}".encode() for r in "abc" for i in range(12))
    assert [tp.offset for tp in committed] == [6] * PARTITIONS  # 3 rounds of 2 records each


def install_modules() -> Path:
    require(
        shutil.which("node") is not None and shutil.which("npm") is not None,
        "node and npm are needed for the kafkajs tests",
    )
    from tests.integration.test_groups_kafkajs import install_kafkajs

    return install_kafkajs()


async def test_kafkajs_reads_the_metadata_of_three_nodes(threaded: ThreadedBroker) -> None:
    modules = await asyncio.to_thread(install_modules)
    node = shutil.which("node")
    assert node is not None
    script = Path(__file__).resolve().parents[1] / "js" / "nodes_metadata.js"
    proc = await asyncio.create_subprocess_exec(
        node,
        str(script),
        json.dumps({"brokers": [threaded.bootstrap], "topic": TOPIC}),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env={**os.environ, "NODE_PATH": str(modules)},
    )
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 0, (out, err)
    seen = json.loads(out.decode().splitlines()[-1])
    listed = threaded.controls.nodes()
    assert [(b["nodeId"], f"{b['host']}:{b['port']}") for b in seen["brokers"]] == [
        (n["id"], n["listeners"]["PLAINTEXT"]) for n in listed
    ]
    assert seen["controller"] == 0
    assert [(p["partition"], p["leader"]) for p in seen["partitions"]] == [
        (p, p % 3) for p in range(PARTITIONS)
    ]
    assert all(len(p["replicas"]) == 3 and len(p["isr"]) == 3 for p in seen["partitions"])
    assert [(w["partition"], w["errorCode"]) for w in seen["written"]] == [
        (p, 0) for p in range(PARTITIONS)
    ]
    assert {NodeConnection} >= {type(c) for c in threaded.server.connections}  # type: ignore[union-attr]
