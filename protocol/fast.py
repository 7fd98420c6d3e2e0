"""Hand-written codecs for the hottest requests, checked against the struct codec in tests.

The struct codec walks a schema field by field; these read and write the fields of the
requests clients send most (Heartbeat, OffsetCommit) and the Fetch response directly. Any
malformation raises ``ValueError``, like the struct codec's errors.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable

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


# --- OffsetCommit v0-v7 -------------------------------------------------------------------
_I64 = struct.Struct(">q")
_COMMIT_PART = {  # per partition, up to the metadata string's length
    0: struct.Struct(">iqh"),  # partition, offset, metadata length
    1: struct.Struct(">iqqh"),  # partition, offset, commit timestamp (ignored), ...
    6: struct.Struct(">iqih"),  # partition, offset, committed leader epoch, ...
}

# (partition, offset, leader epoch, metadata)
CommitPartition = tuple[int, int, int, str | None]


def _commit_part_struct(version: int) -> struct.Struct:
    if version >= 6:
        return _COMMIT_PART[6]
    return _COMMIT_PART[1] if version == 1 else _COMMIT_PART[0]


def decode_offset_commit(frame: bytes, pos: int, version: int) -> dict[str, object]:
    """OffsetCommit v0-v7, straight into the handler's shape.

    Keys as the struct codec names them (``consumer_group``, ``consumer_group_generation_id``,
    ``consumer_id``, ``retention_time``, ``group_instance_id``); ``topics`` is a list of
    ``(topic, [(partition, offset, leader_epoch, metadata), ...])`` with leader epoch -1 before
    v6. A null array reads as empty.
    """
    n = len(frame)
    group, pos = read_string(frame, pos)
    fields: dict[str, object] = {"consumer_group": group}
    if version >= 1:
        fields["consumer_group_generation_id"], pos = read_int32(frame, pos)
        fields["consumer_id"], pos = read_string(frame, pos)
    if 2 <= version <= 4:
        if pos + 8 > n:
            raise ValueError("retention_time runs past the end of the request")
        fields["retention_time"] = _I64.unpack_from(frame, pos)[0]
        pos += 8
    if version >= 7:
        fields["group_instance_id"], pos = read_string(frame, pos)
    part = _commit_part_struct(version)
    unpack = part.unpack_from
    head = part.size
    v6 = version >= 6
    ntopics, pos = read_int32(frame, pos)
    topics: list[tuple[str, list[CommitPartition]]] = []
    for _ in range(max(ntopics, 0)):
        name, pos = read_string(frame, pos)
        if name is None:
            raise ValueError("null topic name")
        nparts, pos = read_int32(frame, pos)
        parts: list[CommitPartition] = []
        for _ in range(max(nparts, 0)):
            if pos + head > n:
                raise ValueError("partition runs past the end of the request")
            values = unpack(frame, pos)
            pos += head
            mlen = values[-1]
            if mlen == 0:
                metadata: str | None = ""
            elif mlen < 0:
                metadata = None
            else:
                end = pos + mlen
                if end > n:
                    raise ValueError("string runs past the end of the request")
                metadata = frame[pos:end].decode("utf-8")
                pos = end
            parts.append((values[0], values[1], values[2] if v6 else -1, metadata))
        topics.append((name, parts))
    if pos != n:
        raise ValueError(f"{n - pos} unread bytes after the request body")
    fields["topics"] = topics
    return fields


_PART_ERROR = struct.Struct(">ih")


def encode_offset_commit_response(
    version: int, topics: Iterable[tuple[str, Iterable[tuple[int, int]]]]
) -> bytes:
    """OffsetCommit response v0-v7: (throttle_time_ms from v3,) [topic [partition, error]]."""
    out = [_I32.pack(0)] if version >= 3 else []
    count = 0
    count_at = len(out)
    out.append(b"")
    pack = _PART_ERROR.pack
    for name, parts in topics:
        count += 1
        raw = name.encode()
        packed = [pack(p, code) for p, code in parts]
        out.append(_I16.pack(len(raw)) + raw + _I32.pack(len(packed)))
        out.extend(packed)
    out[count_at] = _I32.pack(count)
    return b"".join(out)
