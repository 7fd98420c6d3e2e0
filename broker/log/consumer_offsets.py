"""``__consumer_offsets``: the group coordinator's records, readable as Kafka shows them.

Kafka keeps its group coordinator's state in the compacted internal topic
``__consumer_offsets``; partition N holds the groups of coordinator shard N. kgroupd keeps
its coordinator state in its own coordinator log (``broker.storage``) and shows the topic as
a view built from the same record stream: every record a shard emits goes through
``OffsetsTopic.sink`` (beside the coordinator log's sink), is turned into Kafka's key and
value (``consumer_offsets_format``) and is appended to the shard's partition, so Fetch,
ListOffsets and long polling read it like any partition (``PartitionLog``), as magic-2
batches (one batch per event-loop turn and partition: the records of one request's answer
share a batch, as Kafka writes one batch per coordinator write).

Memory is bounded as Kafka's log cleaner bounds the topic: each partition remembers, per
key, the offset of its latest record; once the records held exceed twice the live keys
(Kafka's ``min.cleanable.dirty.ratio`` 0.5) plus a slack, the partition is compacted: only
the latest record of each key stays (offsets keep their gaps, as in a compacted log), and
tombstones older than ``delete.retention.ms`` (24 h, Kafka's default) go too. The live keys
are the coordinator's own state (one per committed offset, group and member record), so the
view costs a bounded multiple of what the coordinator already holds.

Offsets only grow and never name two records. Without ``--data-dir`` the topic starts again
from offset 0 after a restart (nothing of it survives). With ``--data-dir`` each partition's
next offset is reserved ahead on disk (``reserve``, in blocks) and written exactly at a clean
shutdown: after a restart a partition starts empty at that offset (its log start offset),
so a follower that had read to N reads on from N and sees only new records; after a crash
it starts at the reserved bound, above every offset handed out.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable

from broker.coordinator.records import (
    BatchRecordSink,
    CommitEntries,
    OffsetCommitRecord,
    Record,
    RecordSink,
)
from broker.log.consumer_offsets_format import (
    KafkaRecord,
    kafka_record,
    offset_commit_key,
    offset_commit_value,
)
from broker.log.partition import PartitionLog, StoredBatch, now_ms
from broker.log.topics import Topic
from protocol.records import build_batch

__all__ = ["OFFSETS_TOPIC", "OffsetsTopic", "offsets_topic_id"]

OFFSETS_TOPIC = "__consumer_offsets"
DELETE_RETENTION_MS = 86_400_000  # Kafka's delete.retention.ms
COMPACT_SLACK = 1000  # records beyond twice the live keys before a partition is compacted
RESERVE_BLOCK = 1 << 20  # offsets reserved on disk at a time (--data-dir)
MAX_BATCH_RECORDS = 1000

# (offset, key, value or None, timestamp)
Entry = tuple[int, bytes, bytes | None, int]


def offsets_topic_id(cluster_id: str) -> uuid.UUID:
    """Stable across restarts: derived from the cluster id (as ``__transaction_state``'s)."""
    return uuid.uuid5(uuid.NAMESPACE_URL, f"kgroupd:{cluster_id}:{OFFSETS_TOPIC}")


class _Partition:
    def __init__(self, log: PartitionLog) -> None:
        self.log = log
        self.entries: list[Entry] = []  # offset order; what the batches hold
        self.latest: dict[bytes, int] = {}  # key -> offset of its latest record
        self.pending: list[tuple[bytes, bytes | None, int]] = []


class OffsetsTopic:
    """The ``__consumer_offsets`` view: created on the first FindCoordinator (``create``),
    or at start-up when the data dir holds groups or the topic existed."""

    def __init__(
        self,
        cluster_id: str,
        partitions: int,
        start_offsets: list[int] | None = None,
        persist: Callable[[list[int], bool], None] | None = None,
    ) -> None:
        self.topic = Topic(OFFSETS_TOPIC, [], {"cleanup.policy": "compact"})
        self.topic.topic_id = offsets_topic_id(cluster_id)
        self.count = partitions
        self.created = False
        self._parts: list[_Partition] = []
        self._start = start_offsets or [0] * partitions
        self._persist = persist  # (next offsets, clean shutdown) -> on disk
        self._reserved = list(self._start)
        self._flush_scheduled = False
        self.on_create: list[Callable[[], None]] = []

    # --- the topic -------------------------------------------------------------------------
    def create(self) -> None:
        if self.created:
            return
        self.created = True
        for i in range(self.count):
            log = PartitionLog(OFFSETS_TOPIC, i)
            log.log_start_offset = log.high_watermark = self._start[i]
            self.topic.partitions.append(log)
            self._parts.append(_Partition(log))
        for listener in self.on_create:
            listener()

    def next_offsets(self) -> list[int]:
        """Each partition's next offset (written at a clean shutdown)."""
        self.flush()
        if not self.created:
            return list(self._start)
        return [p.log.high_watermark for p in self._parts]

    def close(self) -> None:
        """Clean shutdown: the exact next offsets to disk (with ``--data-dir``)."""
        if self._persist is not None and self.created:
            self._persist(self.next_offsets(), True)

    # --- the record stream -----------------------------------------------------------------
    def sink(self, shard: int, inner: RecordSink | None) -> RecordSink:
        """Shard ``shard``'s sink: records to ``inner`` (the coordinator log) and here."""
        return _TeeSink(self, shard, inner)

    def append(self, shard: int, kafka: KafkaRecord | None) -> None:
        if kafka is None:
            return
        self.create()  # a group exists: so does the topic (FindCoordinator came first)
        self._parts[shard].pending.append((kafka[0], kafka[1], now_ms()))
        if not self._flush_scheduled:
            self._flush_scheduled = True
            try:
                asyncio.get_running_loop().call_soon(self.flush)
            except RuntimeError:  # no loop (unit tests): sealed at once
                self.flush()

    def flush(self) -> None:
        """Seal every partition's pending records into one batch each."""
        self._flush_scheduled = False
        for i, part in enumerate(self._parts):
            if part.pending:
                self._seal(i, part)

    def _seal(self, index: int, part: _Partition) -> None:
        pending, part.pending = part.pending, []
        log = part.log
        base = log.high_watermark
        end = base + len(pending)
        if self._persist is not None and end > self._reserved[index]:
            self._reserved[index] = end + RESERVE_BLOCK
            self._persist(list(self._reserved), False)
        entries = [(base + i, k, v, ts) for i, (k, v, ts) in enumerate(pending)]
        for offset, key, _value, _ts in entries:
            part.latest[key] = offset
        part.entries.extend(entries)
        self._store(log, entries)
        log._wake()
        if len(part.entries) > 2 * len(part.latest) + COMPACT_SLACK:
            self.compact(index)

    def _store(self, log: PartitionLog, entries: list[Entry]) -> None:
        for i in range(0, len(entries), MAX_BATCH_RECORDS):
            chunk = entries[i : i + MAX_BATCH_RECORDS]
            data = build_batch(chunk)
            base, last = chunk[0][0], chunk[-1][0]
            max_ts = max(e[3] for e in chunk)
            log.batches.append(StoredBatch(base, last, max_ts, max_ts, data))
            log._bases.append(base)
            log.size_bytes += len(data)
            log.high_watermark = max(log.high_watermark, last + 1)

    def compact(self, index: int, now: int | None = None) -> None:
        """Keep each key's latest record; drop tombstones older than delete.retention.ms."""
        part = self._parts[index]
        now = now_ms() if now is None else now
        kept: list[Entry] = []
        for entry in part.entries:
            offset, key, value, ts = entry
            if part.latest.get(key) != offset:
                continue
            if value is None and now - ts > DELETE_RETENTION_MS:
                del part.latest[key]
                continue
            kept.append(entry)
        part.entries = kept
        log = part.log
        high = log.high_watermark
        log.batches, log._bases, log.size_bytes = [], [], 0
        self._store(log, kept)
        log.high_watermark = high  # the end stays where it was (its records may be gone)


class _TeeSink:
    """Records to the coordinator log's sink (if any) and to ``__consumer_offsets``; keeps
    the coordinator log's batched offset-commit path (``BatchRecordSink``)."""

    def __init__(self, topic: OffsetsTopic, shard: int, inner: RecordSink | None) -> None:
        self.topic = topic
        self.shard = shard
        self.inner = inner
        self.inner_commits = inner.offset_commits if isinstance(inner, BatchRecordSink) else None

    def __call__(self, record: Record, /) -> None:
        if self.inner is not None:
            self.inner(record)
        self.topic.append(self.shard, kafka_record(record))

    def offset_commits(
        self,
        group_id: str,
        topic: str,
        entries: CommitEntries,
        commit_timestamp_ms: int,
        expire_timestamp_ms: int | None,
    ) -> None:
        if self.inner_commits is not None:
            self.inner_commits(group_id, topic, entries, commit_timestamp_ms, expire_timestamp_ms)
        elif self.inner is not None:
            for p, o, e, m in entries:
                rec = OffsetCommitRecord(
                    group_id, topic, p, o, e, m, commit_timestamp_ms, expire_timestamp_ms
                )
                self.inner(rec)
        for partition, offset, epoch, metadata in entries:
            key = offset_commit_key(group_id, topic, partition)
            value = offset_commit_value(
                offset, epoch, metadata, commit_timestamp_ms, expire_timestamp_ms
            )
            self.topic.append(self.shard, (key, value))
