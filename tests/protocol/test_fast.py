"""The hand-written hot-path codecs agree with the struct codec, byte for byte."""

from __future__ import annotations

import warnings

import pytest
from hypothesis import given
from hypothesis import strategies as st

from protocol.fast import (
    decode_offset_commit,
    encode_fetch_response,
    encode_offset_commit_response,
)
from protocol.messages import lookup

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)  # kafka-python 3.0's import-time read
    from kafka.protocol.consumer import OffsetCommitRequest, OffsetCommitResponse


names = st.text(max_size=40)
int32 = st.integers(-(2**31), 2**31 - 1)


batches = st.lists(st.binary(min_size=0, max_size=30), max_size=3)
fetch_parts = st.lists(
    st.tuples(
        st.integers(0, 1000),
        st.integers(-1, 100),
        st.integers(-1, 2**62),
        st.integers(-1, 2**62),
        st.integers(-1, 2**62),
        batches,
    ),
    max_size=3,
)


@given(
    version=st.integers(4, 11),
    error=st.integers(0, 100),
    session=int32,
    topics=st.lists(st.tuples(names, fetch_parts), max_size=3),
)
def test_fetch_encoder_matches_struct_codec(
    version: int,
    error: int,
    session: int,
    topics: list[tuple[str, list[tuple[int, int, int, int, int, list[bytes]]]]],
) -> None:
    spec = lookup(1, version)
    assert spec is not None
    ours = b"".join(encode_fetch_response(version, error, session, topics))
    fields = {
        "throttle_time_ms": 0,
        "error_code": error,
        "session_id": session,
        "topics": [
            {
                "topics": name,
                "partitions": [
                    {
                        "partition": index,
                        "error_code": code,
                        "highwater_offset": hw,
                        "last_stable_offset": lso,
                        "log_start_offset": start,
                        "aborted_transactions": None,
                        "preferred_read_replica": -1,
                        "message_set": b"".join(parts),
                    }
                    for index, code, hw, lso, start, parts in partitions
                ],
            }
            for name, partitions in topics
        ],
    }
    assert ours == spec.encode_response(fields)


# --- OffsetCommit --------------------------------------------------------------------------
# Checked against kafka-python 3's JSON-driven classes (generated from Apache Kafka's message
# definitions), an independent codec, and against our struct codec.

commit_parts = st.lists(
    st.tuples(
        int32,
        st.integers(-(2**63), 2**63 - 1),
        int32,
        st.none() | st.text(max_size=20),
        st.integers(-(2**63), 2**63 - 1),
    ),
    max_size=4,
)
commit_topics = st.lists(st.tuples(names, commit_parts), max_size=3)


@given(
    version=st.integers(0, 7),
    group=names,
    generation=int32,
    member=names,
    instance=st.none() | names,
    retention=st.integers(-(2**63), 2**63 - 1),
    topics=commit_topics,
    prefix=st.binary(max_size=8),
)
def test_offset_commit_decoder_reads_what_kafka_python_writes(
    version: int,
    group: str,
    generation: int,
    member: str,
    instance: str | None,
    retention: int,
    topics: list[tuple[str, list[tuple[int, int, int, str | None, int]]]],
    prefix: bytes,
) -> None:
    req_cls = OffsetCommitRequest[version]
    topic_cls = req_cls.OffsetCommitRequestTopic
    part_cls = topic_cls.OffsetCommitRequestPartition
    msg = req_cls(
        group_id=group,
        generation_id_or_member_epoch=generation,
        member_id=member,
        group_instance_id=instance,
        retention_time_ms=retention,
        topics=[
            topic_cls(
                name=name,
                partitions=[
                    part_cls(
                        partition_index=p,
                        committed_offset=o,
                        committed_leader_epoch=e,
                        commit_timestamp=ts,
                        committed_metadata=m,
                    )
                    for p, o, e, m, ts in parts
                ],
            )
            for name, parts in topics
        ],
    )
    frame = prefix + msg.encode(version=version, header=False)
    fields = decode_offset_commit(frame, len(prefix), version)
    expected: dict[str, object] = {"consumer_group": group}
    if version >= 1:
        expected["consumer_group_generation_id"] = generation
        expected["consumer_id"] = member
    if 2 <= version <= 4:
        expected["retention_time"] = retention
    if version >= 7:
        expected["group_instance_id"] = instance
    expected["topics"] = [
        (name, [(p, o, e if version >= 6 else -1, m) for p, o, e, m, _ts in parts])
        for name, parts in topics
    ]
    assert fields == expected
    # and the struct codec agrees
    spec = lookup(8, version)
    assert spec is not None
    ref = spec.decode_request(frame, len(prefix))
    assert ref["consumer_group"] == group
    assert [
        (t["topic"], [(p["partition"], p["offset"], p["metadata"]) for p in t["partitions"]])
        for t in ref["topics"]
    ] == [(name, [(p, o, m) for p, o, _e, m in parts]) for name, parts in fields["topics"]]


@given(
    version=st.integers(0, 7),
    topics=st.lists(
        st.tuples(names, st.lists(st.tuples(int32, st.integers(-1, 200)), max_size=4)),
        max_size=3,
    ),
)
def test_offset_commit_response_encoder_is_what_kafka_python_reads(
    version: int, topics: list[tuple[str, list[tuple[int, int]]]]
) -> None:
    ours = encode_offset_commit_response(version, topics)
    decoded = OffsetCommitResponse[version].decode(ours, version=version, header=False)
    assert [
        (t.name, [(p.partition_index, p.error_code) for p in t.partitions]) for t in decoded.topics
    ] == topics
    if version >= 3:
        assert decoded.throttle_time_ms == 0
    spec = lookup(8, version)
    assert spec is not None
    fields = {
        "throttle_time_ms": 0,
        "topics": [
            {"topic": n, "partitions": [{"partition": p, "error_code": c} for p, c in ps]}
            for n, ps in topics
        ],
    }
    assert ours == spec.encode_response(fields)


@pytest.mark.parametrize("version", [0, 2, 6, 7])
def test_offset_commit_decoder_rejects_malformed_bodies(version: int) -> None:
    req_cls = OffsetCommitRequest[version]
    topic_cls = req_cls.OffsetCommitRequestTopic
    part_cls = topic_cls.OffsetCommitRequestPartition
    body = req_cls(
        group_id="g",
        generation_id_or_member_epoch=1,
        member_id="m",
        topics=[
            topic_cls(
                name="t",
                partitions=[
                    part_cls(partition_index=0, committed_offset=1, committed_metadata="meta")
                ],
            )
        ],
    ).encode(version=version, header=False)
    decode_offset_commit(body, 0, version)  # the whole body is fine
    for cut in range(len(body)):
        with pytest.raises(ValueError):
            decode_offset_commit(body[:cut], 0, version)
    with pytest.raises(ValueError):
        decode_offset_commit(body + b"\x00", 0, version)
    null_topic = body.replace(b"\x00\x01t", b"\xff\xff", 1)
    with pytest.raises(ValueError):
        decode_offset_commit(null_topic, 0, version)
