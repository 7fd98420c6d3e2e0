"""SyncGroup, Heartbeat, session expiry (KIP-62) and LeaveGroup."""

from __future__ import annotations

import pytest
from coord_helpers import REBALANCE, SESSION, Harness, sub

from kgroupd.broker.coordinator import GroupMetadataRecord, GroupState
from kgroupd.protocol.errors import ErrorCode as E

S = GroupState


# --- SyncGroup ---------------------------------------------------------------------------
def test_sync_empty_group_id() -> None:
    assert Harness().sync("m", 1, group="").result().error == E.INVALID_GROUP_ID


def test_sync_unknown_group_and_empty_group() -> None:
    h = Harness()
    assert h.sync("m", 0).result().error == E.UNKNOWN_MEMBER_ID
    ids = h.stable(1)
    h.leave((ids[0], None))
    assert h.group().state is S.EMPTY
    assert h.sync(ids[0], h.group().generation_id).result().error == E.UNKNOWN_MEMBER_ID


def test_sync_member_instance_generation_checks() -> None:
    h = Harness()
    ids = h.form(2, instances=["i0", None])
    gen = h.group().generation_id
    assert h.sync("nobody", gen).result().error == E.UNKNOWN_MEMBER_ID
    assert h.sync(ids[1], gen, instance="i9").result().error == E.UNKNOWN_MEMBER_ID
    assert h.sync("other", gen, instance="i0").result().error == E.FENCED_INSTANCE_ID
    assert h.sync(ids[1], gen + 1).result().error == E.ILLEGAL_GENERATION


@pytest.mark.parametrize(
    ("ptype", "pname", "error"),
    [
        ("connect", None, E.INCONSISTENT_GROUP_PROTOCOL),
        (None, "roundrobin", E.INCONSISTENT_GROUP_PROTOCOL),
        ("consumer", "range", E.NONE),
        (None, None, E.NONE),
    ],
)
def test_sync_v5_protocol_type_and_name(ptype: str | None, pname: str | None, error: E) -> None:
    h = Harness()
    ids = h.form(1)
    r = h.sync(ids[0], h.group().generation_id, ptype=ptype, pname=pname).result()
    assert r.error == error


def test_sync_in_preparing_is_rebalance_in_progress() -> None:
    h = Harness()
    ids = h.stable(2)
    h.join(member_id=ids[0])
    assert h.sync(ids[1], h.group().generation_id).result().error == E.REBALANCE_IN_PROGRESS


def test_sync_parks_until_leader_missing_assignment_is_empty_and_record_written() -> None:
    h = Harness()
    ids = h.form(3)
    gen = h.group().generation_id
    f1 = h.sync(ids[1], gen)
    assert not f1.done() and h.group().state is S.COMPLETING_REBALANCE
    lead = h.sync(ids[0], gen, assignments=((ids[0], b"A0"), (ids[1], b"A1"), ("stranger", b"X")))
    assert h.group().state is S.STABLE
    assert lead.result().assignment == b"A0" and lead.result().protocol_name == "range"
    assert f1.result().assignment == b"A1" and f1.result().protocol_type == "consumer"
    assert h.group().members[ids[2]].assignment == b""
    late = h.sync(ids[2], gen).result()  # Stable: stored assignment at once
    assert late.error == E.NONE and late.assignment == b""
    rec = h.records[-1]
    assert isinstance(rec, GroupMetadataRecord)
    assert [(m.member_id, m.assignment) for m in rec.members] == [
        (ids[0], b"A0"),
        (ids[1], b"A1"),
        (ids[2], b""),
    ]


def test_new_rebalance_answers_parked_syncs() -> None:
    h = Harness()
    ids = h.form(2)
    parked = h.sync(ids[1], h.group().generation_id)
    h.join()  # a new member: CompletingRebalance -> PreparingRebalance
    r = parked.result()
    assert (r.error, r.assignment, r.protocol_name) == (E.REBALANCE_IN_PROGRESS, b"", None)


