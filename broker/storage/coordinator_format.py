"""Snapshot payloads of file format version 2, beside the binary records of ``records``.

A snapshot is a file of kind ``KIND_SNAPSHOT`` whose entries are, in order:

1. the header: ``uint8 version (2) | uint8 type | int64 next_log_seq``: the first record
   log the snapshot does not cover; type 18 counts the broker's shared coordinator logs
   (``log-SEQ.log``), type 16 (written before them) the shard's own (``shard-NN-SEQ.log``);
2. one group metadata record (``encode_record``, type 3) per group with one;
3. offset blocks, one or more per (group, topic): every committed offset of some of that
   topic's partitions, packed column by column so that loading one is a few C-level calls
   plus one ``OffsetAndMetadata`` per partition, straight into the shard's dictionaries.

Offset block (type 17), big-endian: ``uint8 version | uint8 type | uint8 flags |
uint32 len(group) | uint32 len(topic) | uint32 n``, the group and topic (UTF-8), then the
columns ``int32 partition[n] | int64 offset[n] | int32 leader_epoch[n] |
int64 commit_timestamp_ms[n]``; if ``flags & 1`` (some expire timestamp set)
``uint8 has_expire[n] | int64 expire_timestamp_ms[n]``; if ``flags & 2`` (some metadata not
empty) ``uint32 metadata_len[n] | metadata bytes`` (UTF-8, back to back). A block holds at
most ``BLOCK_PARTITIONS`` partitions, so an entry stays well under ``MAX_ENTRY``.
"""

from __future__ import annotations

import struct
import sys
from array import array
from collections.abc import Iterator, Mapping
from itertools import accumulate, pairwise, repeat
from operator import attrgetter

from kgroupd.broker.coordinator.core import OffsetAndMetadata
from kgroupd.broker.coordinator.records import RECORD_FORMAT_VERSION, RecordFormatError

TYPE_SNAPSHOT_HEADER = 16
TYPE_OFFSET_BLOCK = 17
TYPE_SNAPSHOT_HEADER_SHARED = 18
BLOCK_PARTITIONS = 8192

_HEADER = struct.Struct(">BBq")
_BLOCK = struct.Struct(">BBBIII")
_EXPIRE, _METADATA = 1, 2
_SWAP = sys.byteorder == "little"  # columns are big-endian on disk

for _code, _size in (("i", 4), ("q", 8), ("I", 4), ("B", 1)):
    assert array(_code).itemsize == _size, f"array {_code!r} is not {_size} bytes here"

_offset = attrgetter("offset")
_epoch = attrgetter("leader_epoch")
_commit = attrgetter("commit_timestamp_ms")
_expire = attrgetter("expire_timestamp_ms")
_metadata = attrgetter("metadata")


def encode_header(next_log_seq: int) -> bytes:
    """A snapshot header: the snapshot covers the broker's shared coordinator logs below
    ``next_log_seq`` (type 18)."""
    return _HEADER.pack(RECORD_FORMAT_VERSION, TYPE_SNAPSHOT_HEADER_SHARED, next_log_seq)


def decode_header(payload: bytes) -> tuple[int, bool]:
    """``(next_log_seq, shared)`` of a snapshot header entry: ``shared`` for the shared log's
    sequence (type 18), else the shard's own logs' (type 16, written before the shared log);
    raises ``RecordFormatError``."""
    if len(payload) != _HEADER.size or payload[1] not in (
        TYPE_SNAPSHOT_HEADER,
        TYPE_SNAPSHOT_HEADER_SHARED,
    ):
        raise RecordFormatError("not a snapshot header")
    version, kind, next_log_seq = _HEADER.unpack(payload)
    if version != RECORD_FORMAT_VERSION:
        raise RecordFormatError(f"snapshot header of version {version}")
    seq: int = next_log_seq
    return seq, kind == TYPE_SNAPSHOT_HEADER_SHARED


def _column(code: str, values: object) -> bytes:
    col = array(code, values)  # type: ignore[call-overload]
    if _SWAP:
        col.byteswap()
    return col.tobytes()


