"""The log cleaner: log compaction of ``cleanup.policy=compact`` (and ``compact,delete``)
topics, as Kafka's LogCleaner.

Every ``--log-cleaner-backoff-ms`` when it found nothing to do (at once again when it did),
the cleaner picks the filthiest compacted partition: the one with the largest share of dirty
bytes (written since its last clean) in its cleanable range, if that share reaches the
topic's ``min.cleanable.dirty.ratio``; a partition is also taken whatever its ratio when its
first dirty record is older than ``max.compaction.lag.ms``, or when a delete horizon set by an
earlier pass has passed (tombstones and markers to remove). ``kgroupd.broker.log.compaction`` says
what a pass keeps.

The cleanable range starts at the log start and ends before the first of: the active
segment, the last stable offset (an open transaction's records are never cleaned), a record
newer than ``min.compaction.lag.ms``. Under --data-dir the range is whole closed segment
files, merged as Kafka groups them (``kgroupd.broker.storage.segment_cleaner``). In memory there are
no files: the newest batches that fit in ``segment.bytes`` and were appended within
``segment.ms`` of the newest (at least the newest batch) are the active segment, everything
older is closed; ``min.compaction.lag.ms`` is checked per batch.

Reading, compacting and writing run on the cleaner's own thread (at most
``--log-cleaner-io-max-bytes-per-second`` read plus written); putting the result in place runs
on the event loop, and is skipped for a range that retention, DeleteRecords or the memory bound
changed meanwhile.
"""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, cast

import structlog

from kgroupd.broker.log.compaction import AbortedRanges, Cleaning, OffsetMap, Throttle
from kgroupd.broker.log.partition import PartitionLog, StoredBatch, now_ms

if TYPE_CHECKING:
    from kgroupd.broker.log.producers import ProducerStateManager
    from kgroupd.broker.log.topics import Topic, TopicManager

log = structlog.get_logger("kgroupd.cleaner")


@dataclass
class Candidate:
    plog: PartitionLog
    topic: Topic
    ratio: float
    end: int  # the first offset past the cleanable range
    work: object  # the backend's description of the range


@dataclass
class CleanerStats:
    passes: int = 0
    bytes_read: int = 0
    bytes_written: int = 0
    records_removed: int = 0
    seconds: float = 0.0