def test_members_that_never_sync_are_removed_and_rebalance_starts() -> None:
    h = Harness()
    ids = h.form(3, session=10 * REBALANCE)
    gen = h.group().generation_id
    h.sync(ids[1], gen)
    h.sync(ids[0], gen, assignments=())  # leader: Stable; ids[2] never syncs
    assert h.group().state is S.STABLE
    h.advance(REBALANCE)
    g = h.group()
    assert ids[2] not in g.members
    assert g.state is S.PREPARING_REBALANCE


def test_sync_timer_cancelled_when_everyone_synced() -> None:
    h = Harness()
    h.stable(2)
    assert not h.timers.is_scheduled("sync/g")


# --- Heartbeat ---------------------------------------------------------------------------
def test_heartbeat_errors_in_order() -> None:
    h = Harness()
    assert h.hb("m", 0, group="").error == E.INVALID_GROUP_ID
    assert h.hb("m", 0).error == E.UNKNOWN_MEMBER_ID  # unknown group
    ids = h.stable(2, instances=["i0", None])
    gen = h.group().generation_id
    assert h.hb("nobody", gen).error == E.UNKNOWN_MEMBER_ID
    assert h.hb("nobody", gen + 5).error == E.UNKNOWN_MEMBER_ID  # member before generation
    assert h.hb("x", gen, instance="i0").error == E.FENCED_INSTANCE_ID
    assert h.hb(ids[1], gen + 1).error == E.ILLEGAL_GENERATION
    assert h.hb(ids[1], gen).error == E.NONE


def test_heartbeat_generation_checked_before_state() -> None:
    h = Harness()
    ids = h.stable(2)
    gen = h.group().generation_id
    h.join(member_id=ids[0])  # PreparingRebalance
    assert h.hb(ids[1], gen - 1).error == E.ILLEGAL_GENERATION
    assert h.hb(ids[1], gen).error == E.REBALANCE_IN_PROGRESS


def test_heartbeat_resets_session_in_preparing_completing_stable() -> None:
    h = Harness()
    ids = h.form(2, session=SESSION, rebalance=10 * SESSION)
    gen = h.group().generation_id
    h.advance(SESSION - 10)
    assert h.hb(ids[1], gen).error == E.NONE  # CompletingRebalance
    assert h.timers.due_at(f"heartbeat/g/{ids[1]}") == h.timers.now_ms() + SESSION
    h.sync(ids[1], gen)
    h.sync(ids[0], gen)
    h.advance(SESSION - 10)
    assert h.hb(ids[1], gen).error == E.NONE  # Stable
    assert h.hb(ids[0], gen).error == E.NONE
    h.join(member_id=ids[0])
    h.advance(SESSION - 10)
    assert h.hb(ids[1], gen).error == E.REBALANCE_IN_PROGRESS  # still resets the session
    h.advance(SESSION - 10)
    assert ids[1] in h.group().members


def test_pending_member_heartbeat_is_unknown() -> None:
    h = Harness()
    pending = h.join(v4=True).result().member_id
    assert h.hb(pending, 0).error == E.UNKNOWN_MEMBER_ID


# --- session expiry ----------------------------------------------------------------------
def test_session_expiry_in_stable_starts_rebalance() -> None:
    h = Harness()
    ids = h.stable(2)
    gen = h.group().generation_id
    h.advance(SESSION - 1)
    h.hb(ids[0], gen)
    h.advance(1)  # ids[1] expires
    g = h.group()
    assert ids[1] not in g.members and g.state is S.PREPARING_REBALANCE
    assert not h.timers.is_scheduled(f"heartbeat/g/{ids[1]}")


def test_session_expiry_in_completing_starts_rebalance() -> None:
    h = Harness()
    h.form(2, rebalance=10 * SESSION)
    h.advance(SESSION)  # nobody parked in sync: both expire
    assert h.group().state is S.EMPTY
    assert h.group().generation_id == 2


def test_parked_sync_member_is_not_expired() -> None:
    h = Harness()
    ids = h.form(2, rebalance=10 * SESSION)
    gen = h.group().generation_id
    parked = h.sync(ids[1], gen)
    h.advance(SESSION - 1)
    h.hb(ids[0], gen)
    h.advance(1)
    assert ids[1] in h.group().members and not parked.done()


