"""Heartbeat: the hand-written request decoder."""

from __future__ import annotations

from protocol.fast.common import read_int32, read_string


def decode_heartbeat(frame: bytes, pos: int, version: int) -> dict[str, object]:
    """Heartbeat v0-v3: group, generation_id, member_id (, group_instance_id from v3)."""
    group, pos = read_string(frame, pos)
    generation, pos = read_int32(frame, pos)
    member, pos = read_string(frame, pos)
    fields: dict[str, object] = {"group": group, "generation_id": generation, "member_id": member}
    if version >= 3:
        fields["group_instance_id"], pos = read_string(frame, pos)
    if pos != len(frame):
        raise ValueError(f"{len(frame) - pos} unread bytes after the request body")
    return fields
