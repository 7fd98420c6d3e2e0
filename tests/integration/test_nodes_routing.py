"""Simulated nodes (``--nodes 3``), raw requests over real sockets: share groups routed as
Kafka routes them (ShareGroupHeartbeat/Describe to the group's coordinator; FindCoordinator for
a share-state key naming its ``__share_group_state`` partition's leader; ShareFetch and
ShareAcknowledge serving the partitions the node leads, the others NOT_LEADER_OR_FOLLOWER with
their leader; one share session per node and member); ListOffsets, OffsetForLeaderEpoch,
DeleteRecords and DescribeProducers answered per partition; a long-poll Fetch, a parked
JoinGroup and a parked SyncGroup answered at once when leadership moves away from their
node."""

from __future__ import annotations

import asyncio
import base64
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest_asyncio

from kgroupd.broker.config.settings import TopicSpec
from kgroupd.broker.coordinator.placement import partition_for
from kgroupd.broker.net.server import KafkaServer
from kgroupd.broker.testing import running_server
from kgroupd.protocol.errors import ErrorCode
from tests.support.kafka_wire import (
    WireClient,
    build_batch,
    fetch_request,
    list_offsets_request,
    produce_request,
)
from tests.support.nodes import leader, ports
from tests.support.share_wire import ACCEPT, ack, heartbeat, set_group_config

TOPIC, PARTITIONS, GROUP = "routed", 6, "routed-share"
FIND_COORDINATOR, JOIN_GROUP, FETCH, LIST_OFFSETS, DELETE_RECORDS = 10, 11, 1, 2, 21
OFFSET_FOR_LEADER_EPOCH, DESCRIBE_PRODUCERS = 23, 61
SHARE_DESCRIBE, SHARE_FETCH, SHARE_ACKNOWLEDGE = 77, 78, 79
SYNC_GROUP, DESCRIBE_GROUPS = 14, 15
NOT_LEADER, NOT_COORDINATOR = ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.NOT_COORDINATOR
LONG_WAIT_MS = 600_000  # far longer than a test runs: only the move answers it


@pytest_asyncio.fixture
async def server() -> AsyncIterator[KafkaServer]:
    async with running_server(
        log_level="warning",
        test_controls=True,
        nodes=3,
        node_id=1,
        initial_rebalance_delay_ms=LONG_WAIT_MS,
        create_topics=(TopicSpec(TOPIC, PARTITIONS),),
    ) as srv:
        yield srv


def coordinator(server: KafkaServer, group: str) -> int:
    return 1 + partition_for(group, server.config.offsets_partitions) % 3


def topic_id(server: KafkaServer) -> uuid.UUID:
    return server.broker.topics.topics[TOPIC].topic_id


async def produce_everywhere(server: KafkaServer) -> None:
    by_node = ports(server)
    for p in range(PARTITIONS):
        async with await WireClient.connect(by_node[leader(p)]) as c:
            batch = build_batch([(None, b"r%d" % p, [])])
            answer = await c.request(0, 9, produce_request(TOPIC, p, batch))
        assert answer["responses"][0]["partition_responses"][0]["error_code"] == 0


def share_body(member: str, epoch: int, tid: uuid.UUID, parts: dict[int, list]) -> dict[str, Any]:
    return {
        "group_id": GROUP,
        "member_id": member,
        "share_session_epoch": epoch,
        "max_wait_ms": 0,
        "min_bytes": 1,
        "max_bytes": 1 << 20,
        "max_records": 100,
        "batch_size": 100,
        "is_renew_ack": False,
        "topics": [
            {
                "topic_id": tid,
                "partitions": [
                    {"partition_index": p, "acknowledgement_batches": acks}
                    for p, acks in parts.items()
                ],
            }
        ],
        "forgotten_topics_data": [],
    }


def by_partition(answer: dict[str, Any]) -> dict[int, dict[str, Any]]:
    assert answer["error_code"] == 0, answer
    return {p["partition_index"]: p for t in answer["responses"] for p in t["partitions"]}


