"""One partition's segment files under ``--data-dir`` (``PartitionStore``): appends, rolls,
index checkpoints, reads below the cached tail and retention; the descriptors the reader
threads use (``ReadFds``). ``kgroupd.broker.storage.topic_store`` holds them all and loads
them at start-up (``kgroupd.broker.storage.segment_recovery``).
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import os
import random
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import structlog

from kgroupd.broker.log.partition import ReadWouldBlock, now_ms
from kgroupd.broker.storage.fileio import write_all
from kgroupd.broker.storage.fsync import FsyncWorker
from kgroupd.broker.storage.segment import (
    INDEX_INTERVAL_BYTES,
    PEEK_SIZE,
    READ_CAP,
    ProducerEntry,
    Segment,
    peek,
)

if TYPE_CHECKING:
    from kgroupd.broker.log.partition import PartitionLog, StoredBatch
    from kgroupd.broker.log.txn import AbortedTxn

log = structlog.get_logger("kgroupd.storage")


CHECKPOINT_BYTES = 64 * 1024 * 1024  # the active segment's index file is rewritten this often
READ_FDS = 256  # segment files held open for reads, over every partition
READ_THREADS = 4  # reader threads for the reads the page cache cannot answer at once
# A read of the files up to this size that the page cache holds is made on the event loop
# (measured: up to 256 KiB the thread hop, ~0.1 ms, costs more than the read; at 1 MiB the
# same wall time, but the loop is free meanwhile); larger ones, and any that would wait for
# the disk, go to a reader thread.
INLINE_READ_BYTES = 256 * 1024


class ReadFds:
    """Read-only file descriptors of segment files, the most recently used kept open, and
    the reader threads that make the reads the page cache cannot answer at once.

    A descriptor a reader thread uses is pinned: evicted or dropped meanwhile (a deleted or
    cleaned segment), it is closed when the read is done, so its number is never reused
    under a read."""

    def __init__(self, limit: int = READ_FDS) -> None:
        self.limit = limit
        self._fds: OrderedDict[Segment, int] = OrderedDict()
        self._pins: dict[int, int] = {}  # fd -> reads in flight on the reader threads
        self._doomed: set[int] = set()  # closed at their last unpin
        self._pool: ThreadPoolExecutor | None = None
        self._closed = False

    def get(self, seg: Segment) -> int:
        fd = self._fds.get(seg)
        if fd is not None:
            self._fds.move_to_end(seg)
            return fd
        fd = os.open(seg.path, os.O_RDONLY)
        self._fds[seg] = fd
        if len(self._fds) > self.limit:
            _, old = self._fds.popitem(last=False)
            self._close(old)
        return fd

    def drop(self, seg: Segment) -> None:
        fd = self._fds.pop(seg, None)
        if fd is not None:
            self._close(fd)

    def _close(self, fd: int) -> None:
        if fd in self._pins:
            self._doomed.add(fd)
        else:
            os.close(fd)

    async def read(
        self,
        seg: Segment,
        offset: int,
        max_bytes: int,
        at_least_one: bool,
        below: int | None,
        start: int,
        end: int,
    ) -> tuple[list[memoryview], int, bool]:
        """``seg.read`` on a reader thread (its descriptor pinned until the thread is done
        with it, even when the fetch waiting for it is cancelled meanwhile)."""
        if self._pool is None:
            self._pool = ThreadPoolExecutor(READ_THREADS, thread_name_prefix="segment-read")
        loop = asyncio.get_running_loop()
        fd = self.get(seg)
        self._pins[fd] = self._pins.get(fd, 0) + 1
        done = self._pool.submit(seg.read, fd, offset, max_bytes, at_least_one, below, start, end)
        done.add_done_callback(lambda _: _on_loop(loop, self._unpin, fd))
        return await asyncio.wrap_future(done)

    def _unpin(self, fd: int) -> None:
        if self._closed:
            return
        left = self._pins.pop(fd) - 1
        if left:
            self._pins[fd] = left
        elif fd in self._doomed:
            self._doomed.discard(fd)
            os.close(fd)

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None
        self._closed = True
        while self._fds:
            os.close(self._fds.popitem()[1])
        for fd in self._doomed:
            os.close(fd)
        self._doomed.clear()


def _on_loop(loop: asyncio.AbstractEventLoop, call: Callable[[int], None], arg: int) -> None:
    with contextlib.suppress(RuntimeError):  # the loop closed meanwhile (stopping)
        loop.call_soon_threadsafe(call, arg)


@dataclass
class PartitionStore:
    """The segment files of one partition; the last one is open for appends."""

    # its directory, or (the topics directory, its name): made a Path on first use (a
    # Path costs microseconds, times every partition at start-up)
    home: Path | tuple[Path, str]
    worker: FsyncWorker
    segment_bytes: int
    index_interval: int = INDEX_INTERVAL_BYTES  # index.interval.bytes of new segments
    read_fds: ReadFds = field(default_factory=ReadFds)
    segments: list[Segment] = field(default_factory=list)
    bases: list[int] = field(default_factory=list)
    fd: int = -1
    log: PartitionLog | None = None
    # The partition's idempotent producer state, for the index files (set by TopicStore).
    producers_of: Callable[[], list[ProducerEntry]] = list
    # Start-up: the producer state found (taken by ProducerStateManager.restore_from).
    loaded_producers: list[ProducerEntry] = field(default_factory=list)
    since_checkpoint: int = 0
    # segment.ms and segment.jitter.ms of the topic (TopicStore.set_roll_ms)
    segment_ms: int = 604800000
    segment_jitter_ms: int = 0
    # The active segment's roll clock (Kafka's LogSegment): its first batch's max timestamp
    # (-1: none), when it was opened, its jitter. A segment found at start-up has its first
    # batch's timestamp read from the file at the first append (``first_ts_read``), as
    # Kafka's loadFirstBatchTimestamp does, so a restart does not restart its clock; its
    # jitter is drawn then too (Kafka draws one for every segment it loads).
    first_ts: int = -1
    first_ts_read: bool = False
    created_ms: int = field(default_factory=now_ms)
    roll_jitter_ms: int = 0
    # whether ``directory`` exists: made with the first segment (TopicStore.attach)
    on_disk: bool = True

    @property
    def directory(self) -> Path:
        home = self.home
        if isinstance(home, tuple):
            self.home = home = home[0] / home[1]
        return home

    @property
    def size(self) -> int:
        return sum(seg.size for seg in self.segments)

    def append(self, batch: bytes, base_offset: int, last_offset: int) -> None:
        max_ts = peek(batch, 0)[3]
        if not self.segments or (
            self.segments[-1].size > 0
            and (
                self.segments[-1].size + len(batch) > self.segment_bytes
                or self._waited(max_ts) > self.segment_ms - self.roll_jitter_ms
            )
        ):
            self._roll(base_offset)
        elif self.since_checkpoint >= CHECKPOINT_BYTES:
            self.checkpoint()
        seg = self.segments[-1]
        try:
            write_all(self.fd, batch)
        except OSError as exc:
            # No half batch stays for later appends to follow (damage in the middle).
            log.error("segment_write_failed", file=str(seg.path), error=str(exc))
            os.ftruncate(self.fd, seg.size)
            raise
        _base, length, _last, max_ts, crc = peek(batch, 0)
        seg.on_batch(seg.size, length, base_offset, last_offset, max_ts, crc)
        if self.first_ts < 0:
            self.first_ts = max_ts
        self.since_checkpoint += length
        self.worker.dirty(self.fd)

    def _waited(self, max_ts: int) -> int:
        """Kafka's LogSegment.timeWaitedForRoll: the new batch's timestamp past the first
        batch's, or (no timestamp) the time since the segment was opened."""
        if not self.first_ts_read:
            self.first_ts_read = True
            self.roll_jitter_ms = self._jitter()
            if self.first_ts < 0:
                self.first_ts = self._first_batch_ts()
        if self.first_ts >= 0 and max_ts >= 0:
            return max_ts - self.first_ts
        return now_ms() - self.created_ms

    def _jitter(self) -> int:
        """Kafka's LogConfig.randomSegmentJitter: below segment.jitter.ms and segment.ms."""
        jitter = self.segment_jitter_ms
        return random.randrange(min(jitter, self.segment_ms)) if jitter else 0

    def _first_batch_ts(self) -> int:
        """The max timestamp of the active segment's first batch, read from its file (a
        segment found at start-up); -1 if it cannot be read."""
        try:
            with open(self.segments[-1].path, "rb") as f:
                head = f.read(PEEK_SIZE)
        except OSError as exc:
            log.warning("segment_read_failed", file=str(self.segments[-1].path), error=str(exc))
            return -1
        return peek(head, 0)[3] if len(head) == PEEK_SIZE else -1

    def _roll(self, base_offset: int) -> None:
        self.first_ts, self.first_ts_read, self.created_ms = -1, True, now_ms()
        self.roll_jitter_ms = self._jitter()
        if self.fd >= 0:
            self.checkpoint()  # the index file of the segment it leaves, final
            self.worker.retire(self.fd)  # fsynced (before any waiter is answered), then closed
        if not self.on_disk:
            self.make_directory()
        path = self.directory / f"{base_offset:020d}.log"
        self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        self.segments.append(Segment(base_offset, path, interval=self.index_interval))
        self.bases.append(base_offset)
        # The new name is durable once the directory is, before any answer that waits for a
        # batch in this segment.
        self.worker.dirty_dir(self.directory)

    def make_directory(self) -> None:
        """The partition's directory, on its first write; its name is durable with the next
        fsync round (before any answer waiting for that write)."""
        self.directory.mkdir(parents=True, exist_ok=True)
        self.worker.dirty_dir(self.directory.parent)
        self.on_disk = True

    def checkpoint(self) -> None:
        """Write the active segment's index file, with the partition's state as of now."""
        seg = self.segments[-1]
        txn = self.log.txn if self.log is not None else None
        aborted = [] if txn is None else txn_aborted_in(txn.aborted, seg)
        ongoing = {} if txn is None else dict(txn.ongoing)
        try:
            seg.write_index(os.fstat(self.fd).st_mtime_ns, aborted, ongoing, self.producers_of())
        except OSError as exc:  # a full disk: the index is rebuilt from the segment instead
            log.warning("index_write_failed", file=str(seg.index_path), error=str(exc))
        self.since_checkpoint = 0

    def read(
        self,
        offset: int,
        max_bytes: int,
        at_least_one: bool,
        below: int | None,
        nowait: bool = False,
    ) -> tuple[list[memoryview], int]:
        """Batches from the segment file holding ``offset`` (``PartitionLog.read_chunks``),
        on the calling thread. ``nowait``: ``ReadWouldBlock`` unless the page cache holds
        them and they are at most ``INLINE_READ_BYTES``."""
        if nowait and min(max_bytes, READ_CAP) > INLINE_READ_BYTES:
            raise ReadWouldBlock
        i = max(0, bisect.bisect_right(self.bases, offset) - 1)
        while i < len(self.segments):
            seg = self.segments[i]
            i += 1
            if seg.size == 0 or seg.last_offset < offset:
                continue
            fd = self.read_fds.get(seg)
            start = seg.lookup(offset)
            parts, total, ended = seg.read(
                fd, offset, max_bytes, at_least_one, below, start, seg.size, nowait
            )
            if parts or not ended:
                return parts, total
        return [], 0

    async def read_off_loop(
        self, offset: int, max_bytes: int, at_least_one: bool, below: int | None
    ) -> tuple[list[memoryview], int]:
        """``read`` on a reader thread: the segment and where to walk from are chosen here,
        on the event loop, the file is read there."""
        i = max(0, bisect.bisect_right(self.bases, offset) - 1)
        while i < len(self.segments):
            seg = self.segments[i]
            if seg.size and seg.last_offset >= offset:
                start = seg.lookup(offset)
                parts, total, ended = await self.read_fds.read(
                    seg, offset, max_bytes, at_least_one, below, start, seg.size
                )
                if parts or not ended:
                    return parts, total
            # the segments may have changed meanwhile (a roll, retention, the cleaner)
            i = bisect.bisect_right(self.bases, seg.base_offset)
        return [], 0

    def batch_at_timestamp(self, timestamp: int, log_start: int) -> StoredBatch | None:
        from kgroupd.broker.log.partition import StoredBatch

        for seg in self.segments:
            if seg.size == 0 or seg.max_ts < timestamp or seg.last_offset < log_start:
                continue
            fd = self.read_fds.get(seg)
            for base, last, max_ts, view in seg.batches_from(fd, seg.time_lookup(timestamp)):
                if max_ts >= timestamp and last >= log_start:
                    return StoredBatch(base, last, max_ts, max_ts, bytes(view))
        return None

    def max_timestamp_batch(self) -> StoredBatch | None:
        from kgroupd.broker.log.partition import StoredBatch

        best = None
        for seg in self.segments:
            if seg.size and (best is None or seg.max_ts > best.max_ts):
                best = seg
        if best is None:
            return None
        parts, _ = self.read(best.max_ts_offset, 1, True, None)
        if not parts:
            return None
        base, _length, last, max_ts, _crc = peek(parts[0], 0)
        return StoredBatch(base, last, max_ts, max_ts, bytes(parts[0]))

    def retention_start(self, retention_ms: int, retention_bytes: int, now_ms: int) -> int | None:
        """Kafka's retention by segment: the base offset of the first segment to keep, if
        older ones go (too old by their largest timestamp, or the log is at least a segment
        over ``retention_bytes``). The active segment always stays."""
        size = self.size
        keep = 0
        while keep < len(self.segments) - 1:
            head = self.segments[keep]
            too_old = retention_ms >= 0 and now_ms - head.max_ts > retention_ms
            too_big = retention_bytes >= 0 and size - head.size >= retention_bytes
            if not (too_old or too_big):
                break
            size -= head.size
            keep += 1
        return self.segments[keep].base_offset if keep else None

    def delete_below(self, log_start_offset: int, later: bool = False) -> int:
        """Record the new log start (as Kafka's log-start-offset checkpoint: the segment that
        holds it may keep older batches) and delete whole segments entirely below it (never
        the active one). ``later`` (retention): the file work (a write, two fsyncs and two
        unlinks a segment: ~10 ms a partition measured, with peaks of 100s of ms while other
        writes are flushed) goes to the worker's file thread, in order; the segments leave
        the partition at once. A kill before it runs finds the old start and segments again,
        as Kafka's periodic checkpoint may."""
        if not self.on_disk:
            self.make_directory()
        if later:
            # The directory by its inode, not only its path: a topic deleted and made again
            # meanwhile has a new directory of the same name, which the job must not touch.
            home = self.directory
            found = os.stat(home)
            doomed = self._drop_below(log_start_offset)
            names = [n for seg in doomed for n in (seg.path.name, seg.index_path.name)]
            ident = (found.st_dev, found.st_ino)
            worker, plog = self.worker, self.log
            worker.later(
                lambda: _checkpoint_later(home, ident, worker, log_start_offset, plog, names)
            )
            return len(doomed)
        path = self.directory / "log-start-offset"
        tmp = path.with_suffix(".tmp")
        with self.worker.start_lock:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            try:
                write_all(fd, str(log_start_offset).encode())
                os.fsync(fd)  # rare (DeleteRecords moved the start): not worth a round trip
            finally:
                os.close(fd)
            os.replace(tmp, path)
        self.worker.dirty_dir(self.directory)  # the rename, with the next fsync round
        doomed = self._drop_below(log_start_offset)
        for seg in doomed:
            seg.path.unlink(missing_ok=True)
            seg.index_path.unlink(missing_ok=True)
        return len(doomed)

    def _drop_below(self, log_start_offset: int) -> list[Segment]:
        """The segments entirely below the start (never the active one), out of the
        partition and its readers' fds."""
        doomed: list[Segment] = []
        while len(self.segments) > 1 and self.segments[0].last_offset < log_start_offset:
            doomed.append(self.segments.pop(0))
            self.bases.pop(0)
        for seg in doomed:
            self.read_fds.drop(seg)
        return doomed

    def forget(self) -> None:
        """The topic is deleted: close its files, and let go of the partition (no cycle
        left: the two are freed by reference counting, also once gc.freeze kept them)."""
        for seg in self.segments:
            self.read_fds.drop(seg)
        if self.fd >= 0:
            self.worker.close_fd(self.fd)
            self.fd = -1
        self.log = None

    def close(self) -> None:
        """Clean stop: the active segment's index file, then fsync."""
        if self.fd >= 0:
            if self.segments:
                self.checkpoint()
            os.fsync(self.fd)
            self.worker.close_fd(self.fd)
            self.fd = -1


