"""KIP-848 consumer groups in one shard on a manual clock: the heartbeat's rules state by state
and error code by error code (GroupMetadataManager.consumerGroupHeartbeat's), never sleeping."""

from __future__ import annotations

import dataclasses
import uuid

import pytest
from coord_helpers import TEST_CONFIG

from kgroupd.broker.coordinator import (
    ConsumerGroupHeartbeat,
    ConsumerGroupHeartbeatResult,
    CoordinatorConfig,
    CoordinatorShard,
    InMemoryTopics,
    ManualTimers,
    OffsetCommit,
    OffsetCommitTopic,
    OffsetFetch,
)
from kgroupd.protocol.errors import ErrorCode

SESSION, HEARTBEAT, REBALANCE = 1000, 100, 2000
CONFIG = dataclasses.replace(
    TEST_CONFIG,
    consumer_session_timeout_ms=SESSION,
    consumer_heartbeat_interval_ms=HEARTBEAT,
    consumer_max_size=3,
)
# group.consumer.regex.refresh.interval.ms, not Kafka's default (600000): the test sees it used
REFRESH = 20_000
TOPIC = uuid.UUID(int=1)
Owned = tuple[tuple[uuid.UUID, tuple[int, ...]], ...]


class Harness:
    def __init__(self, config: CoordinatorConfig = CONFIG) -> None:
        self.timers = ManualTimers()
        self.shard = CoordinatorShard(0, config, self.timers)
        self.topics = InMemoryTopics({"t": (TOPIC, 4)})
        self.shard.topics_view = self.topics

    def hb(self, member: str, epoch: int, **kw: object) -> ConsumerGroupHeartbeatResult:
        fields: dict[str, object] = {
            "group_id": "g",
            "member_id": member,
            "member_epoch": epoch,
            "client_generates_member_id": True,
        }
        if epoch == 0:
            fields |= {
                "rebalance_timeout_ms": REBALANCE,
                "subscribed_topic_names": ("t",),
                "owned_partitions": (),
            }
        fields |= kw
        return self.shard.consumer_group_heartbeat(ConsumerGroupHeartbeat(**fields))  # type: ignore[arg-type]

    def owned(self, r: ConsumerGroupHeartbeatResult) -> Owned:
        assert r.assignment is not None
        return r.assignment


def parts(owned: Owned) -> set[int]:
    return {p for _t, ps in owned for p in ps}


@pytest.fixture
def h() -> Harness:
    return Harness()


def test_a_lone_member_gets_every_partition_at_epoch_one(h: Harness) -> None:
    r = h.hb("a", 0)
    assert (r.error, r.member_id, r.member_epoch, r.heartbeat_interval_ms) == (
        ErrorCode.NONE,
        "a",
        1,
        HEARTBEAT,
    )
    assert parts(h.owned(r)) == {0, 1, 2, 3}
    assert h.shard.describe_consumer_group("g").state == "Stable"


def test_a_partition_moves_only_after_its_owner_revokes_it(h: Harness) -> None:
    a = h.hb("a", 0)
    b = h.hb("b", 0)  # epoch 2: b's target is half, but a still owns everything
    assert b.member_epoch == 2 and parts(h.owned(b)) == set()
    assert h.shard.describe_consumer_group("g").state == "Reconciling"
    # a hears of the new epoch: it must revoke two partitions first (stays at epoch 1)
    r = h.hb("a", 1, owned_partitions=h.owned(a))
    keep = parts(h.owned(r))
    assert r.member_epoch == 1 and len(keep) == 2
    # b still waits: a has not acknowledged the revocation yet
    assert h.hb("b", 2).assignment is None
    # a acknowledges (its owned partitions no longer hold them): epoch 2
    r = h.hb("a", 1, owned_partitions=((TOPIC, tuple(sorted(keep))),))
    assert r.member_epoch == 2
    got = h.hb("b", 2)
    assert parts(h.owned(got)) == {0, 1, 2, 3} - keep
    assert h.shard.describe_consumer_group("g").state == "Stable"


def test_epoch_and_member_errors(h: Harness) -> None:
    h.hb("a", 0)
    assert h.hb("a", 5).error is ErrorCode.FENCED_MEMBER_EPOCH  # ahead of the coordinator
    assert h.hb("ghost", 1).error is ErrorCode.UNKNOWN_MEMBER_ID
    assert h.hb("a", 0, server_assignor="sticky").error is ErrorCode.UNSUPPORTED_ASSIGNOR
    bad = h.hb("c", 0, subscribed_topic_names=None, subscribed_topic_regex="[unclosed")
    assert bad.error is ErrorCode.INVALID_REGULAR_EXPRESSION
    assert h.hb("", 0).error is ErrorCode.INVALID_REQUEST  # v1: the client names itself
    assert h.hb("c", 0, rebalance_timeout_ms=-1).error is ErrorCode.INVALID_REQUEST
    assert h.hb("c", 0, owned_partitions=((TOPIC, (0,)),)).error is ErrorCode.INVALID_REQUEST
    other = h.shard.consumer_group_heartbeat(
        ConsumerGroupHeartbeat("unknown-group", "x", 3, client_generates_member_id=True)
    )
    assert other.error is ErrorCode.GROUP_ID_NOT_FOUND


