"""The consumer embedded protocol codecs, cross-checked against kafka-python 3.x's
JSON-driven definitions (kafka.protocol.consumer.metadata) and aiokafka's v0 structs."""

from __future__ import annotations

import contextlib
import warnings
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kgroupd.assignors.codec import (
    INT32_MIN,
    Assignment,
    CodecError,
    Subscription,
    decode_assignment,
    decode_priority,
    decode_sticky_user_data,
    decode_subscription,
    encode_assignment,
    encode_priority,
    encode_sticky_user_data,
    encode_subscription,
    peek_version,
)
from kgroupd.assignors.spec import TopicPartition

with warnings.catch_warnings():  # kafka-python's resource loading warns on 3.11
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka.protocol.consumer.metadata import (
        ConsumerProtocolAssignment as KpAssignment,
    )
    from kafka.protocol.consumer.metadata import (
        ConsumerProtocolSubscription as KpSubscription,
    )

names = st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=12)
int32 = st.integers(INT32_MIN, 2**31 - 1)
topic_partitions = st.lists(
    st.tuples(names, st.lists(int32, max_size=5).map(tuple)), max_size=4
).map(tuple)
subscriptions = st.builds(
    Subscription,
    topics=st.lists(names, max_size=5).map(tuple),
    user_data=st.one_of(st.none(), st.binary(max_size=20)),
    owned_partitions=topic_partitions,
    generation_id=int32,
    rack_id=st.one_of(st.none(), names),
)
assignments = st.builds(
    Assignment,
    assigned_partitions=topic_partitions,
    user_data=st.one_of(st.none(), st.binary(max_size=20)),
)


def at_version(sub: Subscription, version: int) -> Subscription:
    """What survives encoding at ``version`` (newer fields are ignorable)."""
    return Subscription(
        sub.topics,
        sub.user_data,
        sub.owned_partitions if version >= 1 else (),
        sub.generation_id if version >= 2 else -1,
        sub.rack_id if version >= 3 else None,
    )


def kp_subscription(sub: Subscription, version: int) -> Any:
    kw: dict[str, Any] = {"topics": list(sub.topics), "user_data": sub.user_data}
    if version >= 1:
        kw["owned_partitions"] = [
            KpSubscription.TopicPartition(topic=t, partitions=list(ps))
            for t, ps in sub.owned_partitions
        ]
    if version >= 2:
        kw["generation_id"] = sub.generation_id
    if version >= 3:
        kw["rack_id"] = sub.rack_id
    return KpSubscription(version=version, **kw)


@given(subscriptions, st.integers(0, 3))
def test_subscription_bytes_match_kafka_python(sub: Subscription, version: int) -> None:
    ours = encode_subscription(sub, version)
    assert ours == kp_subscription(sub, version).encode(version=version)
    assert peek_version(ours) == version
    assert decode_subscription(ours) == at_version(sub, version)
    theirs = KpSubscription.decode(ours)
    assert list(theirs.topics) == list(sub.topics)
    assert theirs.user_data == sub.user_data
    if version >= 1:
        assert [(tp.topic, tuple(tp.partitions)) for tp in theirs.owned_partitions] == list(
            sub.owned_partitions
        )
    if version >= 2:
        assert theirs.generation_id == sub.generation_id
    if version >= 3:
        assert theirs.rack_id == sub.rack_id


@given(assignments, st.integers(0, 3))
def test_assignment_bytes_match_kafka_python(assignment: Assignment, version: int) -> None:
    ours = encode_assignment(assignment, version)
    theirs = KpAssignment(
        version=version,
        assigned_partitions=[
            KpAssignment.TopicPartition(topic=t, partitions=list(ps))
            for t, ps in assignment.assigned_partitions
        ],
        user_data=assignment.user_data,
    )
    assert ours == theirs.encode(version=version)
    assert decode_assignment(ours) == assignment
    decoded = KpAssignment.decode(ours)
    assert [(tp.topic, tuple(tp.partitions)) for tp in decoded.assigned_partitions] == list(
        assignment.assigned_partitions
    )


def test_known_bytes_v3() -> None:
    sub = Subscription(("a", "b"), b"xy", (("a", (0, 2)),), 7, "r1")
    assert encode_subscription(sub).hex() == (
        "000300000002000161000162000000027879000000010001610000000200000000000000020000000700027231"
    )


def test_newer_versions_parse_with_the_newest_known_format() -> None:
    data = b"\x00\x07" + encode_subscription(Subscription(("t",), None, (), 3, "r"))[2:]
    data += b"future fields"
    assert decode_subscription(data) == Subscription(("t",), None, (), 3, "r")


def test_aiokafka_reads_our_v3_subscription_and_we_read_its_v0() -> None:
    from aiokafka.coordinator.protocol import (
        ConsumerProtocolMemberAssignment,
        ConsumerProtocolMemberMetadata,
    )

    ours = encode_subscription(Subscription(("t1", "t2"), b"ud", (("t1", (0,)),), 4, None))
    meta = ConsumerProtocolMemberMetadata.decode(ours)
    assert (meta.version, meta.subscription, meta.user_data) == (3, ["t1", "t2"], b"ud")
    theirs = ConsumerProtocolMemberMetadata(0, ["x"], b"").encode()
    assert decode_subscription(theirs) == Subscription(("x",), b"")
    a = ConsumerProtocolMemberAssignment(0, [("t", [1, 2])], b"").encode()
    assert decode_assignment(a).topic_partitions() == [
        TopicPartition("t", 1),
        TopicPartition("t", 2),
    ]


@pytest.mark.parametrize(
    "data",
    [b"", b"\x00", b"\x00\x00\x00\x00\x00\x05\x00\x01a", b"\xff\xff", b"\x00\x01\x7f\xff\xff\xff"],
)
def test_malformed_input_raises_codec_error(data: bytes) -> None:
    with pytest.raises(CodecError):
        decode_subscription(data)


@given(st.binary(max_size=40))
def test_decoders_only_raise_codec_error(data: bytes) -> None:
    for decode in (decode_subscription, decode_assignment, decode_sticky_user_data):
        with contextlib.suppress(CodecError):
            decode(data)


def test_sticky_user_data_matches_aiokafka_and_kafka_v0() -> None:
    from aiokafka.coordinator.assignors.sticky.sticky_assignor import StickyAssignorUserDataV1

    parts = [TopicPartition("b", 1), TopicPartition("a", 0), TopicPartition("a", 3)]
    ours = encode_sticky_user_data(parts, 5)
    theirs = StickyAssignorUserDataV1([("a", [0, 3]), ("b", [1])], 5).encode()
    assert ours == theirs
    decoded = decode_sticky_user_data(ours)
    assert sorted(decoded.partitions) == sorted(parts) and decoded.generation == 5
    v0 = encode_sticky_user_data(parts, None)  # Kafka STICKY_ASSIGNOR_USER_DATA_V0
    assert decode_sticky_user_data(v0).generation is None


def test_priority_codec() -> None:
    assert encode_priority(10) == b"\x00\x00\x00\x0a"
    assert decode_priority(encode_priority(-5)) == -5
    assert decode_priority(None) == decode_priority(b"") == decode_priority(b"\x01") == INT32_MIN
    assert decode_priority(b"\x00\x00\x00\x02trailing") == 2
