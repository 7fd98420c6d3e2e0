"""DescribeGroups, ListGroups, DeleteGroups, routing, loading/ownership and shutdown."""

from __future__ import annotations

from coord_helpers import RANGE, TEST_CONFIG, Harness

from kgroupd.broker.coordinator import (
    CoordinatorConfig,
    CoordinatorShard,
    DeleteGroups,
    DescribeGroups,
    GroupCoordinator,
    GroupState,
    GroupTombstoneRecord,
    Heartbeat,
    JoinGroup,
    ListGroups,
    ManualTimers,
    OffsetCommit,
    OffsetFetch,
    SyncGroup,
    partition_for,
)
from kgroupd.protocol.errors import ErrorCode as E

S = GroupState


def test_describe_unknown_group_dead_or_not_found_v6() -> None:
    h = Harness()
    d = h.shard.describe_group("nope")
    assert (d.error, d.state, d.members) == (E.NONE, "Dead", ())
    assert (
        h.shard.describe_group("nope", unknown_group_not_found=True).error == E.GROUP_ID_NOT_FOUND
    )


def test_describe_metadata_and_assignment_only_in_stable() -> None:
    h = Harness()
    ids = h.form(2, instances=["i0", None])
    d = h.shard.describe_group("g")
    assert (d.state, d.protocol_type, d.protocol_data) == ("CompletingRebalance", "consumer", "")
    assert all(m.metadata == b"" and m.assignment == b"" for m in d.members)
    assert d.members[0].group_instance_id == "i0" and d.members[0].client_host == "/127.0.0.1"
    gen = h.group().generation_id
    h.sync(ids[1], gen)
    h.sync(ids[0], gen, instance="i0", assignments=((ids[0], b"x"),))
    d = h.shard.describe_group("g")
    assert (d.state, d.protocol_data) == ("Stable", "range")
    assert d.members[0].metadata == RANGE[0][1] and d.members[0].assignment == b"x"


def test_list_groups_case_insensitive_filter() -> None:
    h = Harness()
    h.stable(1, group="a")
    h.commit({("t", 0): 1}, group="b")
    assert {g.group_id for g in h.shard.list_groups()} == {"a", "b"}
    assert [g.group_id for g in h.shard.list_groups(["STABLE"])] == ["a"]
    listed = h.shard.list_groups(["empty", "preparingrebalance"])
    assert [(g.group_id, g.state, g.protocol_type) for g in listed] == [("b", "Empty", "")]


def test_delete_groups_rules() -> None:
    h = Harness()
    assert h.shard.delete_group("nope") == E.GROUP_ID_NOT_FOUND
    h.stable(1, group="busy")
    assert h.shard.delete_group("busy") == E.NON_EMPTY_GROUP
    h.commit({("t", 0): 1, ("t", 1): 1}, group="idle")
    assert h.shard.delete_group("idle") == E.NONE
    assert "idle" not in h.shard.groups and not h.shard.committed("idle")
    assert isinstance(h.records[-1], GroupTombstoneRecord)
    assert h.fetch(group="idle", topics={"t": (0,)}).offsets()[("t", 0)].offset == -1


# --- GroupCoordinator --------------------------------------------------------------------
def test_coordinator_routes_by_partition_and_answers_find_coordinator() -> None:
    timers = ManualTimers()
    c = GroupCoordinator(CoordinatorConfig(initial_rebalance_delay_ms=0), timers, node_id=7)
    assert len(c.shards) == 50
    loc = c.coordinator_for("hello")
    assert (loc.partition, loc.owned, loc.node_id) == (99162322 % 50, True, 7)
    assert c.coordinator_for("polygenelubricants").partition == 0
    d = c.join_group(JoinGroup("hello", "", 10_000, 10_000, "consumer", RANGE))
    timers.advance(0)
    r = d.result()
    assert r.error == E.NONE and "hello" in c.shards[partition_for("hello", 50)].groups
    s = c.sync_group(
        SyncGroup("hello", r.generation_id, r.member_id, assignments=((r.member_id, b"a"),))
    )
    assert s.result().assignment == b"a"
    assert c.heartbeat(Heartbeat("hello", r.generation_id, r.member_id)).error == E.NONE
    c.commit_offsets(OffsetCommit("simple", ()))
    assert {g.group_id for g in c.list_groups(ListGroups()).groups} == {"hello", "simple"}
    assert c.describe_groups(DescribeGroups(("hello", "x"))).groups[1].state == "Dead"
    assert c.delete_groups(DeleteGroups(("hello", "simple"))).results == (
        ("hello", E.NON_EMPTY_GROUP),
        ("simple", E.NONE),
    )
    c.shutdown()
    assert c.coordinator_for("hello").owned is False


def test_shutdown_resolves_parked_requests_with_not_coordinator() -> None:
    h = Harness()
    ids = h.form(2)
    parked_sync = h.sync(ids[1], h.group().generation_id)
    h2 = Harness()
    parked_join = h2.join()
    h.shard.shutdown()
    h2.shard.shutdown()
    assert parked_sync.result().error == E.NOT_COORDINATOR
    assert parked_join.result().error == E.NOT_COORDINATOR
    assert h.timers.keys() == [] and h2.timers.keys() == []
    assert h.join().result().error == E.NOT_COORDINATOR
    assert h.hb("m", 1).error == E.NOT_COORDINATOR


def test_loading_shard_answers_load_in_progress_but_heartbeat_none() -> None:
    timers = ManualTimers()
    shard = CoordinatorShard(0, TEST_CONFIG, timers, loaded=False)
    assert shard.join_group(JoinGroup("g", "", 1000, 1000, "consumer", RANGE)).result().error == (
        E.COORDINATOR_LOAD_IN_PROGRESS
    )
    assert shard.sync_group(SyncGroup("g", 0, "m")).result().error == E.COORDINATOR_LOAD_IN_PROGRESS
    assert shard.heartbeat(Heartbeat("g", 0, "m")).error == E.NONE
    assert shard.fetch_offsets(OffsetFetch("g", None)).error == E.COORDINATOR_LOAD_IN_PROGRESS
    assert shard.describe_group("g").error == E.COORDINATOR_LOAD_IN_PROGRESS
    assert shard.delete_group("g") == E.COORDINATOR_LOAD_IN_PROGRESS
    c = GroupCoordinator(TEST_CONFIG, timers, 1)
    c.shards[0].loading = True
    assert c.list_groups(ListGroups()).error == E.COORDINATOR_LOAD_IN_PROGRESS
    shard.load([])
    assert shard.heartbeat(Heartbeat("g", 0, "m")).error == E.UNKNOWN_MEMBER_ID


def test_loaded_members_get_session_timers() -> None:
    h = Harness()
    ids = h.stable(2)
    fresh = Harness()
    fresh.shard.load(h.records)
    assert fresh.group().state is S.STABLE
    fresh.advance(1000)  # nobody heartbeats after the restart
    assert fresh.group().state is S.EMPTY and ids[0] not in fresh.group().members


def test_group_deleted_while_members_pending_answers_nothing_hanging() -> None:
    h = Harness()
    pending = h.join(v4=True).result().member_id
    assert h.shard.delete_group("g") == E.NONE
    assert not h.timers.is_scheduled(f"pending/g/{pending}")
