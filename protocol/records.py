"""Magic-2 record batches as bytes: header parsing, CRC-32C, base offset and timestamp rewrites.

Batches stay bytes end to end; only the fields outside the records are read or rewritten.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from kgroupd.protocol.crc import crc32c
from kgroupd.protocol.record_bulk import verified_prefix

# A batch or record set: bytes, or a view of a request's frame (``types.VIEW_FROM``)
Buffer = bytes | bytearray | memoryview

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


class InvalidRecords(InvalidBatch):
    """The batch's records are not what its header says, or not well formed (Kafka's
    InvalidRecordException: INVALID_RECORD)."""


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


def parse_header(data: Buffer, pos: int = 0) -> BatchHeader:
    if len(data) - pos < HEADER_SIZE:
        raise InvalidBatch(f"batch of {len(data) - pos} bytes is shorter than its header")
    f = _HEADER.unpack_from(data, pos)
    return BatchHeader(f[0], f[1] + 12, *f[2:])


def split_batches(data: Buffer, most: int | None = None) -> list[tuple[int, BatchHeader]]:
    """(position, header) of every batch in a record set, validating sizes and magic (the
    counts and records are ``check_records``'s); of the first ``most`` only, if given."""
    out: list[tuple[int, BatchHeader]] = []
    pos = 0
    end = len(data)
    while pos < end and len(out) != most:
        header = parse_header(data, pos)
        if header.magic != 2:
            raise InvalidBatch(f"record batch magic {header.magic} is not supported (need 2)")
        if header.length < HEADER_SIZE or pos + header.length > end:
            raise InvalidBatch("record batch length does not match the record set")
        out.append((pos, header))
        pos += header.length
    return out


def check_crc(data: Buffer, pos: int, header: BatchHeader) -> None:
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


def _varint(data: Buffer, pos: int, most: int = 5) -> tuple[int, int]:
    """The zigzag varint at ``pos`` as Kafka's ByteUtils reads it: at most 5 bytes (a varlong:
    10), and refused where Java would drop bits of it (a value past 32 / 64 bits)."""
    value = shift = 0
    for at in range(pos, pos + most):
        b = data[at]
        value |= (b & 0x7F) << shift
        if b < 0x80:
            if value >> (32 if most == 5 else 64):
                raise InvalidRecords(f"varint at {pos} is out of range")
            return (value >> 1) ^ -(value & 1), at + 1
        shift += 7
    raise InvalidRecords(f"varint at {pos} is longer than {most} bytes")


def _raw_varint(data: Buffer, pos: int) -> tuple[int, int]:
    """``_varint`` still zigzag-encoded (a negative value is odd): the walk's slow path."""
    value, pos = _varint(data, pos)
    return (value << 1 if value >= 0 else (-value << 1) - 1), pos


def check_records(
    data: Buffer, pos: int, end: int, count: int, keyless: list[int] | None = None
) -> None:
    """The ``count`` records of a batch (uncompressed: ``data[pos:end]``, its body after the
    header, or a compressed batch's body decompressed) are well formed, as Kafka's
    DefaultRecord.readFrom reads them: each record's fields fill exactly the length it
    declares, the records fill exactly the body, and record i has offset delta i. Raises
    ``InvalidRecords``. ``keyless`` collects the indexes of the records without a key.

    Nothing is built: the produce path runs this on every batch, so the varints are read
    inline, one or two bytes (nearly all of them) without a call; each is kept in its zigzag
    form (``b >> 1`` a length when ``b`` is even, odd for a null).
    """
    # runs of records alike checked in bulk first (``record_bulk``), the rest walked here
    first, pos = verified_prefix(data, pos, end, count, keyless)
    expect = first << 1  # the next record's offset delta, zigzag-encoded
    try:
        for index in range(first, count):
            b = data[pos]  # the record's length
            if b < 0x80:
                pos += 1
            elif data[pos + 1] < 0x80:
                b = (b & 0x7F) | (data[pos + 1] << 7)
                pos += 2
            else:
                b, pos = _raw_varint(data, pos)
            stop = pos + (b >> 1)
            # then its attributes: unused, 0 from every producer (aiokafka's consumer reads a
            # byte with the high bit set as the start of a varint)
            if b & 1 or not b or stop > end or data[pos] >= 0x80:
                raise _bad_start(data, pos, end, b, index)
            # the timestamp delta (a varlong, its value unused)
            at = pos + 2 if data[pos + 1] < 0x80 else _varint(data, pos + 1, 10)[1]
            b = data[at]  # the offset delta
            if b < 0x80:
                at += 1
            elif data[at + 1] < 0x80:
                b = (b & 0x7F) | (data[at + 1] << 7)
                at += 2
            else:
                b, at = _raw_varint(data, at)
            if b != expect:
                raise InvalidRecords(
                    f"Record {index} has offset delta {_unzig(b)}: the offset deltas of a "
                    "batch must be 0, 1, 2, ..."
                )
            expect += 2
            b = data[at]  # the key's length (-1: null)
            if b < 0x80:
                at += 1
            elif data[at + 1] < 0x80:
                b = (b & 0x7F) | (data[at + 1] << 7)
                at += 2
            else:
                b, at = _raw_varint(data, at)
            if not b & 1:
                at += b >> 1
            elif keyless is not None:
                keyless.append(index)
            b = data[at]  # the value's length (-1: null)
            if b < 0x80:
                at += 1
            elif data[at + 1] < 0x80:
                b = (b & 0x7F) | (data[at + 1] << 7)
                at += 2
            else:
                b, at = _raw_varint(data, at)
            if not b & 1:
                at += b >> 1
            # the headers: most records have none (a count of 0, the record's last byte)
            if at + 1 != stop or data[at]:
                at = _headers(data, at, stop)
                if at != stop:
                    raise InvalidRecords(
                        f"Invalid record size: expected to read {stop - pos} bytes in record "
                        f"payload, but instead read {at - pos}"
                    )
            pos = stop
    except IndexError:
        raise InvalidRecords("Incorrect declared batch size, premature EOF reached") from None
    if pos != end:
        raise InvalidRecords("Incorrect declared batch size, records still remaining in file")


def _bad_start(data: Buffer, pos: int, end: int, b: int, index: int) -> InvalidRecords:
    """Why a record's length (zigzag ``b``, its body from ``pos``) or attributes are refused."""
    if b & 1 or not b or pos + (b >> 1) > end:
        return InvalidRecords(
            f"Invalid record size: record {index} claims {_unzig(b)} bytes, the batch has "
            f"{end - pos} left"
        )
    return InvalidRecords(
        f"Record {index} has attributes {data[pos]:#04x}: aiokafka's consumer reads a byte "
        "with the high bit set as the start of a varint"
    )


def _unzig(b: int) -> int:
    return (b >> 1) ^ -(b & 1)


def _headers(data: Buffer, at: int, stop: int) -> int:
    """Past a record's headers (a count, then each key, never null, UTF-8, and value)."""
    count, at = _varint(data, at)
    if count < 0:
        raise InvalidRecords(f"Found invalid number of record headers {count}")
    for _ in range(count):
        size, at = _varint(data, at)
        if size < 0:
            raise InvalidRecords(f"Invalid negative header key size {size}")
        try:  # a String: Python's consumers decode it
            str(data[at : at + size], "utf-8")
        except UnicodeDecodeError:
            raise InvalidRecords("a record header's key is not UTF-8") from None
        size, at = _varint(data, at + size)
        if size > 0:
            at += size
        if at > stop:
            break  # the caller's size check says so
    return at
