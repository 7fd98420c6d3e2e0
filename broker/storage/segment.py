"""One segment file of a partition: its sparse index, its reads, and its index file.

The index is Kafka's offset and time index in one: an entry per ``interval`` bytes of log
(the topic's ``index.interval.bytes``, 4096 by default), each ``(offset - base offset, byte
position, the largest timestamp of the batches before it)``, in three compact arrays (16
bytes an entry; ``index.interval.bytes`` 0: an entry per batch).
A read looks up the last entry at or below the offset it wants and walks batch headers from
there (at most about one interval); a timestamp lookup does the same with the timestamps.

The index file (``BASE.idx``, next to ``BASE.log``) holds the index and what start-up would
otherwise replay the segment for: where the segment ended when it was written (size, mtime,
the last batch's position and CRC), its largest timestamp, the aborted transactions whose
marker is in it, and the partition's open transactions and idempotent producer state as of
that point. It is written when the segment rolls, every ``CHECKPOINT_BYTES`` of the active
segment and at a clean stop, as a temporary file renamed over the old one and never fsynced:
a missing, damaged or stale one is rebuilt by reading the segment.
"""

from __future__ import annotations

import bisect
import errno
import os
import struct
import sys
from array import array
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from kgroupd.broker.log.partition import ReadWouldBlock
from kgroupd.protocol.crc import crc32c

INDEX_INTERVAL_BYTES = 4096  # Kafka: index.interval.bytes
READ_CAP = 4 * 1024 * 1024  # bytes one partition's read takes from a file, inline (pread)
_PEEK = struct.Struct(">qiibIhiqq")  # a batch header up to its max timestamp
PEEK_SIZE = _PEEK.size
_WINDOW = 1024 * 1024
_SEEK = 64 * 1024  # a read's first look for the batch holding its offset
_BASE_LENGTH = struct.Struct(">qi")
_NO_LIMIT = 1 << 63

_MAGIC = b"KGIX"
_VERSION = 1
_TOP = struct.Struct(">4sHBqqqqqqqIIIII")
_ABORTED = struct.Struct(">qqq")
_ONGOING = struct.Struct(">qq")
_PRODUCER = struct.Struct(">qhB")
_SEQ = struct.Struct(">iiq")
_NATIVE = 0 if sys.byteorder == "little" else 1
_NOWAIT: int | None = getattr(os, "RWF_NOWAIT", None)  # Linux 4.14+

# (producer id, epoch, [(first sequence, last sequence, base offset), ...] oldest first)
ProducerEntry = tuple[int, int, list[tuple[int, int, int]]]


def _pread(fd: int, n: int, pos: int, nowait: bool) -> bytes | bytearray:
    """``os.pread``; with ``nowait`` only from the page cache (``RWF_NOWAIT``): a read that
    would wait for the disk raises ``ReadWouldBlock`` instead."""
    if not nowait:
        return os.pread(fd, n, pos)
    if _NOWAIT is None:
        raise ReadWouldBlock
    buf = bytearray(n)
    try:
        got = os.preadv(fd, [buf], pos, _NOWAIT)
    except BlockingIOError:
        raise ReadWouldBlock from None
    except OSError as exc:
        if exc.errno in (errno.EOPNOTSUPP, errno.EINVAL):  # a file system without it
            raise ReadWouldBlock from None
        raise
    if got < n:  # partly in the page cache
        raise ReadWouldBlock
    return buf


def peek(data: bytes | bytearray | memoryview, at: int) -> tuple[int, int, int, int, int]:
    """(base offset, batch length, last offset, max timestamp, crc) of the batch at ``at``."""
    base, length, _epoch, _magic, crc, _attrs, delta, _first, max_ts = _PEEK.unpack_from(data, at)
    return base, length + 12, base + delta, max_ts, crc


