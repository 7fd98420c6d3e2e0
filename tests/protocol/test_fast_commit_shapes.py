"""OffsetCommit shapes (``protocol/fast/commit.py``): a request matched against a shape learned
from an earlier commit reads exactly what the decoder (itself checked against the general
codec) reads, or does not match."""

from __future__ import annotations

from itertools import repeat
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from kgroupd.protocol.fast import decode_offset_commit
from kgroupd.protocol.fast.commit import learn_offset_commit, match_offset_commit
from kgroupd.protocol.messages import lookup

from .test_fast_commit import int32, int64, names, request, tags

uniform = st.sampled_from(["", None]).flatmap(
    lambda m: st.lists(st.tuples(int32, int64, int32, st.just(m), int64, st.just({})), min_size=1)
)
# a later request: the same partitions with other offsets, epochs and timestamps, or others
other_parts = st.lists(
    st.tuples(st.integers(-1, 3), int64, int32, st.sampled_from(["", None, "m"]), int64, tags),
    min_size=1,
    max_size=5,
)


def _read(fields: dict[str, Any]) -> tuple[dict[str, Any], Any]:
    return {k: v for k, v in fields.items() if k != "topics"}, fields["topics"]


@given(
    version=st.integers(0, 10),
    group=names,
    gen=int32,
    member=names,
    instance=st.none() | names,
    retention=int64,
    name=names,
    parts=uniform,
    again=st.lists(st.tuples(int64, int32, int64), min_size=1),
    other=other_parts,
    other_name=names,
    top_tags=tags,
    trailing=st.binary(max_size=3),
    use_other=st.integers(0, 3),
)
def test_a_shape_reads_later_commits_as_the_decoder(
    version: int,
    group: str,
    gen: int,
    member: str,
    instance: str | None,
    retention: int,
    name: str,
    parts: list[Any],
    again: list[Any],
    other: list[Any],
    other_name: str,
    top_tags: dict[int, bytes],
    trailing: bytes,
    use_other: int,
) -> None:
    spec = lookup(8, version)
    assert spec is not None

    def frame(topic: str, plist: list[Any], body_tags: dict[int, bytes], tail: bytes) -> bytes:
        tps = [(topic, None, plist, {})]
        fields = request(version, group, gen, member, instance, retention, tps, body_tags)
        return spec.encode_request(fields) + tail

    first = frame(name, parts, {}, b"")
    shape = learn_offset_commit(first, 0, version, decode_offset_commit(first, 0, version))
    if version < 10:  # a usual commit by name: learned
        assert shape is not None
    if shape is None:
        return
    # the same partitions again, other offsets, epochs and commit timestamps
    later = [
        (p[0], o, e, p[3], ts, {}) for p, (o, e, ts) in zip(parts, again * len(parts), strict=False)
    ]
    if use_other == 1:
        later = other
    candidates = [
        frame(name, later, {}, b""),
        frame(name if use_other != 2 else other_name, later, top_tags, trailing),
    ]
    for data in candidates:
        got = match_offset_commit(data, 0, version)
        want = decode_offset_commit(data, 0, version)
        if got is None:
            continue
        found, offsets, epochs = got
        assert _read(want)[0] == found.fields
        read = zip(found.indexes, offsets, epochs, repeat(found.metadata))
        assert want["topics"] == [(found.name, list(read))]
    # the same partitions, other offsets: matched
    if use_other == 0:
        assert match_offset_commit(candidates[0], 0, version) is not None
