"""Log compaction of magic-2 record batches: what Kafka's cleaner keeps, batch by batch.

A pass has two steps over the same range of batches (the closed part of a partition, from its
log start): ``OffsetMap.add`` maps every key to the offset of its latest record, then
``Cleaning.clean`` rewrites each batch keeping only

* records that are their key's latest (keyless records go, as Kafka's cleaner drops them);
* tombstones (a null value) until their batch's delete horizon has passed;
* nothing of a transaction that was aborted (its records go at once);
* a transaction marker (control batch) while records of its transaction remain before it,
  then until its delete horizon has passed.

As Kafka since KIP-534, the delete horizon is stored in the batch: the first pass that keeps a
tombstone or a marker with nothing left to mark sets the batch attribute ``DELETE_HORIZON_BIT``
and its base timestamp to now + ``delete.retention.ms`` (record timestamp deltas are rewritten
so every record keeps its timestamp); a later pass after that time removes them. A kept
record keeps its offset, its batch its base offset and last offset delta (and producer id,
epoch, base sequence, max timestamp), so offsets have gaps where records went; a batch left
empty goes, unless it is an idempotent producer's last (``Cleaning.retain``): then its header
alone stays, as Kafka's RETAIN_EMPTY keeps the producer's sequence in the log.

A compressed batch is read as Kafka's cleaner reads it (``kgroupd.broker.log.codecs``, at most
``EXPANDED_LIMIT`` bytes decompressed): its records are mapped and compacted as any other's,
and a batch that loses records (or gets a delete horizon) is written again with its own codec,
as MemoryRecords.filterTo does. One that cannot be read (damaged, or larger than the limit)
is kept whole, its records neither compacted nor superseding older ones, and named in
``Expander.failed`` for the cleaner's log line.
"""

from __future__ import annotations

import hashlib
import struct
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from kgroupd.broker.log.codecs import BadCompression, compress, decompress
from kgroupd.protocol.crc import crc32c
from kgroupd.protocol.records import (
    COMPRESSION_MASK,
    CONTROL_BIT,
    HEADER_SIZE,
    TIMESTAMP_TYPE_BIT,
    TRANSACTIONAL_BIT,
    BatchHeader,
    InvalidBatch,
    parse_header,
    read_zigzag,
    zigzag,
)

DELETE_HORIZON_BIT = 0x40  # Kafka's DefaultRecordBatch.DELETE_HORIZON_FLAG_MASK
_HEADER = struct.Struct(">qiibIhiqqqhii")
_KEY_BYTES = 32  # longer keys are mapped by a 16-byte digest (Kafka maps every key by MD5)
ENTRY_BYTES = 150  # a map entry's memory, about: its dict slot, key (<= 32 bytes) and int
EXPANDED_LIMIT = 64 * 1024 * 1024  # the most a compressed batch's records may decompress to

__all__ = [
    "DELETE_HORIZON_BIT",
    "EXPANDED_LIMIT",
    "Cleaning",
    "Expander",
    "OffsetMap",
    "Record",
    "Stopped",
    "Throttle",
    "keyless_record",
    "records",
]


# A record: (attributes, timestamp delta, offset delta, key or None, tombstone, where its key
# length starts, where it ends); a plain tuple, as a pass makes one per record.
Record = tuple[int, int, int, bytes | None, bool, int, int]


def records(data: bytes) -> list[Record]:
    """The records of an uncompressed batch; ``InvalidBatch`` if malformed. One-byte varints
    (most of them) are read inline: this loop is the cleaner's cost."""
    count = struct.unpack_from(">i", data, 57)[0]
    size = len(data)
    pos = HEADER_SIZE
    out: list[Record] = []
    append = out.append
    try:
        for _ in range(count):
            b = data[pos]
            if b < 0x80:
                length, pos = (b >> 1) ^ -(b & 1), pos + 1
            else:
                length, pos = read_zigzag(data, pos)
            end = pos + length
            if length < 0 or end > size:
                raise InvalidBatch("record length past the batch")
            attributes = data[pos]
            b = data[pos + 1]
            if b < 0x80:
                ts_delta, at = (b >> 1) ^ -(b & 1), pos + 2
            else:
                ts_delta, at = read_zigzag(data, pos + 1)
            b = data[at]
            if b < 0x80:
                offset_delta, at = (b >> 1) ^ -(b & 1), at + 1
            else:
                offset_delta, at = read_zigzag(data, at)
            tail = at
            b = data[at]
            if b < 0x80:
                key_len, at = (b >> 1) ^ -(b & 1), at + 1
            else:
                key_len, at = read_zigzag(data, at)
            if key_len < 0:
                key = None
            else:
                key = data[at : at + key_len]
                at += key_len
            b = data[at]
            tombstone = b == 1 if b < 0x80 else read_zigzag(data, at)[0] < 0  # zigzag(-1) == 1
            if at >= end:
                raise InvalidBatch("record fields past its length")
            append((attributes, ts_delta, offset_delta, key, tombstone, tail, end))
            pos = end
    except IndexError:
        raise InvalidBatch("record cut short") from None
    return out


