"""Fetch: the hand-written response encoder (record batches written as stored)."""

from __future__ import annotations

import struct
import uuid
from collections.abc import Sequence

from kgroupd.protocol.fast.common import _I16, _I32, Chunks

_FETCH_TOP_V4 = struct.Struct(">i")  # throttle_time_ms
_FETCH_TOP_V7 = struct.Struct(">ihi")  # throttle_time_ms, error_code, session_id
_PART_V4 = struct.Struct(">ihqq")  # index, error, high watermark, last stable
_PART_V5 = struct.Struct(">ihqqq")  # ... log start offset
_ABORTED = struct.Struct(">qq")  # producer id, first offset
_NULL_ARRAY = _I32.pack(-1)
_NO_REPLICA = _I32.pack(-1)


# (partition index, error code, high watermark, last stable, log start, record batches,
# aborted transactions: None, or (producer id, first offset) pairs for read_committed)
FetchPartition = tuple[
    int, int, int, int, int, Sequence[bytes | memoryview], list[tuple[int, int]] | None
]


def _aborted(entries: list[tuple[int, int]] | None) -> bytes:
    if entries is None:
        return _NULL_ARRAY
    return _I32.pack(len(entries)) + b"".join(_ABORTED.pack(p, f) for p, f in entries)


def _aborted_flexible(entries: list[tuple[int, int]] | None) -> bytes:
    if entries is None:
        return b"\x00"
    out = _uvarint(len(entries) + 1)
    return out + b"".join(_ABORTED.pack(p, f) + b"\x00" for p, f in entries)


def _uvarint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


_PART_V12 = struct.Struct(">ihqqq")  # index, error, high watermark, last stable, log start
FLEXIBLE_FROM = 12
TOPIC_IDS_FROM = 13


def encode_fetch_response(
    version: int,
    error_code: int,
    session_id: int,
    topics: Sequence[tuple[str | uuid.UUID, list[FetchPartition]]],
    throttle_ms: int = 0,
) -> Chunks:
    """Fetch response v4-v18, records left as the stored batch objects.

    Aborted transactions are null (read_uncommitted) or the list given (read_committed); the
    preferred read replica (v11+) is -1. v12+ is flexible (tagged fields all at their
    defaults); from v13 topics are keyed by topic id (a UUID), before by name.
    """
    if version >= FLEXIBLE_FROM:
        return _encode_flexible(version, error_code, session_id, topics, throttle_ms)
    out = Chunks()
    if version >= 7:
        out.append(_FETCH_TOP_V7.pack(throttle_ms, error_code, session_id))
    else:
        out.append(_FETCH_TOP_V4.pack(throttle_ms))
    out.append(_I32.pack(len(topics)))
    for name, parts in topics:
        assert isinstance(name, str)
        raw = name.encode()
        out.append(_I16.pack(len(raw)) + raw + _I32.pack(len(parts)))
        for index, error, hw, lso, log_start, batches, aborted in parts:
            if version >= 5:
                head = _PART_V5.pack(index, error, hw, lso, log_start) + _aborted(aborted)
            else:
                head = _PART_V4.pack(index, error, hw, lso) + _aborted(aborted)
            if version >= 11:
                head += _NO_REPLICA
            size = 0
            for b in batches:
                size += len(b)
            out.append(head + _I32.pack(size))
            out.extend(batches)
    return out


def _encode_flexible(
    version: int,
    error_code: int,
    session_id: int,
    topics: Sequence[tuple[str | uuid.UUID, list[FetchPartition]]],
    throttle_ms: int = 0,
) -> Chunks:
    out = Chunks()
    top = _FETCH_TOP_V7.pack(throttle_ms, error_code, session_id)
    out.append(top + _uvarint(len(topics) + 1))
    for key, parts in topics:
        if isinstance(key, uuid.UUID):
            head = key.bytes
        else:
            raw = key.encode()
            head = _uvarint(len(raw) + 1) + raw
        out.append(head + _uvarint(len(parts) + 1))
        for index, error, hw, lso, log_start, batches, aborted in parts:
            size = 0
            for b in batches:
                size += len(b)
            out.append(
                _PART_V12.pack(index, error, hw, lso, log_start)
                + _aborted_flexible(aborted)
                + _NO_REPLICA
                + _uvarint(size + 1)
            )
            out.extend(batches)
            out.append(b"\x00")  # the partition's tagged fields
        out.append(b"\x00")  # the topic's tagged fields
    out.append(b"\x00")  # no node endpoints: top-level tagged fields
    return out
