"""Online migration between the classic and the consumer group protocols, in one shard on a
manual clock (Kafka 4's GroupMetadataManager: convertToConsumerGroup, convertToClassicGroup,
classicGroupJoin/Sync/Heartbeat/LeaveToConsumerGroup), never sleeping."""

from __future__ import annotations

import dataclasses
import uuid

from coord_helpers import DELAY, REBALANCE, SESSION, TEST_CONFIG
from coord_helpers import Harness as ClassicHarness

from kgroupd.assignors.codec import Assignment, Subscription, decode_assignment, encode_assignment
from kgroupd.assignors.codec import encode_subscription as encode_sub
from kgroupd.broker.coordinator import (
    ConsumerGroupHeartbeat,
    ConsumerGroupHeartbeatResult,
    CoordinatorShard,
    InMemoryTopics,
    ManualTimers,
    Record,
)
from kgroupd.broker.coordinator.consumer.group import MemberState
from kgroupd.broker.coordinator.state import GroupState
from kgroupd.protocol.errors import ErrorCode

TOPIC = uuid.UUID(int=7)
CG_SESSION = 4000


def protocols(owned: tuple[int, ...] = (), version: int = 1) -> tuple[tuple[str, bytes], ...]:
    sub = Subscription(("t",), None, (("t", owned),) if owned else ())
    return (("range", encode_sub(sub, version)),)


def assignment(*parts: int) -> bytes:
    return encode_assignment(Assignment((("t", tuple(parts)),)), 1)


class H(ClassicHarness):
    def __init__(self, **overrides: object) -> None:
        cfg = dataclasses.replace(
            TEST_CONFIG, consumer_session_timeout_ms=CG_SESSION, consumer_heartbeat_interval_ms=100
        )
        super().__init__(cfg, **overrides)  # type: ignore[arg-type]
        self.shard.topics_view = InMemoryTopics({"t": (TOPIC, 4)})

    def cgh(self, member: str, epoch: int, **kw: object) -> ConsumerGroupHeartbeatResult:
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

    def classic_stable(self) -> tuple[str, str, int]:
        """Two classic members, Stable: the leader holds 0-1, the other 2-3."""
        waiters = [self.join(protocols=protocols()) for _ in range(2)]
        while not all(w.done() for w in waiters):
            self.advance(DELAY)
        results = [w.result() for w in waiters]
        leader = results[0].leader
        other = next(r.member_id for r in results if r.member_id != leader)
        gen = results[0].generation_id
        follower = self.sync(other, gen)
        self.sync(leader, gen, assignments=((leader, assignment(0, 1)), (other, assignment(2, 3))))
        assert follower.result().error is ErrorCode.NONE
        return leader, other, gen

    def owners(self) -> dict[int, str]:
        """Partition -> the one member holding it (assigned or pending revocation); fails if
        a partition is held twice."""
        out: dict[int, str] = {}
        for m in self.shard.consumer_groups["g"].members.values():
            for held in (m.assigned, m.pending_revocation):
                for p in held.get(TOPIC, ()):
                    assert p not in out, f"partition {p} held by {out[p]} and {m.member_id}"
                    out[p] = m.member_id
        return out


def parts(assigned: bytes) -> set[int]:
    return {p for _t, ps in decode_assignment(assigned).assigned_partitions for p in ps}


