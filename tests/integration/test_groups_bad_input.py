"""Bad group requests at the wire level: the documented error code, and nothing else disturbed.

Each test builds a Stable two-member group from raw frames (JoinGroup v5 with the KIP-394
member-id round trip, SyncGroup v3), sends the bad request, checks the error code Kafka
answers, and then checks the group is exactly as it was: DescribeGroups gives the same
state (Stable), members and assignments, and each member's heartbeat with the old
generation is still answered NONE (so the generation did not move either).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from dataclasses import dataclass
from typing import Any

import pytest
import pytest_asyncio
from aiokafka.coordinator.protocol import (
    ConsumerProtocolMemberAssignment,
    ConsumerProtocolMemberMetadata,
)

from kgroupd.broker.config.settings import TopicSpec
from kgroupd.broker.net.server import KafkaServer
from kgroupd.broker.testing import running_server
from kgroupd.protocol.errors import ErrorCode
from tests.support.groups import (
    HEARTBEAT,
    JOIN_GROUP,
    LEAVE_GROUP,
    LIST_GROUPS,
    OFFSET_COMMIT,
    OFFSET_FETCH,
    SYNC_GROUP,
    GroupView,
    RawConnection,
    describe_group,
    wait_until,
)

TOPIC = "bad-input-topic"
GROUP = "bad-input-group"
SESSION_MS = 30_000  # no heartbeats needed while a test runs
REBALANCE_MS = 10_000
MIN_SESSION_MS, MAX_SESSION_MS = 6000, 1_800_000  # the broker's defaults (Kafka's)
METADATA_MAX = 4096  # offset.metadata.max.bytes


@pytest_asyncio.fixture
async def server() -> AsyncIterator[KafkaServer]:
    async with running_server(
        log_level="warning",
        initial_rebalance_delay_ms=100,
        create_topics=(TopicSpec(TOPIC, 4),),
    ) as srv:
        yield srv


@pytest_asyncio.fixture
async def bootstrap(server: KafkaServer) -> str:
    return f"127.0.0.1:{server.port}"


@pytest_asyncio.fixture
async def conns(bootstrap: str) -> AsyncIterator[Connections]:
    async with AsyncExitStack() as stack:
        yield Connections(bootstrap, stack)


class Connections:
    """Opens raw connections for a test and closes them all at its end."""

    def __init__(self, bootstrap: str, stack: AsyncExitStack) -> None:
        self.bootstrap = bootstrap
        self.stack = stack

    async def open(self, client_id: str) -> RawConnection:
        conn = await RawConnection.open(self.bootstrap, client_id)
        return await self.stack.enter_async_context(conn)


def subscription(*topics: str) -> bytes:
    return ConsumerProtocolMemberMetadata(0, list(topics), b"").encode()


def assignment(partitions: list[int]) -> bytes:
    return ConsumerProtocolMemberAssignment(0, [(TOPIC, partitions)], b"").encode()


RANGE = [("range", subscription(TOPIC))]


async def join(
    conn: RawConnection,
    group: str = GROUP,
    member_id: str = "",
    *,
    version: int = 5,
    session_timeout: int = SESSION_MS,
    protocol_type: str = "consumer",
    protocols: list[tuple[str, bytes]] | None = None,
    instance_id: str | None = None,
) -> dict[str, Any]:
    fields: dict[str, Any] = {
        "group_id": group,
        "session_timeout_ms": session_timeout,
        "member_id": member_id,
        "protocol_type": protocol_type,
        "protocols": RANGE if protocols is None else protocols,
    }
    if version >= 1:
        fields["rebalance_timeout_ms"] = REBALANCE_MS
    if version >= 5:
        fields["group_instance_id"] = instance_id
    return await conn.call(JOIN_GROUP, version, **fields)


async def sync(
    conn: RawConnection,
    generation: int,
    member_id: str,
    assignments: list[tuple[str, bytes]] | None = None,
    group: str = GROUP,
) -> dict[str, Any]:
    return await conn.call(
        SYNC_GROUP,
        3,
        group_id=group,
        generation_id=generation,
        member_id=member_id,
        group_instance_id=None,
        assignments=assignments or [],
    )


async def heartbeat(
    conn: RawConnection, generation: int, member_id: str, group: str = GROUP
) -> int:
    resp = await conn.call(
        HEARTBEAT,
        3,
        group_id=group,
        generation_id=generation,
        member_id=member_id,
        group_instance_id=None,
    )
    return int(resp["error_code"])


async def commit(
    conn: RawConnection,
    generation: int,
    member_id: str,
    offsets: dict[int, tuple[int, str]],
    group: str = GROUP,
) -> dict[int, int]:
    """OffsetCommit v7 of ``{partition: (offset, metadata)}``: ``{partition: error}``."""
    resp = await conn.call(
        OFFSET_COMMIT,
        7,
        group_id=group,
        generation_id_or_member_epoch=generation,
        member_id=member_id,
        group_instance_id=None,
        topics=[(TOPIC, [(p, o, -1, meta) for p, (o, meta) in offsets.items()])],
    )
    ((topic, partitions),) = [(t["name"], t["partitions"]) for t in resp["topics"]]
    assert topic == TOPIC
    return {p["partition_index"]: p["error_code"] for p in partitions}


async def fetch_offsets(conn: RawConnection, group: str = GROUP) -> dict[int, tuple[int, str]]:
    """OffsetFetch v5 of the test topic's partitions: ``{partition: (offset, metadata)}``."""
    resp = await conn.call(OFFSET_FETCH, 5, group_id=group, topics=[(TOPIC, [0, 1, 2, 3])])
    assert resp["error_code"] == 0
    ((topic,),) = [[t["name"] for t in resp["topics"]]]
    assert topic == TOPIC
    out = {}
    for p in resp["topics"][0]["partitions"]:
        assert p["error_code"] == 0
        out[p["partition_index"]] = (p["committed_offset"], p["metadata"])
    return out