def test_group_max_size(h: Harness) -> None:
    for m in ("a", "b", "c"):
        assert h.hb(m, 0).error is ErrorCode.NONE
    assert h.hb("d", 0).error is ErrorCode.GROUP_MAX_SIZE_REACHED


def test_session_timeout_fences_a_silent_member_and_its_partitions_move(h: Harness) -> None:
    a = h.hb("a", 0)
    h.hb("b", 0)
    r = h.hb("a", 1, owned_partitions=h.owned(a))
    r = h.hb("a", 1, owned_partitions=h.owned(r))
    for _ in range(15):  # b keeps heartbeating, a falls silent
        h.timers.advance(SESSION // 10)
        got = h.hb("b", h.shard.consumer_groups["g"].members["b"].member_epoch)
    assert "a" not in h.shard.consumer_groups["g"].members
    assert got.error is ErrorCode.NONE
    assert parts(to_owned(h, "b")) == {0, 1, 2, 3}


def to_owned(h: Harness, member: str) -> Owned:
    m = h.shard.consumer_groups["g"].members[member]
    return tuple((t, tuple(sorted(ps))) for t, ps in m.assigned.items())


def test_rebalance_timeout_fences_a_member_that_does_not_revoke(h: Harness) -> None:
    a = h.hb("a", 0)
    h.hb("b", 0)
    h.hb("a", 1, owned_partitions=h.owned(a))  # told to revoke; never acknowledges
    for _ in range(5):
        h.timers.advance(REBALANCE // 4)
        h.hb("a", 1, owned_partitions=h.owned(a))  # still owns everything
        h.hb("b", h.shard.consumer_groups["g"].members["b"].member_epoch)
    assert "a" not in h.shard.consumer_groups["g"].members


def test_leaving_and_a_static_member_that_comes_back_keeps_its_partitions(h: Harness) -> None:
    r = h.hb("s1", 0, instance_id="i")
    mine = parts(h.owned(r))
    epoch = r.member_epoch
    assert h.hb("s1", -2, instance_id="i").member_epoch == -2  # a temporary leave
    back = h.hb("s3", 0, instance_id="i")
    assert back.error is ErrorCode.NONE
    assert parts(h.owned(back)) == mine and back.member_epoch == epoch
    assert h.shard.consumer_groups["g"].group_epoch == epoch  # no rebalance
    # a second member with the same instance id while the first is in: refused
    assert h.hb("s4", 0, instance_id="i").error is ErrorCode.UNRELEASED_INSTANCE_ID
    # a leave (-1) removes the member and bumps the group epoch
    assert h.hb("s3", -1).member_epoch == -1
    assert "s3" not in h.shard.consumer_groups["g"].members


def test_regex_subscriptions_follow_topics(h: Harness) -> None:
    r = h.hb("a", 0, subscribed_topic_names=None, subscribed_topic_regex="t|u.*")
    assert h.owned(r) == ()  # the regex is resolved after the answer
    h.timers.advance(0)
    r = h.hb("a", r.member_epoch)
    assert r.member_epoch == 2 and parts(h.owned(r)) == {0, 1, 2, 3}
    new = h.topics.create("u1", 2)
    h.topics.create("x", 2)
    h.shard.on_topics_changed()
    h.timers.advance(0)
    r = h.hb("a", r.member_epoch)
    assert r.member_epoch == 3 and r.assignment is not None
    assert {t for t, _ in r.assignment} == {TOPIC, new}


def test_a_new_regex_is_resolved_after_the_heartbeat_that_brings_it(h: Harness) -> None:
    """librdkafka 0045: a regex plus a literal topic; the first answer holds only the literal
    topic's partitions, the regex's topics come on a later heartbeat once it is resolved."""
    r1 = h.topics.create("r1", 2)
    r2 = h.topics.create("r2", 2)
    r = h.hb("a", 0, subscribed_topic_names=("t",), subscribed_topic_regex="r.*")
    assert r.member_epoch == 1 and {t for t, _ in h.owned(r)} == {TOPIC}
    group = h.shard.consumer_groups["g"]
    assert group.resolved_regexes == {}
    r = h.hb("a", r.member_epoch)  # before the resolution op: nothing new
    assert r.member_epoch == 1 and r.assignment is None
    h.timers.advance(0)  # the resolution op runs and bumps the group epoch
    assert group.resolved_regexes == {"r.*": ("r1", "r2")}
    assert group.group_epoch == 2
    r = h.hb("a", r.member_epoch)
    assert r.member_epoch == 2
    assert {t for t, _ in h.owned(r)} == {TOPIC, r1, r2} and len(parts(h.owned(r))) == 4


def test_a_regex_nobody_subscribes_to_is_dropped(h: Harness) -> None:
    r1 = h.topics.create("r1", 2)
    r = h.hb("a", 0, subscribed_topic_names=(), subscribed_topic_regex="r.*")
    h.timers.advance(0)
    r = h.hb("a", r.member_epoch)
    assert {t for t, _ in h.owned(r)} == {r1}
    group = h.shard.consumer_groups["g"]
    assert group.resolved_regexes == {"r.*": ("r1",)}
    r = h.hb("a", r.member_epoch, subscribed_topic_names=("t",), subscribed_topic_regex="")
    assert group.resolved_regexes == {}
    assert not h.shard.timers_scheduled("consumer-regex/g")
    assert set(group.target["a"]) == {TOPIC}


def test_resolved_regexes_are_refreshed_on_the_refresh_interval() -> None:
    h = Harness(dataclasses.replace(CONFIG, consumer_regex_refresh_interval_ms=REFRESH))
    r = h.hb("a", 0, subscribed_topic_names=(), subscribed_topic_regex="r.*")
    h.timers.advance(0)
    group = h.shard.consumer_groups["g"]
    assert group.resolved_regexes == {"r.*": ()}
    h.topics.create("r1", 2)  # nobody is told: only the periodic refresh finds it
    for _ in range(REFRESH // HEARTBEAT - 1):
        h.timers.advance(HEARTBEAT)
        assert h.hb("a", r.member_epoch).error is ErrorCode.NONE
    assert group.resolved_regexes == {"r.*": ()}
    h.timers.advance(HEARTBEAT)
    assert group.resolved_regexes == {"r.*": ("r1",)}
    assert group.group_epoch == r.member_epoch + 1


def test_commits_and_fetches_are_checked_by_member_epoch(h: Harness) -> None:
    r = h.hb("a", 0)

    def commit(member: str, epoch: int, v9: bool = True) -> ErrorCode:
        cmd = OffsetCommit(
            "g", (OffsetCommitTopic("t", [(0, 5, -1, "")]),), epoch, member, group_id_not_found=v9
        )
        return h.shard.commit_offsets(cmd).topics[0][1][0][1]

    assert commit("a", r.member_epoch) is ErrorCode.NONE
    assert commit("a", r.member_epoch + 1) is ErrorCode.STALE_MEMBER_EPOCH
    assert commit("ghost", 1) is ErrorCode.UNKNOWN_MEMBER_ID
    assert commit("a", r.member_epoch, v9=False) is ErrorCode.UNSUPPORTED_VERSION
    fetched = h.shard.fetch_offsets(OffsetFetch("g", None, member_id="a", member_epoch=1))
    assert fetched.error is ErrorCode.NONE and fetched.topics[0][1][0].offset == 5
    stale = h.shard.fetch_offsets(OffsetFetch("g", None, member_id="a", member_epoch=7))
    assert stale.error is ErrorCode.STALE_MEMBER_EPOCH


def test_a_commit_at_the_previous_epoch_is_taken_for_partitions_still_owned(h: Harness) -> None:
    """KIP-1251 (Kafka 4.3): a member's commit may carry an epoch older than its current one
    (its heartbeat's answer and its commit crossed) for partitions it was given at or before
    that epoch and still owns; any other partition, or a newer epoch, is STALE_MEMBER_EPOCH."""

    def commit(member: str, epoch: int, *partitions: int, name: str = "t") -> ErrorCode:
        topic = OffsetCommitTopic(name, [(p, 5, -1, "") for p in partitions])
        cmd = OffsetCommit("g", (topic,), epoch, member, group_id_not_found=True)
        errors = {e for _t, ps in h.shard.commit_offsets(cmd).topics for _p, e in ps}
        assert len(errors) == 1  # a group-level answer: every partition the same
        return errors.pop()

    a = h.hb("a", 0)  # epoch 1, every partition given at 1
    h.hb("b", 0)  # epoch 2
    r = h.hb("a", 1, owned_partitions=h.owned(a))
    keep = parts(h.owned(r))
    r = h.hb("a", 1, owned_partitions=((TOPIC, tuple(sorted(keep))),))
    assert r.member_epoch == 2  # a moved on; its commit built at epoch 1 is still in flight
    gone = min({0, 1, 2, 3} - keep)
    assert commit("a", 1, *keep) is ErrorCode.NONE  # given at epoch 1, still a's
    assert commit("a", 2, *keep) is ErrorCode.NONE
    assert commit("a", 1, gone) is ErrorCode.STALE_MEMBER_EPOCH  # revoked since
    assert commit("a", 1, min(keep), gone) is ErrorCode.STALE_MEMBER_EPOCH
    assert commit("a", 3, *keep) is ErrorCode.STALE_MEMBER_EPOCH  # newer than a's epoch
    assert commit("a", 1, 0, name="unknown-topic") is ErrorCode.STALE_MEMBER_EPOCH
    # b was given its partitions at epoch 2: a commit at epoch 1 for them is stale
    got = h.hb("b", 2)
    mine = parts(h.owned(got))
    assert commit("b", got.member_epoch, *mine) is ErrorCode.NONE
    assert commit("b", 1, *mine) is ErrorCode.STALE_MEMBER_EPOCH


def test_list_and_describe_know_both_group_types(h: Harness) -> None:
    h.hb("a", 0)
    listed = {g.group_id: (g.group_type, g.state) for g in h.shard.list_groups()}
    assert listed == {"g": ("consumer", "Stable")}
    assert h.shard.describe_group("g", True).error is ErrorCode.GROUP_ID_NOT_FOUND
    assert h.shard.delete_group("g") is ErrorCode.NON_EMPTY_GROUP
    h.hb("a", -1)
    assert h.shard.delete_group("g") is ErrorCode.NONE


def test_replaying_what_a_live_group_emitted_rebuilds_it() -> None:
    emitted: list[object] = []
    timers = ManualTimers()
    live = CoordinatorShard(0, CONFIG, timers, emitted.append)  # type: ignore[arg-type]
    topics = InMemoryTopics({"t": (TOPIC, 4)})
    live.topics_view = topics
    h = Harness.__new__(Harness)
    h.timers, h.shard, h.topics = timers, live, topics
    a = h.hb("a", 0)
    h.hb("b", 0)
    r = h.hb("a", 1, owned_partitions=h.owned(a))  # a revokes
    h.hb("a", 1, owned_partitions=h.owned(r))
    h.hb("b", 2)
    h.hb("s1", 0, instance_id="i")
    h.hb("s1", -2, instance_id="i")  # a static member away for now
    h.hb("c", 0, subscribed_topic_names=(), subscribed_topic_regex="x.*")
    ra = live.consumer_groups["g"].members["a"]
    h.hb("a", ra.member_epoch, subscribed_topic_regex="t|y")
    timers.advance(0)  # both regexes resolved (records)
    h.hb("c", -1)  # and one that left: its regex is dropped (a tombstone)
    assert live.consumer_groups["g"].resolved_regexes == {"t|y": ("t",)}

    loaded = CoordinatorShard(0, CONFIG, ManualTimers(), loaded=False)
    loaded.topics_view = topics
    loaded.load(emitted)  # type: ignore[arg-type]

    def state(shard: CoordinatorShard) -> tuple[object, ...]:
        g = shard.consumer_groups["g"]
        return (
            g.group_epoch,
            g.assignment_epoch,
            g.members,
            g.static_members,
            {m: to for m, to in g.target.items() if to},
            g.partition_epochs,
            g.subscription_metadata,
            g.resolved_regexes,
        )

    assert state(loaded) == state(live)
    # and the loaded group carries on: b heartbeats at its epoch without a reassignment
    b = live.consumer_groups["g"].members["b"]
    again = loaded.consumer_group_heartbeat(
        ConsumerGroupHeartbeat("g", "b", b.member_epoch, client_generates_member_id=True)
    )
    assert again.error is ErrorCode.NONE and again.member_epoch == b.member_epoch


def test_a_classic_join_with_malformed_metadata_is_refused(h: Harness) -> None:
    from kgroupd.broker.coordinator import JoinGroup

    h.hb("a", 0)
    joined = h.shard.join_group(
        JoinGroup("g", "x", 10_000, 10_000, "consumer", (("range", b"\x00"),))
    ).result()
    assert joined.error is ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    assert "g" not in h.shard.groups and set(h.shard.consumer_groups["g"].members) == {"a"}


def test_a_static_member_that_never_comes_back_releases_its_partitions(h: Harness) -> None:
    s1 = h.hb("s1", 0, instance_id="i")
    assert parts(h.owned(s1)) == {0, 1, 2, 3}
    h.hb("s1", -2, instance_id="i")
    joined = h.hb("b", 0)
    assert parts(h.owned(joined)) == set()  # still held by the static member, away
    for _ in range(12):  # past its session timeout, b keeps heartbeating
        h.timers.advance(SESSION // 10)
        got = h.hb("b", h.shard.consumer_groups["g"].members["b"].member_epoch)
    assert "s1" not in h.shard.consumer_groups["g"].members
    assert got.error is ErrorCode.NONE and parts(to_owned(h, "b")) == {0, 1, 2, 3}
