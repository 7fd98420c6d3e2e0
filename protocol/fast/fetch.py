"""Fetch: the hand-written response encoder (record batches written as stored)."""

from __future__ import annotations

import struct

from protocol.fast.common import _I16, _I32, Chunks

_FETCH_TOP_V4 = struct.Struct(">i")  # throttle_time_ms
_FETCH_TOP_V7 = struct.Struct(">ihi")  # throttle_time_ms, error_code, session_id
_PART_V4 = struct.Struct(">ihqqi")  # index, error, high watermark, last stable, aborted (null)
_PART_V5 = struct.Struct(">ihqqqi")  # ... log start offset, aborted (null)
_PART_V11 = struct.Struct(">ihqqqii")  # ... aborted (null), preferred read replica


# (partition index, error code, high watermark, last stable, log start, record batches)
FetchPartition = tuple[int, int, int, int, int, list[bytes]]


def encode_fetch_response(
    version: int,
    error_code: int,
    session_id: int,
    topics: list[tuple[str, list[FetchPartition]]],
) -> Chunks:
    """Fetch response v4-v11 (non-flexible), records left as the stored batch objects.

    Aborted transactions are always null (no transactions) and the preferred read replica
    (v11) is -1.
    """
    out = Chunks()
    if version >= 7:
        out.append(_FETCH_TOP_V7.pack(0, error_code, session_id))
    else:
        out.append(_FETCH_TOP_V4.pack(0))
    out.append(_I32.pack(len(topics)))
    for name, parts in topics:
        raw = name.encode()
        out.append(_I16.pack(len(raw)) + raw + _I32.pack(len(parts)))
        for index, error, hw, lso, log_start, batches in parts:
            if version >= 11:
                head = _PART_V11.pack(index, error, hw, lso, log_start, -1, -1)
            elif version >= 5:
                head = _PART_V5.pack(index, error, hw, lso, log_start, -1)
            else:
                head = _PART_V4.pack(index, error, hw, lso, -1)
            size = 0
            for b in batches:
                size += len(b)
            out.append(head + _I32.pack(size))
            out.extend(batches)
    return out
