"""Simulated nodes (``--nodes 3``) with the share sessions as Kafka keeps them, raw requests
over real sockets: a ShareFetch answered later (a long poll, a parked fetch refused when
leadership moves) still names the partitions led elsewhere; a member's session on a node ends
with the connection that opened it and what it held through that node comes back at once; a
member the coordinator removes loses what it holds through every node; each node bounds its
own sessions (--group-share-max-share-sessions), as each Kafka broker bounds its cache."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator

import pytest_asyncio

from kgroupd.broker.config.settings import TopicSpec
from kgroupd.broker.net.server import KafkaServer
from kgroupd.broker.testing import running_server
from kgroupd.protocol.errors import ErrorCode
from tests.integration.test_nodes_routing import (
    GROUP,
    LONG_WAIT_MS,
    NOT_LEADER,
    PARTITIONS,
    SHARE_ACKNOWLEDGE,
    SHARE_FETCH,
    TOPIC,
    by_partition,
    coordinator,
    leader,
    ports,
    produce_everywhere,
    share_body,
    topic_id,
)
from tests.support.kafka_wire import WireClient, build_batch, produce_request
from tests.support.share_wire import ACCEPT, ack, heartbeat, set_group_config

SHARE_SESSION_LIMIT_REACHED = ErrorCode.SHARE_SESSION_LIMIT_REACHED


@pytest_asyncio.fixture
async def server() -> AsyncIterator[KafkaServer]:
    async with running_server(
        log_level="warning",
        test_controls=True,
        nodes=3,
        node_id=1,
        create_topics=(TopicSpec(TOPIC, PARTITIONS),),
    ) as srv:
        async with await WireClient.connect(ports(srv)[coordinator(srv, GROUP)]) as c:
            await set_group_config(c, GROUP, "share.auto.offset.reset", "earliest")
        yield srv


def delivered(entry: dict) -> list[tuple[int, int]]:
    return [(a["first_offset"], a["delivery_count"]) for a in entry["acquired_records"]]


async def test_a_long_poll_share_fetch_still_answers_the_partitions_led_elsewhere(
    server: KafkaServer,
) -> None:
    """Node 1 leads partition 0, node 2 partition 1: the fetch waits for partition 0's first
    record and its answer (encoded when it comes) names partition 1 NOT_LEADER_OR_FOLLOWER."""
    by_node, tid, member = ports(server), topic_id(server), uuid.uuid4().hex[:22]
    body = share_body(member, 0, tid, {0: [], 1: []}) | {"max_wait_ms": LONG_WAIT_MS}
    async with await WireClient.connect(by_node[1]) as one:
        waiting = asyncio.ensure_future(one.request(SHARE_FETCH, 1, body))
        await asyncio.sleep(0.2)
        assert not waiting.done()  # waits for records
        async with await WireClient.connect(by_node[1]) as producer:
            batch = build_batch([(None, b"late", [])])
            await producer.request(0, 9, produce_request(TOPIC, 0, batch))
        answer = await asyncio.wait_for(waiting, 60)
    got = by_partition(answer)
    assert delivered(got[0]) == [(0, 1)]
    assert got[1]["error_code"] == NOT_LEADER
    assert got[1]["current_leader"] == {"leader_id": 2, "leader_epoch": 0}
    assert [e["node_id"] for e in answer["node_endpoints"]] == [2]


async def test_a_served_partition_names_its_node_and_leader_epoch(server: KafkaServer) -> None:
    """Node 2 down: node 3 leads partitions 1 and 2, partition 1 at leader epoch 1 (it moved),
    partition 2 at 0 (it did not). A ShareFetch and a ShareAcknowledge served by node 3 give
    each partition's current leader as node 3 at that epoch (not the process's own node id)."""
    nodes = server.broker.nodes
    assert nodes is not None
    await produce_everywhere(server)
    nodes.set_down(2)
    by_node, tid, member = ports(server), topic_id(server), uuid.uuid4().hex[:22]
    async with await WireClient.connect(by_node[3]) as three:
        fetched = by_partition(
            await three.request(SHARE_FETCH, 1, share_body(member, 0, tid, {1: [], 2: []}))
        )
        acks = {1: [ack(0, 0, ACCEPT)], 2: [ack(0, 0, ACCEPT)]}
        acked = by_partition(
            await three.request(SHARE_ACKNOWLEDGE, 1, share_body(member, 1, tid, acks))
        )
    expected = {1: {"leader_id": 3, "leader_epoch": 1}, 2: {"leader_id": 3, "leader_epoch": 0}}
    assert {p: e["current_leader"] for p, e in fetched.items()} == expected
    assert [delivered(fetched[p]) for p in (1, 2)] == [[(0, 1)], [(0, 1)]]
    assert {p: (e["error_code"], e["current_leader"]) for p, e in acked.items()} == {
        p: (0, leader) for p, leader in expected.items()
    }


async def test_a_parked_share_fetch_refused_when_leadership_moves_names_the_others_too(
    server: KafkaServer,
) -> None:
    """Node 2 down: node 3 leads partition 1. A fetch waiting on node 3 for partitions 0 (led
    by node 1) and 1 is answered when node 2 takes partition 1 back: both refused."""
    nodes = server.broker.nodes
    assert nodes is not None
    by_node, tid, member = ports(server), topic_id(server), uuid.uuid4().hex[:22]
    nodes.set_down(2)
    body = share_body(member, 0, tid, {0: [], 1: []}) | {"max_wait_ms": LONG_WAIT_MS}
    async with await WireClient.connect(by_node[3]) as three:
        waiting = asyncio.ensure_future(three.request(SHARE_FETCH, 1, body))
        await asyncio.sleep(0.2)
        assert not waiting.done()  # parked: nothing to take in partition 1
        nodes.set_up(2)
        got = by_partition(await asyncio.wait_for(waiting, 60))
    assert {p: (e["error_code"], e["current_leader"]) for p, e in got.items()} == {
        0: (NOT_LEADER, {"leader_id": 1, "leader_epoch": 0}),
        1: (NOT_LEADER, {"leader_id": 2, "leader_epoch": 2}),
    }


async def test_a_node_session_ends_with_its_connection(server: KafkaServer) -> None:
    """What a member acquired through node 2 comes back when that connection closes (not after
    its lock): another member waiting there takes it, a second delivery."""
    await produce_everywhere(server)
    by_node, tid = ports(server), topic_id(server)
    member, other = uuid.uuid4().hex[:22], uuid.uuid4().hex[:22]
    async with await WireClient.connect(by_node[2]) as two:
        async with await WireClient.connect(by_node[2]) as first:
            held = by_partition(
                await first.request(SHARE_FETCH, 1, share_body(member, 0, tid, {1: []}))
            )
            assert delivered(held[1]) == [(0, 1)]
        body = share_body(other, 0, tid, {1: []}) | {"max_wait_ms": LONG_WAIT_MS}
        back = by_partition(await asyncio.wait_for(two.request(SHARE_FETCH, 1, body), 60))
    assert delivered(back[1]) == [(0, 2)]


async def test_a_member_removed_loses_what_it_holds_through_every_node() -> None:
    """The coordinator removes a member whose heartbeats stop (share.session.timeout.ms): what
    it acquired through node 2 comes back though its connection there stays open (not after
    its lock); another member waiting there takes it, a second delivery."""
    async with running_server(
        log_level="warning",
        nodes=3,
        node_id=1,
        group_share_min_session_timeout_ms=200,
        group_share_session_timeout_ms=200,
        group_share_min_heartbeat_interval_ms=100,
        group_share_heartbeat_interval_ms=100,
        create_topics=(TopicSpec(TOPIC, PARTITIONS),),
    ) as srv:
        await produce_everywhere(srv)
        by_node, tid = ports(srv), topic_id(srv)
        member, other = uuid.uuid4().hex[:22], uuid.uuid4().hex[:22]
        async with (
            await WireClient.connect(by_node[coordinator(srv, GROUP)]) as coord,
            await WireClient.connect(by_node[2]) as two,
            await WireClient.connect(by_node[2]) as two_other,
        ):
            await set_group_config(coord, GROUP, "share.auto.offset.reset", "earliest")
            joined = await heartbeat(coord, GROUP, member, 0, TOPIC)
            assert joined["error_code"] == 0
            body = share_body(member, 0, tid, {1: []})
            assert delivered(by_partition(await two.request(SHARE_FETCH, 1, body))[1]) == [(0, 1)]
            body = share_body(other, 0, tid, {1: []}) | {"max_wait_ms": LONG_WAIT_MS}
            waited = await asyncio.wait_for(two_other.request(SHARE_FETCH, 1, body), 60)
        assert delivered(by_partition(waited)[1]) == [(0, 2)]


async def test_a_new_session_hears_nothing_of_the_old_ones_moves(server: KafkaServer) -> None:
    """Partition 1 moves away from node 3 while the member's session there holds it; the member
    opens a new session there (epoch 0) for partition 2: answered for partition 2 only."""
    nodes = server.broker.nodes
    assert nodes is not None
    await produce_everywhere(server)
    by_node, tid, member = ports(server), topic_id(server), uuid.uuid4().hex[:22]
    nodes.set_down(2)
    async with await WireClient.connect(by_node[3]) as three:
        held = by_partition(
            await three.request(SHARE_FETCH, 1, share_body(member, 0, tid, {1: []}))
        )
        assert delivered(held[1]) == [(0, 1)]
        nodes.set_up(2)
        again = await three.request(SHARE_FETCH, 1, share_body(member, 0, tid, {2: []}))
    assert sorted(by_partition(again)) == [2]


async def test_each_node_bounds_its_own_share_sessions() -> None:
    async with running_server(
        log_level="warning",
        nodes=3,
        node_id=1,
        group_share_max_share_sessions=1,
        create_topics=(TopicSpec(TOPIC, PARTITIONS),),
    ) as srv:
        by_node, tid = ports(srv), topic_id(srv)
        a, b = uuid.uuid4().hex[:22], uuid.uuid4().hex[:22]
        async with (
            await WireClient.connect(by_node[1]) as one,
            await WireClient.connect(by_node[2]) as two,
        ):
            codes = []
            for wire, member, p in ((one, a, 0), (two, a, 1), (two, a, 4), (one, b, 3)):
                assert leader(p) == (1 if wire is one else 2)
                answer = await wire.request(SHARE_FETCH, 1, share_body(member, 0, tid, {p: []}))
                codes.append(answer["error_code"])
    # a's session on node 2 is its own (one per node); reopened there it is replaced, not
    # counted twice; node 1 holds a's session, so b gets none there
    assert codes == [0, 0, 0, SHARE_SESSION_LIMIT_REACHED]
