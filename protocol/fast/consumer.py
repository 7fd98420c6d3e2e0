"""ConsumerGroupHeartbeat (KIP-848): the hand-written request decoder, v0-v1 (flexible)."""

from __future__ import annotations

import struct
import uuid

from kgroupd.protocol.fast.common import read_compact_string, read_int32, read_uvarint, skip_tags

_I32 = struct.Struct(">i")


def _string(frame: bytes, pos: int, what: str) -> tuple[str, int]:
    value, pos = read_compact_string(frame, pos)
    if value is None:
        raise ValueError(f"null {what}")
    return value, pos


def decode_consumer_group_heartbeat(frame: bytes, pos: int, version: int) -> dict[str, object]:
    """ConsumerGroupHeartbeat v0-v1 into the general codec's dict (names and nulls alike)."""
    n = len(frame)
    group, pos = _string(frame, pos, "group id")
    member, pos = _string(frame, pos, "member id")
    epoch, pos = read_int32(frame, pos)
    instance, pos = read_compact_string(frame, pos)
    rack, pos = read_compact_string(frame, pos)
    rebalance, pos = read_int32(frame, pos)
    count, pos = read_uvarint(frame, pos)
    names: list[str] | None = None
    if count:
        names = []
        for _ in range(count - 1):
            name, pos = _string(frame, pos, "topic name")
            names.append(name)
    regex = None
    if version >= 1:
        regex, pos = read_compact_string(frame, pos)
    assignor, pos = read_compact_string(frame, pos)
    count, pos = read_uvarint(frame, pos)
    owned: list[dict[str, object]] | None = None
    if count:
        owned = []
        for _ in range(count - 1):
            if pos + 16 > n:
                raise ValueError("topic id runs past the end of the request")
            topic_id = uuid.UUID(bytes=frame[pos : pos + 16])
            pos += 16
            nparts, pos = read_uvarint(frame, pos)
            if nparts == 0:
                raise ValueError("null partitions array")
            end = pos + 4 * (nparts - 1)
            if end > n:
                raise ValueError("partitions run past the end of the request")
            parts = list(struct.unpack_from(f">{nparts - 1}i", frame, pos))
            pos = skip_tags(frame, end)
            owned.append({"topic_id": topic_id, "partitions": parts})
    pos = skip_tags(frame, pos)
    if pos > n:  # bytes after the body are ignored, as Kafka ignores them
        raise ValueError("the request body runs past the end of the frame")
    return {
        "group_id": group,
        "member_id": member,
        "member_epoch": epoch,
        "instance_id": instance,
        "rack_id": rack,
        "rebalance_timeout_ms": rebalance,
        "subscribed_topic_names": names,
        "subscribed_topic_regex": regex,
        "server_assignor": assignor,
        "topic_partitions": owned,
    }


_HEAD = struct.Struct(">ih")  # throttle_time_ms, error_code
_TAIL = struct.Struct(">ii")  # member_epoch, heartbeat_interval_ms


def _compact(value: str | None) -> bytes:
    if value is None:
        return b"\x00"
    raw = value.encode()
    n = len(raw) + 1
    if n < 0x80:
        return bytes((n,)) + raw
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out) + raw


def encode_consumer_group_heartbeat_response(
    error_code: int,
    error_message: str | None,
    member_id: str | None,
    member_epoch: int,
    heartbeat_interval_ms: int,
) -> bytes:
    """A ConsumerGroupHeartbeat response (v0-v1 share it) without an assignment (null):
    the answer to almost every heartbeat."""
    return b"".join(
        (
            _HEAD.pack(0, error_code),
            _compact(error_message),
            _compact(member_id),
            _TAIL.pack(member_epoch, heartbeat_interval_ms),
            b"\xff\x00",  # assignment null; no tagged fields
        )
    )


# What follows the member epoch in a steady heartbeat: instance id, rack id null, rebalance
# timeout -1, subscribed topics null, (v1: regex null,) assignor null, owned partitions null,
# no tagged fields.
_STEADY = (
    b"\x00\x00\xff\xff\xff\xff\x00\x00\x00\x00",
    b"\x00\x00\xff\xff\xff\xff\x00\x00\x00\x00\x00",
)


def read_steady_heartbeat(
    frame: bytes, pos: int, version: int
) -> tuple[str, str, bytes, int] | None:
    """A steady ConsumerGroupHeartbeat (every optional field null, no instance id): group id,
    member id, the member id's compact-string bytes (as the answer repeats them) and the
    member epoch; None for any other request (``decode_consumer_group_heartbeat`` reads
    those). Bad UTF-8 raises ``ValueError``."""
    n = len(frame)
    if pos >= n or frame[pos] >= 0x80:
        return None
    end = pos + frame[pos]
    if end > n or end == pos:
        return None
    group = frame[pos + 1 : end].decode("utf-8")
    if end >= n or frame[end] >= 0x80 or frame[end] == 0:
        return None
    member_end = end + frame[end]
    if member_end + 4 > n:
        return None
    member = frame[end:member_end]
    tail = _STEADY[version >= 1]
    if frame[member_end + 4 : member_end + 4 + len(tail)] != tail:
        return None
    return group, member[1:].decode("utf-8"), member, _I32.unpack_from(frame, member_end)[0]


_STEADY_HEAD = struct.Struct(">iibihb")  # size, correlation id, tags, throttle, error, message
_STEADY_TAIL = struct.Struct(">iiH")  # member epoch, interval, assignment null + no tags


def steady_heartbeat_answer(corr: int, member: bytes, epoch: int, interval_ms: int) -> bytes:
    """The framed answer to a steady heartbeat (``member``: its compact-string bytes): error
    NONE, no message, no assignment, throttle time 0."""
    return b"".join(
        (
            _STEADY_HEAD.pack(len(member) + 22, corr, 0, 0, 0, 0),
            member,
            _STEADY_TAIL.pack(epoch, interval_ms, 0xFF00),
        )
    )