def test_a_consumer_member_upgrades_a_classic_group_and_partitions_move_without_overlap() -> None:
    h = H()
    leader, other, gen = h.classic_stable()
    h.commit({("t", 0): 5}, generation=gen, member_id=leader)

    new = h.cgh("new", 0)
    assert new.error is ErrorCode.NONE
    assert "g" not in h.shard.groups
    group = h.shard.consumer_groups["g"]
    assert group.group_epoch == gen + 1
    assert new.member_epoch == gen + 1 and new.assignment == ()  # all still held by classics
    assert h.owners() == {0: leader, 1: leader, 2: other, 3: other}
    assert group.members[leader].uses_classic and group.members[leader].member_epoch == gen
    assert h.fetch(topics={"t": (0,)}).offsets()[("t", 0)].offset == 5  # offsets are kept

    # The classic members learn of the new epoch from their heartbeat and rejoin (eager: they
    # revoked everything first, so they own nothing).
    assert h.hb(leader, gen).error is ErrorCode.REBALANCE_IN_PROGRESS
    joined = h.join(leader, protocols=protocols()).result()
    assert joined.error is ErrorCode.NONE
    assert (joined.generation_id, joined.leader, joined.members) == (gen + 1, "", ())
    assert (joined.protocol_type, joined.protocol_name) == ("consumer", "range")
    synced = h.sync(leader, gen + 1, ptype="consumer", pname="range").result()
    assert synced.error is ErrorCode.NONE
    kept_leader = parts(synced.assignment)
    h.owners()

    assert h.hb(other, gen).error is ErrorCode.REBALANCE_IN_PROGRESS
    joined = h.join(other, protocols=protocols()).result()
    synced = h.sync(other, joined.generation_id).result()
    kept_other = parts(synced.assignment)
    h.owners()

    got = h.cgh("new", gen + 1)
    mine = {p for _t, ps in got.assignment or () for p in ps}
    assert len(mine) == 1 and not (mine & (kept_leader | kept_other))
    assert mine | kept_leader | kept_other == {0, 1, 2, 3}
    assert h.shard.describe_consumer_group("g").state == "Stable"
    assert h.hb(leader, gen + 1).error is ErrorCode.NONE
    # a classic member commits with its generation (its member epoch) in a consumer group
    ok = h.commit({("t", 1): 9}, generation=gen + 1, member_id=leader)
    assert ok.errors() == {("t", 1): ErrorCode.NONE}
    bad = h.commit({("t", 1): 9}, generation=gen, member_id=leader)
    assert bad.errors() == {("t", 1): ErrorCode.ILLEGAL_GENERATION}


def test_a_cooperative_classic_member_revokes_before_the_partition_moves() -> None:
    h = H()
    leader, other, gen = h.classic_stable()
    h.cgh("new", 0)
    target = h.shard.consumer_groups["g"].target
    revoker = next(m for m in (leader, other) if len(target[m].get(TOPIC, ())) < 2)
    held = (0, 1) if revoker == leader else (2, 3)
    # it rejoins still owning its two partitions (cooperative): it must revoke one first,
    # staying at its old epoch
    joined = h.join(revoker, protocols=protocols(owned=held)).result()
    assert joined.generation_id == gen
    member = h.shard.consumer_groups["g"].members[revoker]
    assert member.state is MemberState.UNREVOKED_PARTITIONS
    synced = h.sync(revoker, gen).result()  # no REBALANCE_IN_PROGRESS while revoking
    assert synced.error is ErrorCode.NONE and len(parts(synced.assignment)) == 1
    assert not h.cgh("new", gen + 1).assignment  # not released yet
    assert h.hb(revoker, gen).error is ErrorCode.REBALANCE_IN_PROGRESS
    kept = tuple(parts(synced.assignment))
    again = h.join(revoker, protocols=protocols(owned=kept)).result()
    assert again.generation_id == gen + 1
    h.owners()
    got = h.cgh("new", gen + 1).assignment or ()
    assert {p for _t, ps in got for p in ps} == set(held) - set(kept)


def test_a_parked_classic_join_is_answered_rebalance_in_progress_by_the_upgrade() -> None:
    h = H()
    _leader, _other, _gen = h.classic_stable()
    parked = h.join(protocols=protocols())  # a third member: the group prepares a rebalance
    assert not parked.done()
    h.cgh("new", 0)
    assert parked.result().error is ErrorCode.REBALANCE_IN_PROGRESS


def test_the_upgrade_is_refused_by_policy_or_by_a_non_consumer_protocol_type() -> None:
    h = H(consumer_migration_policy="downgrade")
    h.classic_stable()
    assert h.cgh("new", 0).error is ErrorCode.GROUP_ID_NOT_FOUND
    assert h.group().state is GroupState.STABLE

    h = H()
    waiter = h.join(ptype="connect", protocols=(("v1", b"x"),))
    h.advance(DELAY)
    assert waiter.result().error is ErrorCode.NONE
    assert h.cgh("new", 0).error is ErrorCode.GROUP_ID_NOT_FOUND