def keyless_record(batch: bytes | memoryview, limit: int = EXPANDED_LIMIT) -> bool:
    """Whether a data batch holds a record without a key (a compacted topic refuses it at
    produce time, as Kafka's LogValidator). A compressed batch is decompressed (at most
    ``limit`` bytes): one that cannot be raises ``InvalidBatch``."""
    header = parse_header(batch)
    if header.attributes & CONTROL_BIT:
        return False
    if header.attributes & COMPRESSION_MASK:
        return any(r[3] is None for r in expand(batch, header, limit)[1])
    return any(r[3] is None for r in records(bytes(batch)))


def expand(
    batch: bytes | memoryview, header: BatchHeader, limit: int
) -> tuple[bytes, list[Record]]:
    """A compressed batch as an uncompressed one would be laid out (its header, then its
    records decompressed; the header's length and CRC left as they were), and its records.
    ``InvalidBatch`` if it cannot be read: not its codec's data, more than ``limit`` bytes,
    records that do not fill it exactly, or offset deltas not increasing within the batch's."""
    try:
        body = decompress(header.attributes & COMPRESSION_MASK, bytes(batch[HEADER_SIZE:]), limit)
    except BadCompression as exc:
        raise InvalidBatch(str(exc)) from None
    data = bytes(batch[:HEADER_SIZE]) + body
    found = records(data)
    if (found[-1][6] if found else HEADER_SIZE) != len(data):
        raise InvalidBatch("compressed records do not fill the batch")
    previous = -1
    for r in found:
        if r[2] <= previous:
            raise InvalidBatch("offset deltas not increasing")
        previous = r[2]
    if previous > header.last_offset_delta:
        raise InvalidBatch("an offset delta past the batch's last")
    return data, found


@dataclass
class Expander:
    """A pass's reading of compressed batches: the decompression limit, and the batches kept
    whole because they could not be read (base offset -> why)."""

    limit: int = EXPANDED_LIMIT
    failed: dict[int, str] = field(default_factory=dict)

    def expand(
        self, batch: bytes | memoryview, header: BatchHeader
    ) -> tuple[bytes, list[Record]] | None:
        try:
            return expand(batch, header, self.limit)
        except InvalidBatch as exc:
            self.failed[header.base_offset] = str(exc)
            return None


def _map_key(key: bytes) -> bytes:
    return key if len(key) <= _KEY_BYTES else hashlib.blake2b(key, digest_size=16).digest()


@dataclass
class AbortedRanges:
    """Aborted transactions as ``producer id -> [(first offset, marker offset)]``."""

    by_pid: dict[int, list[tuple[int, int]]] = field(default_factory=dict)

    @classmethod
    def of(cls, aborted: Sequence[tuple[int, int, int]]) -> AbortedRanges:
        out = cls()
        for pid, first, marker in aborted:
            out.by_pid.setdefault(pid, []).append((first, marker))
        return out

    def holds(self, pid: int, offset: int) -> bool:
        return any(first <= offset < marker for first, marker in self.by_pid.get(pid, ()))