@dataclass(eq=False)
class Segment:
    base_offset: int
    path: Path
    size: int = 0
    last_offset: int = -1
    max_ts: int = -1
    max_ts_offset: int = -1
    last_batch_pos: int = -1
    last_batch_crc: int = 0
    since_index: int = 0
    interval: int = INDEX_INTERVAL_BYTES  # the topic's index.interval.bytes
    rel: array[int] = field(default_factory=lambda: array("i"))
    pos: array[int] = field(default_factory=lambda: array("i"))
    ts: array[int] = field(default_factory=lambda: array("q"))

    @property
    def index_path(self) -> Path:
        return self.path.with_suffix(".idx")

    def on_batch(
        self, position: int, length: int, base: int, last: int, max_ts: int, crc: int
    ) -> None:
        """A batch written (or found at start-up) at ``position``: index it."""
        if self.since_index >= self.interval:
            self.rel.append(base - self.base_offset)
            self.pos.append(position)
            self.ts.append(self.max_ts)
            self.since_index = 0
        self.since_index += length
        self.size = position + length
        self.last_offset = last
        if max_ts > self.max_ts:
            self.max_ts, self.max_ts_offset = max_ts, base
        self.last_batch_pos, self.last_batch_crc = position, crc

    def lookup(self, offset: int) -> int:
        """Byte position to walk from for the batch holding ``offset``."""
        i = bisect.bisect_right(self.rel, offset - self.base_offset) - 1
        return self.pos[i] if i >= 0 else 0

    def time_lookup(self, timestamp: int) -> int:
        """Byte position to walk from for the first batch reaching ``timestamp``."""
        i = bisect.bisect_left(self.ts, timestamp) - 1
        return self.pos[i] if i >= 0 else 0

    def memory(self) -> int:
        return self.rel.itemsize * len(self.rel) * 2 + self.ts.itemsize * len(self.ts)

    # --- reads --------------------------------------------------------------------------------
    def read(
        self,
        fd: int,
        offset: int,
        max_bytes: int,
        at_least_one: bool,
        below: int | None,
        start: int,
        end: int,
        nowait: bool = False,
    ) -> tuple[list[memoryview], int, bool]:
        """Whole batches from the one holding ``offset``, as ``PartitionLog.read_chunks``
        (at most ``READ_CAP`` bytes unless one batch is larger), walking from byte ``start``
        (``lookup``) up to ``end`` (the size when the read was planned: this runs on a
        reader thread while the event loop appends). Returns them as at most two views (the
        last batch on its own: read_committed reads its header), their size and whether the
        segment ended before any limit did. ``nowait``: only what the page cache holds,
        else ``ReadWouldBlock``."""
        max_bytes = min(max_bytes, READ_CAP)
        limit = _NO_LIMIT if below is None else below
        # the batch holding ``offset``: about an index interval from ``start``
        pos = start
        while True:
            if end - pos < PEEK_SIZE:
                return [], 0, True
            head = _pread(fd, min(_SEEK, end - pos), pos, nowait)
            if len(head) < PEEK_SIZE:  # the file is shorter than it was
                return [], 0, True
            at = 0
            while len(head) - at >= PEEK_SIZE:
                base, length, last, _ts, _crc = peek(head, at)
                if last >= offset:
                    break
                at += length
            else:
                pos += at
                continue
            pos += at
            break
        if base >= limit:
            return [], 0, False
        if length > max_bytes and not at_least_one:
            return [], 0, False
        # from there, whole batches up to the limits (only their offsets and sizes read)
        data = _pread(fd, min(max(max_bytes, length), end - pos), pos, nowait)
        n = len(data)
        unpack = _BASE_LENGTH.unpack_from
        at = last_at = 0
        ended = True
        while n - at >= 12:
            base, length = unpack(data, at)
            length += 12
            if at and (base >= limit or at + length > max_bytes):
                ended = False
                break
            if at + length > n:
                ended = pos + at >= end
                break
            last_at = at
            at += length
        if not at:
            return [], 0, ended
        view = memoryview(data)
        parts = [view[:last_at], view[last_at:at]] if last_at else [view[:at]]
        return parts, at, ended and pos + at >= end

    def batches_from(self, fd: int, pos: int) -> Iterator[tuple[int, int, int, memoryview]]:
        """(base offset, last offset, max timestamp, batch) of every batch from ``pos``."""
        want = _WINDOW
        while pos < self.size:
            data = os.pread(fd, min(max(want, PEEK_SIZE), self.size - pos), pos)
            if not data:
                return
            view = memoryview(data)
            n = len(data)
            at = 0
            want = _WINDOW
            while n - at >= PEEK_SIZE:
                base, length, last, max_ts, _crc = peek(data, at)
                if at + length > n:
                    want = max(length, _WINDOW)
                    break
                yield base, last, max_ts, view[at : at + length]
                at += length
            if at == 0 and want <= n:
                return
            pos += at

    # --- the index file ---------------------------------------------------------------------
    def encode_index(
        self,
        mtime_ns: int,
        aborted: list[tuple[int, int, int]],
        ongoing: dict[int, int],
        producers: list[ProducerEntry],
    ) -> bytes:
        parts = [
            _TOP.pack(
                _MAGIC,
                _VERSION,
                _NATIVE,
                self.size,
                mtime_ns,
                self.last_offset,
                self.max_ts,
                self.max_ts_offset,
                self.last_batch_pos,
                self.since_index,
                self.last_batch_crc,
                len(self.rel),
                len(aborted),
                len(ongoing),
                len(producers),
            ),
            self.rel.tobytes(),
            self.pos.tobytes(),
            self.ts.tobytes(),
        ]
        parts.extend(_ABORTED.pack(*a) for a in aborted)
        parts.extend(_ONGOING.pack(pid, first) for pid, first in ongoing.items())
        for pid, epoch, seqs in producers:
            parts.append(_PRODUCER.pack(pid, epoch, len(seqs)))
            parts.extend(_SEQ.pack(*s) for s in seqs)
        body = b"".join(parts)
        return body + struct.pack(">I", crc32c(body))

    def write_index(
        self,
        mtime_ns: int,
        aborted: list[tuple[int, int, int]],
        ongoing: dict[int, int],
        producers: list[ProducerEntry],
    ) -> None:
        """Write the index file (a temporary file renamed over the old; not fsynced)."""
        data = self.encode_index(mtime_ns, aborted, ongoing, producers)
        tmp = self.path.with_suffix(".idx.tmp")
        with open(tmp, "wb") as f:
            f.write(data)
        os.replace(tmp, self.index_path)


