"""The hand-written ConsumerGroupHeartbeat decoder (v0-v1) agrees with the general codec."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kgroupd.protocol.codec import UNKNOWN_TAGS
from kgroupd.protocol.fast.consumer import (
    decode_consumer_group_heartbeat,
    encode_consumer_group_heartbeat_response,
)
from kgroupd.protocol.messages import lookup

names = st.text(max_size=20)
maybe = st.none() | names
tags = st.dictionaries(st.integers(0, 300), st.binary(max_size=4), max_size=2)
owned = st.none() | st.lists(
    st.fixed_dictionaries(
        {
            "topic_id": st.uuids(),
            "partitions": st.lists(st.integers(-(2**31), 2**31 - 1), max_size=5),
        }
    ),
    max_size=3,
)


@given(
    version=st.integers(0, 1),
    group=names,
    member=names,
    epoch=st.integers(-(2**31), 2**31 - 1),
    instance=maybe,
    rack=maybe,
    rebalance=st.integers(-(2**31), 2**31 - 1),
    topics=st.none() | st.lists(names, max_size=4),
    regex=maybe,
    assignor=maybe,
    owned=owned,
    unknown=tags,
    prefix=st.binary(max_size=6),
)
def test_decoder_matches_the_general_codec(
    version: int,
    group: str,
    member: str,
    epoch: int,
    instance: str | None,
    rack: str | None,
    rebalance: int,
    topics: list[str] | None,
    regex: str | None,
    assignor: str | None,
    owned: list[dict[str, object]] | None,
    unknown: dict[int, bytes],
    prefix: bytes,
) -> None:
    spec = lookup(68, version)
    assert spec is not None
    fields = {
        "group_id": group,
        "member_id": member,
        "member_epoch": epoch,
        "instance_id": instance,
        "rack_id": rack,
        "rebalance_timeout_ms": rebalance,
        "subscribed_topic_names": topics,
        "subscribed_topic_regex": regex,
        "server_assignor": assignor,
        "topic_partitions": owned,
        UNKNOWN_TAGS: unknown,
    }
    frame = prefix + spec.encode_request(fields)
    general = spec.decode_request(frame, len(prefix))
    general.pop(UNKNOWN_TAGS, None)
    assert decode_consumer_group_heartbeat(frame, len(prefix), version) == general


@pytest.mark.parametrize(
    "body",
    [b"", b"\x00", b"\x02g\x00", b"\x02g\x02m\x00\x00\x00\x01\x00\x00\x00\x00\x00\x00\x00\x00\x00"],
)
def test_decoder_rejects_malformed_bodies(body: bytes) -> None:
    with pytest.raises(ValueError):
        decode_consumer_group_heartbeat(body, 0, 1)


@given(
    version=st.integers(0, 1),
    code=st.integers(-1, 130),
    message=maybe,
    member=maybe,
    epoch=st.integers(-(2**31), 2**31 - 1),
    interval=st.integers(-(2**31), 2**31 - 1),
)
def test_response_encoder_matches_the_general_codec(
    version: int, code: int, message: str | None, member: str | None, epoch: int, interval: int
) -> None:
    spec = lookup(68, version)
    assert spec is not None
    fields = {
        "error_code": code,
        "error_message": message,
        "member_id": member,
        "member_epoch": epoch,
        "heartbeat_interval_ms": interval,
        "assignment": None,
    }
    ours = encode_consumer_group_heartbeat_response(code, message, member, epoch, interval)
    assert ours == spec.encode_response(fields)
