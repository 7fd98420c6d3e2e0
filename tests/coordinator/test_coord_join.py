"""JoinGroup, steps 1-9 of group-protocol.md, state by state."""

from __future__ import annotations

import dataclasses
import re

import pytest
from coord_helpers import DELAY, RANGE, REBALANCE, SESSION, Harness, sub

from kgroupd.broker.coordinator import GroupMetadataRecord, GroupState
from kgroupd.protocol.errors import ErrorCode as E

S = GroupState


def test_empty_group_id_is_invalid() -> None:
    h = Harness()
    assert h.join(group="").result().error == E.INVALID_GROUP_ID


@pytest.mark.parametrize("session", [9, 100_001])
def test_session_timeout_bounds_checked_before_group(session: int) -> None:
    h = Harness()
    assert h.join(session=session).result().error == E.INVALID_SESSION_TIMEOUT
    assert h.join(member_id="nope", session=session).result().error == E.INVALID_SESSION_TIMEOUT
    assert "g" not in h.shard.groups
    assert not h.join(session=10).done()  # bounds inclusive: accepted (parked)
    assert h.join(session=100_000).done() is False


def test_unknown_member_on_missing_group() -> None:
    h = Harness()
    r = h.join(member_id="ghost").result()
    assert r.error == E.UNKNOWN_MEMBER_ID and "g" not in h.shard.groups


def test_new_group_created_empty_and_persisted() -> None:
    h = Harness()
    d = h.join()
    assert not d.done()
    g = h.group()
    assert g.state is S.PREPARING_REBALANCE and g.previous_state is S.EMPTY
    rec = h.records[-1]
    assert isinstance(rec, GroupMetadataRecord) and rec.members == () and rec.generation_id == 0


@pytest.mark.parametrize(("ptype", "protocols"), [("", RANGE), ("consumer", ())])
def test_empty_group_needs_protocol_type_and_protocols(
    ptype: str, protocols: tuple[tuple[str, bytes], ...]
) -> None:
    h = Harness()
    assert h.join(ptype=ptype, protocols=protocols).result().error == E.INCONSISTENT_GROUP_PROTOCOL


def test_protocol_type_and_common_protocol_required() -> None:
    h = Harness()
    h.form(2, protocols=(("range", b"x"), ("rr", b"y")))
    assert h.join(ptype="connect").result().error == E.INCONSISTENT_GROUP_PROTOCOL
    r = h.join(protocols=(("sticky", b""),)).result()
    assert r.error == E.INCONSISTENT_GROUP_PROTOCOL
    assert len(h.group().members) == 2 and h.group().state is S.COMPLETING_REBALANCE
    assert not h.join(protocols=(("sticky", b""), ("rr", b""))).done()  # rr is common


def test_member_id_required_v4() -> None:
    h = Harness()
    r = h.join(v4=True, client_id="cli").result()
    assert r.error == E.MEMBER_ID_REQUIRED
    assert re.fullmatch(
        r"cli-[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[0-9a-f]{4}-[0-9a-f]{12}", r.member_id
    )
    g = h.group()
    assert r.member_id in g.pending_join_members and not g.members
    assert h.timers.due_at(f"pending/g/{r.member_id}") == SESSION
    d = h.join(member_id=r.member_id, v4=True)
    assert not d.done() and r.member_id in g.members and not g.pending_join_members
    assert not h.timers.is_scheduled(f"pending/g/{r.member_id}")
    h.advance(DELAY)
    assert d.result().error == E.NONE and d.result().member_id == r.member_id


def test_v3_joins_at_once_with_generated_id() -> None:
    h = Harness()
    d = h.join(client_id="cli")
    h.advance(DELAY)
    assert d.result().member_id.startswith("cli-") and d.result().generation_id == 1


def test_pending_member_expires_after_session_timeout() -> None:
    h = Harness()
    r = h.join(v4=True).result()
    h.advance(SESSION - 1)
    assert r.member_id in h.group().pending_join_members
    h.advance(1)
    assert not h.group().pending_join_members
    assert h.join(member_id=r.member_id, v4=True).result().error == E.UNKNOWN_MEMBER_ID


def test_pending_member_blocks_join_completion_until_it_expires() -> None:
    h = Harness()
    ids = h.stable(2)
    gen = h.group().generation_id
    pending = h.join(v4=True).result().member_id
    d1 = h.join(member_id=ids[0])  # leader rejoin -> PreparingRebalance
    d2 = h.join(member_id=ids[1])
    assert h.group().state is S.PREPARING_REBALANCE and not d1.done() and not d2.done()
    h.advance(SESSION)  # pending expiry completes the join
    assert d1.result().generation_id == gen + 1 and pending not in h.group().pending_join_members