def test_classic_member_errors_and_timeouts_in_a_consumer_group() -> None:
    h = H()
    leader, other, gen = h.classic_stable()
    h.cgh("new", 0)
    assert h.hb("ghost", gen).error is ErrorCode.UNKNOWN_MEMBER_ID
    assert h.hb(leader, gen + 5).error is ErrorCode.ILLEGAL_GENERATION
    assert h.sync(leader, gen + 5).result().error is ErrorCode.ILLEGAL_GENERATION
    assert h.sync(leader, gen).result().error is ErrorCode.REBALANCE_IN_PROGRESS
    assert h.hb("new", gen + 1).error is ErrorCode.UNKNOWN_MEMBER_ID  # not a classic member
    wrong = h.join(leader, ptype="connect", protocols=(("v1", b"x"),)).result()
    assert wrong.error is ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    needs_id = h.join(protocols=protocols(), v4=True).result()
    assert needs_id.error is ErrorCode.MEMBER_ID_REQUIRED and needs_id.member_id
    # asked to rejoin, the leader keeps heartbeating but never rejoins: fenced after its
    # rebalance timeout; so is the other, asked one step later
    assert h.hb(leader, gen).error is ErrorCode.REBALANCE_IN_PROGRESS
    for _ in range(3):
        h.advance(REBALANCE // 4)
        assert h.hb(leader, gen).error is ErrorCode.REBALANCE_IN_PROGRESS
        assert h.hb(other, gen).error is ErrorCode.REBALANCE_IN_PROGRESS
    h.advance(REBALANCE // 4)
    members = h.shard.consumer_groups["g"].members
    assert leader not in members and other in members
    h.advance(REBALANCE // 4)
    assert set(members) == {"new"}


def test_a_classic_member_that_stops_heartbeating_is_fenced_after_its_session() -> None:
    h = H()
    leader, _other, gen = h.classic_stable()
    h.cgh("new", 0)
    h.advance(SESSION - 1)
    assert h.hb(leader, gen).error is ErrorCode.REBALANCE_IN_PROGRESS
    h.advance(1)  # the other's classic session timeout (not the consumer one, 4000)
    assert set(h.shard.consumer_groups["g"].members) == {leader, "new"}


def test_a_classic_leave_from_a_consumer_group() -> None:
    h = H()
    leader, other, _gen = h.classic_stable()
    h.cgh("new", 0)
    epoch = h.shard.consumer_groups["g"].group_epoch
    left = h.leave((leader, None), ("new", None), ("ghost", None))
    errors = [m.error for m in left.members]
    assert errors == [ErrorCode.NONE, ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode.UNKNOWN_MEMBER_ID]
    group = h.shard.consumer_groups["g"]
    assert set(group.members) == {other, "new"} and group.group_epoch == epoch + 1


def test_the_last_consumer_member_leaving_downgrades_the_group() -> None:
    h = H()
    leader, other, gen = h.classic_stable()
    h.commit({("t", 3): 11}, generation=gen, member_id=leader)
    h.cgh("new", 0)
    epoch = h.shard.consumer_groups["g"].group_epoch
    assert h.cgh("new", -1).error is ErrorCode.NONE
    assert "g" not in h.shard.consumer_groups
    group = h.group()
    assert group.state is GroupState.PREPARING_REBALANCE
    assert group.generation_id == epoch and set(group.members) == {leader, other}
    assert h.fetch(topics={"t": (3,)}).offsets()[("t", 3)].offset == 11
    # the members rejoin as a classic group and the leader assigns again
    assert h.hb(leader, epoch).error is ErrorCode.REBALANCE_IN_PROGRESS
    waiters = [h.join(m, protocols=protocols()) for m in (leader, other)]
    h.advance(DELAY)
    assert all(w.result().error is ErrorCode.NONE for w in waiters)
    assert h.group().generation_id == epoch + 1


def test_no_downgrade_when_the_policy_only_upgrades() -> None:
    h = H(consumer_migration_policy="upgrade")
    h.classic_stable()
    h.cgh("new", 0)
    h.cgh("new", -1)
    assert "g" in h.shard.consumer_groups and "g" not in h.shard.groups


def test_a_classic_join_to_an_empty_consumer_group_makes_a_classic_group() -> None:
    h = H()
    h.cgh("a", 0)
    h.cgh("a", -1)
    waiter = h.join(protocols=protocols())
    h.advance(DELAY)
    assert waiter.result().error is ErrorCode.NONE
    assert "g" not in h.shard.consumer_groups and h.group().state is GroupState.COMPLETING_REBALANCE


def test_replaying_the_records_of_an_upgrade_rebuilds_the_group() -> None:
    h = H()
    leader, _other, _gen = h.classic_stable()
    h.cgh("new", 0)
    h.join(leader, protocols=protocols()).result()
    loaded = CoordinatorShard(0, h.config, ManualTimers())
    loaded.load(list(h.records))

    def state(shard: CoordinatorShard) -> tuple[object, ...]:
        g = shard.consumer_groups["g"]
        targets = {m: t for m, t in g.target.items() if t}
        return g.group_epoch, g.assignment_epoch, g.members, targets, g.partition_epochs

    assert "g" not in loaded.groups
    assert state(loaded) == state(h.shard)
    assert loaded.consumer_groups["g"].members[leader].classic is not None


def test_replaying_a_downgrade_rebuilds_the_classic_group() -> None:
    h = H()
    leader, other, gen = h.classic_stable()
    h.cgh("new", 0)
    h.cgh("new", -1)
    records: list[Record] = list(h.records)
    loaded = CoordinatorShard(0, h.config, ManualTimers())
    loaded.load(records)
    assert "g" not in loaded.consumer_groups
    assert set(loaded.groups["g"].members) == {leader, other}
    assert loaded.groups["g"].generation_id == gen + 1


def test_a_classic_static_member_replacing_the_last_consumer_member_downgrades_the_group() -> None:
    """Kafka's validateOnlineDowngradeWithReplacedMemberId: the group becomes classic at once,
    Stable, the joiner holding the replaced member's target assignment, no rebalance."""
    h = H()
    leader, other, _gen = h.classic_stable()
    h.cgh("static", 0, instance_id="inst")  # upgrades the group
    group = h.shard.consumer_groups["g"]
    # the classic members rejoin at the new epoch; the static member gets its partition
    for m in (leader, other):
        assert h.hb(m, group.members[m].member_epoch).error is ErrorCode.REBALANCE_IN_PROGRESS
        joined = h.join(m, protocols=protocols()).result()
        assert h.sync(m, joined.generation_id).result().error is ErrorCode.NONE
    got = h.cgh("static", group.members["static"].member_epoch)
    wanted = group.target["static"]
    assert got.assignment == ((TOPIC, tuple(sorted(wanted[TOPIC]))),)
    assert wanted
    epoch = group.group_epoch
    joined = h.join(instance="inst", protocols=protocols()).result()
    assert joined.error is ErrorCode.NONE and joined.member_id != "static"
    assert "g" not in h.shard.consumer_groups
    classic = h.group()
    assert classic.state is GroupState.STABLE and classic.generation_id == epoch
    assert set(classic.members) == {leader, other, joined.member_id}
    assert classic.members[joined.member_id].group_instance_id == "inst"
    assert parts(classic.members[joined.member_id].assignment) == set(wanted[TOPIC])
    # the joiner's SyncGroup is answered from the classic group, without a rebalance
    synced = h.sync(joined.member_id, classic.generation_id, instance="inst").result()
    assert synced.error is ErrorCode.NONE and synced.assignment == (
        classic.members[joined.member_id].assignment
    )
    # replayed, the records build the same classic group
    loaded = CoordinatorShard(0, h.config, ManualTimers())
    loaded.load(list(h.records))
    assert "g" not in loaded.consumer_groups
    assert set(loaded.groups["g"].members) == {leader, other, joined.member_id}


def test_no_downgrade_by_a_static_replacement_when_the_policy_only_upgrades() -> None:
    h = H(consumer_migration_policy="upgrade")
    h.classic_stable()
    h.cgh("static", 0, instance_id="inst")
    joined = h.join(instance="inst", protocols=protocols()).result()
    assert joined.error is ErrorCode.NONE
    group = h.shard.consumer_groups["g"]
    assert "g" not in h.shard.groups and joined.member_id in group.members
    assert "static" not in group.members
