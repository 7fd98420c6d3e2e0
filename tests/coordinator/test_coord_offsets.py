"""OffsetCommit, OffsetFetch, OffsetDelete and KIP-211 retention."""

from __future__ import annotations

from coord_helpers import SESSION, TEST_CONFIG, Harness, sub

from kgroupd.broker.coordinator import (
    GroupState,
    GroupTombstoneRecord,
    OffsetCommitRecord,
    OffsetDelete,
    OffsetTombstoneRecord,
)
from kgroupd.protocol.errors import ErrorCode as E

S = GroupState
RETENTION = TEST_CONFIG.offsets_retention_ms
CHECK = TEST_CONFIG.offsets_retention_check_interval_ms


def test_simple_commit_creates_group_and_fetch_returns_it() -> None:
    h = Harness()
    r = h.commit({("t", 0): 5, ("t", 1): 7, ("u", 0): 1}, metadata="m")
    assert set(r.errors().values()) == {E.NONE}
    g = h.group()
    assert g.state is S.EMPTY and g.protocol_type is None
    f = h.fetch(topics={"t": (0, 1, 2)}).offsets()
    assert (f[("t", 0)].offset, f[("t", 0)].leader_epoch, f[("t", 0)].metadata) == (5, 3, "m")
    assert f[("t", 2)].offset == -1 and f[("t", 2)].error == E.NONE
    assert isinstance(h.records[-1], OffsetCommitRecord)


def test_empty_group_id_allowed_for_commit_and_fetch() -> None:
    h = Harness()
    assert h.commit({("t", 0): 1}, group="").errors()[("t", 0)] == E.NONE
    assert h.fetch(group="", topics={"t": (0,)}).offsets()[("t", 0)].offset == 1


def test_unknown_group_with_generation_illegal_generation_or_not_found_v9() -> None:
    h = Harness()
    assert h.commit({("t", 0): 1}, generation=1, member_id="m").errors()[("t", 0)] == (
        E.ILLEGAL_GENERATION
    )
    assert (
        h.commit({("t", 0): 1}, generation=1, member_id="m", v9=True).errors()[("t", 0)]
        == E.GROUP_ID_NOT_FOUND
    )
    assert "g" not in h.shard.groups


def test_commit_rules_on_a_live_group() -> None:
    h = Harness()
    ids = h.form(2, instances=["i0", None])
    gen = h.group().generation_id

    def err(**kw: object) -> E:
        return h.commit({("t", 0): 1}, **kw).errors()[("t", 0)]  # type: ignore[arg-type]

    assert err() == E.UNKNOWN_MEMBER_ID  # generation -1, no member, non-Empty group
    assert err(generation=gen, member_id="x") == E.UNKNOWN_MEMBER_ID
    assert err(generation=gen, member_id="x", instance="i0") == E.FENCED_INSTANCE_ID
    assert err(generation=gen + 1, member_id=ids[1]) == E.ILLEGAL_GENERATION
    assert err(generation=gen, member_id=ids[1]) == E.REBALANCE_IN_PROGRESS  # Completing
    h.sync(ids[1], gen)
    h.sync(ids[0], gen, instance="i0")
    assert err(generation=gen, member_id=ids[1]) == E.NONE  # Stable
    h.join(member_id=ids[0], instance="i0")  # Preparing
    assert err(generation=gen, member_id=ids[1]) == E.NONE
    assert err(generation=gen + 1, member_id=ids[1]) == E.ILLEGAL_GENERATION


def test_commit_resets_session_in_stable_and_preparing() -> None:
    h = Harness()
    ids = h.stable(2)
    gen = h.group().generation_id
    h.advance(SESSION - 1)
    h.commit({("t", 0): 1}, generation=gen, member_id=ids[1])
    h.hb(ids[0], gen)
    h.advance(SESSION - 1)
    assert ids[1] in h.group().members


