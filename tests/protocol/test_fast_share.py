"""The hand-written ShareFetch request decoder and response encoder (v1-v2) agree with the
general codec (the encoder byte for byte)."""

from __future__ import annotations

import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kgroupd.protocol.codec import UNKNOWN_TAGS
from kgroupd.protocol.fast.share import (
    SharePartition,
    decode_share_fetch,
    encode_share_fetch_response,
)
from kgroupd.protocol.messages import lookup

int32 = st.integers(-(2**31), 2**31 - 1)
parts = st.lists(
    st.tuples(
        st.integers(0, 1000),
        st.integers(0, 130),
        st.integers(0, 130),
        st.lists(st.binary(min_size=0, max_size=30), max_size=3),
        st.lists(
            st.tuples(st.integers(0, 2**62), st.integers(0, 2**62), st.integers(0, 2**15 - 1)),
            max_size=3,
        ),
    ),
    max_size=3,
)


@given(
    version=st.integers(1, 2),
    error=st.integers(0, 130),
    message=st.none() | st.text(max_size=20),
    lock=int32,
    topics=st.lists(st.tuples(st.uuids(), parts), max_size=3),
    leader=st.tuples(int32, int32),
    throttle=st.integers(0, 2**31 - 1),
)
def test_share_fetch_encoder_matches_the_general_codec(
    version: int,
    error: int,
    message: str | None,
    lock: int,
    topics: list[tuple[uuid.UUID, list[SharePartition]]],
    leader: tuple[int, int],
    throttle: int,
) -> None:
    spec = lookup(78, version)
    assert spec is not None
    ours = b"".join(
        encode_share_fetch_response(error, message, lock, topics, *leader, throttle_ms=throttle)
    )
    fields = {
        "throttle_time_ms": throttle,
        "error_code": error,
        "error_message": message,
        "acquisition_lock_timeout_ms": lock,
        "responses": [
            {
                "topic_id": tid,
                "partitions": [
                    {
                        "partition_index": index,
                        "error_code": err,
                        "error_message": None,
                        "acknowledge_error_code": ack,
                        "acknowledge_error_message": None,
                        "current_leader": {"leader_id": leader[0], "leader_epoch": leader[1]},
                        "records": b"".join(batches),
                        "acquired_records": [
                            {"first_offset": f, "last_offset": last, "delivery_count": n}
                            for f, last, n in acquired
                        ],
                    }
                    for index, err, ack, batches, acquired in ps
                ],
            }
            for tid, ps in topics
        ],
        "node_endpoints": [],
    }
    assert ours == spec.encode_response(fields)


tags = st.dictionaries(st.integers(0, 300), st.binary(max_size=4), max_size=2)
int8 = st.integers(-128, 127)
batches = st.lists(
    st.fixed_dictionaries(
        {
            "first_offset": st.integers(-(2**63), 2**63 - 1),
            "last_offset": st.integers(-(2**63), 2**63 - 1),
            "acknowledge_types": st.lists(int8, max_size=4),
        }
    ),
    max_size=3,
)
fetch_topics = st.lists(
    st.fixed_dictionaries(
        {
            "topic_id": st.uuids(),
            "partitions": st.lists(
                st.fixed_dictionaries(
                    {"partition_index": int32, "acknowledgement_batches": batches}
                ),
                max_size=3,
            ),
        }
    ),
    max_size=3,
)


@given(
    version=st.integers(1, 2),
    group=st.none() | st.text(max_size=12),
    member=st.none() | st.text(max_size=12),
    numbers=st.lists(int32, min_size=6, max_size=6),
    mode=int8,
    renew=st.booleans(),
    topics=fetch_topics,
    forgotten=st.lists(
        st.fixed_dictionaries({"topic_id": st.uuids(), "partitions": st.lists(int32, max_size=4)}),
        max_size=2,
    ),
    unknown=tags,
    prefix=st.binary(max_size=6),
)
def test_share_fetch_decoder_matches_the_general_codec(
    version: int,
    group: str | None,
    member: str | None,
    numbers: list[int],
    mode: int,
    renew: bool,
    topics: list[dict],  # type: ignore[type-arg]
    forgotten: list[dict],  # type: ignore[type-arg]
    unknown: dict[int, bytes],
    prefix: bytes,
) -> None:
    spec = lookup(78, version)
    assert spec is not None
    epoch, wait, min_bytes, max_bytes, records, size = numbers
    fields = {
        "group_id": group,
        "member_id": member,
        "share_session_epoch": epoch,
        "max_wait_ms": wait,
        "min_bytes": min_bytes,
        "max_bytes": max_bytes,
        "max_records": records,
        "batch_size": size,
        "share_acquire_mode": mode,
        "is_renew_ack": renew,
        "topics": topics,
        "forgotten_topics_data": forgotten,
        UNKNOWN_TAGS: unknown,
    }
    frame = prefix + spec.encode_request(fields)
    general = spec.decode_request(frame, len(prefix))
    general.pop(UNKNOWN_TAGS, None)
    assert decode_share_fetch(frame, len(prefix), version) == general
    with pytest.raises(ValueError):  # cut short (its last tagged-field byte): refused
        decode_share_fetch(frame[:-1], len(prefix), version)
