"""The bytes of record batches held in memory, shared by every partition, oldest out first.

In memory (no --data-dir) the batches are the topic data: over ``--max-memory-bytes`` the
oldest are deleted (the log start offset moves, ``memory_bound_deleted`` is logged). Under
--data-dir they are only a cache of the newest batches (``--log-cache-bytes``): over it the
oldest are forgotten, and read from the segment files when asked for again.

Batches leave in the order they came (a FIFO over all partitions). Going over the limit
evicts down to seven eighths of it, in one cut per partition.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from typing import Protocol


class StoredBatch(Protocol):
    """A batch held in memory (``kgroupd.broker.log.partition.StoredBatch``): its bytes."""

    @property
    def data(self) -> bytes | memoryview: ...


class PartitionLog(Protocol):
    """What the budget asks of a partition (``kgroupd.broker.log.partition.PartitionLog``)."""

    @property
    def batches(self) -> Sequence[StoredBatch]: ...

    def evictable(self, k: int) -> bool: ...

    def evict(self, k: int) -> int: ...


class MemoryBudget:
    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.total = 0
        self._fifo: deque[tuple[PartitionLog, StoredBatch]] = deque()
        self._stale = 0  # queued entries of batches the cleaner replaced

    def added(self, log: PartitionLog, stored: StoredBatch) -> None:
        self._fifo.append((log, stored))
        self.total += len(stored.data)
        if self.total > self.limit:
            self._evict()

    def removed(self, nbytes: int) -> None:
        """Batches left a log some other way (retention, DeleteRecords, a deleted topic)."""
        self.total -= nbytes
        if not self.total:
            self._fifo.clear()  # only stale entries can be left

    def replaced(
        self, log: PartitionLog, freed: int, new: Sequence[StoredBatch], stale: int
    ) -> None:
        """The cleaner rewrote the oldest batches of ``log`` as ``new`` (``freed`` bytes
        fewer): they are queued first, in the log's order, as the batches they replace were.
        The ``stale`` entries of those (emptied, or now queued twice) are skipped when met,
        and dropped when they are most of the queue."""
        self.total -= freed
        self._fifo.extendleft((log, s) for s in reversed(new))
        self._stale += stale
        if self._stale > 1024 and self._stale > len(self._fifo) // 2:
            seen: set[int] = set()
            fifo: deque[tuple[PartitionLog, StoredBatch]] = deque()
            for entry in self._fifo:
                if entry[1].data and id(entry[1]) not in seen:
                    seen.add(id(entry[1]))
                    fifo.append(entry)
            self._fifo = fifo
            self._stale = 0

    def _evict(self) -> None:
        target = self.limit - self.limit // 8
        cuts: dict[PartitionLog, int] = {}
        kept: list[tuple[PartitionLog, StoredBatch]] = []
        freed = 0
        fifo = self._fifo
        while fifo and self.total - freed > target:
            log, stored = fifo.popleft()
            k = cuts.get(log, 0)
            batches = log.batches
            if k >= len(batches) or batches[k] is not stored:
                continue  # already gone
            if not log.evictable(k):
                kept.append((log, stored))
                continue
            cuts[log] = k + 1
            freed += len(stored.data)
        fifo.extendleft(reversed(kept))
        for log, k in cuts.items():
            self.total -= log.evict(k)
