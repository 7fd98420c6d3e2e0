"""The hand-written Heartbeat codec (v0-v4) agrees with the general codec, byte for byte."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kgroupd.protocol.codec import UNKNOWN_TAGS
from kgroupd.protocol.fast import decode_heartbeat, encode_heartbeat_response
from kgroupd.protocol.messages import lookup

names = st.text(max_size=40)
int32 = st.integers(-(2**31), 2**31 - 1)
tags = st.dictionaries(st.integers(0, 300), st.binary(max_size=5), max_size=3)


@given(
    version=st.integers(0, 4),
    group=names,
    generation=int32,
    member=names,
    instance=st.none() | names,
    unknown=tags,
    prefix=st.binary(max_size=8),
)
def test_heartbeat_decoder_matches_the_general_codec(
    version: int,
    group: str,
    generation: int,
    member: str,
    instance: str | None,
    unknown: dict[int, bytes],
    prefix: bytes,
) -> None:
    spec = lookup(12, version)
    assert spec is not None
    fields = {
        "group_id": group,
        "generation_id": generation,
        "member_id": member,
        "group_instance_id": instance if version >= 3 else None,
        UNKNOWN_TAGS: unknown,  # written only in the flexible version
    }
    frame = prefix + spec.encode_request(fields)  # the decoder starts at the body offset
    general = spec.decode_request(frame, len(prefix))
    general.pop(UNKNOWN_TAGS, None)
    assert decode_heartbeat(frame, len(prefix), version) == general
    assert general["group_id"] == group and general["member_id"] == member


@pytest.mark.parametrize("version", [0, 1, 2, 3, 4])
@pytest.mark.parametrize("code", [0, 22, 25, 27, 82, 16, -1])
def test_heartbeat_response_encoder_matches_the_general_codec(version: int, code: int) -> None:
    spec = lookup(12, version)
    assert spec is not None
    assert encode_heartbeat_response(code, version) == spec.encode_response({"error_code": code})


def test_bytes_after_the_body_are_ignored_like_the_general_codec_and_kafka() -> None:
    body = b"\x00\x01g\x00\x00\x00\x01\x00\x01m"
    spec = lookup(12, 1)
    assert spec is not None
    for frame in (body, body + b"!", body + b"\x00\x00\x00"):
        ours = decode_heartbeat(frame, 0, 1)
        assert ours["group_id"] == "g" and ours["member_id"] == "m"
        assert spec.decode_request(frame, 0)["member_id"] == "m"


@pytest.mark.parametrize(
    ("version", "body"),
    [
        (1, b""),
        (1, b"\x00\x05ab"),
        (1, b"\x00\x01g\x00\x00"),
        (1, b"\xff\xff\x00\x00\x00\x01\x00\x01m"),  # null group id
        (3, b"\x00\x01g\x00\x00\x00\x01\xff\xff\xff\xff"),  # null member id
        (4, b"\x02g\x00\x00\x00\x01\x02m\x00"),  # no tagged-field buffer
        (4, b"\x00\x00\x00\x00\x01\x02m\x00\x00"),  # null compact group id
        (4, b"\x02g\x00\x00\x00\x01\x02m\x00\x02\x05\x00\x01\x00"),  # tags out of order
        (4, b"\x02g\x00\x00\x00\x01\x02m\x00\x01\x05\x09\x00"),  # a tag past the end
    ],
)
def test_heartbeat_decoder_rejects_malformed_bodies(version: int, body: bytes) -> None:
    with pytest.raises(ValueError):
        decode_heartbeat(body, 0, version)
