"""The hand-written ShareFetch response encoder (v1-v2) agrees with the general codec, byte for
byte."""

from __future__ import annotations

import uuid

from hypothesis import given
from hypothesis import strategies as st

from kgroupd.protocol.fast.share import SharePartition, encode_share_fetch_response
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