@dataclass
class Member:
    conn: RawConnection
    member_id: str


@dataclass
class StableGroup:
    """Two raw members in a Stable group, and what the group looked like then."""

    generation: int
    leader: Member
    follower: Member
    view: GroupView
    observer: RawConnection

    @property
    def members(self) -> list[Member]:
        return [self.leader, self.follower]

    async def assert_undisturbed(self) -> None:
        """Same state, members and assignments; the old generation still current."""
        assert await describe_group(self.observer, GROUP) == self.view
        for m in self.members:
            assert await heartbeat(m.conn, self.generation, m.member_id) == ErrorCode.NONE


async def required_member_id(conn: RawConnection, group: str = GROUP) -> str:
    """JoinGroup v5 with no member id: MEMBER_ID_REQUIRED and the id to join with."""
    resp = await join(conn, group)
    assert resp["error_code"] == ErrorCode.MEMBER_ID_REQUIRED
    assert resp["member_id"]
    return str(resp["member_id"])


async def stable_group(conns: Connections) -> StableGroup:
    a, b, observer = await conns.open("a"), await conns.open("b"), await conns.open("observer")
    ids = [await required_member_id(a), await required_member_id(b)]
    ja, jb = await asyncio.gather(join(a, member_id=ids[0]), join(b, member_id=ids[1]))
    assert ja["error_code"] == jb["error_code"] == 0
    assert ja["generation_id"] == jb["generation_id"] >= 1
    assert ja["leader"] == jb["leader"] in ids
    generation = ja["generation_id"]
    by_id = {ids[0]: Member(a, ids[0]), ids[1]: Member(b, ids[1])}
    leader = by_id.pop(ja["leader"])
    (follower,) = by_id.values()
    leader_join = ja if leader.conn is a else jb
    assert sorted(m["member_id"] for m in leader_join["members"]) == sorted(ids)
    plan = {leader.member_id: assignment([0, 1]), follower.member_id: assignment([2, 3])}
    sl, sf = await asyncio.gather(
        sync(leader.conn, generation, leader.member_id, list(plan.items())),
        sync(follower.conn, generation, follower.member_id),
    )
    assert (sl["error_code"], sl["assignment"]) == (0, plan[leader.member_id])
    assert (sf["error_code"], sf["assignment"]) == (0, plan[follower.member_id])
    view = await describe_group(observer, GROUP)
    assert view.state == "Stable" and view.protocol == "range"
    assert {m: v.assignment for m, v in view.members.items()} == {
        leader.member_id: {TOPIC: [0, 1]},
        follower.member_id: {TOPIC: [2, 3]},
    }
    return StableGroup(generation, leader, follower, view, observer)


