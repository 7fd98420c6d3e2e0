"""``__consumer_offsets``: the group coordinator's records, readable as Kafka shows them.

Kafka keeps its group coordinator's state in the compacted internal topic
``__consumer_offsets``; partition N holds the groups of coordinator shard N. kgroupd keeps
its coordinator state in its own coordinator log (``kgroupd.broker.storage``) and shows the topic as
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

import functools
import uuid
from collections.abc import Callable, Hashable
from operator import itemgetter
from typing import Any

import structlog

from kgroupd.broker.coordinator.records import (
    BatchRecordSink,
    CommitEntries,
    OffsetCommitRecord,
    OffsetTombstoneRecord,
    Record,
    RecordSink,
)
from kgroupd.broker.log.consumer_offsets_format import (
    KafkaRecord,
    kafka_record,
    offset_commit_key,
    offset_commit_value,
)
from kgroupd.broker.log.partition import PartitionLog, StoredBatch, now_ms
from kgroupd.broker.log.topics import Topic
from kgroupd.protocol.records import build_batch

logger = structlog.get_logger("kgroupd.consumer_offsets")

__all__ = ["OFFSETS_TOPIC", "OffsetsTopic", "offsets_topic_id"]

OFFSETS_TOPIC = "__consumer_offsets"
DELETE_RETENTION_MS = 86_400_000  # Kafka's delete.retention.ms
OFFSETS_TOPIC_CONFIGS = {
    "cleanup.policy": "compact",
    "compression.type": "producer",
    "segment.bytes": "104857600",  # offsets.topic.segment.bytes
}
# records beyond twice the live keys before a partition is compacted: few, so a commit's
# tuples are freed soon and the next commit reuses warm memory (1,000 cost a fifth of an
# OffsetCommit's CPU over sockets, issue 26; the fold's work per record is the same)
COMPACT_SLACK = 64
RESERVE_BLOCK = 1 << 20  # offsets reserved on disk at a time (--data-dir)
MAX_BATCH_RECORDS = 1000
RETRY_RECORDS = 10_000  # records between attempts to reserve after a failed write

# A record not yet encoded: (offset, identity, payload, timestamp). The identity is the
# record's key: ("offset", group, topic, partition) for offset commits and their tombstones
# (payload: (offset, leader epoch, metadata, commit ms, expire ms) or None), else the key
# bytes (payload: the value bytes or None). One OffsetCommit's partitions of a topic are one
# Raw whose identity is ``COMMITS`` (payload: (group, topic, entries, expire ms)): its records
# take the offsets from the Raw's on, one per entry, and are only spelled out when read.
Raw = tuple[int, Hashable, Any, int]
COMMITS: Hashable = object()
_first = itemgetter(0)
# An encoded record: (offset, identity, key bytes, value bytes or None, timestamp)
Entry = tuple[int, Hashable, bytes, bytes | None, int]


def offsets_topic_id(cluster_id: str) -> uuid.UUID:
    """Stable across restarts: derived from the cluster id (as ``__transaction_state``'s)."""
    return uuid.uuid5(uuid.NAMESPACE_URL, f"kgroupd:{cluster_id}:{OFFSETS_TOPIC}")


class _Partition:
    def __init__(self, log: PartitionLog, start: int) -> None:
        self.log = log
        self.next = start  # the next offset handed out
        self.raw: list[Raw] = []  # handed out, not yet encoded (nobody read them yet)
        # (group, topic) -> its newest commit's Raw, not yet encoded, and the partitions it
        # names: a newer commit naming them all replaces it at once (no fold to wait for)
        self.commits: dict[tuple[str, str], tuple[Raw, list[int]]] = {}
        self.folded = 0  # len(raw) after its last ``_fold``
        self.entries: list[Entry] = []  # offset order; what the batches hold
        self.latest: dict[Hashable, int] = {}  # identity -> offset of its latest record


def _encode(identity: Hashable, payload: Any) -> tuple[bytes, bytes | None]:
    if isinstance(identity, bytes):
        return identity, payload
    commit: tuple[str, str, str, int] = identity  # type: ignore[assignment]
    key = offset_commit_key(commit[1], commit[2], commit[3])
    if payload is None:
        return key, None
    return key, offset_commit_value(*payload)


class OffsetsTopic:
    """The ``__consumer_offsets`` view: created on the first FindCoordinator (``create``),
    or at start-up when the data dir holds groups or the topic existed.

    Records are handed their offsets as the coordinator emits them, but encoded into Kafka's
    formats and batches only when the partition is read (``materialize``, called by
    ``TopicManager.partition``): a commit costs the coordinator a tuple, not an encoding,
    and a record superseded before anyone reads it is never encoded (as if the cleaner had
    run)."""

    def __init__(
        self,
        cluster_id: str,
        partitions: int,
        start_offsets: list[int] | None = None,
        persist: Callable[[list[int], bool], None] | None = None,
    ) -> None:
        # the configs Kafka's group coordinator creates the topic with
        self.topic = Topic(OFFSETS_TOPIC, [], dict(OFFSETS_TOPIC_CONFIGS))
        self.topic.topic_id = offsets_topic_id(cluster_id)
        self.count = partitions
        self.created = False
        self._parts: list[_Partition] = []
        self._start = start_offsets or [0] * partitions
        self._persist = persist  # (next offsets, clean shutdown) -> on disk
        self._reserved = list(self._start)
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
            self._parts.append(_Partition(log, self._start[i]))
        if self._persist is not None:  # one write now, not one per partition's first record
            wanted = [s + RESERVE_BLOCK for s in self._start]
            try:
                self._persist(wanted, False)
                self._reserved = wanted
            except OSError as exc:
                logger.warning("consumer_offsets_reserve_failed", error=str(exc))
        for listener in self.on_create:
            listener()

    def next_offsets(self) -> list[int]:
        """Each partition's next offset (written at a clean shutdown)."""
        if not self.created:
            return list(self._start)
        return [p.next for p in self._parts]

    def close(self) -> None:
        """Clean shutdown: the exact next offsets to disk (with ``--data-dir``)."""
        if self._persist is not None and self.created:
            self._persist(self.next_offsets(), True)

    # --- the record stream -----------------------------------------------------------------
    def sink(self, shard: int, inner: RecordSink | None) -> RecordSink:
        """Shard ``shard``'s sink: records to ``inner`` (the coordinator log) and here."""
        return _TeeSink(self, shard, inner)

    def append(self, shard: int, kafka: KafkaRecord | None) -> None:
        """An encoded record (key, value or None)."""
        if kafka is not None:
            self.add(shard, kafka[0], kafka[1], now_ms())

    def add(self, shard: int, identity: Hashable, payload: Any, ts: int) -> None:
        self.create()  # a group exists: so does the topic (FindCoordinator came first)
        part = self._parts[shard]
        offset = part.next
        part.next = offset + 1
        if part.next > self._reserved[shard]:
            self._reserve(shard, part.next)
        part.raw.append((offset, identity, payload, ts))
        part.latest[identity] = offset
        if len(part.raw) > 2 * part.folded + COMPACT_SLACK:
            _fold(part)
        if part.log.waiters:
            part.log._wake()  # a long poll on this partition: it reads (materializes) now

    def add_commits(
        self,
        shard: int,
        group_id: str,
        topic: str,
        entries: CommitEntries,
        commit_ms: int,
        expire_ms: int | None,
    ) -> None:
        """``add`` for each partition of one commit (the hot path: one tuple a commit, its
        offsets handed out now, its records spelled out when the partition is read)."""
        if not self.created:
            self.create()
        part = self._parts[shard]
        offset = part.next
        key = (group_id, topic)
        named = list(map(_first, entries))
        commits = part.commits
        old = commits.get(key)
        commits[key] = ((offset, COMMITS, (group_id, topic, entries, expire_ms), commit_ms), named)
        if old is not None and old[1] != named and not set(old[1]) <= set(named):
            # the older commit still names partitions this one does not: it stays
            raw = part.raw
            raw.append(old[0])
            if len(raw) > 2 * part.folded + COMPACT_SLACK:
                _fold(part)
        offset += len(entries)
        part.next = offset
        if offset > self._reserved[shard]:
            self._reserve(shard, offset)
        if part.log.waiters:
            part.log._wake()

    def _reserve(self, shard: int, offset: int) -> None:
        """Offsets handed out pass what is reserved on disk: reserve the next block (for
        ``shard``, or for every partition at creation). A write that fails is logged and
        retried at the next record; the records themselves are the coordinator log's job."""
        if self._persist is None:  # nothing to reserve: never asked again
            self._reserved[shard] = 1 << 62
            return
        wanted = list(self._reserved)
        wanted[shard] = offset + RESERVE_BLOCK
        try:
            self._persist(wanted, False)
        except OSError as exc:
            # retried after RETRY_RECORDS more (one line each time, not one per record);
            # a crash before a write succeeds may hand those offsets out again
            logger.warning("consumer_offsets_reserve_failed", error=str(exc))
            self._reserved[shard] = offset + RETRY_RECORDS
            return
        self._reserved = wanted

    def materialize(self, index: int) -> None:
        """Encode what partition ``index`` was handed since it was last read."""
        if not self.created or not 0 <= index < self.count:
            return
        part = self._parts[index]
        if not part.raw and not part.commits:
            return
        # in offset order (a commit goes to ``raw`` when superseded, after younger records;
        # offsets are unique, so tuples compare by offset alone)
        pending = sorted(part.raw + [c[0] for c in part.commits.values()])
        part.commits = {}
        raw, part.raw = _spelled_out(pending, part.latest), []
        part.folded = 0
        latest = part.latest
        entries: list[Entry] = []
        for offset, identity, payload, ts in raw:
            if latest.get(identity) == offset:  # else superseded before anyone read it
                key, value = _encode(identity, payload)
                entries.append((offset, identity, key, value, ts))
        part.entries.extend(entries)
        log = part.log
        if entries:
            self._store(log, entries)
        log.high_watermark = part.next
        if len(part.entries) > 2 * len(latest) + COMPACT_SLACK:
            self.compact(index)

    def flush(self) -> None:
        """Encode every partition's records (tests; a reader calls ``materialize``)."""
        for i in range(len(self._parts)):
            self.materialize(i)

    def _store(self, log: PartitionLog, entries: list[Entry]) -> None:
        for i in range(0, len(entries), MAX_BATCH_RECORDS):
            chunk = entries[i : i + MAX_BATCH_RECORDS]
            data = build_batch([(e[0], e[2], e[3], e[4]) for e in chunk])
            base, last = chunk[0][0], chunk[-1][0]
            max_ts = max(e[4] for e in chunk)
            log.batches.append(StoredBatch(base, last, max_ts, max_ts, data))
            log._bases.append(base)
            log.size_bytes += len(data)
            log.high_watermark = max(log.high_watermark, last + 1)

    def compact(self, index: int, now: int | None = None) -> None:
        """Keep each key's latest record; drop tombstones older than delete.retention.ms."""
        self.materialize(index)
        part = self._parts[index]
        now = now_ms() if now is None else now
        kept: list[Entry] = []
        for entry in part.entries:
            offset, identity, _key, value, ts = entry
            if part.latest.get(identity) != offset:
                continue
            if value is None and now - ts > DELETE_RETENTION_MS:
                del part.latest[identity]
                continue
            kept.append(entry)
        part.entries = kept
        log = part.log
        high = log.high_watermark
        log.batches, log._bases, log.size_bytes = [], [], 0
        if kept:
            self._store(log, kept)
        log.high_watermark = high  # the end stays where it was (its records may be gone)


def _spelled_out(raw: list[Raw], latest: dict[Hashable, int]) -> list[Raw]:
    """``raw`` with each commit's Raw spelled out, a Raw per partition, and ``latest`` naming
    every identity's newest offset (``add`` set it for other records, not for commits)."""
    out: list[Raw] = []
    for item in raw:
        offset, identity, payload, ts = item
        if identity is not COMMITS:
            latest[identity] = offset  # in offset order: the newest is set last
            out.append(item)
            continue
        group_id, topic, entries, expire_ms = payload
        for partition, committed, epoch, metadata in entries:
            key = ("offset", group_id, topic, partition)
            out.append((offset, key, (committed, epoch, metadata, ts, expire_ms), ts))
            latest[key] = offset
            offset += 1
    return out


def _fold(part: _Partition) -> None:
    """Nobody reads the partition: forget what is superseded, unencoded, newest first. A
    commit whose partitions a newer commit of the same group and topic names again goes
    whole, without spelling it out (the usual case: a consumer commits the same partitions
    over and over); other records go when ``latest`` names a newer one."""
    latest = part.latest
    covered: dict[tuple[str, str], frozenset[int]] = {}
    kept: list[Raw] = []
    for item in reversed(part.raw):
        offset, identity, payload, _ts = item
        if identity is COMMITS:
            key = (payload[0], payload[1])
            named = frozenset([e[0] for e in payload[2]])
            seen = covered.get(key)
            if seen is None:
                covered[key] = named
            elif named <= seen:
                continue
            else:
                covered[key] = seen | named
        elif latest.get(identity) != offset:
            continue
        kept.append(item)
    kept.reverse()
    part.raw = kept
    part.folded = len(kept)


class _TeeSink:
    """Records to the coordinator log's sink (if any) and to ``__consumer_offsets``; keeps
    the coordinator log's batched offset-commit path (``BatchRecordSink``)."""

    def __init__(self, topic: OffsetsTopic, shard: int, inner: RecordSink | None) -> None:
        self.topic = topic
        self.shard = shard
        self.inner = inner
        self.inner_commits = inner.offset_commits if isinstance(inner, BatchRecordSink) else None
        if inner is None:  # in memory: a commit goes straight to the view (one call less)
            self.offset_commits = functools.partial(topic.add_commits, shard)  # type: ignore[method-assign]

    def __call__(self, record: Record, /) -> None:
        if self.inner is not None:
            self.inner(record)
        if isinstance(record, OffsetCommitRecord):
            self.topic.add(
                self.shard,
                ("offset", record.group_id, record.topic, record.partition),
                (
                    record.offset,
                    record.leader_epoch,
                    record.metadata,
                    record.commit_timestamp_ms,
                    record.expire_timestamp_ms,
                ),
                now_ms(),
            )
        elif isinstance(record, OffsetTombstoneRecord):
            identity = ("offset", record.group_id, record.topic, record.partition)
            self.topic.add(self.shard, identity, None, now_ms())
        else:
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
        self.topic.add_commits(
            self.shard, group_id, topic, entries, commit_timestamp_ms, expire_timestamp_ms
        )