async def test_share_group_apis_go_to_the_coordinator_and_leaders(server: KafkaServer) -> None:
    by_node = ports(server)
    tid = topic_id(server)
    owner = coordinator(server, GROUP)
    member = uuid.uuid4().hex[:22]
    await produce_everywhere(server)
    for node, port in by_node.items():  # the heartbeat and describe: at the coordinator only
        async with await WireClient.connect(port) as c:
            if node == owner:
                await set_group_config(c, GROUP, "share.auto.offset.reset", "earliest")
                joined = await heartbeat(c, GROUP, member, 0, TOPIC)
                assert joined["error_code"] == 0 and joined["member_epoch"] > 0
            else:
                refused = await heartbeat(c, GROUP, member, 0, TOPIC)
                assert refused["error_code"] == NOT_COORDINATOR
            described = await c.request(
                SHARE_DESCRIBE, 1, {"group_ids": [GROUP], "include_authorized_operations": False}
            )
            (group,) = described["groups"]
            assert group["error_code"] == (0 if node == owner else NOT_COORDINATOR), node
    everything: dict[int, list] = {p: [] for p in range(PARTITIONS)}
    async with (
        await WireClient.connect(by_node[1]) as one,
        await WireClient.connect(by_node[2]) as two,
    ):
        first = by_partition(
            await one.request(SHARE_FETCH, 1, share_body(member, 0, tid, everything))
        )
        assert sorted(first) == list(range(PARTITIONS))
        for p, entry in first.items():
            if leader(p) == 1:  # served: its record acquired
                assert entry["error_code"] == 0 and len(entry["acquired_records"]) == 1
            else:
                assert entry["error_code"] == NOT_LEADER
                assert entry["current_leader"] == {"leader_id": leader(p), "leader_epoch": 0}
                assert entry["acquired_records"] == []
        # node 2 opens the member's own session there: node 1's goes on (its epoch 1)
        second = by_partition(
            await two.request(SHARE_FETCH, 1, share_body(member, 0, tid, {1: [], 4: []}))
        )
        assert [len(second[p]["acquired_records"]) for p in (1, 4)] == [1, 1]
        accepted = await one.request(
            SHARE_ACKNOWLEDGE,
            1,
            share_body(member, 1, tid, {0: [ack(0, 0, ACCEPT)], 1: [ack(0, 0, ACCEPT)]}),
        )
        acks = by_partition(accepted)
        assert acks[0]["error_code"] == 0
        assert acks[1]["error_code"] == NOT_LEADER  # node 2 leads it
        assert acks[1]["current_leader"] == {"leader_id": 2, "leader_epoch": 0}
        assert [e["node_id"] for e in accepted["node_endpoints"]] == [2]
        assert accepted["node_endpoints"][0]["port"] == by_node[2]
        again = by_partition(
            await two.request(
                SHARE_ACKNOWLEDGE, 1, share_body(member, 1, tid, {1: [ack(0, 0, ACCEPT)]})
            )
        )
        assert again[1]["error_code"] == 0


async def test_a_node_down_gives_back_what_its_share_sessions_held(server: KafkaServer) -> None:
    by_node = ports(server)
    tid = topic_id(server)
    member, other = uuid.uuid4().hex[:22], uuid.uuid4().hex[:22]
    await produce_everywhere(server)
    async with await WireClient.connect(by_node[coordinator(server, GROUP)]) as c:
        await set_group_config(c, GROUP, "share.auto.offset.reset", "earliest")
    two = await WireClient.connect(by_node[2])
    held = by_partition(await two.request(SHARE_FETCH, 1, share_body(member, 0, tid, {1: []})))
    assert len(held[1]["acquired_records"]) == 1
    assert server.broker.nodes is not None
    server.broker.nodes.set_down(2)  # partition 1 moves to node 3; node 2's sessions end
    await two.close()
    async with await WireClient.connect(by_node[3]) as three:
        moved = by_partition(
            await three.request(SHARE_FETCH, 1, share_body(other, 0, tid, {1: []}))
        )
    # available again at once (not after the lock expires), a second delivery
    assert [(a["first_offset"], a["delivery_count"]) for a in moved[1]["acquired_records"]] == [
        (0, 2)
    ]