@dataclass
class IndexFile:
    """What an index file holds beyond the index (loaded into its segment)."""

    mtime_ns: int
    aborted: list[tuple[int, int, int]]
    ongoing: dict[int, int]
    producers: list[ProducerEntry]


def read_index(seg: Segment) -> IndexFile | None:
    """Load ``seg``'s index file into it; None (``seg`` untouched) if missing or damaged."""
    try:
        data = seg.index_path.read_bytes()
    except OSError:
        return None
    if len(data) < _TOP.size + 4 or struct.unpack_from(">I", data, len(data) - 4)[0] != crc32c(
        data[:-4]
    ):
        return None
    top = _TOP.unpack_from(data, 0)
    if top[0] != _MAGIC or top[1] != _VERSION or top[2] != _NATIVE:
        return None
    (size, mtime, last, max_ts, max_ts_offset, last_pos, since, crc) = top[3:11]
    n_index, n_aborted, n_ongoing, n_producers = top[11:15]
    at = _TOP.size
    rel, pos, ts = array("i"), array("i"), array("q")
    try:
        for arr in (rel, pos, ts):
            end = at + arr.itemsize * n_index
            arr.frombytes(data[at:end])
            at = end
        aborted = []
        for _ in range(n_aborted):
            aborted.append(_ABORTED.unpack_from(data, at))
            at += _ABORTED.size
        ongoing = {}
        for _ in range(n_ongoing):
            pid, first = _ONGOING.unpack_from(data, at)
            ongoing[pid] = first
            at += _ONGOING.size
        producers: list[ProducerEntry] = []
        for _ in range(n_producers):
            pid, epoch, count = _PRODUCER.unpack_from(data, at)
            at += _PRODUCER.size
            seqs = []
            for _ in range(count):
                seqs.append(_SEQ.unpack_from(data, at))
                at += _SEQ.size
            producers.append((pid, epoch, seqs))
    except (struct.error, ValueError):
        return None
    if at != len(data) - 4 or len(rel) != n_index:
        return None
    seg.size, seg.last_offset, seg.max_ts, seg.max_ts_offset = size, last, max_ts, max_ts_offset
    seg.last_batch_pos, seg.since_index, seg.last_batch_crc = last_pos, since, crc
    seg.rel, seg.pos, seg.ts = rel, pos, ts
    return IndexFile(mtime, [tuple(a) for a in aborted], ongoing, producers)


def boundary_holds(fd: int, seg: Segment) -> bool:
    """Whether the batch the index file last saw is still where it says, ending at its size
    (an index file written before a crash is good for the bytes it covers)."""
    if seg.size == 0:
        return True
    head = os.pread(fd, PEEK_SIZE, seg.last_batch_pos)
    if len(head) < PEEK_SIZE:
        return False
    _base, length, last, _ts, crc = peek(head, 0)
    return (
        seg.last_batch_pos + length == seg.size
        and last == seg.last_offset
        and crc == seg.last_batch_crc
    )
