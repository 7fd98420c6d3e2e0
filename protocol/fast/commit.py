"""OffsetCommit: the hand-written request decoder and response encoder."""

from __future__ import annotations

import struct
from collections.abc import Iterable

from protocol.fast.common import _I16, _I32, _I64, read_int32, read_string

# --- OffsetCommit v0-v7 -------------------------------------------------------------------
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
