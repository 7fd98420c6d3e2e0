"""The KIP-848 group records round-trip through their binary and JSON forms, and a member
record written before members could use the classic protocol still reads."""

from __future__ import annotations

import uuid

import pytest

from kgroupd.broker.coordinator.consumer.records import (
    ClassicMeta,
    ConsumerGroupCurrentMemberRecord,
    ConsumerGroupEpochRecord,
    ConsumerGroupMemberRecord,
    ConsumerGroupPartitionMetadataRecord,
    ConsumerGroupRegexRecord,
    ConsumerGroupTargetEpochRecord,
    ConsumerGroupTargetMemberRecord,
    ConsumerRecord,
    ConsumerTombstoneRecord,
    consumer_record_from_dict,
    consumer_record_to_dict,
    decode_consumer_record,
    encode_consumer_record,
)

T = uuid.UUID(int=3)
MEMBER = ConsumerGroupMemberRecord(
    "g", "m", "i", None, "client", "/127.0.0.1", 3000, ("a", "b"), "x.*", "uniform"
)
RECORDS: list[ConsumerRecord] = [
    ConsumerGroupEpochRecord("g", 7),
    ConsumerGroupPartitionMetadataRecord("g", (("a", T, 4),)),
    MEMBER,
    ConsumerGroupMemberRecord(
        "g",
        "c",
        None,
        "rack",
        "",
        "",
        5000,
        ("a",),
        None,
        None,
        ClassicMeta(10_000, (("range", b"\x00\x01meta"), ("cooperative-sticky", b""))),
    ),
    ConsumerGroupTargetMemberRecord("g", "m", ((T, (0, 2)),)),
    ConsumerGroupTargetEpochRecord("g", 7),
    ConsumerGroupCurrentMemberRecord("g", "m", 7, 6, 2, ((T, (0,)),), ((T, (2,)),)),
    ConsumerGroupRegexRecord("g", "x.*", ("xa", "xb")),
    ConsumerTombstoneRecord("cg-member", "g", "m"),
]


@pytest.mark.parametrize("record", RECORDS, ids=lambda r: type(r).__name__)
def test_binary_and_json_round_trip(record: ConsumerRecord) -> None:
    assert decode_consumer_record(encode_consumer_record(record, 2)) == record
    name, d = consumer_record_to_dict(record)
    assert consumer_record_from_dict(name, d) == record


def test_a_member_record_without_classic_metadata_reads_as_a_consumer_member() -> None:
    raw = encode_consumer_record(MEMBER, 2)
    assert decode_consumer_record(raw) == MEMBER and MEMBER.classic is None
    name, d = consumer_record_to_dict(MEMBER)
    del d["classic"]  # JSON written before the field existed
    assert consumer_record_from_dict(name, d) == MEMBER
    with pytest.raises(ValueError):
        decode_consumer_record(raw + b"\x00")  # a cut classic section is refused