@pytest_asyncio.fixture
async def group(conns: Connections) -> StableGroup:
    return await stable_group(conns)


# --------------------------------------------------------------------------------------------


async def test_wrong_generation_is_illegal_generation(group: StableGroup) -> None:
    m, g = group.follower, group.generation
    for wrong in (g + 1, g - 1, -1):
        assert await heartbeat(m.conn, wrong, m.member_id) == ErrorCode.ILLEGAL_GENERATION
    for wrong in (g + 1, g - 1):
        resp = await sync(m.conn, wrong, m.member_id)
        assert resp["error_code"] == ErrorCode.ILLEGAL_GENERATION
        assert not resp["assignment"]
        assert await commit(m.conn, wrong, m.member_id, {2: (5, "")}) == {
            2: ErrorCode.ILLEGAL_GENERATION
        }
    # Heartbeat v0 (no instance id) follows the same rule.
    resp = await m.conn.call(
        HEARTBEAT, 0, group_id=GROUP, generation_id=g + 1, member_id=m.member_id
    )
    assert resp["error_code"] == ErrorCode.ILLEGAL_GENERATION
    assert await fetch_offsets(group.observer) == {p: (-1, "") for p in range(4)}
    await group.assert_undisturbed()


async def test_unknown_member_is_unknown_member_id(group: StableGroup, conns: Connections) -> None:
    ghost, g, conn = "ghost-member", group.generation, await conns.open("ghost")
    assert await heartbeat(conn, g, ghost) == ErrorCode.UNKNOWN_MEMBER_ID
    assert (await sync(conn, g, ghost))["error_code"] == ErrorCode.UNKNOWN_MEMBER_ID
    assert (await join(conn, member_id=ghost))["error_code"] == ErrorCode.UNKNOWN_MEMBER_ID
    assert await commit(conn, g, ghost, {0: (5, "")}) == {0: ErrorCode.UNKNOWN_MEMBER_ID}
    resp = await conn.call(LEAVE_GROUP, 0, group_id=GROUP, member_id=ghost)
    assert resp["error_code"] == ErrorCode.UNKNOWN_MEMBER_ID
    resp = await conn.call(LEAVE_GROUP, 3, group_id=GROUP, members=[(ghost, None)])
    assert resp["error_code"] == 0
    assert resp["members"] == [
        {"member_id": ghost, "group_instance_id": None, "error_code": ErrorCode.UNKNOWN_MEMBER_ID}
    ]
    # A non-empty member id for a group that does not exist: refused, nothing created.
    resp = await join(conn, "no-such-group", ghost)
    assert resp["error_code"] == ErrorCode.UNKNOWN_MEMBER_ID
    assert (await describe_group(conn, "no-such-group")).state == "Dead"
    assert await fetch_offsets(group.observer) == {p: (-1, "") for p in range(4)}
    await group.assert_undisturbed()