# --- group.max.size ----------------------------------------------------------------------
def test_max_size_empty_accepts_and_preparing_counts_awaiting() -> None:
    h = Harness(group_max_size=2)
    a, b = h.join(), h.join()
    c = h.join()
    assert c.result().error == E.GROUP_MAX_SIZE_REACHED and c.result().member_id == ""
    h.advance(3 * DELAY)
    assert a.result().error == b.result().error == E.NONE
    assert len(h.group().members) == 2


def test_max_size_stable_accepts_known_member_rejects_new() -> None:
    h = Harness(group_max_size=2)
    ids = h.stable(2)
    assert h.join().result().error == E.GROUP_MAX_SIZE_REACHED
    assert h.join(member_id=ids[1]).result().error == E.NONE  # follower, unchanged
    assert h.group().state is S.STABLE


def test_max_size_completing_rejects_new() -> None:
    h = Harness(group_max_size=1)
    h.form(1)
    assert h.join().result().error == E.GROUP_MAX_SIZE_REACHED
    assert h.group().state is S.COMPLETING_REBALANCE


def test_max_size_preparing_accepts_member_already_awaiting() -> None:
    h = Harness(group_max_size=1)
    ids = h.stable(1)
    d = h.join(member_id=ids[0])  # leader rejoin, now awaiting; join completes at once
    assert d.result().error == E.NONE


def test_max_size_preparing_removes_rejected_known_member() -> None:
    h2 = Harness(group_max_size=2)
    ids = h2.stable(2)
    # shrink the limit (as after a config change): both members exist
    h2.shard.config = dataclasses.replace(h2.config, group_max_size=1)
    d0 = h2.join(member_id=ids[0])
    assert not d0.done() and h2.group().state is S.PREPARING_REBALANCE
    r = h2.join(member_id=ids[1]).result()  # awaiting (1) >= max (1): rejected and removed
    assert r.error == E.GROUP_MAX_SIZE_REACHED and ids[1] not in h2.group().members


# --- known member per state --------------------------------------------------------------
def test_known_member_parked_in_preparing() -> None:
    h = Harness()
    ids = h.stable(2)
    d0 = h.join(member_id=ids[0])
    assert not d0.done()
    d1 = h.join(member_id=ids[1])
    assert d0.result().error == d1.result().error == E.NONE  # everyone rejoined: completes


def test_known_member_completing_same_protocols_gets_current_generation() -> None:
    h = Harness()
    ids = h.form(2)
    gen = h.group().generation_id
    leader = h.join(member_id=ids[0]).result()
    assert leader.generation_id == gen and len(leader.members) == 2 and leader.leader == ids[0]
    follower = h.join(member_id=ids[1]).result()
    assert follower.generation_id == gen and follower.members == ()
    assert h.group().state is S.COMPLETING_REBALANCE


def test_known_member_completing_changed_protocols_rebalances() -> None:
    h = Harness()
    ids = h.form(2)
    pending_sync = h.sync(ids[1], h.group().generation_id)
    d = h.join(member_id=ids[1], protocols=(("range", sub("other")),))
    assert not d.done() and h.group().state is S.PREPARING_REBALANCE
    r = pending_sync.result()
    assert r.error == E.REBALANCE_IN_PROGRESS and r.assignment == b""


def test_stable_leader_rejoin_always_rebalances() -> None:
    h = Harness()
    ids = h.stable(2)
    d = h.join(member_id=ids[0])
    assert not d.done() and h.group().state is S.PREPARING_REBALANCE


def test_stable_follower_changed_metadata_rebalances_unchanged_does_not() -> None:
    h = Harness()
    ids = h.stable(2)
    gen = h.group().generation_id
    r = h.join(member_id=ids[1]).result()
    assert (r.error, r.generation_id, r.members, r.leader) == (E.NONE, gen, (), ids[0])
    assert h.group().state is S.STABLE
    assert not h.join(member_id=ids[1], protocols=(("range", sub("x")),)).done()
    assert h.group().state is S.PREPARING_REBALANCE


def test_known_member_on_empty_group_is_unknown() -> None:
    h = Harness()
    ids = h.stable(1)
    h.leave((ids[0], None))
    h.advance(REBALANCE)
    assert h.group().state is S.EMPTY
    assert h.join(member_id=ids[0]).result().error == E.UNKNOWN_MEMBER_ID


# --- join completion ---------------------------------------------------------------------
def test_join_completion_answers_all_with_member_list_for_leader() -> None:
    h = Harness()
    a = h.join(protocols=(("range", b"A"),))
    b = h.join(protocols=(("range", b"B"),))
    h.advance(2 * DELAY)
    ra, rb = a.result(), b.result()
    assert ra.generation_id == rb.generation_id == 1
    assert ra.leader == rb.leader == ra.member_id
    assert ra.protocol_type == "consumer" and ra.protocol_name == "range"
    assert [(m.member_id, m.group_instance_id, m.metadata) for m in ra.members] == [
        (ra.member_id, None, b"A"),
        (rb.member_id, None, b"B"),
    ]
    assert rb.members == ()
    g = h.group()
    assert g.state is S.COMPLETING_REBALANCE and g.pending_sync_members == {
        ra.member_id,
        rb.member_id,
    }
    assert all(not m.is_new for m in g.members.values())
    assert h.timers.due_at(f"heartbeat/g/{ra.member_id}") == h.timers.now_ms() + SESSION