async def test_find_coordinator_for_a_share_state_key(server: KafkaServer) -> None:
    raw = topic_id(server).bytes
    tid = base64.urlsafe_b64encode(raw).rstrip(b"=").decode()
    key = f"{GROUP}:{tid}:3"
    state_partition = partition_for(key, 50)  # Kafka's __share_group_state default
    async with await WireClient.connect(server.port) as c:
        found = await c.request(
            FIND_COORDINATOR,
            6,
            {"key_type": 2, "coordinator_keys": [key, "g:nope:1", "x:1", key[:-1] + "03"]},
        )
        old = await c.request(FIND_COORDINATOR, 5, {"key_type": 2, "coordinator_keys": [key]})
        group = await c.request(FIND_COORDINATOR, 6, {"key_type": 0, "coordinator_keys": [GROUP]})
    good, bad, short, padded = found["coordinators"]
    assert (good["error_code"], good["node_id"]) == (0, 1 + state_partition % 3)
    # hashed as Kafka writes the key (partition 3), echoed as asked
    assert (padded["key"], padded["node_id"]) == (key[:-1] + "03", good["node_id"])
    assert good["port"] == ports(server)[good["node_id"]]
    assert bad["error_code"] == short["error_code"] == ErrorCode.INVALID_REQUEST
    assert old["coordinators"][0]["error_code"] == ErrorCode.INVALID_REQUEST  # SHARE: v6+
    assert group["coordinators"][0]["node_id"] == coordinator(server, GROUP)
    async with (
        running_server(log_level="warning") as one,
        await WireClient.connect(one.port) as c,
    ):
        alone = await c.request(FIND_COORDINATOR, 6, {"key_type": 2, "coordinator_keys": [key]})
    assert (alone["coordinators"][0]["error_code"], alone["coordinators"][0]["node_id"]) == (0, 0)


async def test_partition_requests_are_answered_per_partition(server: KafkaServer) -> None:
    await produce_everywhere(server)
    everything = list(range(PARTITIONS))
    async with await WireClient.connect(server.port) as c:  # node 1 leads partitions 0 and 3
        listed = await c.request(LIST_OFFSETS, 7, list_offsets_request(TOPIC, everything, -1))
        epochs = await c.request(
            OFFSET_FOR_LEADER_EPOCH,
            4,
            {
                "replica_id": -1,
                "topics": [
                    {
                        "topic": TOPIC,
                        "partitions": [
                            {"partition": p, "current_leader_epoch": 0, "leader_epoch": 0}
                            for p in everything
                        ],
                    }
                ],
            },
        )
        producers = await c.request(
            DESCRIBE_PRODUCERS, 0, {"topics": [{"name": TOPIC, "partition_indexes": everything}]}
        )
        deleted = await c.request(
            DELETE_RECORDS,
            2,
            {
                "topics": [
                    {
                        "name": TOPIC,
                        "partitions": [{"partition_index": p, "offset": 1} for p in everything],
                    }
                ],
                "timeout_ms": 5000,
            },
        )

    def codes(answer: dict[str, Any], index: str = "partition_index") -> dict[int, int]:
        (topic,) = answer["topics"]
        return {p[index]: p["error_code"] for p in topic["partitions"]}

    expected = {p: 0 if leader(p) == 1 else NOT_LEADER for p in everything}
    assert codes(listed) == codes(producers) == codes(deleted) == expected
    assert codes(epochs, "partition") == expected
    offsets = {p["partition_index"]: p["offset"] for p in listed["topics"][0]["partitions"]}
    assert (offsets[0], offsets[3]) == (1, 1)  # answered: one record each
    low = {p["partition_index"]: p["low_watermark"] for p in deleted["topics"][0]["partitions"]}
    assert (low[0], low[1]) == (1, -1)


