"""Records: stable serialization (binary and JSON), and the property that replaying what a live
shard emitted rebuilds an equal persisted state."""

from __future__ import annotations

import json
import struct

import pytest
from coord_helpers import TEST_CONFIG, Harness, sub
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kgroupd.broker.coordinator import (
    CoordinatorShard,
    Deferred,
    GroupMetadataRecord,
    GroupState,
    GroupTombstoneRecord,
    JoinGroupResult,
    MemberRecord,
    OffsetCommitRecord,
    OffsetDelete,
    OffsetTombstoneRecord,
    Record,
    record_from_dict,
    record_to_dict,
)
from kgroupd.broker.coordinator.records import (
    RECORD_FORMAT_VERSION,
    NewerRecordFormat,
    RecordFormatError,
    TxnOffsetCommitRecord,
    TxnOffsetMarkerRecord,
    decode_record,
    encode_record,
)
from kgroupd.protocol.errors import ErrorCode as E


def json_roundtrip(record: Record) -> Record:
    return record_from_dict(json.loads(json.dumps(record_to_dict(record))))


def roundtrip(record: Record) -> Record:
    """Through the binary form (what the logs hold), checking the JSON form agrees."""
    decoded = decode_record(encode_record(record))
    assert json_roundtrip(record) == decoded
    return decoded


def test_record_serialization_roundtrip() -> None:
    member = MemberRecord("m", "i", "c", "/h", 1, 2, "consumer", (("range", b"\x00\x01"),), b"a")
    records: list[Record] = [
        OffsetCommitRecord("g", "t", 0, 5, 3, "meta", 100, None),
        OffsetCommitRecord("g", "t", 1, 5, -1, "", 100, 200),
        OffsetTombstoneRecord("g", "t", 0),
        GroupMetadataRecord("g", "consumer", 3, "range", "m", 7, (member,)),
        GroupMetadataRecord("g", None, 0, None, None, 0, ()),
        GroupTombstoneRecord("g"),
        TxnOffsetCommitRecord("g", 4000, 2, "t", 1, 77, 5, "m", 300),
        TxnOffsetMarkerRecord("g", 4000, True),
        TxnOffsetMarkerRecord("g", 4000, False),
    ]
    for r in records:
        assert roundtrip(r) == r
    assert records[0].key() == records[2].key() and records[3].key() == records[5].key()
    assert record_to_dict(records[2]) == {
        "v": 1,
        "type": "offset_tombstone",
        "group_id": "g",
        "topic": "t",
        "partition": 0,
    }


# --- the binary codec ----------------------------------------------------------------------

text = st.text(max_size=40)  # any unicode, surrogates excluded (not valid UTF-8)
int32 = st.integers(-(2**31), 2**31 - 1)
int64 = st.integers(-(2**63), 2**63 - 1)
blob = st.one_of(st.binary(max_size=64), st.binary(min_size=70_000, max_size=70_000))

