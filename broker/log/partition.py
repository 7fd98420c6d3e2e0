"""A partition log: record batches as bytes, indexed by base offset.

In memory (no --data-dir) ``batches`` is the whole log, bounded by ``--max-memory-bytes``
(``budget``: the oldest batches are deleted first). Under --data-dir the log lives in its
segment files (``store``) and ``batches`` is only the cached tail: the newest batches,
contiguous up to the high watermark, bounded by ``--log-cache-bytes`` shared by every
partition; older offsets are read from the files.
"""

from __future__ import annotations

import asyncio
import bisect
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

import structlog

from kgroupd.broker.log.budget import MemoryBudget
from kgroupd.broker.log.txn import TxnIndex
from kgroupd.protocol.records import (
    TRANSACTIONAL_BIT,
    BatchHeader,
    control_batch,
    parse_header,
    with_base_offset,
)


class ReadWouldBlock(Exception):
    """A read that must not wait for the disk (``nowait``) would: the page cache does not
    hold it (or it is too large to make on the event loop); ``PartitionLog.read_files``
    makes it on a reader thread."""


class SegmentStore(Protocol):
    """Where a partition's batches persist under --data-dir (``kgroupd.broker.storage.topic_store``
    implements it; the log knows nothing more of storage)."""

    def append(self, batch: bytes, base_offset: int, last_offset: int) -> None: ...

    def delete_below(self, log_start_offset: int, later: bool = False) -> int: ...

    def read(
        self,
        offset: int,
        max_bytes: int,
        at_least_one: bool,
        below: int | None,
        nowait: bool = False,
    ) -> tuple[list[memoryview], int]: ...

    async def read_off_loop(
        self, offset: int, max_bytes: int, at_least_one: bool, below: int | None
    ) -> tuple[list[memoryview], int]: ...

    def retention_start(
        self, retention_ms: int, retention_bytes: int, now_ms: int
    ) -> int | None: ...

    def batch_at_timestamp(self, timestamp: int, log_start: int) -> StoredBatch | None: ...

    def max_timestamp_batch(self) -> StoredBatch | None: ...

    @property
    def size(self) -> int: ...


log_events = structlog.get_logger("kgroupd.log")


@dataclass(slots=True)
class StoredBatch:
    base_offset: int
    last_offset: int
    max_timestamp: int
    append_time_ms: int
    data: bytes