@dataclass
class OffsetMap:
    """Key -> offset of its latest record in the dirty part of the range being cleaned (the
    clean part holds one record a key already: a key the map lacks is kept there).

    Bounded as Kafka's ``log.cleaner.dedupe.buffer.size``: ``used`` estimates its memory
    (``ENTRY_BYTES`` plus the key an entry); once ``full`` the pass stops taking batches at
    the next segment (in memory, batch) boundary and cleans up to there."""

    aborted: AbortedRanges
    limit: int = 1 << 62
    latest: dict[bytes, int] = field(default_factory=dict)
    used: int = 0
    expander: Expander = field(default_factory=Expander)

    @property
    def full(self) -> bool:
        return self.used >= self.limit

    def add(self, batch: bytes | memoryview) -> None:
        header = parse_header(batch)
        attributes = header.attributes
        if attributes & CONTROL_BIT:
            return
        base = header.base_offset
        if attributes & TRANSACTIONAL_BIT and self.aborted.holds(header.producer_id, base):
            return
        if attributes & COMPRESSION_MASK:
            got = self.expander.expand(batch, header)
            if got is None:
                return
            found = got[1]
        else:
            found = records(bytes(batch))
        latest = self.latest
        before = len(latest)
        for r in found:
            key = r[3]
            if key is not None:
                latest[key if len(key) <= _KEY_BYTES else _map_key(key)] = base + r[2]
        self.used += (len(latest) - before) * ENTRY_BYTES


@dataclass
class Cleaning:
    """One pass's rewrite of the batches of a range, in offset order."""

    offsets: OffsetMap
    now_ms: int
    delete_retention_ms: int
    # base offsets of the batches that are an idempotent producer's last in the partition:
    # kept, emptied of records, when all their records go (Kafka's BatchRetention.RETAIN_EMPTY:
    # the producer's last sequence and epoch stay in the log)
    retain: frozenset[int] = frozenset()
    # producer id -> whether records of its current transaction were kept
    txn_kept: dict[int, bool] = field(default_factory=dict)
    removed_markers: list[int] = field(default_factory=list)  # offsets of markers removed
    next_horizon: int | None = None  # the earliest delete horizon left in the range
    records_removed: int = 0
    batches_removed: int = 0

    def _horizon(self, at: int) -> None:
        if self.next_horizon is None or at < self.next_horizon:
            self.next_horizon = at

    def clean(self, batch: bytes | memoryview) -> bytes | memoryview | None:
        """``batch`` itself when all of it stays, a rewritten batch, or None (removed)."""
        header = parse_header(batch)
        attributes = header.attributes
        if attributes & COMPRESSION_MASK and attributes & CONTROL_BIT:
            return batch  # never written so (Kafka's markers are uncompressed): kept as it is
        pid, base = header.producer_id, header.base_offset
        has_horizon = bool(attributes & DELETE_HORIZON_BIT)
        horizon_passed = has_horizon and self.now_ms >= header.base_timestamp
        if attributes & CONTROL_BIT:
            if not attributes & TRANSACTIONAL_BIT or self.txn_kept.pop(pid, False):
                return batch
            if horizon_passed:
                self.removed_markers.append(base)
                self.batches_removed += 1
                return None
            if has_horizon:
                self._horizon(header.base_timestamp)
                return batch
            data = bytes(batch)
            return self._rewrite(data, header.base_timestamp, records(data))
        transactional = attributes & TRANSACTIONAL_BIT
        if transactional and self.offsets.aborted.holds(pid, base):
            self.records_removed += header.record_count
            self.batches_removed += 1
            return None
        if header.record_count == 0:  # kept empty by an earlier pass
            if self._retained(header):
                return batch
            self.batches_removed += 1
            return None
        if attributes & COMPRESSION_MASK:
            got = self.offsets.expander.expand(batch, header)
            if got is None:
                return batch
            data, found = got
        else:
            data = bytes(batch)
            found = records(data)
        latest = self.offsets.latest
        kept: list[Record] = []
        tombstones = False
        for r in found:
            key = r[3]
            if key is None:
                continue
            newest = latest.get(key if len(key) <= _KEY_BYTES else _map_key(key))
            if newest is not None and base + r[2] < newest:
                continue
            if r[4]:
                if horizon_passed:
                    continue
                tombstones = True
            kept.append(r)
        self.records_removed += len(found) - len(kept)
        if not kept:
            if self._retained(header):
                return _empty(data)
            self.batches_removed += 1
            return None
        if transactional:
            self.txn_kept[pid] = True
        if tombstones and has_horizon:
            self._horizon(header.base_timestamp)
        if len(kept) == len(found) and (has_horizon or not tombstones):
            return batch
        if tombstones and not has_horizon:
            return self._rewrite(data, header.base_timestamp, kept)
        return _encode(data, kept, header.base_timestamp, attributes)

    def _retained(self, header: BatchHeader) -> bool:
        """Whether the batch is kept, empty, for its producer (Kafka also keeps transactional
        ones; kgroupd keeps only idempotent, non-transactional batches: its transaction index
        would take an empty transactional batch whose marker went for an open transaction)."""
        return (
            header.producer_id >= 0
            and not header.attributes & TRANSACTIONAL_BIT
            and header.base_offset in self.retain
        )

    def _rewrite(self, data: bytes, base_ts: int, kept: list[Record]) -> bytes:
        """``kept`` with the delete horizon set: now + delete.retention.ms."""
        horizon = self.now_ms + self.delete_retention_ms
        self._horizon(horizon)
        shift = base_ts - horizon
        moved = [(r[0], r[1] + shift, *r[2:]) for r in kept]
        attributes = parse_header(data).attributes | DELETE_HORIZON_BIT
        return _encode(data, moved, horizon, attributes)


