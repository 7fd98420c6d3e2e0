"""Share groups (KIP-932) in the coordinator: join, epochs, fencing, leave, session expiry on a
manual clock, the simple assignment (every member gets every subscribed partition)."""

from __future__ import annotations

import uuid

import pytest

from kgroupd.broker.config.settings import BrokerConfig
from kgroupd.broker.coordinator.consumer.commands import InMemoryTopics
from kgroupd.broker.coordinator.share.commands import ShareGroupHeartbeat
from kgroupd.broker.coordinator.share.coordinator import ShareGroupCoordinator
from kgroupd.broker.coordinator.timers import ManualTimers
from kgroupd.broker.share.group_config import GroupConfigs
from kgroupd.protocol.errors import ErrorCode

G = "sg"


@pytest.fixture
def env() -> tuple[ShareGroupCoordinator, ManualTimers, InMemoryTopics, GroupConfigs]:
    timers = ManualTimers()
    topics = InMemoryTopics()
    configs = GroupConfigs(BrokerConfig())
    coord = ShareGroupCoordinator(timers, topics, configs, max_size=3)
    return coord, timers, topics, configs


def hb(member: str, epoch: int, topics: tuple[str, ...] | None = None) -> ShareGroupHeartbeat:
    return ShareGroupHeartbeat(G, member, epoch, subscribed_topic_names=topics)


def test_the_simple_assignor_spreads_partitions_and_shares_them(env) -> None:  # type: ignore[no-untyped-def]
    coord, _timers, topics, _c = env
    t1 = topics.create("t1", 3)
    t2 = topics.create("t2", 1)
    a = coord.heartbeat(hb("a", 0, ("t1",)))
    assert (a.error, a.member_epoch, a.heartbeat_interval_ms) == (ErrorCode.NONE, 1, 5000)
    assert a.assignment == ((t1, (0, 1, 2)),)
    b = coord.heartbeat(hb("b", 0, ("t1", "t2", "missing")))
    assert b.member_epoch == 2
    # t1's three partitions are split (a keeps two of its own), t2's one goes to b alone
    assert b.assignment == tuple(sorted([(t1, (2,)), (t2, (0,))]))
    a = coord.heartbeat(hb("a", 1))
    assert (a.error, a.member_epoch, a.assignment) == (ErrorCode.NONE, 2, ((t1, (0, 1)),))
    a = coord.heartbeat(hb("a", 2))
    assert (a.member_epoch, a.assignment) == (2, None)  # unchanged: not sent again
    # a third member on t2 shares its one partition with b
    c = coord.heartbeat(hb("c", 0, ("t2",)))
    assert c.assignment == ((t2, (0,)),)
    assert coord.heartbeat(hb("b", 2)).assignment is None  # b keeps what it had


def test_subscription_and_partition_changes_bump_the_epoch(env) -> None:  # type: ignore[no-untyped-def]
    coord, _timers, topics, _c = env
    t1 = topics.create("t1", 1)
    assert coord.heartbeat(hb("a", 0, ("t1",))).member_epoch == 1
    t2 = topics.create("t2", 2)
    r = coord.heartbeat(hb("a", 1, ("t1", "t2")))
    assert (r.member_epoch, r.assignment) == (2, tuple(sorted([(t1, (0,)), (t2, (0, 1))])))
    topics.create("t2", 4, t2)
    coord.on_topics_changed()
    r = coord.heartbeat(hb("a", 2))
    assert (r.member_epoch, r.assignment) == (3, tuple(sorted([(t1, (0,)), (t2, (0, 1, 2, 3))])))