def _checkpoint_later(
    home: Path,
    ident: tuple[int, int],
    worker: FsyncWorker,
    log_start_offset: int,
    plog: PartitionLog | None,
    names: list[str],
) -> None:
    """``delete_below(later=True)``'s file work, on the worker's file thread, in directory
    ``home`` if it is still the one (device, inode) ``ident``: the start checkpoint (the
    partition's latest start: a DeleteRecords on the loop may have moved it since), durable
    before the segments below it are unlinked."""
    try:
        dir_fd = os.open(home, os.O_RDONLY | os.O_DIRECTORY)
    except FileNotFoundError:  # the topic was deleted: its files go with it
        return
    try:
        found = os.fstat(dir_fd)
        if (found.st_dev, found.st_ino) != ident:
            return  # deleted and made again: not this partition's files
        with worker.start_lock:
            start = (
                log_start_offset if plog is None else max(log_start_offset, plog.log_start_offset)
            )
            fd = os.open(
                "log-start-offset.tmp", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644, dir_fd=dir_fd
            )
            try:
                write_all(fd, str(start).encode())
                os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(
                "log-start-offset.tmp", "log-start-offset", src_dir_fd=dir_fd, dst_dir_fd=dir_fd
            )
        os.fsync(dir_fd)
        for name in names:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(name, dir_fd=dir_fd)
    except OSError as exc:  # the next start finds the old start and segments: retention again
        log.error("retention_files_failed", error=str(exc), directory=str(home))
    finally:
        os.close(dir_fd)


def txn_aborted_in(aborted: list[AbortedTxn], seg: Segment) -> list[tuple[int, int, int]]:
    """The aborted transactions whose marker is in ``seg``."""
    return [
        (a.producer_id, a.first_offset, a.last_offset)
        for a in aborted
        if seg.base_offset <= a.last_offset <= seg.last_offset
    ]