@dataclass(eq=False)
class PartitionLog:
    topic: str
    partition: int
    batches: list[StoredBatch] = field(default_factory=list)
    _bases: list[int] = field(default_factory=list)
    log_start_offset: int = 0
    high_watermark: int = 0
    size_bytes: int = 0
    waiters: list[asyncio.Future[None]] = field(default_factory=list)
    # Segment files under --data-dir (kgroupd.broker.storage.partition_store.PartitionStore), else
    # None.
    store: SegmentStore | None = None
    # Open and aborted transactions (rebuilt from the batches at start-up).
    txn: TxnIndex = field(default_factory=TxnIndex)
    # The memory bound (in memory) or the cache (under --data-dir) the batches count against.
    budget: MemoryBudget | None = None
    # Log compaction (kgroupd.broker.log.cleaner): the end of the last cleaned range (the first
    # dirty offset) and the earliest delete horizon left in it.
    cleaned_to: int = 0
    next_horizon: int | None = None

    def append(self, batch: bytes, header: BatchHeader, now_ms: int) -> int:
        """Store ``batch`` (already carrying its base offset); returns that offset."""
        base = self.high_watermark
        last = base + header.last_offset_delta
        if self.store is not None:
            self.store.append(batch, base, last)
        stored = StoredBatch(base, last, header.max_timestamp, now_ms, batch)
        self.batches.append(stored)
        self._bases.append(base)
        self.high_watermark = last + 1
        self.size_bytes += len(batch)
        if header.attributes & TRANSACTIONAL_BIT:
            self.txn.on_batch(header, base, batch)
        if self.budget is not None:
            self.budget.added(self, stored)
        self._wake()
        return base

    def write_marker(
        self, producer_id: int, producer_epoch: int, commit: bool, coordinator_epoch: int
    ) -> int:
        """Append a commit or abort marker (a control batch) for ``producer_id``'s
        transaction; returns its offset."""
        now = now_ms()
        raw = control_batch(producer_id, producer_epoch, commit, coordinator_epoch, now)
        batch = bytes(with_base_offset(raw, self.high_watermark))
        return self.append(batch, parse_header(batch), now)

    @property
    def last_stable_offset(self) -> int:
        return self.txn.last_stable_offset(self.high_watermark)

    def restore(self, batch: bytes, header: BatchHeader) -> None:
        """Start-up: a batch read back at the offsets it was stored with (in memory)."""
        base = header.base_offset
        last = base + header.last_offset_delta
        self.batches.append(
            StoredBatch(base, last, header.max_timestamp, header.max_timestamp, batch)
        )
        self._bases.append(base)
        self.high_watermark = last + 1
        self.size_bytes += len(batch)
        if header.attributes & TRANSACTIONAL_BIT:
            self.txn.on_batch(header, base, batch)

    def _wake(self) -> None:
        if self.waiters:
            waiters, self.waiters = self.waiters, []
            for fut in waiters:
                if not fut.done():
                    fut.set_result(None)

    def find(self, offset: int) -> int:
        """Index of the batch holding ``offset`` (or the first after it); len() if none."""
        i = bisect.bisect_right(self._bases, offset) - 1
        if i < 0:
            return 0
        if self.batches[i].last_offset < offset:
            return i + 1
        return i

    def read(self, offset: int, max_bytes: int, at_least_one: bool) -> tuple[bytes, int]:
        """``read_chunks`` joined into one bytes object."""
        parts, total = self.read_chunks(offset, max_bytes, at_least_one)
        return b"".join(parts), total

    def read_chunks(
        self,
        offset: int,
        max_bytes: int,
        at_least_one: bool,
        below: int | None = None,
        nowait: bool = False,
    ) -> tuple[Sequence[bytes | memoryview], int]:
        """Whole batches from the one holding ``offset``, up to ``max_bytes``, as the stored
        objects (never copied: the response is written with them as they are), or under
        --data-dir, below the cached tail, as views of what was read from the segment file.

        With ``at_least_one`` the first batch is returned even when it alone is larger,
        so a consumer always makes progress. ``below`` stops at the first batch starting at
        or after it (read_committed reads below the last stable offset). Returns the batches
        and their total size. ``nowait``: a read of the files that would wait for the disk
        (or is large) raises ``ReadWouldBlock`` (``read_files`` makes it off the loop).
        """
        batches = self.batches
        if self.store is not None and (not batches or offset < batches[0].base_offset):
            return self.store.read(offset, max_bytes, at_least_one, below, nowait)
        i = self.find(offset)
        parts: list[bytes] = []
        total = 0
        while i < len(batches):
            if below is not None and batches[i].base_offset >= below:
                break
            data = batches[i].data
            if total + len(data) > max_bytes and (parts or not at_least_one):
                break
            parts.append(data)
            total += len(data)
            i += 1
        return parts, total

    async def read_files(
        self, offset: int, max_bytes: int, at_least_one: bool, below: int | None
    ) -> tuple[Sequence[bytes | memoryview], int]:
        """``read_chunks`` of a read that raised ``ReadWouldBlock``: made on a reader thread
        while the event loop serves other connections."""
        if self.store is None:  # pragma: no cover (only file reads would block)
            return self.read_chunks(offset, max_bytes, at_least_one, below)
        return await self.store.read_off_loop(offset, max_bytes, at_least_one, below)

    def _drop_head(self, k: int) -> int:
        """Forget the ``k`` oldest batches held in memory; returns their size."""
        if k <= 0:
            return 0
        freed = sum(len(b.data) for b in self.batches[:k])
        del self.batches[:k]
        del self._bases[:k]
        if self.store is None:
            self.size_bytes -= freed
        return freed

    def _drop_cached_below(self, offset: int) -> None:
        """Forget the held batches wholly below ``offset`` (the newest stays in memory)."""
        k = 0
        keep = 1 if self.store is None else 0
        while k < len(self.batches) - keep and self.batches[k].last_offset < offset:
            k += 1
        freed = self._drop_head(k)
        if self.budget is not None:
            self.budget.removed(freed)

    def evictable(self, k: int) -> bool:
        """Whether the budget may take the ``k``-th held batch (in memory, never the newest:
        as Kafka keeps the active segment)."""
        return self.store is not None or k < len(self.batches) - 1

    def evict(self, k: int) -> int:
        """The budget takes the ``k`` oldest held batches: under --data-dir they stay in the
        files; in memory they are deleted (the log start offset moves past them)."""
        if self.store is not None:
            return self._drop_head(k)
        freed = self._drop_head(k)
        start = max(self.log_start_offset, self.batches[0].base_offset)
        log_events.warning(
            "memory_bound_deleted",
            topic=self.topic,
            partition=self.partition,
            batches=k,
            bytes=freed,
            log_start_offset=start,
        )
        self.log_start_offset = start
        self.txn.trim(start)
        return freed

    def release(self) -> None:
        """The topic is deleted: its held batches leave the budget."""
        freed = self._drop_head(len(self.batches))
        if self.budget is not None:
            self.budget.removed(freed)

    def drop_below(self, log_start_offset: int) -> None:
        """Start-up: forget batches wholly below a checkpointed log start offset."""
        self._drop_cached_below(log_start_offset)
        self.log_start_offset = max(self.log_start_offset, log_start_offset)
        self.txn.trim(self.log_start_offset)

    def batch_at_timestamp(self, timestamp: int, start: int | None = None) -> StoredBatch | None:
        """The first batch whose max timestamp reaches ``timestamp``, among those holding an
        offset at or after ``start`` (default: the log start offset)."""
        start = self.log_start_offset if start is None else max(start, self.log_start_offset)
        if self.store is not None:
            return self.store.batch_at_timestamp(timestamp, start)
        for i in range(self.find(start), len(self.batches)):
            b = self.batches[i]
            if b.max_timestamp >= timestamp:
                return b
        return None

    def max_timestamp_batches(self) -> list[StoredBatch]:
        """The batches ListOffsets MAX_TIMESTAMP looks in: every batch in memory; under
        --data-dir the first batch with the largest timestamp (each segment keeps it)."""
        if self.store is None:
            return self.batches
        found = self.store.max_timestamp_batch()
        return [] if found is None else [found]

    def apply_retention(
        self, retention_ms: int, retention_bytes: int, now_ms: int, later: bool = False
    ) -> int:
        """Drop whole batches (in memory) or whole segments (under --data-dir, as Kafka)
        from the head; returns how many were dropped.

        The newest batch (the active segment) always stays. ``later``: the segment files go
        on the storage's file thread (``PartitionStore.delete_below``).
        """
        if self.store is not None:
            start = self.store.retention_start(retention_ms, retention_bytes, now_ms)
            if start is None or start <= self.log_start_offset:
                return 0
            self.log_start_offset = start
            dropped = self.store.delete_below(start, later)
            self.size_bytes = self.store.size
            self._drop_cached_below(start)
            self.txn.trim(start)
            return dropped
        dropped = 0
        while len(self.batches) - dropped > 1:
            head = self.batches[dropped]
            # Kafka ages a segment by the largest record timestamp in it.
            too_old = retention_ms >= 0 and now_ms - head.max_timestamp > retention_ms
            too_big = retention_bytes >= 0 and self.size_bytes > retention_bytes
            if not (too_old or too_big):
                break
            self.size_bytes -= len(head.data)
            dropped += 1
        if dropped:
            self.size_bytes += self._drop_head_removed(dropped)
            # never back (DeleteRecords moves the start inside a batch it keeps)
            self.log_start_offset = max(self.log_start_offset, self.batches[0].base_offset)
            self.txn.trim(self.log_start_offset)
        return dropped

    def replace_head(self, old: list[StoredBatch], new: list[StoredBatch]) -> bool:
        """In memory: the cleaner's ``new`` batches in place of ``old``, if ``old`` are still
        the oldest held (else nothing: retention or the bound took some meanwhile)."""
        k = len(old)
        if k == 0 or len(self.batches) <= k or self.batches[0] is not old[0]:
            return False
        if self.batches[k - 1] is not old[-1]:
            return False
        self.batches[:k] = new
        self._bases[:k] = [b.base_offset for b in new]
        before = sum(len(b.data) for b in old)
        after = sum(len(b.data) for b in new)
        self.size_bytes += after - before
        kept = {id(b) for b in new}
        for b in old:
            if id(b) not in kept:
                b.data = b""  # freed now, though the budget's queue may still name it
        if self.budget is not None:
            self.budget.replaced(self, before - after, new, len(old))
        return True

    def _drop_head_removed(self, k: int) -> int:
        freed = self._drop_head(k)
        if self.budget is not None:
            self.budget.removed(freed)
        return freed

    def delete_records(self, offset: int) -> int:
        """DeleteRecords: move the log start offset up to ``offset`` (at most the high
        watermark; the caller checks), dropping the batches wholly below it (the newest
        always stays, as Kafka keeps the active segment) and recording the new start on disk.
        Returns the log start offset (the low watermark)."""
        if offset <= self.log_start_offset:
            return self.log_start_offset
        self._drop_cached_below(offset)
        self.log_start_offset = offset
        self.txn.trim(offset)
        if self.store is not None:
            self.store.delete_below(offset)
            self.size_bytes = self.store.size
        return offset

    def wait_for_data(self) -> asyncio.Future[None]:
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.waiters.append(fut)
        return fut


def now_ms() -> int:
    return int(time.time() * 1000)
