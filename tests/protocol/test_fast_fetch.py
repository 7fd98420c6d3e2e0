"""The hand-written Fetch response encoder (v4-v18) agrees with the general codec, byte for
byte (the general codec is itself cross-checked against kafka-python 3's JSON classes)."""

from __future__ import annotations

import uuid
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from kgroupd.protocol.fast import encode_fetch_response
from kgroupd.protocol.messages import lookup

int32 = st.integers(-(2**31), 2**31 - 1)
batches = st.lists(st.binary(min_size=0, max_size=30), max_size=3)
fetch_parts = st.lists(
    st.tuples(
        st.integers(0, 1000),
        st.integers(-1, 120),
        st.integers(-1, 2**62),
        st.integers(-1, 2**62),
        st.integers(-1, 2**62),
        batches,
        st.none() | st.lists(st.tuples(st.integers(0, 2**62), st.integers(0, 2**62)), max_size=3),
    ),
    max_size=3,
)


@given(
    version=st.integers(4, 18),
    error=st.integers(0, 120),
    session=int32,
    topics=st.lists(st.tuples(st.text(max_size=20), st.uuids(), fetch_parts), max_size=3),
)
def test_fetch_encoder_matches_the_general_codec(
    version: int,
    error: int,
    session: int,
    topics: list[
        tuple[
            str,
            uuid.UUID,
            list[tuple[int, int, int, int, int, list[bytes], list[tuple[int, int]] | None]],
        ]
    ],
) -> None:
    spec = lookup(1, version)
    assert spec is not None
    keyed: list[Any] = [(tid if version >= 13 else name, parts) for name, tid, parts in topics]
    ours = b"".join(encode_fetch_response(version, error, session, keyed))
    fields = {
        "error_code": error,
        "session_id": session,
        "responses": [
            {
                "topic": name,
                "topic_id": tid,
                "partitions": [
                    {
                        "partition_index": index,
                        "error_code": code,
                        "high_watermark": hw,
                        "last_stable_offset": lso,
                        "log_start_offset": start,
                        "aborted_transactions": None
                        if aborted is None
                        else [{"producer_id": p, "first_offset": f} for p, f in aborted],
                        "preferred_read_replica": -1,
                        "records": b"".join(parts),
                    }
                    for index, code, hw, lso, start, parts, aborted in partitions
                ],
            }
            for name, tid, partitions in topics
        ],
    }
    assert ours == spec.encode_response(fields)