def test_protocol_vote() -> None:
    h = Harness()
    h.join(protocols=(("a", b""), ("b", b""), ("c", b"")))
    h.join(protocols=(("b", b""), ("a", b"")))
    h.join(protocols=(("b", b""), ("c", b""), ("a", b"")))
    h.advance(3 * DELAY)
    assert h.group().protocol_name == "b"  # candidates {a, b}; votes a:1, b:2


def test_dynamic_members_not_rejoining_are_removed_and_leader_reelected() -> None:
    h = Harness()
    ids = h.stable(3, session=5000)
    gen = h.group().generation_id
    d1 = h.join(member_id=ids[1], protocols=(("range", sub("u")),))  # follower change
    assert h.group().state is S.PREPARING_REBALANCE
    d2 = h.join(member_id=ids[2])
    h.advance(REBALANCE)  # rebalance timer: leader ids[0] never rejoined
    r1, r2 = d1.result(), d2.result()
    assert r2.error == E.NONE and r2.members == ()
    assert r1.generation_id == gen + 1 and r1.leader == ids[1] and len(r1.members) == 2
    assert list(h.group().members) == [ids[1], ids[2]]
    assert not h.timers.is_scheduled(f"heartbeat/g/{ids[0]}")


def test_join_completes_empty_when_nobody_left_and_generation_rises() -> None:
    h = Harness()
    ids = h.stable(1)
    gen = h.group().generation_id
    h.leave((ids[0], None))
    g = h.group()
    assert g.state is S.EMPTY and g.generation_id == gen + 1 and g.protocol_name is None
    rec = h.records[-1]
    assert isinstance(rec, GroupMetadataRecord) and rec.generation_id == gen + 1


def test_rebalance_timer_completes_join_with_those_who_rejoined() -> None:
    h = Harness()
    ids = h.stable(2, session=5000)
    d = h.join(member_id=ids[0], session=5000)
    h.advance(REBALANCE - 1)
    assert not d.done()
    h.advance(1)
    assert d.result().error == E.NONE and list(h.group().members) == [ids[0]]


# --- initial rebalance delay -------------------------------------------------------------
def test_initial_delay_single_member_never_early() -> None:
    h = Harness()
    d = h.join()
    h.advance(DELAY - 1)
    assert not d.done()
    h.advance(1)
    assert d.result().generation_id == 1


def test_initial_delay_extension_rule() -> None:
    # rebalance timeout 250, delay 100: remaining = 150
    h = Harness()
    a = h.join(rebalance=250)
    h.advance(50)
    h.join(rebalance=250)  # new member during the wait -> extend
    h.advance(50)  # t=100: extend by min(100, 150)=100, remaining = 50
    assert not a.done()
    h.advance(30)
    h.join(rebalance=250)  # t=130, added again
    h.advance(70)  # t=200: extend by min(100, 50)=50, remaining 0
    assert not a.done()
    h.join(rebalance=250)  # t=200, added again, but nothing remains
    h.advance(49)
    assert not a.done()
    h.advance(1)  # t=250
    assert a.result().error == E.NONE and len(a.result().members) == 4


def test_initial_rebalance_does_not_complete_early_when_all_joined() -> None:
    h = Harness()
    d = h.join()
    h.join(member_id=d and "")  # second new member
    assert not d.done()  # everyone "joined", still waits for the delay


# --- new member join timeout -------------------------------------------------------------
def test_new_member_dropped_after_join_timeout() -> None:
    h = Harness(new_member_join_timeout_ms=500)
    ids = h.stable(1, rebalance=10_000)
    # keep the old member alive but not rejoining; rebalance timeout is long
    newcomer = h.join(rebalance=10_000)
    assert h.group().state is S.PREPARING_REBALANCE
    h.hb(ids[0], h.group().generation_id)
    h.advance(500)
    r = newcomer.result()
    assert r.error == E.UNKNOWN_MEMBER_ID and r.member_id == ""
    assert len(h.group().members) == 1


def test_duplicate_join_answers_superseded_request() -> None:
    h = Harness()
    ids = h.stable(2)
    first = h.join(member_id=ids[0])
    second = h.join(member_id=ids[0])
    assert first.result().error == E.REBALANCE_IN_PROGRESS and not second.done()
    assert h.group().num_awaiting_join == 1
