"""Hand-written codecs for the hottest requests, checked against the struct codec in tests.

The struct codec walks a schema field by field; these read the few fields of a Heartbeat
directly. Any malformation raises ``ValueError``, like the struct codec's errors.
"""

from __future__ import annotations

import struct

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I16_I32 = struct.Struct(">ih")  # throttle_time_ms, error_code


def read_string(data: bytes, pos: int) -> tuple[str | None, int]:
    """A non-compact (int16-length) nullable string."""
    if pos + 2 > len(data):
        raise ValueError("string length runs past the end of the request")
    (n,) = _I16.unpack_from(data, pos)
    pos += 2
    if n < 0:
        return None, pos
    end = pos + n
    if end > len(data):
        raise ValueError("string runs past the end of the request")
    return data[pos:end].decode("utf-8"), end


def read_int32(data: bytes, pos: int) -> tuple[int, int]:
    if pos + 4 > len(data):
        raise ValueError("int32 runs past the end of the request")
    return _I32.unpack_from(data, pos)[0], pos + 4


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


_ERROR_ONLY = [_I16.pack(code) for code in range(128)]


def encode_error_only(error_code: int, version: int, throttle_from: int = 1) -> bytes:
    """A body of (throttle_time_ms from ``throttle_from``,) error_code: Heartbeat's shape."""
    if version >= throttle_from:
        return _I16_I32.pack(0, error_code)
    return _ERROR_ONLY[error_code] if 0 <= error_code < 128 else _I16.pack(error_code)


class Chunks(list[bytes]):
    """A response body as buffers written one after the other (``transport.writelines``),
    so large record batches are never copied into one object."""


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