class LogCleaner:
    def __init__(
        self,
        topics: TopicManager,
        backoff_ms: int,
        io_max_bytes_per_second: int | None,
        dedupe_buffer_size: int = 128 * 1024 * 1024,
        producers: ProducerStateManager | None = None,
    ) -> None:
        self.topics = topics
        self.producers = producers
        self.backoff_s = backoff_ms / 1000
        self.io_rate = io_max_bytes_per_second
        self.map_limit = dedupe_buffer_size
        self.stats = CleanerStats()
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="log-cleaner")
        self._stop = threading.Event()

    async def run(self) -> None:
        while True:
            try:
                did = await self.clean_once()
            except asyncio.CancelledError:
                raise
            except Exception:  # a pass that failed (a full disk...) is retried later
                log.exception("log_cleaner_failed")
                did = False
            if not did:
                await asyncio.sleep(self.backoff_s)

    def close(self) -> None:
        self._stop.set()
        self._pool.shutdown(wait=True, cancel_futures=True)

    # --- choosing ----------------------------------------------------------------------------
    def candidates(self, now: int) -> list[Candidate]:
        out = []
        for topic in list(self.topics.topics.values()):
            if not topic.compacted:
                continue
            for plog in topic.partitions:
                found = self._candidate(topic, plog, now)
                if found is not None:
                    out.append(found)
        return out

    def _candidate(self, topic: Topic, plog: PartitionLog, now: int) -> Candidate | None:
        lag_ms = int(topic.config("min.compaction.lag.ms"))
        lso = plog.last_stable_offset
        if plog.store is not None:
            from kgroupd.broker.storage.segment_cleaner import cleanable

            rng = cleanable(plog.store, plog.cleaned_to, lso, lag_ms, now)  # type: ignore[arg-type]
            dirty, total, first_ts, end = (
                rng.dirty_bytes,
                rng.total_bytes,
                rng.first_dirty_ts,
                rng.end,
            )
            work: object = rng
        else:
            seg_bytes, seg_ms = int(topic.config("segment.bytes")), int(topic.config("segment.ms"))
            batches = _memory_range(plog, seg_bytes, seg_ms, lso, lag_ms, now)
            if not batches:
                return None
            end = batches[-1].last_offset + 1
            dirty_batches = [b for b in batches if b.base_offset >= plog.cleaned_to]
            total = sum(len(b.data) for b in batches)
            dirty = sum(len(b.data) for b in dirty_batches)
            first_ts = dirty_batches[0].max_timestamp if dirty_batches else -1
            work = batches
        if total == 0:
            return None
        ratio = dirty / total
        max_lag = int(topic.config("max.compaction.lag.ms"))
        overdue = dirty > 0 and first_ts >= 0 and now - first_ts > max_lag
        horizon = plog.next_horizon is not None and now >= plog.next_horizon
        if (dirty > 0 and ratio >= float(topic.config("min.cleanable.dirty.ratio"))) or (
            overdue or horizon
        ):
            return Candidate(plog, topic, ratio, end, work)
        return None

    # --- cleaning ----------------------------------------------------------------------------
    async def clean_once(self, now: int | None = None) -> bool:
        """Clean the filthiest partition that needs it; False if none did."""
        now = now_ms() if now is None else now
        found = self.candidates(now)
        if not found:
            return False
        best = max(found, key=lambda c: c.ratio)
        await self.clean(best, now)
        return True

    async def clean(self, c: Candidate, now: int) -> None:
        loop = asyncio.get_running_loop()
        plog = c.plog
        aborted = [(a.producer_id, a.first_offset, a.last_offset) for a in plog.txn.aborted]
        retention = int(c.topic.config("delete.retention.ms"))
        retain = self._last_batches(plog)
        started = loop.time()
        if plog.store is not None:
            from kgroupd.broker.storage import segment_cleaner as sc

            throttle = Throttle(self.io_rate, self._stop)
            rng = cast("sc.Range", c.work)
            try:
                cleaned, cleaning, end = await loop.run_in_executor(
                    self._pool,
                    sc.clean_range,
                    rng,
                    aborted,
                    now,
                    retention,
                    throttle,
                    self.map_limit,
                    retain,
                )
            except OSError:
                if not self._still_there(c):
                    return  # the topic was deleted under the pass (its files with it)
                raise
            if not self._still_there(c):
                sc.discard(cleaned)
                return
            swapped = sc.swap(plog, plog.store, cleaned)  # type: ignore[arg-type]
            range_bytes = rng.total_bytes
            plog._drop_cached_below(end)
            self.stats.bytes_read += 2 * rng.total_bytes
            self.stats.bytes_written += sum(x.new.size for x in cleaned)
        else:
            old: list[StoredBatch] = c.work  # type: ignore[assignment]
            throttle = Throttle(self.io_rate, self._stop)
            new, cleaning, k = await loop.run_in_executor(
                self._pool,
                _clean_memory,
                old,
                plog.cleaned_to,
                aborted,
                now,
                retention,
                throttle,
                self.map_limit,
                retain,
            )
            old = old[:k]
            end = old[-1].last_offset + 1
            if not self._still_there(c) or not plog.replace_head(old, new):
                return
            swapped = len(old)
            range_bytes = sum(len(b.data) for b in old)
            self.stats.bytes_read += 2 * range_bytes
            # batches kept as they were are the same objects (a list's ``in`` compared every
            # new batch with every old one, field by field)
            unchanged = {id(b) for b in old}
            self.stats.bytes_written += sum(len(b.data) for b in new if id(b) not in unchanged)
        if cleaning.removed_markers:
            gone = set(cleaning.removed_markers)
            plog.txn.aborted = [a for a in plog.txn.aborted if a.last_offset not in gone]
        for base, why in cleaning.offsets.expander.failed.items():
            log.warning(
                "compressed_batch_kept_whole",
                topic=plog.topic,
                partition=plog.partition,
                base_offset=base,
                reason=why,
            )
        plog.cleaned_to = end
        plog.next_horizon = cleaning.next_horizon
        if plog.store is not None:
            sc.save_progress(plog.store.directory, end, cleaning.next_horizon)  # type: ignore[attr-defined]
        elapsed = loop.time() - started
        self.stats.passes += 1
        self.stats.records_removed += cleaning.records_removed
        self.stats.seconds += elapsed
        log.info(
            "log_cleaned",
            topic=plog.topic,
            partition=plog.partition,
            end_offset=end,
            dirty_ratio=round(c.ratio, 3),
            bytes_cleaned=range_bytes,
            log_bytes=plog.size_bytes,
            records_removed=cleaning.records_removed,
            batches_removed=cleaning.batches_removed,
            markers_removed=len(cleaning.removed_markers),
            segments_rewritten=swapped,
            segments=None if plog.store is None else len(plog.store.segments),  # type: ignore[attr-defined]
            seconds=round(elapsed, 3),
        )

    def _last_batches(self, plog: PartitionLog) -> frozenset[int]:
        """The base offsets of each idempotent producer's last batch in ``plog``."""
        if self.producers is None:
            return frozenset()
        entries = self.producers.entries(plog.topic, plog.partition)
        return frozenset(seqs[-1][2] for _pid, _epoch, seqs in entries if seqs)

    def _still_there(self, c: Candidate) -> bool:
        topic = self.topics.get(c.topic.name)
        return topic is c.topic and c.plog in topic.partitions


