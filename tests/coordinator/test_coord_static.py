"""Static membership (KIP-345)."""

from __future__ import annotations

from coord_helpers import RANGE, SESSION, Harness, sub

from kgroupd.broker.coordinator import GroupMetadataRecord, GroupState
from kgroupd.protocol.errors import ErrorCode as E

S = GroupState


def test_static_join_gets_instance_prefixed_id() -> None:
    h = Harness()
    ids = h.form(1, instances=["inst"])
    assert ids[0].startswith("inst-") and h.group().static_members == {"inst": ids[0]}


def test_static_rejoin_in_stable_no_rebalance_cached_assignment_below_v9() -> None:
    h = Harness()
    ids = h.stable(2, instances=["i0", "i1"])
    gen = h.group().generation_id
    r = h.join(instance="i1").result()  # follower restarts
    assert r.error == E.NONE and r.member_id != ids[1] and r.member_id.startswith("i1-")
    assert (r.generation_id, r.leader, r.members, r.skip_assignment) == (gen, ids[0], (), False)
    g = h.group()
    assert g.state is S.STABLE and g.static_members["i1"] == r.member_id
    assert ids[1] not in g.members
    s = h.sync(r.member_id, gen, instance="i1").result()
    assert s.error == E.NONE and s.assignment == f"a-{ids[1]}".encode()
    rec = h.records[-1]
    assert isinstance(rec, GroupMetadataRecord)
    assert [m.member_id for m in rec.members] == [ids[0], r.member_id]


def test_old_id_is_fenced_after_replacement() -> None:
    h = Harness()
    ids = h.stable(2, instances=["i0", "i1"])
    gen = h.group().generation_id
    h.join(instance="i1")
    assert h.hb(ids[1], gen, instance="i1").error == E.FENCED_INSTANCE_ID
    assert h.sync(ids[1], gen, instance="i1").result().error == E.FENCED_INSTANCE_ID
    assert h.join(member_id=ids[1], instance="i1").result().error == E.FENCED_INSTANCE_ID
    assert (
        h.commit({("t", 0): 1}, generation=gen, member_id=ids[1], instance="i1").errors()[("t", 0)]
        == E.FENCED_INSTANCE_ID
    )
    assert h.leave((ids[1], "i1")).members[0].error == E.FENCED_INSTANCE_ID


def test_ex_leader_below_v9_gets_previous_leader_id() -> None:
    h = Harness()
    ids = h.stable(2, instances=["i0", "i1"])
    r = h.join(instance="i0").result()
    assert r.leader == ids[0] and r.member_id != ids[0] and r.members == ()
    assert h.group().leader_id == r.member_id  # leadership moved to the new id
    assert h.group().state is S.STABLE


def test_leader_v9_gets_members_and_skip_assignment() -> None:
    h = Harness()
    ids = h.stable(2, instances=["i0", "i1"])
    r = h.join(instance="i0", v9=True).result()
    assert r.skip_assignment and r.leader == r.member_id and len(r.members) == 2
    f = h.join(instance="i1", v9=True).result()
    assert not f.skip_assignment and f.members == () and f.leader == r.member_id
    assert ids[0] not in h.group().members


def test_static_rejoin_in_stable_with_protocol_change_rebalances() -> None:
    h = Harness()
    h.stable(2, instances=["i0", "i1"], protocols=(("range", b""), ("rr", b"")))
    d = h.join(instance="i1", protocols=(("rr", b""),))
    assert not d.done() and h.group().state is S.PREPARING_REBALANCE


def test_static_rejoin_in_completing_forces_rebalance_and_fences_parked_sync() -> None:
    h = Harness()
    ids = h.form(2, instances=["i0", "i1"])
    parked = h.sync(ids[1], h.group().generation_id, instance="i1")
    d = h.join(instance="i1")
    assert parked.result().error == E.FENCED_INSTANCE_ID
    assert not d.done() and h.group().state is S.PREPARING_REBALANCE


def test_static_rejoin_in_preparing_is_parked() -> None:
    h = Harness()
    ids = h.stable(3, instances=["i0", "i1", "i2"])
    gen = h.group().generation_id
    lead = h.join(member_id=ids[0], instance="i0")  # PreparingRebalance
    first = h.join(instance="i1")  # replaces ids[1] while Preparing: parked
    assert not first.done() and h.group().state is S.PREPARING_REBALANCE
    new_id = h.group().static_members["i1"]
    assert new_id != ids[1] and ids[1] not in h.group().members
    h.join(member_id=ids[2], instance="i2")  # the last one: join completes
    assert lead.result().generation_id == gen + 1
    assert first.result().member_id == new_id and first.result().error == E.NONE


def test_static_replacement_fences_old_parked_join() -> None:
    h = Harness()
    ids = h.stable(3, instances=["i0", "i1", "i2"])
    h.join(member_id=ids[0], instance="i0")  # Preparing
    old = h.join(member_id=ids[1], instance="i1")
    assert not old.done()
    new = h.join(instance="i1")
    assert old.result().error == E.FENCED_INSTANCE_ID
    assert not new.done()  # i2 has not rejoined yet


def test_static_member_not_removed_when_not_rejoining_and_expires_by_session() -> None:
    h = Harness()
    ids = h.stable(2, instances=["i0", "i1"], session=SESSION, rebalance=SESSION // 2)
    gen = h.group().generation_id
    d = h.join(member_id=ids[0], instance="i0", session=SESSION, rebalance=SESSION // 2)
    h.advance(SESSION // 2)  # rebalance timeout: static i1 stays
    assert d.result().generation_id == gen + 1 and ids[1] in h.group().members
    h.advance(SESSION)  # then its session expires
    assert ids[1] not in h.group().members


def test_static_assignment_survives_restart_via_records() -> None:
    h = Harness()
    ids = h.stable(2, instances=["i0", "i1"])
    fresh = Harness()
    fresh.shard.load(h.records)
    g = fresh.group()
    assert g.state is S.STABLE and g.static_members == {"i0": ids[0], "i1": ids[1]}
    r = fresh.join(instance="i1").result()
    assert r.error == E.NONE and r.generation_id == h.group().generation_id
    s = fresh.sync(r.member_id, r.generation_id, instance="i1").result()
    assert s.assignment == f"a-{ids[1]}".encode()


def test_static_unknown_instance_with_member_id_is_unknown() -> None:
    h = Harness()
    ids = h.stable(1)
    r = h.join(member_id=ids[0], instance="never", protocols=RANGE).result()
    assert r.error == E.UNKNOWN_MEMBER_ID
    r = h.join(member_id=ids[0], protocols=(("range", sub("z")),)).result()
    assert r.error == E.NONE and r.generation_id == 2  # the only member: completes at once