def test_generation_minus_one_on_empty_group_is_accepted() -> None:
    h = Harness()
    ids = h.stable(1)
    h.leave((ids[0], None))
    assert h.group().state is S.EMPTY
    assert h.commit({("t", 0): 9}, member_id="whoever").errors()[("t", 0)] == E.NONE


def test_metadata_too_large_only_for_that_partition() -> None:
    h = Harness(offset_metadata_max_bytes=4)
    from kgroupd.broker.coordinator import OffsetCommit, OffsetCommitPartition, OffsetCommitTopic

    r = h.shard.commit_offsets(
        OffsetCommit(
            "g",
            (
                OffsetCommitTopic(
                    "t",
                    (
                        OffsetCommitPartition(0, 1, -1, "abcd"),
                        OffsetCommitPartition(1, 1, -1, "abcde"),
                        OffsetCommitPartition(2, 1, -1, None),
                    ),
                ),
            ),
        )
    ).errors()
    assert r == {("t", 0): E.NONE, ("t", 1): E.OFFSET_METADATA_TOO_LARGE, ("t", 2): E.NONE}
    f = h.fetch(topics={"t": (0, 1, 2)}).offsets()
    assert f[("t", 1)].offset == -1 and f[("t", 2)].metadata == ""


def test_fetch_unknown_group_and_all_topics() -> None:
    h = Harness()
    f = h.fetch(group="nope", topics={"t": (0, 1)})
    assert f.error == E.NONE
    assert [
        (p.partition, p.offset, p.leader_epoch, p.metadata, p.error)
        for _, ps in f.topics
        for p in ps
    ] == [
        (0, -1, -1, "", E.NONE),
        (1, -1, -1, "", E.NONE),
    ]
    assert h.fetch(group="nope").topics == ()
    h.commit({("b", 1): 2, ("a", 0): 1, ("b", 0): 3})
    assert [(t, [p.partition for p in ps]) for t, ps in h.fetch().topics] == [
        ("a", [0]),
        ("b", [0, 1]),
    ]


# --- OffsetDelete ------------------------------------------------------------------------
def test_offset_delete_rules() -> None:
    h = Harness()
    assert h.shard.delete_offsets(OffsetDelete("g", (("t", (0,)),))).error == E.GROUP_ID_NOT_FOUND
    ids = h.stable(1, protocols=(("range", sub("t")),))
    gen = h.group().generation_id
    h.commit({("t", 0): 1, ("old", 0): 1}, generation=gen, member_id=ids[0])
    r = h.shard.delete_offsets(OffsetDelete("g", (("t", (0,)), ("old", (0, 5)))))
    assert r.error == E.NONE
    assert r.topics == (
        ("t", ((0, E.GROUP_SUBSCRIBED_TO_TOPIC),)),
        ("old", ((0, E.NONE), (5, E.NONE))),
    )
    assert set(h.shard.committed("g")) == {("t", 0)}
    assert isinstance(h.records[-1], OffsetTombstoneRecord)


def test_offset_delete_non_consumer_group_with_members() -> None:
    h = Harness()
    h.stable(1, ptype="connect")
    assert h.shard.delete_offsets(OffsetDelete("g", (("t", (0,)),))).error == E.NON_EMPTY_GROUP


def test_offset_delete_unparseable_subscription_counts_as_subscribed() -> None:
    h = Harness()
    h.stable(1, protocols=(("range", b"\xff"),))
    assert h.group().subscribed_topics is None
    r = h.shard.delete_offsets(OffsetDelete("g", (("t", (0,)),)))
    assert r.topics == (("t", ((0, E.GROUP_SUBSCRIBED_TO_TOPIC),)),)


