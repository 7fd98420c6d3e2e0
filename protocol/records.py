"""Magic-2 record batches as bytes: header parsing, CRC-32C, base offset and timestamp rewrites.

Batches stay bytes end to end; only the fields outside the records are read or rewritten.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from kgroupd.protocol.crc import crc32c

HEADER_SIZE = 61
_BASE_OFFSET = struct.Struct(">q")
# baseOffset, batchLength, partitionLeaderEpoch, magic, crc, attributes, lastOffsetDelta,
# baseTimestamp, maxTimestamp, producerId, producerEpoch, baseSequence, recordCount
_HEADER = struct.Struct(">qiibIhiqqqhii")
_ATTRS_TO_MAX_TS = struct.Struct(">hiqq")  # attributes .. maxTimestamp, at offset 21
_CRC = struct.Struct(">I")

TIMESTAMP_TYPE_BIT = 0x08
TRANSACTIONAL_BIT = 0x10
CONTROL_BIT = 0x20
COMPRESSION_MASK = 0x07


class InvalidBatch(Exception):
    """The bytes are not one well-formed magic-2 batch."""


class CorruptBatch(InvalidBatch):
    """The stored CRC-32C does not match the batch."""


@dataclass(slots=True)
class BatchHeader:
    base_offset: int
    length: int  # whole batch including the 12 bytes of offset and length
    leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    record_count: int

    @property
    def last_sequence(self) -> int:
        return self.base_sequence + self.last_offset_delta

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_BIT)


def parse_header(data: bytes | memoryview, pos: int = 0) -> BatchHeader:
    if len(data) - pos < HEADER_SIZE:
        raise InvalidBatch(f"batch of {len(data) - pos} bytes is shorter than its header")
    f = _HEADER.unpack_from(data, pos)
    return BatchHeader(f[0], f[1] + 12, *f[2:])


def split_batches(data: bytes) -> list[tuple[int, BatchHeader]]:
    """(position, header) of every batch in a record set, validating sizes and magic."""
    out: list[tuple[int, BatchHeader]] = []
    pos = 0
    end = len(data)
    while pos < end:
        header = parse_header(data, pos)
        if header.magic != 2:
            raise InvalidBatch(f"record batch magic {header.magic} is not supported (need 2)")
        if header.length < HEADER_SIZE or pos + header.length > end:
            raise InvalidBatch("record batch length does not match the record set")
        if header.record_count < 0 or header.last_offset_delta < 0:
            raise InvalidBatch("negative record count or offset delta")
        out.append((pos, header))
        pos += header.length
    return out


def check_crc(data: bytes, pos: int, header: BatchHeader) -> None:
    actual = crc32c(memoryview(data)[pos + 21 : pos + header.length])
    if actual != header.crc:
        raise CorruptBatch(f"CRC-32C mismatch: stored {header.crc:#010x}, computed {actual:#010x}")


def with_base_offset(batch: bytes | bytearray, base_offset: int) -> bytearray:
    """The batch with its base offset set (the field lies outside the CRC)."""
    out = bytearray(batch)
    _BASE_OFFSET.pack_into(out, 0, base_offset)
    return out


def stamp_log_append_time(batch: bytearray, now_ms: int) -> None:
    """Mark the batch LogAppendTime with max timestamp ``now_ms`` and recompute its CRC."""
    attributes, last_delta, base_ts, _ = _ATTRS_TO_MAX_TS.unpack_from(batch, 21)
    _ATTRS_TO_MAX_TS.pack_into(
        batch, 21, attributes | TIMESTAMP_TYPE_BIT, last_delta, base_ts, now_ms
    )
    _CRC.pack_into(batch, 17, crc32c(memoryview(batch)[21:]))


def zigzag(value: int) -> bytes:
    """A signed varint (zigzag), as record fields are written."""
    v = (value << 1) ^ (value >> 63)
    out = bytearray()
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)


ABORT_MARKER = 0
COMMIT_MARKER = 1


def control_batch(
    producer_id: int, producer_epoch: int, commit: bool, coordinator_epoch: int, timestamp_ms: int
) -> bytes:
    """A transaction marker: a control batch of one record whose key is (version 0, type
    commit 1 / abort 0) and value an EndTransactionMarker (version 0, coordinator epoch), as
    Kafka's transaction coordinator writes into each partition of a finished transaction.
    Base offset 0: the log sets it."""
    key = struct.pack(">hh", 0, COMMIT_MARKER if commit else ABORT_MARKER)
    value = struct.pack(">hi", 0, coordinator_epoch)
    body = (
        b"\x00"  # record attributes
        + zigzag(0)  # timestamp delta
        + zigzag(0)  # offset delta
        + zigzag(len(key))
        + key
        + zigzag(len(value))
        + value
        + zigzag(0)  # headers
    )
    record = zigzag(len(body)) + body
    batch = bytearray(
        _HEADER.pack(
            0,
            HEADER_SIZE - 12 + len(record),
            0,
            2,
            0,
            TRANSACTIONAL_BIT | CONTROL_BIT,
            0,
            timestamp_ms,
            timestamp_ms,
            producer_id,
            producer_epoch,
            -1,
            1,
        )
    )
    batch += record
    _CRC.pack_into(batch, 17, crc32c(memoryview(batch)[21:]))
    return bytes(batch)


def control_marker(batch: bytes) -> tuple[bool, int]:
    """(commit, coordinator epoch) of a control batch written by ``control_batch``-style
    producers (Kafka's layout); raises ``InvalidBatch`` if it is not one."""
    header = parse_header(batch)
    if not header.attributes & CONTROL_BIT or header.record_count != 1:
        raise InvalidBatch("not a transaction marker")
    pos = HEADER_SIZE
    # skip the record's length, attributes, timestamp delta, offset delta
    pos = _skip_varint(batch, pos)
    pos += 1
    pos = _skip_varint(batch, pos)
    pos = _skip_varint(batch, pos)
    key_len, pos = read_zigzag(batch, pos)
    if key_len != 4:
        raise InvalidBatch("bad control record key")
    _version, kind = struct.unpack_from(">hh", batch, pos)
    pos += key_len
    value_len, pos = read_zigzag(batch, pos)
    epoch = struct.unpack_from(">i", batch, pos + 2)[0] if value_len >= 6 else -1
    return kind == COMMIT_MARKER, epoch


def read_zigzag(data: bytes, pos: int) -> tuple[int, int]:
    shift = value = 0
    while True:
        if pos >= len(data):
            raise InvalidBatch("varint cut short")
        b = data[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            return (value >> 1) ^ -(value & 1), pos
        shift += 7
        if shift > 63:
            raise InvalidBatch("varint too long")


def _skip_varint(data: bytes, pos: int) -> int:
    return read_zigzag(data, pos)[1]


def build_batch(records: list[tuple[int, bytes, bytes | None, int]]) -> bytes:
    """A magic-2 batch (uncompressed, no producer) of ``(offset, key, value or None,
    timestamp ms)`` records in offset order; offsets may have gaps (a compacted log's), the
    base offset is the first record's."""
    base, base_ts = records[0][0], min(r[3] for r in records)
    body = bytearray()
    for offset, key, value, ts in records:
        rec = bytearray(b"\x00")  # record attributes
        rec += zigzag(ts - base_ts)
        rec += zigzag(offset - base)
        rec += zigzag(len(key)) + key
        rec += zigzag(-1) if value is None else zigzag(len(value)) + value
        rec += zigzag(0)  # headers
        body += zigzag(len(rec)) + rec
    batch = bytearray(
        _HEADER.pack(
            base,
            HEADER_SIZE - 12 + len(body),
            0,
            2,
            0,
            0,
            records[-1][0] - base,
            base_ts,
            max(r[3] for r in records),
            -1,
            -1,
            -1,
            len(records),
        )
    )
    batch += body
    _CRC.pack_into(batch, 17, crc32c(memoryview(batch)[21:]))
    return bytes(batch)