member_records = st.builds(
    MemberRecord,
    text,
    st.none() | text,
    text,
    text,
    int32,
    int32,
    text,
    st.lists(st.tuples(text, blob), max_size=3).map(tuple),
    blob,
)
any_record: st.SearchStrategy[Record] = st.one_of(
    st.builds(OffsetCommitRecord, text, text, int32, int64, int32, text, int64, st.none() | int64),
    st.builds(OffsetTombstoneRecord, text, text, int32),
    st.builds(
        GroupMetadataRecord,
        text,
        st.none() | text,
        int32,
        st.none() | text,
        st.none() | text,
        int64,
        st.lists(member_records, max_size=3).map(tuple),
    ),
    st.builds(GroupTombstoneRecord, text),
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(any_record)
def test_binary_codec_round_trips_any_record(record: Record) -> None:
    payload = encode_record(record)
    assert payload[0] == RECORD_FORMAT_VERSION
    assert decode_record(payload) == record
    # Every field is needed: a record cut short or with bytes after it is refused.
    with pytest.raises(RecordFormatError):
        decode_record(payload[:-1])
    with pytest.raises(RecordFormatError):
        decode_record(payload + b"\x00")


def test_binary_offset_commit_layout_is_stable() -> None:
    """The on-disk bytes of an offset commit, spelled out: a change must bump the version."""
    r = OffsetCommitRecord("gé", "t", 3, 7, -1, "m", 1700000000000, None)
    assert encode_record(r) == (
        struct.pack(">BBBiqiqqIII", 2, 1, 0, 3, 7, -1, 1700000000000, 0, 3, 1, 1)
        + "gé".encode()
        + b"tm"
    )
    expiring = OffsetCommitRecord("g", "t", 0, 1, 2, "", 5, 0)
    assert encode_record(expiring)[2] == 1  # an expire timestamp of 0 is not "unset"
    assert decode_record(encode_record(expiring)) == expiring


def test_a_newer_record_version_says_upgrade_and_garbage_is_refused() -> None:
    payload = bytearray(encode_record(GroupTombstoneRecord("g")))
    payload[0] = RECORD_FORMAT_VERSION + 1
    with pytest.raises(NewerRecordFormat, match=r"newer than this kgroupd reads.*upgrade"):
        decode_record(bytes(payload))
    for bad in (b"", b"\x02", b"\x02\x63", b"\x01\x01", b"\x00"):
        with pytest.raises(RecordFormatError) as info:
            decode_record(bad)
        assert not isinstance(info.value, NewerRecordFormat)


GROUPS = ("g1", "g2")
SLOTS = (0, 1, 2, 3)  # 0 and 1 are static members
PROTOCOLS = (
    (("range", sub("t")),),
    (("range", sub("t", "u")), ("rr", sub("t"))),
)

join_op = st.tuples(
    st.just("join"),
    st.sampled_from(GROUPS),
    st.sampled_from(SLOTS),
    st.sampled_from((0, 1)),
    st.booleans(),
    st.booleans(),
    st.booleans(),
)
settle_op = st.tuples(st.just("settle"), st.sampled_from(GROUPS))

op = st.one_of(
    join_op,
    join_op,
    join_op,
    settle_op,
    settle_op,
    st.tuples(
        st.just("join"),
        st.sampled_from(GROUPS),
        st.sampled_from(SLOTS),
        st.sampled_from((0, 1)),
        st.booleans(),
        st.booleans(),
        st.booleans(),
    ),
    st.tuples(st.just("sync"), st.sampled_from(GROUPS), st.sampled_from(SLOTS)),
    st.tuples(st.just("hb"), st.sampled_from(GROUPS), st.sampled_from(SLOTS)),
    st.tuples(st.just("leave"), st.sampled_from(GROUPS), st.sampled_from(SLOTS), st.booleans()),
    st.tuples(
        st.just("commit"),
        st.sampled_from(GROUPS),
        st.sampled_from(SLOTS),
        st.sampled_from(("t", "u", "x")),
        st.integers(0, 2),
        st.integers(0, 1000),
        st.booleans(),
    ),
    st.tuples(st.just("advance"), st.sampled_from((0, 50, 100, 600, 1500, 3000))),
    st.tuples(st.just("delete_group"), st.sampled_from(GROUPS)),
    st.tuples(st.just("delete_offsets"), st.sampled_from(GROUPS), st.sampled_from(("t", "x"))),
    st.tuples(
        st.just("retention"),
    ),
)


class Driver:
    def __init__(self) -> None:
        self.h = Harness(offsets_retention_minutes=1, offsets_retention_check_interval_ms=5000)
        self.ids: dict[tuple[str, int], str] = {}
        self.joins: list[tuple[str, int, Deferred[JoinGroupResult]]] = []

    def collect(self) -> None:
        still = []
        for g, slot, d in self.joins:
            if not d.done():
                still.append((g, slot, d))
                continue
            r = d.result()
            if r.error in (E.NONE, E.MEMBER_ID_REQUIRED):
                self.ids[(g, slot)] = r.member_id
            elif r.error in (E.UNKNOWN_MEMBER_ID, E.FENCED_INSTANCE_ID):
                self.ids.pop((g, slot), None)
        self.joins = still

    def run(self, o: tuple) -> None:  # type: ignore[type-arg]
        h = self.h
        kind = o[0]
        if kind == "join":
            _, g, slot, proto, v4, v9, fresh = o
            inst = f"i{slot}" if slot < 2 else None
            mid = "" if fresh else self.ids.get((g, slot), "")
            d = h.join(
                member_id=mid, group=g, instance=inst, protocols=PROTOCOLS[proto], v4=v4, v9=v9
            )
            self.joins.append((g, slot, d))
        elif kind == "sync":
            _, g, slot = o
            mid = self.ids.get((g, slot), "")
            group = h.shard.groups.get(g)
            gen = group.generation_id if group else 0
            members = list(group.members) if group else []
            h.sync(
                mid,
                gen,
                group=g,
                instance=f"i{slot}" if slot < 2 else None,
                assignments=tuple((m, f"{m}@{gen}".encode()) for m in members[:-1]),
            )
        elif kind == "hb":
            _, g, slot = o
            group = h.shard.groups.get(g)
            h.hb(self.ids.get((g, slot), ""), group.generation_id if group else 0, group=g)
        elif kind == "leave":
            _, g, slot, by_instance = o
            if by_instance and slot < 2:
                h.leave(("", f"i{slot}"), group=g)
            else:
                h.leave((self.ids.get((g, slot), "x"), None), group=g)
        elif kind == "commit":
            _, g, slot, topic, partition, offset, as_member = o
            group = h.shard.groups.get(g)
            if as_member and group is not None:
                h.commit(
                    {(topic, partition): offset},
                    group=g,
                    generation=group.generation_id,
                    member_id=self.ids.get((g, slot), ""),
                )
            else:
                h.commit({(topic, partition): offset}, group=g)
        elif kind == "advance":
            h.advance(o[1])
        elif kind == "delete_group":
            h.shard.delete_group(o[1])
        elif kind == "delete_offsets":
            h.shard.delete_offsets(OffsetDelete(o[1], ((o[2], (0, 1, 2)),)))
        elif kind == "retention":
            h.advance(61_000)
        elif kind == "settle":  # finish the join phase, then everyone syncs (leader last)
            for _ in range(12):
                group = h.shard.groups.get(o[1])
                if group is None or group.state is not GroupState.PREPARING_REBALANCE:
                    break
                h.advance(200)
            self.collect()
            group = h.shard.groups.get(o[1])
            if group is not None and group.state is GroupState.COMPLETING_REBALANCE:
                gen = group.generation_id
                order = sorted(group.members, key=lambda m: group.is_leader(m))
                for mid in order:
                    h.sync(
                        mid,
                        gen,
                        group=o[1],
                        instance=group.members[mid].group_instance_id,
                        assignments=tuple((m, f"{m}@{gen}".encode()) for m in group.members),
                    )
        self.collect()


def check_replay(driver: Driver) -> list[GroupState]:
    """Replay everything emitted so far into a fresh shard and compare persisted state.
    Returns the states of the groups that were compared in full."""
    live = driver.h.shard
    fresh = CoordinatorShard(0, TEST_CONFIG, Harness().timers, loaded=False)
    fresh.load(roundtrip(r) for r in driver.h.records)
    assert fresh.offsets == live.offsets
    assert set(fresh.groups) == set(live.groups)
    compared = []
    for gid, group in live.groups.items():
        # Settled states are persisted as they are; transitional ones are written when the
        # rebalance settles (as Kafka does).
        if group.state in (GroupState.STABLE, GroupState.EMPTY):
            replayed = fresh.groups[gid]
            assert replayed.state is group.state
            assert replayed.to_record() == group.to_record()
            assert replayed.static_members == group.static_members
            compared.append(group.state)
    return compared


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(op, min_size=1, max_size=30))
def test_replaying_emitted_records_rebuilds_persisted_state(ops: list[tuple]) -> None:  # type: ignore[type-arg]
    driver = Driver()
    for o in ops:
        driver.run(o)
        check_replay(driver)


def test_property_driver_reaches_interesting_states() -> None:
    """A fixed scenario through the same driver: static members, Stable, commit, restart."""
    d = Driver()
    for o in [
        ("join", "g1", 0, 0, False, False, True),
        ("join", "g1", 2, 0, True, False, True),
        ("join", "g1", 2, 0, True, False, False),
        ("advance", 100),
        ("advance", 100),
        ("sync", "g1", 0),
        ("sync", "g1", 2),
        ("commit", "g1", 2, "t", 0, 5, True),
        ("join", "g1", 0, 0, False, False, True),  # static restart in Stable
    ]:
        d.run(o)
    assert d.h.group("g1").state is GroupState.STABLE
    fresh = CoordinatorShard(0, TEST_CONFIG, Harness().timers, loaded=False)
    fresh.load(d.h.records)
    assert fresh.groups["g1"].to_record() == d.h.group("g1").to_record()
    assert fresh.offsets == d.h.shard.offsets