async def test_parked_requests_are_answered_when_leadership_moves_away(
    server: KafkaServer,
) -> None:
    """Node 2 down: partition 1 is led by node 3, and the groups node 2 coordinated by the
    next node. A long-poll Fetch and a JoinGroup (waiting out the initial rebalance delay)
    parked there are answered at once, refused, when node 2 comes back and takes them over."""
    nodes = server.broker.nodes
    assert nodes is not None
    by_node = ports(server)
    group = next(g for g in (f"parked-{n}" for n in range(100)) if coordinator(server, g) == 2)
    nodes.set_down(2)
    assert nodes.leader(1) == 3 and nodes.coordinator(0, group) == 3
    async with (
        await WireClient.connect(by_node[3]) as fetcher,
        await WireClient.connect(by_node[3]) as joiner,
    ):
        body = fetch_request(TOPIC, 1, 0, max_wait_ms=LONG_WAIT_MS)
        fetch = asyncio.ensure_future(fetcher.request(FETCH, 12, body))
        join = asyncio.ensure_future(
            joiner.request(
                JOIN_GROUP,
                5,
                {
                    "group_id": group,
                    "session_timeout_ms": 30000,
                    "rebalance_timeout_ms": 60000,
                    "member_id": "",
                    "group_instance_id": "fixed",
                    "protocol_type": "consumer",
                    "protocols": [{"name": "range", "metadata": b""}],
                },
            )
        )
        await asyncio.sleep(0.2)
        assert not fetch.done() and not join.done()  # parked
        nodes.set_up(2)
        fetched = await asyncio.wait_for(fetch, 60)
        joined = await asyncio.wait_for(join, 60)
    (partition,) = fetched["responses"][0]["partitions"]
    assert partition["error_code"] == NOT_LEADER
    assert partition["current_leader"] == {"leader_id": 2, "leader_epoch": 2}
    assert joined["error_code"] == NOT_COORDINATOR


def join_body(group: str, instance: str, member: str = "") -> dict[str, Any]:
    return {
        "group_id": group,
        "session_timeout_ms": 30000,
        "rebalance_timeout_ms": 60000,
        "member_id": member,
        "group_instance_id": instance,
        "protocol_type": "consumer",
        "protocols": [{"name": "range", "metadata": b""}],
    }


async def test_a_parked_sync_group_is_answered_when_its_group_moves_away() -> None:
    """Node 2 down: its groups are coordinated by node 3. Two members join there; the
    follower's SyncGroup waits for the leader's. Node 2 comes back and takes the group over:
    the waiting SyncGroup is answered at once, NOT_COORDINATOR."""
    async with running_server(
        log_level="warning", nodes=3, node_id=1, initial_rebalance_delay_ms=0
    ) as srv:
        nodes = srv.broker.nodes
        assert nodes is not None
        by_node = ports(srv)
        group = next(g for g in (f"sync-{n}" for n in range(100)) if coordinator(srv, g) == 2)
        nodes.set_down(2)
        assert nodes.coordinator(0, group) == 3
        async with (
            await WireClient.connect(by_node[3]) as a,
            await WireClient.connect(by_node[3]) as b,
        ):
            first = await a.request(JOIN_GROUP, 5, join_body(group, "a"))
            assert first["error_code"] == 0
            b_join = asyncio.ensure_future(b.request(JOIN_GROUP, 5, join_body(group, "b")))
            while True:  # until b's join has started the rebalance
                described = await a.request(
                    DESCRIBE_GROUPS, 5, {"groups": [group], "include_authorized_operations": False}
                )
                if described["groups"][0]["group_state"] == "PreparingRebalance":
                    break
                await asyncio.sleep(0.02)
            a_join = await a.request(JOIN_GROUP, 5, join_body(group, "a", first["member_id"]))
            b_joined = await asyncio.wait_for(b_join, 60)
            assert (a_join["error_code"], b_joined["error_code"]) == (0, 0)
            assert a_join["leader"] == a_join["member_id"]  # b is the follower
            sync = {
                "group_id": group,
                "generation_id": b_joined["generation_id"],
                "member_id": b_joined["member_id"],
                "group_instance_id": "b",
                "assignments": [],
            }
            synced = asyncio.ensure_future(b.request(SYNC_GROUP, 3, sync))
            await asyncio.sleep(0.2)
            assert not synced.done()  # parked: waiting for the leader's SyncGroup
            nodes.set_up(2)
            answer = await asyncio.wait_for(synced, 60)
    assert answer["error_code"] == NOT_COORDINATOR


