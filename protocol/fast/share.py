"""ShareFetch: the hand-written request decoder and response encoder (v1-v2, flexible), the
record batches written as stored (one buffer each, never joined); both checked against the
general codec in tests.

Every partition's error messages are null, its current leader is given, the node endpoints
are empty (the leader is the broker answering), and every tagged-field section is empty.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Mapping, Sequence

from kgroupd.protocol.fast.common import (
    Chunks,
    read_compact_string,
    read_int32,
    read_uvarint,
    skip_tags,
)

_TOP = struct.Struct(">ih")  # throttle_time_ms, error_code
_I32 = struct.Struct(">i")
# partition_index, error_code, (null message), acknowledge_error_code, (null message),
# current_leader {leader_id, leader_epoch, tagged fields}
_PART = struct.Struct(">ihBhBiiB")
_ACQUIRED = struct.Struct(">qqhB")  # first, last, delivery count, tagged fields

# (partition index, error code, acknowledge error code, record batches, acquired records as
# (first offset, last offset, delivery count))
SharePartition = tuple[int, int, int, Sequence[bytes | memoryview], Sequence[tuple[int, int, int]]]


def _uvarint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _nullable_string(value: str | None) -> bytes:
    if value is None:
        return b"\x00"
    raw = value.encode()
    return _uvarint(len(raw) + 1) + raw


def encode_share_fetch_response(
    error_code: int,
    error_message: str | None,
    lock_timeout_ms: int,
    topics: Sequence[tuple[uuid.UUID, Sequence[SharePartition]]],
    leader_id: int,
    leader_epoch: int,
    throttle_ms: int = 0,
    epochs: Mapping[tuple[uuid.UUID, int], int] | None = None,
) -> Chunks:
    """ShareFetch response v1-v2 (both have the same fields). Every partition's current
    leader is ``leader_id`` with ``leader_epoch``, or its epoch in ``epochs`` if named there."""
    out = Chunks()
    out.append(
        _TOP.pack(throttle_ms, error_code)
        + _nullable_string(error_message)
        + _I32.pack(lock_timeout_ms)
        + _uvarint(len(topics) + 1)
    )
    for topic_id, parts in topics:
        out.append(topic_id.bytes + _uvarint(len(parts) + 1))
        for index, error, ack_error, batches, acquired in parts:
            size = 0
            for b in batches:
                size += len(b)
            epoch = leader_epoch if epochs is None else epochs.get((topic_id, index), leader_epoch)
            out.append(
                _PART.pack(index, error, 0, ack_error, 0, leader_id, epoch, 0) + _uvarint(size + 1)
            )
            out.extend(batches)
            out.append(
                _uvarint(len(acquired) + 1)
                + b"".join(_ACQUIRED.pack(f, last, n, 0) for f, last, n in acquired)
                + b"\x00"  # the partition's tagged fields
            )
        out.append(b"\x00")  # the topic's tagged fields
    out.append(b"\x01\x00")  # no node endpoints; top-level tagged fields
    return out


def _count(frame: bytes, pos: int, what: str) -> tuple[int, int]:
    n, pos = read_uvarint(frame, pos)
    if n == 0:
        raise ValueError(f"null {what}")
    return n - 1, pos


def _uuid(frame: bytes, pos: int) -> tuple[uuid.UUID, int]:
    if pos + 16 > len(frame):
        raise ValueError("topic id runs past the end of the request")
    return uuid.UUID(bytes=bytes(frame[pos : pos + 16])), pos + 16


_BATCH = struct.Struct(">qq")
_FETCH_LIMITS = struct.Struct(">iiiiii")  # epoch, max wait, min bytes, max bytes, records, batch


def decode_share_fetch(frame: bytes, pos: int, version: int) -> dict[str, object]:
    """ShareFetch v1-v2 into the general codec's dict (names, defaults and nulls alike)."""
    n = len(frame)
    group, pos = read_compact_string(frame, pos)
    member, pos = read_compact_string(frame, pos)
    if pos + 24 > n:
        raise ValueError("the request runs past the end of the frame")
    epoch, wait, min_bytes, max_bytes, max_records, batch_size = _FETCH_LIMITS.unpack_from(
        frame, pos
    )
    pos += 24
    mode, renew = 0, False
    if version >= 2:
        if pos + 2 > n:
            raise ValueError("the request runs past the end of the frame")
        mode = struct.unpack_from(">b", frame, pos)[0]
        renew = frame[pos + 1] != 0
        pos += 2
    ntopics, pos = _count(frame, pos, "topics")
    topics = []
    for _ in range(ntopics):
        topic_id, pos = _uuid(frame, pos)
        nparts, pos = _count(frame, pos, "partitions")
        parts = []
        for _ in range(nparts):
            index, pos = read_int32(frame, pos)
            nbatches, pos = _count(frame, pos, "acknowledgement batches")
            batches = []
            for _ in range(nbatches):
                if pos + 16 > n:
                    raise ValueError("a batch runs past the end of the request")
                first, last = _BATCH.unpack_from(frame, pos)
                ntypes, pos = _count(frame, pos + 16, "acknowledge types")
                if pos + ntypes > n:
                    raise ValueError("acknowledge types run past the end of the request")
                types = list(struct.unpack_from(f">{ntypes}b", frame, pos))
                pos = skip_tags(frame, pos + ntypes)
                batches.append(
                    {"first_offset": first, "last_offset": last, "acknowledge_types": types}
                )
            pos = skip_tags(frame, pos)
            parts.append(
                {
                    "partition_index": index,
                    "acknowledgement_batches": batches,
                    "partition_max_bytes": 0,
                }
            )
        pos = skip_tags(frame, pos)
        topics.append({"topic_id": topic_id, "partitions": parts})
    nforgotten, pos = _count(frame, pos, "forgotten topics")
    forgotten = []
    for _ in range(nforgotten):
        topic_id, pos = _uuid(frame, pos)
        nparts, pos = _count(frame, pos, "partitions")
        if pos + 4 * nparts > n:
            raise ValueError("partitions run past the end of the request")
        indexes = list(struct.unpack_from(f">{nparts}i", frame, pos))
        pos = skip_tags(frame, pos + 4 * nparts)
        forgotten.append({"topic_id": topic_id, "partitions": indexes})
    pos = skip_tags(frame, pos)
    if pos > n:  # bytes after the body are ignored, as Kafka ignores them
        raise ValueError("the request body runs past the end of the frame")
    return {
        "group_id": group,
        "member_id": member,
        "share_session_epoch": epoch,
        "max_wait_ms": wait,
        "min_bytes": min_bytes,
        "max_bytes": max_bytes,
        "max_records": max_records,
        "batch_size": batch_size,
        "share_acquire_mode": mode,
        "is_renew_ack": renew,
        "topics": topics,
        "forgotten_topics_data": forgotten,
    }