async def test_empty_group_id_is_invalid_group_id(group: StableGroup, conns: Connections) -> None:
    conn, m, g = await conns.open("nameless"), group.leader, group.generation
    for version in (0, 4, 5):
        resp = await join(conn, "", version=version)
        assert resp["error_code"] == ErrorCode.INVALID_GROUP_ID, version
    assert (await join(conn, "", m.member_id))["error_code"] == ErrorCode.INVALID_GROUP_ID
    resp = await sync(conn, g, m.member_id, [(m.member_id, b"")], group="")
    assert resp["error_code"] == ErrorCode.INVALID_GROUP_ID
    assert await heartbeat(conn, g, m.member_id, group="") == ErrorCode.INVALID_GROUP_ID
    resp = await conn.call(LEAVE_GROUP, 0, group_id="", member_id=m.member_id)
    assert resp["error_code"] == ErrorCode.INVALID_GROUP_ID
    resp = await conn.call(LEAVE_GROUP, 3, group_id="", members=[(m.member_id, None)])
    assert resp["error_code"] == ErrorCode.INVALID_GROUP_ID
    listed = await conn.call(LIST_GROUPS, 2)
    assert [g["group_id"] for g in listed["groups"]] == [GROUP]
    await group.assert_undisturbed()


@pytest.mark.parametrize(
    ("protocol_type", "protocols"),
    [
        pytest.param("connect", RANGE, id="other-protocol-type"),
        pytest.param("consumer", [("roundrobin", subscription(TOPIC))], id="no-common-protocol"),
        pytest.param(
            "consumer",
            [("sticky", subscription(TOPIC)), ("roundrobin", subscription(TOPIC))],
            id="no-common-protocol-of-two",
        ),
        pytest.param("consumer", [], id="no-protocols"),
    ],
)
@pytest.mark.parametrize("who", ["new-member", "known-member"])
async def test_inconsistent_protocol_is_refused(
    group: StableGroup,
    conns: Connections,
    protocol_type: str,
    protocols: list[tuple[str, bytes]],
    who: str,
) -> None:
    if who == "new-member":
        conn, member_id = await conns.open("odd"), ""
    else:  # the follower rejoins with protocols the group cannot use
        conn, member_id = group.follower.conn, group.follower.member_id
    resp = await join(conn, member_id=member_id, protocol_type=protocol_type, protocols=protocols)
    assert resp["error_code"] == ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    await group.assert_undisturbed()


@pytest.mark.parametrize(
    ("protocol_type", "protocols"),
    [
        pytest.param("", RANGE, id="empty-protocol-type"),
        pytest.param("consumer", [], id="no-protocols"),
    ],
)
async def test_first_member_without_protocol_is_refused(
    group: StableGroup, conns: Connections, protocol_type: str, protocols: list[Any]
) -> None:
    """A member starting a new group must name a protocol type and at least one protocol."""
    conn = await conns.open("first")
    for version in (3, 5):
        resp = await join(
            conn, "fresh-group", version=version, protocol_type=protocol_type, protocols=protocols
        )
        assert resp["error_code"] == ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    assert (await describe_group(conn, "fresh-group")).members == {}
    await group.assert_undisturbed()


@pytest.mark.parametrize(
    "session_timeout",
    [MIN_SESSION_MS - 1, MAX_SESSION_MS + 1, 0, -1],
    ids=["below-min", "above-max", "zero", "negative"],
)
async def test_session_timeout_out_of_bounds_is_refused(
    group: StableGroup, conns: Connections, session_timeout: int
) -> None:
    conn = await conns.open("impatient")
    bad = ErrorCode.INVALID_SESSION_TIMEOUT
    # A new member, with every JoinGroup version's layout (v0 has no rebalance timeout).
    for version in (0, 1, 3, 4, 5):
        resp = await join(conn, version=version, session_timeout=session_timeout)
        assert resp["error_code"] == bad, version
    # A known member rejoining (checked before the group is looked at: no rebalance).
    f = group.follower
    resp = await join(f.conn, member_id=f.member_id, session_timeout=session_timeout)
    assert resp["error_code"] == bad
    # A group that does not exist is not created by a refused join.
    assert (await join(conn, "not-created", session_timeout=session_timeout))["error_code"] == bad
    assert (await describe_group(conn, "not-created")).state == "Dead"
    await group.assert_undisturbed()