def test_session_expiry_in_preparing_completes_join() -> None:
    h = Harness()
    ids = h.stable(2, rebalance=10 * SESSION)
    gen = h.group().generation_id
    d = h.join(member_id=ids[0], rebalance=10 * SESSION)
    h.advance(SESSION)  # ids[1] never rejoins nor heartbeats
    assert d.result().generation_id == gen + 1 and list(h.group().members) == [ids[0]]


def test_session_and_rebalance_timeouts_are_separate() -> None:
    h = Harness()
    ids = h.stable(2, session=SESSION, rebalance=5 * SESSION)
    gen = h.group().generation_id
    d = h.join(member_id=ids[0], session=SESSION, rebalance=5 * SESSION)
    for _ in range(4):  # ids[1] keeps heartbeating but does not rejoin
        h.advance(SESSION - 1)
        assert h.hb(ids[1], gen).error == E.REBALANCE_IN_PROGRESS
    assert not d.done()
    h.advance(5 * SESSION - 4 * (SESSION - 1))
    assert d.result().error == E.NONE and list(h.group().members) == [ids[0]]


# --- LeaveGroup --------------------------------------------------------------------------
def test_leave_empty_group_id_and_unknown_group() -> None:
    h = Harness()
    assert h.leave(("m", None), group="").error == E.INVALID_GROUP_ID
    r = h.leave(("a", None), ("", "i"))
    assert r.error == E.NONE
    assert [(m.member_id, m.group_instance_id, m.error) for m in r.members] == [
        ("a", None, E.UNKNOWN_MEMBER_ID),
        ("", "i", E.UNKNOWN_MEMBER_ID),
    ]


def test_leave_batch_with_per_member_errors() -> None:
    h = Harness()
    ids = h.stable(4, instances=["i0", "i1", None, None])
    r = h.leave(
        ("", "i1"),  # by instance id
        (ids[2], None),  # dynamic member
        ("wrong", "i0"),  # instance/member mismatch
        ("", "nope"),  # unknown instance
        ("ghost", None),
    )
    assert [m.error for m in r.members] == [
        E.NONE,
        E.NONE,
        E.FENCED_INSTANCE_ID,
        E.UNKNOWN_MEMBER_ID,
        E.UNKNOWN_MEMBER_ID,
    ]
    g = h.group()
    assert set(g.members) == {ids[0], ids[3]} and "i1" not in g.static_members
    assert g.state is S.PREPARING_REBALANCE


def test_leave_pending_member() -> None:
    h = Harness()
    pending = h.join(v4=True).result().member_id
    assert h.leave((pending, None)).members[0].error == E.NONE
    assert not h.group().pending_join_members


def test_leave_in_completing_rebalances_and_in_preparing_may_complete() -> None:
    h = Harness()
    ids = h.form(2)
    parked = h.sync(ids[1], h.group().generation_id)
    h.leave((ids[0], None))
    assert parked.result().error == E.REBALANCE_IN_PROGRESS
    h2 = Harness()
    ids = h2.stable(3)
    d = h2.join(member_id=ids[0])
    h2.join(member_id=ids[1])
    assert not d.done()
    h2.leave((ids[2], None))
    assert d.result().error == E.NONE and h2.group().state is S.COMPLETING_REBALANCE


def test_leave_in_initial_preparing_does_not_complete_early() -> None:
    h = Harness()
    a = h.join()
    b = h.join()
    h.leave((h.group().leader_id or "", None))
    assert b.done() is False and a.result().error == E.UNKNOWN_MEMBER_ID


def test_changed_subscription_does_not_touch_others() -> None:
    h = Harness()
    ids = h.stable(2)
    gen = h.group().generation_id
    bad = h.join(member_id=ids[1], protocols=(("sticky", sub("t")),)).result()
    assert bad.error == E.INCONSISTENT_GROUP_PROTOCOL
    assert h.group().state is S.STABLE and h.hb(ids[0], gen).error == E.NONE
