"""Heartbeat: the hand-written request decoder (v0-v4) and response encoder."""

from __future__ import annotations

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
    return {
        "group_id": group,
        "generation_id": generation,
        "member_id": member,
        "group_instance_id": instance,
    }


def encode_heartbeat_response(error_code: int, version: int) -> bytes:
    return encode_error_only(error_code, version, 1, FLEXIBLE_FROM)