def test_errors_as_kafka_answers_them(env) -> None:  # type: ignore[no-untyped-def]
    coord, _timers, topics, _c = env
    topics.create("t", 1)
    cases = [
        (ShareGroupHeartbeat("", "a", 0, subscribed_topic_names=("t",)),
         ErrorCode.INVALID_REQUEST, "GroupId can't be empty."),
        (hb("", 0, ("t",)), ErrorCode.INVALID_REQUEST, "MemberId can't be empty."),
        (hb("a", 0), ErrorCode.INVALID_REQUEST,
         "SubscribedTopicNames must be set in first request."),
        (hb("a", -2), ErrorCode.INVALID_REQUEST, "MemberEpoch is invalid."),
        (hb("a", 5), ErrorCode.UNKNOWN_MEMBER_ID, "Member a is not a member of group sg."),
        (hb("a", -1), ErrorCode.UNKNOWN_MEMBER_ID, "Member a is not a member of group sg."),
    ]  # fmt: skip
    for cmd, code, message in cases:
        r = coord.heartbeat(cmd)
        assert (r.error, r.error_message) == (code, message), cmd
    assert coord.groups == {}
    assert coord.heartbeat(hb("a", 0, ("t",))).member_epoch == 1
    r = coord.heartbeat(hb("a", 7))
    assert r.error == ErrorCode.FENCED_MEMBER_EPOCH
    assert coord.heartbeat(hb("b", 3)).error == ErrorCode.UNKNOWN_MEMBER_ID
    for m in ("b", "c"):
        assert coord.heartbeat(hb(m, 0, ("t",))).error == ErrorCode.NONE
    r = coord.heartbeat(hb("d", 0, ("t",)))
    assert (r.error, r.error_message) == (
        ErrorCode.GROUP_MAX_SIZE_REACHED,
        "The share group has reached its maximum capacity of 3 members.",
    )


def test_a_group_id_of_another_type_is_not_a_share_group() -> None:
    coord = ShareGroupCoordinator(
        ManualTimers(),
        InMemoryTopics(),
        GroupConfigs(BrokerConfig()),
        other_group_exists=lambda g: g == G,
    )
    r = coord.heartbeat(hb("a", 0, ("t",)))
    assert (r.error, r.error_message) == (
        ErrorCode.GROUP_ID_NOT_FOUND,
        "Group sg is not a share group.",
    )


def test_leave_and_session_expiry(env) -> None:  # type: ignore[no-untyped-def]
    coord, timers, topics, configs = env
    topics.create("t", 1)
    removed: list[tuple[str, str]] = []
    coord.on_member_removed = lambda g, m: removed.append((g, m))
    configs.set_overrides(G, {"share.session.timeout.ms": "50000"})
    coord.heartbeat(hb("a", 0, ("t",)))
    coord.heartbeat(hb("b", 0, ("t",)))
    timers.advance(30000)
    assert coord.heartbeat(hb("a", 1)).member_epoch == 2  # a's session starts again
    timers.advance(20000)  # b: 50 s without a heartbeat
    assert removed == [(G, "b")]
    assert set(coord.groups[G].members) == {"a"}
    assert coord.groups[G].group_epoch == 3
    assert coord.heartbeat(hb("b", 2)).error == ErrorCode.UNKNOWN_MEMBER_ID
    r = coord.heartbeat(hb("a", -1))
    assert (r.error, r.member_epoch) == (ErrorCode.NONE, -1)
    assert removed == [(G, "b")]  # a left: it closes its share sessions itself
    assert timers.keys() == []
    described = coord.describe(G)
    assert (described.state, described.members) == ("Empty", ())
    assert coord.delete(G) == ErrorCode.NONE
    assert coord.describe(G).error == ErrorCode.GROUP_ID_NOT_FOUND


def test_describe_and_delete_of_a_group_with_members(env) -> None:  # type: ignore[no-untyped-def]
    coord, _timers, topics, _c = env
    tid = topics.create("t", 2)
    coord.heartbeat(
        ShareGroupHeartbeat(G, "a", 0, "rack", ("t",), client_id="cid", client_host="/1.2.3.4")
    )
    d = coord.describe(G)
    assert (d.state, d.group_epoch, d.assignment_epoch, d.assignor_name) == (
        "Stable",
        1,
        1,
        "simple",
    )
    (m,) = d.members
    assert (m.member_id, m.rack_id, m.member_epoch, m.client_id, m.client_host) == (
        "a",
        "rack",
        1,
        "cid",
        "/1.2.3.4",
    )
    assert m.assignment == ((tid, "t", (0, 1)),)
    assert coord.delete(G) == ErrorCode.NON_EMPTY_GROUP
    assert isinstance(tid, uuid.UUID)