def _memory_range(
    plog: PartitionLog, segment_bytes: int, segment_ms: int, lso: int, lag_ms: int, now: int
) -> list[StoredBatch]:
    """The closed batches in memory: all but the newest ``segment.bytes`` appended within
    ``segment.ms`` of the newest (at least one), from the first, up to the last stable offset
    and ``min.compaction.lag.ms``."""
    batches = plog.batches
    active = len(batches) - 1
    size = len(batches[-1].data) if batches else 0
    since = batches[-1].append_time_ms - segment_ms if batches else 0
    while (
        active > 0
        and size + len(batches[active - 1].data) <= segment_bytes
        and batches[active - 1].append_time_ms >= since
    ):
        active -= 1
        size += len(batches[active].data)
    out = []
    for b in batches[: max(active, 0)]:
        if b.last_offset >= lso or b.max_timestamp > now - lag_ms:
            break
        out.append(b)
    return out


def _clean_memory(
    old: list[StoredBatch],
    cleaned_to: int,
    aborted: list[tuple[int, int, int]],
    now: int,
    retention: int,
    throttle: Throttle,
    map_limit: int = 1 << 62,
    retain: frozenset[int] = frozenset(),
) -> tuple[list[StoredBatch], Cleaning, int]:
    """The cleaner's thread: ``old`` compacted (unchanged batches are the same objects),
    with a key map of the dirty batches (from ``cleaned_to``) as far as ``map_limit`` allows
    (at least one batch). Returns the new batches, and how many of ``old`` they replace. The
    throttle counts the bytes read (no I/O, but the same bound on the work)."""
    offsets = OffsetMap(AbortedRanges.of(aborted), map_limit)
    count = len(old)
    for i, b in enumerate(old):
        if b.base_offset < cleaned_to:
            continue
        if offsets.full and b.base_offset > cleaned_to:
            count = i
            break
        throttle.take(len(b.data))
        offsets.add(b.data)
    cleaning = Cleaning(offsets, now, retention, retain)
    new: list[StoredBatch] = []
    for b in old[:count]:
        throttle.take(len(b.data))
        kept = cleaning.clean(b.data)
        if kept is b.data:
            new.append(b)
        elif kept is not None:
            data = bytes(kept)
            new.append(
                StoredBatch(b.base_offset, b.last_offset, b.max_timestamp, b.append_time_ms, data)
            )
    return new, cleaning, count
