"""An in-memory partition log: record batches as bytes, indexed by base offset."""

from __future__ import annotations

import asyncio
import bisect
import time
from dataclasses import dataclass, field
from typing import Protocol

from broker.log.txn import TxnIndex
from protocol.records import (
    TRANSACTIONAL_BIT,
    BatchHeader,
    control_batch,
    parse_header,
    with_base_offset,
)


class SegmentStore(Protocol):
    """Where a partition's batches persist under --data-dir (``broker.storage.topic_store``
    implements it; the log knows nothing more of storage)."""

    def append(self, batch: bytes, base_offset: int, last_offset: int) -> None: ...

    def delete_below(self, log_start_offset: int) -> int: ...


@dataclass(slots=True)
class StoredBatch:
    base_offset: int
    last_offset: int
    max_timestamp: int
    append_time_ms: int
    data: bytes


@dataclass
class PartitionLog:
    topic: str
    partition: int
    batches: list[StoredBatch] = field(default_factory=list)
    _bases: list[int] = field(default_factory=list)
    log_start_offset: int = 0
    high_watermark: int = 0
    size_bytes: int = 0
    waiters: list[asyncio.Future[None]] = field(default_factory=list)
    # Segment files under --data-dir (broker.storage.topic_store.PartitionStore), else None.
    store: SegmentStore | None = None
    # Open and aborted transactions (rebuilt from the batches at start-up).
    txn: TxnIndex = field(default_factory=TxnIndex)

    def append(self, batch: bytes, header: BatchHeader, now_ms: int) -> int:
        """Store ``batch`` (already carrying its base offset); returns that offset."""
        base = self.high_watermark
        last = base + header.last_offset_delta
        if self.store is not None:
            self.store.append(batch, base, last)
        self.batches.append(StoredBatch(base, last, header.max_timestamp, now_ms, batch))
        self._bases.append(base)
        self.high_watermark = last + 1
        self.size_bytes += len(batch)
        if header.attributes & TRANSACTIONAL_BIT:
            self.txn.on_batch(header, base, batch)
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
        """Start-up: a batch read back from a segment, at the offsets it was stored with."""
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
        self, offset: int, max_bytes: int, at_least_one: bool, below: int | None = None
    ) -> tuple[list[bytes], int]:
        """Whole batches from the one holding ``offset``, up to ``max_bytes``, as the stored
        objects (never copied: the response is written with them as they are).

        With ``at_least_one`` the first batch is returned even when it alone is larger,
        so a consumer always makes progress. ``below`` stops at the first batch starting at
        or after it (read_committed reads below the last stable offset). Returns the batches
        and their total size.
        """
        i = self.find(offset)
        parts: list[bytes] = []
        total = 0
        batches = self.batches
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

    def drop_below(self, log_start_offset: int) -> None:
        """Start-up: forget batches wholly below a checkpointed log start offset."""
        while len(self.batches) > 1 and self.batches[0].last_offset < log_start_offset:
            head = self.batches.pop(0)
            self._bases.pop(0)
            self.size_bytes -= len(head.data)
        self.log_start_offset = max(self.log_start_offset, log_start_offset)
        self.txn.trim(self.log_start_offset)

    def offset_for_timestamp(self, timestamp: int) -> tuple[int, int] | None:
        """First batch whose max timestamp reaches ``timestamp``: (base offset, batch index)."""
        for i in range(self.find(self.log_start_offset), len(self.batches)):
            b = self.batches[i]
            if b.max_timestamp >= timestamp:
                return b.base_offset, i
        return None

    def max_timestamp_batch(self) -> StoredBatch | None:
        best: StoredBatch | None = None
        for b in self.batches:
            if best is None or b.max_timestamp > best.max_timestamp:
                best = b
        return best

    def apply_retention(self, retention_ms: int, retention_bytes: int, now_ms: int) -> int:
        """Drop whole batches from the head; returns how many were dropped.

        The newest batch always stays, as Kafka keeps the active segment.
        """
        dropped = 0
        while len(self.batches) > 1:
            head = self.batches[0]
            # Kafka ages a segment by the largest record timestamp in it.
            too_old = retention_ms >= 0 and now_ms - head.max_timestamp > retention_ms
            too_big = retention_bytes >= 0 and self.size_bytes > retention_bytes
            if not (too_old or too_big):
                break
            self.batches.pop(0)
            self._bases.pop(0)
            self.size_bytes -= len(head.data)
            # never back (DeleteRecords moves the start inside a batch it keeps)
            self.log_start_offset = max(self.log_start_offset, self.batches[0].base_offset)
            dropped += 1
        if dropped:
            self.txn.trim(self.log_start_offset)
        if dropped and self.store is not None:
            self.store.delete_below(self.log_start_offset)
        return dropped

    def delete_records(self, offset: int) -> int:
        """DeleteRecords: move the log start offset up to ``offset`` (at most the high
        watermark; the caller checks), dropping the batches wholly below it (the newest
        always stays, as Kafka keeps the active segment) and recording the new start on disk.
        Returns the log start offset (the low watermark)."""
        if offset <= self.log_start_offset:
            return self.log_start_offset
        while len(self.batches) > 1 and self.batches[0].last_offset < offset:
            head = self.batches.pop(0)
            self._bases.pop(0)
            self.size_bytes -= len(head.data)
        self.log_start_offset = offset
        self.txn.trim(offset)
        if self.store is not None:
            self.store.delete_below(offset)
        return offset

    def wait_for_data(self) -> asyncio.Future[None]:
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.waiters.append(fut)
        return fut


def now_ms() -> int:
    return int(time.time() * 1000)
