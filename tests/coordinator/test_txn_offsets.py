"""Offsets committed inside transactions (TxnOffsetCommit) in one shard on a manual clock:
KIP-447 fencing error by error, pending offsets invisible until the marker, UNSTABLE_OFFSET_COMMIT
for require_stable fetches, commit and abort markers, and replay."""

from __future__ import annotations

from coord_helpers import Harness

from kgroupd.broker.coordinator import (
    CoordinatorShard,
    ManualTimers,
    OffsetCommitPartition,
    OffsetCommitTopic,
    OffsetFetch,
    OffsetFetchTopic,
    TxnOffsetCommit,
)
from kgroupd.broker.coordinator.state import GroupState
from kgroupd.protocol.errors import ErrorCode

PID = 4000


def txn_commit(
    h: Harness,
    offsets: dict[tuple[str, int], int],
    group: str = "g",
    generation: int = -1,
    member_id: str = "",
    instance: str | None = None,
    producer_id: int = PID,
) -> dict[tuple[str, int], ErrorCode]:
    topics: dict[str, list[OffsetCommitPartition]] = {}
    for (t, p), o in offsets.items():
        topics.setdefault(t, []).append(OffsetCommitPartition(p, o, -1, "meta"))
    result = h.shard.txn_commit_offsets(
        TxnOffsetCommit(
            "tx",
            group,
            producer_id,
            0,
            tuple(OffsetCommitTopic(t, tuple(ps)) for t, ps in topics.items()),
            generation,
            member_id,
            instance,
        )
    )
    return result.errors()


def fetch(h: Harness, stable: bool, group: str = "g") -> dict[tuple[str, int], tuple[int, int]]:
    result = h.shard.fetch_offsets(
        OffsetFetch(group, (OffsetFetchTopic("t", (0, 1)),), require_stable=stable)
    )
    return {k: (p.offset, int(p.error)) for k, p in result.offsets().items()}


UNSTABLE = int(ErrorCode.UNSTABLE_OFFSET_COMMIT)


def test_pending_offsets_become_visible_at_the_commit_marker() -> None:
    h = Harness()
    h.commit({("t", 1): 3})
    assert txn_commit(h, {("t", 0): 10, ("t", 1): 11}) == {
        ("t", 0): ErrorCode.NONE,
        ("t", 1): ErrorCode.NONE,
    }
    assert fetch(h, stable=False) == {("t", 0): (-1, 0), ("t", 1): (3, 0)}
    assert fetch(h, stable=True) == {("t", 0): (-1, UNSTABLE), ("t", 1): (-1, UNSTABLE)}
    assert h.shard.complete_txn_offsets(PID + 1, commit=True) == 0  # another producer's marker
    assert h.shard.complete_txn_offsets(PID, commit=True) == 2
    assert fetch(h, stable=True) == {("t", 0): (10, 0), ("t", 1): (11, 0)}


def test_an_abort_marker_drops_pending_offsets() -> None:
    h = Harness()
    h.commit({("t", 0): 3})
    txn_commit(h, {("t", 0): 10})
    assert h.shard.complete_txn_offsets(PID, commit=False) == 1
    assert fetch(h, stable=True) == {("t", 0): (3, 0), ("t", 1): (-1, 0)}
    assert h.shard.pending_txn == {}


def test_kip447_fencing_of_classic_members() -> None:
    h = Harness()
    leader, _other = h.stable(2)
    gen = h.group().generation_id
    assert set(txn_commit(h, {("t", 0): 1}, generation=gen, member_id=leader).values()) == {
        ErrorCode.NONE
    }
    stale = txn_commit(h, {("t", 0): 1}, generation=gen - 1, member_id=leader)
    assert stale == {("t", 0): ErrorCode.ILLEGAL_GENERATION}
    ghost = txn_commit(h, {("t", 0): 1}, generation=gen, member_id="ghost")
    assert ghost == {("t", 0): ErrorCode.UNKNOWN_MEMBER_ID}
    # older clients send no member and no generation: accepted whatever the group state
    assert txn_commit(h, {("t", 0): 2}) == {("t", 0): ErrorCode.NONE}
    # a rebalance in progress does not stop a transactional commit of the current generation
    h.join()  # a new member
    assert h.group().state is GroupState.PREPARING_REBALANCE
    ok = txn_commit(h, {("t", 0): 3}, generation=gen, member_id=leader)
    assert ok == {("t", 0): ErrorCode.NONE}


def test_fenced_static_member_and_unknown_groups() -> None:
    h = Harness()
    (member,) = h.stable(1, instances=["i1"])
    gen = h.group().generation_id
    fenced = txn_commit(h, {("t", 0): 1}, generation=gen, member_id="other-id", instance="i1")
    assert fenced == {("t", 0): ErrorCode.FENCED_INSTANCE_ID}
    assert txn_commit(h, {("t", 0): 1}, group="nope", generation=3) == {
        ("t", 0): ErrorCode.ILLEGAL_GENERATION
    }
    assert txn_commit(h, {("t", 0): 1}, group="simple") == {("t", 0): ErrorCode.NONE}
    assert "simple" in h.shard.groups
    assert txn_commit(h, {("t", 0): 1}, group="") == {("t", 0): ErrorCode.INVALID_GROUP_ID}
    big = h.shard.txn_commit_offsets(
        TxnOffsetCommit(
            "tx",
            "g",
            PID,
            0,
            (OffsetCommitTopic("t", (OffsetCommitPartition(0, 1, -1, "x" * 5000),)),),
            gen,
            member,
            "i1",
        )
    )
    assert big.errors() == {("t", 0): ErrorCode.OFFSET_METADATA_TOO_LARGE}


def test_replay_keeps_pending_offsets_pending_until_the_marker() -> None:
    h = Harness()
    txn_commit(h, {("t", 0): 10})
    txn_commit(h, {("t", 1): 20}, producer_id=PID + 1)
    h.shard.complete_txn_offsets(PID + 1, commit=True)
    loaded = CoordinatorShard(0, h.config, ManualTimers())
    loaded.load(list(h.records))
    assert loaded.pending_txn == h.shard.pending_txn
    assert set(loaded.pending_txn["g"]) == {PID}
    assert loaded.committed("g")[("t", 1)].offset == 20
    loaded.complete_txn_offsets(PID, commit=True)
    assert loaded.committed("g")[("t", 0)].offset == 10
