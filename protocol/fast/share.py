"""ShareFetch: the hand-written response encoder (v1-v2, flexible), the record batches written
as stored (one buffer each, never joined), checked against the general codec in tests.

Every partition's error messages are null, its current leader is given, the node endpoints
are empty (the leader is the broker answering), and every tagged-field section is empty.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Sequence

from kgroupd.protocol.fast.common import Chunks

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
) -> Chunks:
    """ShareFetch response v1-v2 (both have the same fields)."""
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
            out.append(
                _PART.pack(index, error, 0, ack_error, 0, leader_id, leader_epoch, 0)
                + _uvarint(size + 1)
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