def encode_offset_blocks(
    group_id: str, topic: str, offsets: Mapping[int, OffsetAndMetadata]
) -> Iterator[bytes]:
    """The offset blocks (entry payloads) holding ``offsets`` of one (group, topic)."""
    g = group_id.encode()
    t = topic.encode()
    items = list(offsets.items())
    for start in range(0, len(items), BLOCK_PARTITIONS):
        chunk = items[start : start + BLOCK_PARTITIONS]
        partitions = [p for p, _ in chunk]
        values = [o for _, o in chunk]
        expires = list(map(_expire, values))
        metadata = list(map(_metadata, values))
        flags = 0
        tail: list[bytes] = []
        if any(e is not None for e in expires):
            flags |= _EXPIRE
            tail.append(bytes(e is not None for e in expires))
            tail.append(_column("q", (0 if e is None else e for e in expires)))
        if any(metadata):
            flags |= _METADATA
            encoded = [m.encode() for m in metadata]
            tail.append(_column("I", map(len, encoded)))
            tail.append(b"".join(encoded))
        yield b"".join(
            (
                _BLOCK.pack(
                    RECORD_FORMAT_VERSION, TYPE_OFFSET_BLOCK, flags, len(g), len(t), len(chunk)
                ),
                g,
                t,
                _column("i", partitions),
                _column("q", map(_offset, values)),
                _column("i", map(_epoch, values)),
                _column("q", map(_commit, values)),
                *tail,
            )
        )


class _Columns:
    __slots__ = ("payload", "pos")

    def __init__(self, payload: bytes, pos: int) -> None:
        self.payload = payload
        self.pos = pos

    def take(self, code: str, n: int) -> list[int]:
        col = array(code)
        end = self.pos + n * col.itemsize
        if end > len(self.payload):
            raise RecordFormatError("offset block cut short")
        col.frombytes(self.payload[self.pos : end])
        if _SWAP:
            col.byteswap()
        self.pos = end
        return col.tolist()


def decode_offset_block(payload: bytes) -> tuple[str, str, dict[int, OffsetAndMetadata]]:
    """``(group, topic, {partition: OffsetAndMetadata})`` of one offset block; raises
    ``RecordFormatError`` if it is not a well-formed one."""
    try:
        version, kind, flags, lg, lt, n = _BLOCK.unpack_from(payload, 0)
        if kind != TYPE_OFFSET_BLOCK or version != RECORD_FORMAT_VERSION:
            raise RecordFormatError("not an offset block")
        pos = _BLOCK.size
        group_id = payload[pos : pos + lg].decode()
        topic = payload[pos + lg : pos + lg + lt].decode()
        cols = _Columns(payload, pos + lg + lt)
        partitions = cols.take("i", n)
        offsets = cols.take("q", n)
        epochs = cols.take("i", n)
        commits = cols.take("q", n)
        expires: list[int | None]
        if flags & _EXPIRE:
            present = cols.take("B", n)
            values = cols.take("q", n)
            expires = [v if has else None for has, v in zip(present, values, strict=True)]
        else:
            expires = [None] * n
        metadata: list[str]
        if flags & _METADATA:
            lengths = cols.take("I", n)
            ends = list(accumulate(lengths, initial=0))
            blob = payload[cols.pos : cols.pos + ends[-1]]
            if len(blob) != ends[-1]:
                raise RecordFormatError("offset block cut short")
            cols.pos += ends[-1]
            if blob.isascii():  # byte offsets are character offsets
                text = blob.decode("ascii")
                metadata = [text[a:b] for a, b in pairwise(ends)]
            else:
                metadata = [blob[a:b].decode() for a, b in pairwise(ends)]
        else:
            metadata = [""] * n
        if cols.pos != len(payload):
            raise RecordFormatError(f"{len(payload) - cols.pos} bytes after the offset block")
    except (struct.error, UnicodeDecodeError) as exc:
        raise RecordFormatError(f"malformed offset block: {exc}") from None
    return (
        group_id,
        topic,
        dict(
            zip(
                partitions,
                # OffsetAndMetadata is a named tuple: built by tuple.__new__ straight from
                # the columns, with no Python-level call per offset.
                map(
                    tuple.__new__,
                    repeat(OffsetAndMetadata),
                    zip(offsets, epochs, metadata, commits, expires, strict=True),
                ),
                strict=True,
            )
        ),
    )