async def test_a_share_session_on_a_live_node_gives_up_what_moves_away(
    server: KafkaServer,
) -> None:
    """Node 2 down: node 3 leads partition 1, and the member's session there acquires its
    record. Node 2 comes back and takes partition 1 back: the fetch waiting on node 3 is
    answered at once with partition 1 NOT_LEADER_OR_FOLLOWER (led by node 2), and what node 3's
    session held is available again at node 2, a second delivery."""
    nodes = server.broker.nodes
    assert nodes is not None
    by_node = ports(server)
    tid = topic_id(server)
    member = uuid.uuid4().hex[:22]
    await produce_everywhere(server)
    async with await WireClient.connect(by_node[coordinator(server, GROUP)]) as c:
        await set_group_config(c, GROUP, "share.auto.offset.reset", "earliest")
    nodes.set_down(2)
    async with await WireClient.connect(by_node[3]) as three:
        first = by_partition(
            await three.request(SHARE_FETCH, 1, share_body(member, 0, tid, {1: []}))
        )
        assert [(a["first_offset"], a["delivery_count"]) for a in first[1]["acquired_records"]] == [
            (0, 1)
        ]
        waiting = share_body(member, 1, tid, {})
        waiting["topics"], waiting["max_wait_ms"] = [], LONG_WAIT_MS
        parked = asyncio.ensure_future(three.request(SHARE_FETCH, 1, waiting))
        await asyncio.sleep(0.2)
        assert not parked.done()
        nodes.set_up(2)
        answered = by_partition(await asyncio.wait_for(parked, 60))
        assert answered[1]["error_code"] == NOT_LEADER
        assert answered[1]["current_leader"] == {"leader_id": 2, "leader_epoch": 2}
        assert answered[1]["acquired_records"] == []
        # the next fetch there takes nothing of partition 1 (no longer in that session)
        after = await three.request(SHARE_FETCH, 1, share_body(member, 2, tid, {}) | {"topics": []})
        assert by_partition(after) == {}
    async with await WireClient.connect(by_node[2]) as two:
        back = by_partition(await two.request(SHARE_FETCH, 1, share_body(member, 0, tid, {1: []})))
    assert [(a["first_offset"], a["delivery_count"]) for a in back[1]["acquired_records"]] == [
        (0, 2)
    ]


async def test_a_share_state_key_needs_cluster_action() -> None:
    key = f"{GROUP}:{base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b'=').decode()}:0"
    async with (
        running_server(log_level="warning", authorizer="acl") as secured,
        await WireClient.connect(secured.port) as c,  # ANONYMOUS, no ACLs
    ):
        found = await c.request(FIND_COORDINATOR, 6, {"key_type": 2, "coordinator_keys": [key]})
    assert found["coordinators"][0]["error_code"] == ErrorCode.CLUSTER_AUTHORIZATION_FAILED


async def test_a_share_acknowledgement_held_for_its_fsync_still_names_other_leaders(
    tmp_path: Path,
) -> None:
    """With --data-dir (fsync always) the answer waits for its fsync: the refused partitions
    are added to it all the same."""
    async with running_server(
        log_level="warning",
        nodes=3,
        node_id=1,
        data_dir=str(tmp_path),
        create_topics=(TopicSpec(TOPIC, PARTITIONS),),
    ) as durable:
        await produce_everywhere(durable)
        tid = topic_id(durable)
        member = uuid.uuid4().hex[:22]
        async with await WireClient.connect(ports(durable)[coordinator(durable, GROUP)]) as c:
            await set_group_config(c, GROUP, "share.auto.offset.reset", "earliest")
        async with await WireClient.connect(durable.port) as one:
            await one.request(SHARE_FETCH, 1, share_body(member, 0, tid, {0: []}))
            both = {0: [ack(0, 0, ACCEPT)], 1: [ack(0, 0, ACCEPT)]}
            acks = by_partition(
                await one.request(SHARE_ACKNOWLEDGE, 1, share_body(member, 1, tid, both))
            )
    assert (acks[0]["error_code"], acks[1]["error_code"]) == (0, NOT_LEADER)