async def test_session_timeout_bounds_are_inclusive(group: StableGroup, conns: Connections) -> None:
    """The bounds themselves are accepted (a v4 join gets as far as MEMBER_ID_REQUIRED)."""
    conn = await conns.open("edge")
    for session_timeout in (MIN_SESSION_MS, MAX_SESSION_MS):
        resp = await join(conn, version=4, session_timeout=session_timeout)
        assert resp["error_code"] == ErrorCode.MEMBER_ID_REQUIRED
    await group.assert_undisturbed()


async def test_offset_metadata_too_large_fails_only_that_partition(group: StableGroup) -> None:
    m, g = group.leader, group.generation
    offsets = {
        0: (10, "x" * (METADATA_MAX + 1)),
        1: (11, "y" * METADATA_MAX),
        2: (12, "fine"),
        3: (13, "z" * (METADATA_MAX * 4)),
    }
    assert await commit(m.conn, g, m.member_id, offsets) == {
        0: ErrorCode.OFFSET_METADATA_TOO_LARGE,
        1: 0,
        2: 0,
        3: ErrorCode.OFFSET_METADATA_TOO_LARGE,
    }
    assert await fetch_offsets(group.observer) == {
        0: (-1, ""),
        1: (11, "y" * METADATA_MAX),
        2: (12, "fine"),
        3: (-1, ""),
    }
    # A later oversized commit leaves the stored offset as it was.
    assert await commit(m.conn, g, m.member_id, {2: (20, "w" * (METADATA_MAX + 1))}) == {
        2: ErrorCode.OFFSET_METADATA_TOO_LARGE
    }
    assert (await fetch_offsets(group.observer))[2] == (12, "fine")
    await group.assert_undisturbed()


async def test_member_id_required_then_the_returned_id_joins(
    group: StableGroup, conns: Connections
) -> None:
    conn = await conns.open("late")
    resp = await join(conn, version=4)
    assert resp["error_code"] == ErrorCode.MEMBER_ID_REQUIRED
    assert resp["generation_id"] == -1 and resp["members"] == []
    new_id = resp["member_id"]
    assert new_id.startswith("late-") and len(new_id) > len("late-")
    # Being asked for a member id does not make anyone a member, nor start a rebalance.
    await group.assert_undisturbed()

    # Joining with the returned id is accepted: it starts a rebalance the others join.
    joining = asyncio.create_task(join(conn, member_id=new_id, version=4))
    leader, follower = group.leader, group.follower

    async def rebalance_started() -> bool:
        return await heartbeat(leader.conn, group.generation, leader.member_id) == (
            ErrorCode.REBALANCE_IN_PROGRESS
        )

    await wait_until(rebalance_started, 5, "the join to start a rebalance", interval=0.02)
    assert (await describe_group(group.observer, GROUP)).state == "PreparingRebalance"
    jl, jf = await asyncio.gather(
        join(leader.conn, member_id=leader.member_id),
        join(follower.conn, member_id=follower.member_id),
    )
    jn = await asyncio.wait_for(joining, 10)
    assert jl["error_code"] == jf["error_code"] == jn["error_code"] == 0
    assert jn["member_id"] == new_id
    assert jl["generation_id"] == jf["generation_id"] == jn["generation_id"] == group.generation + 1
    assert jl["leader"] == jn["leader"] == leader.member_id
    assert sorted(m["member_id"] for m in jl["members"]) == sorted(
        [leader.member_id, follower.member_id, new_id]
    )
    assert jn["members"] == jf["members"] == []


async def test_join_below_v4_needs_no_member_id_round_trip(conns: Connections) -> None:
    conn = await conns.open("old")
    resp = await join(conn, "old-group", version=3)
    assert resp["error_code"] == 0
    assert resp["member_id"].startswith("old-")
    assert resp["generation_id"] == 1 and resp["leader"] == resp["member_id"]
