"""The hand-written hot-path codecs agree with the struct codec, byte for byte."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from protocol.fast import (
    encode_fetch_response,
)
from protocol.messages import lookup

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