# --- retention (KIP-211) -----------------------------------------------------------------
def test_simple_group_offsets_expire_from_commit_time_then_group_deleted() -> None:
    h = Harness()
    h.commit({("t", 0): 1})
    h.advance(RETENTION // 2)
    h.commit({("t", 1): 1})
    h.advance(RETENTION // 2 + CHECK)  # (t,0) expired, (t,1) not yet
    assert set(h.shard.committed("g")) == {("t", 1)}
    h.advance(RETENTION // 2)
    assert "g" not in h.shard.groups
    assert isinstance(h.records[-1], GroupTombstoneRecord)


def _long_sessions() -> tuple[Harness, int, int]:
    h = Harness(
        offsets_retention_minutes=1,
        offsets_retention_check_interval_ms=1000,
        group_max_session_timeout_ms=10**9,
    )
    return h, 60_000, 1000


def test_empty_consumer_group_expires_from_when_it_became_empty() -> None:
    h, retention, check = _long_sessions()
    ids = h.stable(1, session=10**8)
    gen = h.group().generation_id
    h.commit({("t", 0): 1}, generation=gen, member_id=ids[0])
    h.advance(2 * retention)  # Stable & subscribed to t: kept
    assert h.shard.committed("g")
    h.leave((ids[0], None))
    became_empty = h.timers.now_ms()
    assert h.group().state is S.EMPTY
    h.advance(retention - check)
    assert h.shard.committed("g")
    h.advance(2 * check)
    assert not h.shard.committed("g") and "g" not in h.shard.groups
    assert h.timers.now_ms() - became_empty >= retention


def test_stable_consumer_group_expires_only_unsubscribed_topics() -> None:
    h, retention, check = _long_sessions()
    ids = h.stable(1, session=10**8, protocols=(("range", sub("t")),))
    gen = h.group().generation_id
    h.commit({("t", 0): 1, ("gone", 0): 1}, generation=gen, member_id=ids[0])
    h.advance(retention + check)
    assert set(h.shard.committed("g")) == {("t", 0)}
    assert "g" in h.shard.groups


def test_non_consumer_group_with_members_keeps_offsets() -> None:
    h, retention, check = _long_sessions()
    ids = h.stable(1, session=10**8, ptype="connect")
    h.commit({("t", 0): 1}, generation=h.group().generation_id, member_id=ids[0])
    h.advance(retention + check)
    assert h.shard.committed("g")


def test_empty_group_without_offsets_is_deleted() -> None:
    h = Harness()
    ids = h.stable(1)
    h.leave((ids[0], None))
    h.advance(CHECK)
    assert "g" not in h.shard.groups


def test_explicit_retention_time_v2_v4() -> None:
    h = Harness()
    h.commit({("t", 0): 1}, retention=1000)
    h.advance(CHECK)
    assert not h.shard.committed("g")


def test_metadata_limit_counts_utf16_units_as_java_does() -> None:
    # 2 code points of 2 UTF-16 units each: 4 units, at the limit; a third is over it.
    h = Harness(offset_metadata_max_bytes=4)
    assert h.commit({("t", 0): 1}, metadata="😀😀").errors()[("t", 0)] == E.NONE
    assert h.commit({("t", 0): 1}, metadata="😀😀a").errors()[("t", 0)] == (
        E.OFFSET_METADATA_TOO_LARGE
    )
    assert h.commit({("t", 0): 1}, metadata="abcd").errors()[("t", 0)] == E.NONE


def test_a_batch_sink_gets_exactly_the_records_a_plain_sink_gets() -> None:
    """The commit hot path hands a topic's commits to a batch sink at once; what it stands
    for must be the records the one-record-per-partition path emits, in the same order."""
    plain, batch = Harness(batch_sink=False), Harness(batch_sink=True)
    for h in (plain, batch):
        h.commit({("t", 0): 5, ("t", 1): 6, ("u", 0): 7}, metadata="m")
        h.commit({("t", 0): 8}, retention=1000)
        h.commit({("t", 1): 9}, metadata="x" * 5000)  # over the limit: no record
        h.commit({("v", 2): 10, ("t", 3): 11})
    assert [type(r).__name__ for r in plain.records].count("OffsetCommitRecord") == 6
    assert batch.records == plain.records
    assert batch.shard.offsets == plain.shard.offsets
