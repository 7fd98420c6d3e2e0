"""The hand-written OffsetCommit codec (v0-v10) agrees with the general codec, byte for byte
(the general codec is itself cross-checked against kafka-python 3's JSON-driven classes)."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kgroupd.protocol.codec import UNKNOWN_TAGS
from kgroupd.protocol.fast import decode_offset_commit, encode_offset_commit_response
from kgroupd.protocol.messages import lookup

names = st.text(max_size=30)
int32 = st.integers(-(2**31), 2**31 - 1)
int64 = st.integers(-(2**63), 2**63 - 1)
tags = st.dictionaries(st.integers(0, 300), st.binary(max_size=4), max_size=2)
nonempty_tags = st.dictionaries(st.integers(0, 300), st.binary(max_size=4), min_size=1, max_size=2)
parts = st.lists(
    st.tuples(int32, int64, int32, st.none() | st.text(max_size=20), int64, tags), max_size=4
)
topics = st.lists(st.tuples(names, st.uuids(), parts, tags), max_size=3)


def request(
    version: int,
    group: str,
    gen: int,
    member: str,
    instance: str | None,
    retention: int,
    tps: list[Any],
    top_tags: dict[int, bytes],
) -> dict[str, Any]:
    return {
        "group_id": group,
        "generation_id_or_member_epoch": gen,
        "member_id": member,
        "group_instance_id": instance,
        "retention_time_ms": retention,
        "topics": [
            {
                "name": name,
                "topic_id": topic_id,
                "partitions": [
                    {
                        "partition_index": p,
                        "committed_offset": o,
                        "committed_leader_epoch": e,
                        "committed_metadata": m,
                        "commit_timestamp": ts,
                        UNKNOWN_TAGS: ptags,
                    }
                    for p, o, e, m, ts, ptags in plist
                ],
                UNKNOWN_TAGS: ttags,
            }
            for name, topic_id, plist, ttags in tps
        ],
        UNKNOWN_TAGS: top_tags,
    }


@given(
    version=st.integers(0, 10),
    group=names,
    gen=int32,
    member=names,
    instance=st.none() | names,
    retention=int64,
    tps=topics,
    top_tags=tags,
    prefix=st.binary(max_size=8),
)
def test_offset_commit_decoder_matches_the_general_codec(
    version: int,
    group: str,
    gen: int,
    member: str,
    instance: str | None,
    retention: int,
    tps: list[Any],
    top_tags: dict[int, bytes],
    prefix: bytes,
) -> None:
    spec = lookup(8, version)
    assert spec is not None
    frame = prefix + spec.encode_request(
        request(version, group, gen, member, instance, retention, tps, top_tags)
    )
    _agree(version, frame, len(prefix))


# Commits as clients send them: many partitions, no metadata (empty or null) and no tags;
# sometimes one partition with metadata or tags among them.
usual_parts = st.lists(
    st.tuples(int32, int64, int32, st.sampled_from(["", None]), int64, st.just({})),
    min_size=1,
    max_size=40,
)
odd_part = st.tuples(int32, int64, int32, st.text(min_size=1, max_size=5), int64, tags) | st.tuples(
    int32, int64, int32, st.sampled_from(["", None]), int64, nonempty_tags
)


@given(
    version=st.integers(0, 10),
    tps=st.lists(
        st.tuples(names, st.uuids(), usual_parts, st.just({})).flatmap(
            lambda t: st.one_of(
                st.just(t),
                st.tuples(st.integers(0, len(t[2]) - 1), odd_part).map(
                    lambda x: (t[0], t[1], [*t[2][: x[0]], x[1], *t[2][x[0] + 1 :]], t[3])
                ),
            )
        ),
        min_size=1,
        max_size=3,
    ),
    cut=st.integers(1, 40),
)
def test_offset_commit_decoder_reads_usual_commits_as_the_general_codec(
    version: int, tps: list[Any], cut: int
) -> None:
    spec = lookup(8, version)
    assert spec is not None
    frame = spec.encode_request(request(version, "g", 1, "m", None, -1, tps, {}))
    _agree(version, frame, 0)
    with pytest.raises(ValueError):  # a frame cut short is refused, never half-read
        decode_offset_commit(frame[: max(0, len(frame) - cut)], 0, version)


def _agree(version: int, frame: bytes, start: int) -> None:
    spec = lookup(8, version)
    assert spec is not None
    prefix = frame[:start]
    general = spec.decode_request(frame, len(prefix))
    ours = decode_offset_commit(frame, len(prefix), version)
    assert ours["group_id"] == general["group_id"]
    assert ours["member_id"] == general["member_id"]
    assert ours["generation_id_or_member_epoch"] == general["generation_id_or_member_epoch"]
    assert ours["group_instance_id"] == general["group_instance_id"]
    assert ours["retention_time_ms"] == general["retention_time_ms"]
    expected = [
        (
            t["topic_id"].bytes if version >= 10 else t["name"],
            [
                (
                    p["partition_index"],
                    p["committed_offset"],
                    p["committed_leader_epoch"],
                    p["committed_metadata"],
                )
                for p in t["partitions"]
            ],
        )
        for t in general["topics"]
    ]
    assert ours["topics"] == expected


@given(
    version=st.integers(0, 10),
    answered=st.lists(
        st.tuples(names, st.uuids(), st.lists(st.tuples(int32, st.integers(-1, 120)), max_size=4)),
        max_size=3,
    ),
    id_bytes=st.booleans(),
    renamed=st.integers(0, 3),
)
def test_offset_commit_response_encoder_matches_the_general_codec(
    version: int,
    answered: list[tuple[str, uuid.UUID, list[tuple[int, int]]]],
    id_bytes: bool,
    renamed: int,
) -> None:
    """Keys are names, then from v10 topic ids (UUIDs or their 16 bytes); the first
    ``renamed`` topics may be named by ``ids`` instead, the others passed as ``extra``."""
    spec = lookup(8, version)
    assert spec is not None
    v10 = version >= 10
    keyed: list[Any] = [
        ((tid.bytes if id_bytes else tid) if v10 else name, ps) for name, tid, ps in answered
    ]
    fields = {
        "topics": [
            {
                "name": name,
                "topic_id": tid,
                "partitions": [{"partition_index": p, "error_code": c} for p, c in ps],
            }
            for name, tid, ps in answered
        ]
    }
    assert encode_offset_commit_response(version, keyed) == spec.encode_response(fields)
    if v10:
        head, rest = keyed[:renamed], keyed[renamed:]
        ids = [key for key, _ps in head]
        placeholders = [("someone-else", ps) for _key, ps in head]
        encoded = encode_offset_commit_response(version, placeholders, ids, rest)
        assert encoded == spec.encode_response(fields)


@pytest.mark.parametrize(
    ("version", "body"),
    [
        (2, b""),
        (2, b"\xff\xff"),  # null group id
        (
            2,
            b"\x00\x01g\x00\x00\x00\x01\x00\x01m" + b"\x00" * 8 + b"\xff\xff\xff\xff",
        ),  # null topics
        (8, b"\x02g\x00\x00\x00\x01\x02m\x00\x00\x00"),  # null compact topics
        (8, b"\x02g\x00\x00\x00\x01\x02m\x00\x01"),  # no tagged-field buffer
        (10, b"\x02g\x00\x00\x00\x01\x02m\x00\x02" + b"\x01" * 10),  # topic id cut short
    ],
)
def test_offset_commit_decoder_rejects_malformed_bodies(version: int, body: bytes) -> None:
    with pytest.raises(ValueError):
        decode_offset_commit(body, 0, version)