def _encode(data: bytes, kept: list[Record], base_ts: int, attributes: int) -> bytes:
    """The batch's header (base offset, last offset delta, producer fields, max timestamp
    kept) over ``kept``: each record's attributes and offset delta as they were, its timestamp
    delta from ``base_ts``, the rest (key, value, headers) copied."""
    f = list(_HEADER.unpack_from(data, 0))
    body = bytearray()
    for attrs, ts_delta, offset_delta, _key, _tomb, tail, end in kept:
        rec = bytes((attrs,)) + zigzag(ts_delta) + zigzag(offset_delta) + data[tail:end]
        body += zigzag(len(rec))
        body += rec
    codec = attributes & COMPRESSION_MASK
    if codec:  # written again with the batch's own codec, as Kafka's cleaner does
        body = bytearray(compress(codec, bytes(body)))
    f[1] = HEADER_SIZE - 12 + len(body)  # batch length
    f[4] = 0  # crc
    f[5] = attributes
    f[7] = base_ts
    f[12] = len(kept)
    out = bytearray(_HEADER.pack(*f))
    out += body
    struct.pack_into(">I", out, 17, crc32c(memoryview(out)[21:]))
    return bytes(out)


def _empty(data: bytes) -> bytes:
    """The batch's header with no records, as Kafka's DefaultRecordBatch.writeEmptyHeader:
    base offset, last offset delta, producer id, epoch and base sequence kept; uncompressed;
    both timestamps the max timestamp."""
    f = list(_HEADER.unpack_from(data, 0))
    f[1] = HEADER_SIZE - 12
    f[4] = 0
    f[5] &= TIMESTAMP_TYPE_BIT | TRANSACTIONAL_BIT
    f[7] = f[8]
    f[12] = 0
    out = bytearray(_HEADER.pack(*f))
    struct.pack_into(">I", out, 17, crc32c(memoryview(out)[21:]))
    return bytes(out)


class Stopped(Exception):
    """The broker is stopping: the pass is left (its ``.cleaned`` files go at start-up)."""


NAP_EVERY_S = 0.002
NAP_S = 0.0002


class Throttle:
    """Kafka's log cleaner Throttler: sleep so the bytes read and written average at most
    ``rate`` a second (None: unbounded).

    Whatever the rate, the cleaner's thread naps 0.2 ms every 2 ms of work: the event loop's
    thread, which gives up the GIL at every system call, then gets it back at once instead of
    after the interpreter's 5 ms switch interval (without the naps, produce ran at a quarter of
    its rate while a pass ran, and the pass itself was slower).
    """

    def __init__(self, rate: float | None, stop: threading.Event | None = None) -> None:
        self.rate = rate
        self.stop = stop or threading.Event()
        self.start = self.napped = time.monotonic()
        self.done = 0

    def take(self, nbytes: int) -> None:
        if self.stop.is_set():
            raise Stopped
        now = time.monotonic()
        if now - self.napped >= NAP_EVERY_S:
            time.sleep(NAP_S)
            self.napped = now = time.monotonic()
        if self.rate is None:
            return
        self.done += nbytes
        ahead = self.done / self.rate - (now - self.start)
        if ahead > 0.005:
            time.sleep(ahead)
