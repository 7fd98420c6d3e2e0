"""Heartbeat: the hand-written request decoder (v0-v4) and response encoder."""

from __future__ import annotations

import struct

from kgroupd.protocol.fast.common import (
    encode_error_only,
    read_compact_string,
    read_int32,
    read_string,
    skip_tagged_fields,
)

FLEXIBLE_FROM = 4


def decode_heartbeat(frame: bytes, pos: int, version: int) -> dict[str, object]:
    """Heartbeat v0-v4: group_id, generation_id, member_id, group_instance_id (v3+, nullable);
    v4 is flexible (compact strings, tagged fields). Nulls where Kafka allows none raise."""
    group, generation, member, instance = read_heartbeat(frame, pos, version)
    return {
        "group_id": group,
        "generation_id": generation,
        "member_id": member,
        "group_instance_id": instance,
    }


def read_heartbeat(frame: bytes, pos: int, version: int) -> tuple[str, int, str, str | None]:
    """``decode_heartbeat``'s fields as a tuple (the hot path's)."""
    read = read_compact_string if version >= FLEXIBLE_FROM else read_string
    group, pos = read(frame, pos)
    generation, pos = read_int32(frame, pos)
    member, pos = read(frame, pos)
    if group is None or member is None:
        raise ValueError("null group id or member id")
    instance = None
    if version >= 3:
        instance, pos = read(frame, pos)
    if version >= FLEXIBLE_FROM:
        if pos < len(frame) and frame[pos] == 0:  # no tagged fields
            pos += 1
        else:
            pos = skip_tagged_fields(frame, pos)
    if pos > len(frame):  # bytes after the body are ignored, as Kafka ignores them
        raise ValueError("the request body runs past the end of the frame")
    return group, generation, member, instance


def encode_heartbeat_response(error_code: int, version: int) -> bytes:
    return encode_error_only(error_code, version, 1, FLEXIBLE_FROM)


_V0 = struct.Struct(">iih")  # size, correlation id, error_code
ANSWER_V1 = struct.Struct(">iiih")  # ..., throttle_time_ms, error_code (v1-v3)
_V4 = struct.Struct(">iibihb")  # size, correlation id, header tags, ..., body tags


def heartbeat_answer(corr: int, error_code: int, version: int) -> bytes:
    """The framed answer (size, response header, body) in one pack, throttle time 0."""
    if version >= FLEXIBLE_FROM:
        return _V4.pack(12, corr, 0, 0, error_code, 0)
    if version >= 1:
        return ANSWER_V1.pack(10, corr, 0, error_code)
    return _V0.pack(6, corr, error_code)
