"""Coordinator state on disk: one record log for every shard, compacted into per-shard
snapshots.

Every record a shard emits is appended (as a binary record, ``encode_record``, in a
CRC-checked entry) to the broker's current coordinator log ``log-SEQ.log``, written on the
event loop; ``flush()`` hands back a future for the fsync when the policy is ``always``. One
file for all shards means one fsync per round however many groups commit (group commit across
shards). A record names its group, and a group's shard is ``partition_for(group_id)``, so
loading routes each entry to its shard.

When the log passes ``snapshot_bytes`` (and at clean shutdown) every shard's compacted state
is written to its snapshot: a new log is started at once, the snapshots are written and
fsynced off the loop, renamed into place, and only then are the logs they cover deleted, so a
crash at any point leaves, for each shard, a snapshot plus the logs after it. Every shard
with records since its last snapshot gets a new one at each rotation (an empty one too, so
an older snapshot never outlives state deleted since); a shard without any keeps its
snapshot, since the logs deleted hold nothing of it.

A snapshot (``coordinator_format``) holds the group metadata records and the committed
offsets packed per (group, topic); start-up decodes the offsets straight into the shard's
dictionaries (``load_offsets``) and replays only the logs written after the snapshot,
through the same ``replay`` the live path uses. Loading streams: one entry at a time.

Data dirs written before the shared log (per-shard logs ``shard-NN-SEQ.log``, of format
version 1 (JSON entries) or 2) are still read: a shard's own logs after its snapshot, then
the shared logs; the next rotation's snapshots cover them and they are deleted.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import structlog

from kgroupd.broker.coordinator.consumer.records import ConsumerRecord
from kgroupd.broker.coordinator.core import OffsetAndMetadata
from kgroupd.broker.coordinator.records import (
    CommitEntries,
    GroupMetadataRecord,
    OffsetCommitRecord,
    TxnOffsetCommitRecord,
    encode_offset_commit,
    encode_record,
)
from kgroupd.broker.coordinator.txn.records import TxnRecord, encode_txn_record
from kgroupd.broker.storage.coordinator_format import encode_header, encode_offset_blocks
from kgroupd.broker.storage.coordinator_load import (
    LOG_NAME,
    SHARED_NAME,
    TXN_RECORD_CLASSES,
    Loading,
    ShardFiles,
    ShardLoader,
    StoredRecord,
    file_records,
    track,
)
from kgroupd.broker.storage.entries import KIND_RECORD_LOG, KIND_SNAPSHOT, entry, file_header
from kgroupd.broker.storage.fileio import fsync_dir, write_all
from kgroupd.broker.storage.fsync import FsyncWorker

__all__ = ["CoordinatorStore", "ShardLoader", "file_records", "fsync_dir"]


log = structlog.get_logger("kgroupd.storage")

# What a snapshot holds of a shard's offsets: (group, topic, {partition: offset}), copied.
OffsetsOf = Callable[[int], list[tuple[str, str, Mapping[int, OffsetAndMetadata]]]]


def encode_stored(record: StoredRecord) -> bytes:
    if isinstance(record, TXN_RECORD_CLASSES):
        return encode_txn_record(record)
    return encode_record(record)


@dataclass
class Snapshot:
    """A shard's state captured on the loop, for a thread to write."""

    shard: int
    groups: list[GroupMetadataRecord]
    offsets: list[tuple[str, str, Mapping[int, OffsetAndMetadata]]]
    # consumer-group records, offsets pending in transactions, transactions
    consumer: list[ConsumerRecord | TxnOffsetCommitRecord | TxnRecord] = field(default_factory=list)


@dataclass
class Rotation:
    """Every shard's snapshot at one point of the shared log: they cover the logs below
    ``next_seq``; ``old_fd`` is the log just closed (fsynced before anything is deleted)."""

    snapshots: list[Snapshot]
    next_seq: int
    old_fd: int


class CoordinatorStore(Loading):
    def __init__(
        self,
        root: Path,
        partitions: int,
        worker: FsyncWorker,
        snapshot_bytes: int,
        recover: bool,
    ) -> None:
        self.root = root / "coordinator"
        if not self.root.exists():
            self.root.mkdir(parents=True)
            fsync_dir(root)
        self.partitions = partitions
        self.worker = worker
        self.snapshot_bytes = snapshot_bytes
        self.recover = recover
        self.shards = [ShardFiles(p) for p in range(partitions)]
        # The shared log being appended to.
        self.seq = 0
        self.fd = -1
        self.size = 0
        self.buf = bytearray()
        self._flush_scheduled = False
        self._unsynced = False
        self._last_sync: asyncio.Future[None] | None = None
        self.closed = False
        self.snapshotting = False
        # Shards with records since their last snapshot (only those get a new one).
        self.changed: set[int] = set()
        self._snapshot_tasks: set[asyncio.Future[None]] = set()
        # Set by the broker: the live offsets of a shard (for snapshots).
        self.offsets_of: OffsetsOf = lambda _p: []

    # --- paths -----------------------------------------------------------------------------
    def _log_path(self, seq: int) -> Path:
        return self.root / f"log-{seq:06d}.log"

    def _open_log(self, seq: int) -> None:
        path = self._log_path(seq)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        size = os.fstat(fd).st_size
        if size == 0:
            header = file_header(KIND_RECORD_LOG)
            write_all(fd, header)
            size = len(header)
            self.worker.dirty(fd)
            # the new name is durable once the directory is: before the first answer that
            # waits for a record in this file
            self.worker.dirty_dir(self.root)
        self.fd, self.seq, self.size = fd, seq, size

    # --- the live path ---------------------------------------------------------------------
    def sink_for(self, shard: int) -> _ShardSink:
        return _ShardSink(self, shard)

    def _appended(self) -> None:
        if not self._flush_scheduled:
            self._flush_scheduled = True
            asyncio.get_running_loop().call_soon(self._write_soon)

    def write_pending(self) -> None:
        """Write what was emitted (before an answer goes out, so whatever a client is told
        is at least in the page cache, whatever the fsync policy)."""
        if self.buf:
            self._write()

    def _write_soon(self) -> None:
        """The write scheduled after a turn's records: a failure was logged by ``_write`` and
        the records stay buffered; whoever waits for them (an answer, an fsync) finds out."""
        with contextlib.suppress(OSError):
            self._write()

    def _write(self) -> None:
        self._flush_scheduled = False
        if not self.buf:
            return
        try:
            write_all(self.fd, self.buf)
        except OSError as exc:
            # Leave no half entry for later appends to follow (that would read as damage in
            # the middle); the records stay buffered for the next write.
            log.error(
                "coordinator_log_write_failed",
                file=str(self._log_path(self.seq)),
                error=str(exc),
                pending_bytes=len(self.buf),
            )
            os.ftruncate(self.fd, self.size)
            raise exc
        self.size += len(self.buf)
        self.buf.clear()
        self.worker.dirty(self.fd)
        self._unsynced = True
        if self.size >= self.snapshot_bytes and not self.snapshotting:
            self._start_snapshot()

    def flush(self) -> asyncio.Future[None] | None:
        """Write what was emitted; under fsync=always, a future for its fsync."""
        self._write()
        if not self._unsynced:
            # Nothing new, but what this caller emitted may be in an fsync still running.
            last = self._last_sync
            return last if last is not None and not last.done() else None
        fut = self.worker.sync()
        if fut is not None:
            self._unsynced = False
            self._last_sync = fut
        return fut

    # --- snapshots -------------------------------------------------------------------------
    def _capture(self) -> Rotation:
        """Every shard's state now (on the loop): group records, and its offsets copied per
        (group, topic), which is cheap (``OffsetAndMetadata`` is immutable)."""
        changed, self.changed = sorted(self.changed), set()
        return Rotation(
            [
                Snapshot(
                    p,
                    list(self.shards[p].groups.values()),
                    self.offsets_of(p),
                    [
                        *self.shards[p].consumer.values(),
                        *self.shards[p].txn_offsets.values(),
                        *self.shards[p].txns.values(),
                    ],
                )
                for p in changed
            ],
            self.seq + 1,
            self.fd,
        )

    def _start_snapshot(self) -> None:
        """Rotate to a new log now; write every shard's snapshot of the state at this point
        off the loop; delete the covered logs once they are all durable."""
        rotation = self._capture()
        self._open_log(self.seq + 1)
        self.snapshotting = True
        loop = asyncio.get_running_loop()
        task = loop.run_in_executor(None, self._write_snapshots, rotation)
        self._snapshot_tasks.add(task)

        def done(f: asyncio.Future[None]) -> None:
            self._snapshot_tasks.discard(f)
            self.snapshotting = False
            if not f.cancelled() and f.exception() is not None:
                # Nothing was deleted; these shards still need a snapshot covering their
                # records before a later rotation may delete the logs holding them.
                self.changed.update(s.shard for s in rotation.snapshots)
                log.error("snapshot_failed", error=str(f.exception()))

        task.add_done_callback(done)

    def _write_snapshots(self, rotation: Rotation) -> None:
        os.fsync(rotation.old_fd)  # the rotated log is complete on disk before any deletion
        self.worker.close_fd(rotation.old_fd)
        next_seq = rotation.next_seq
        offsets = 0
        for snapshot in rotation.snapshots:
            offsets += self._write_snapshot(snapshot, next_seq)
        fsync_dir(self.root)
        # A shard without records since its snapshot keeps it: the logs deleted here hold
        # nothing of it. Its own logs from before the shared log go with its new snapshot.
        rewritten = {snapshot.shard for snapshot in rotation.snapshots}
        for p in self.root.iterdir():
            shared = SHARED_NAME.match(p.name)
            own = LOG_NAME.match(p.name)
            if (shared and int(shared.group(1)) < next_seq) or (
                own and int(own.group(1)) in rewritten
            ):
                p.unlink()
        log.info(
            "snapshots_written",
            shards=len(rotation.snapshots),
            groups=sum(len(s.groups) for s in rotation.snapshots),
            offsets=offsets,
            next_log_seq=next_seq,
        )

    def _write_snapshot(self, snapshot: Snapshot, next_seq: int) -> int:
        path = self._snapshot_path(snapshot.shard)
        tmp = path.with_suffix(".snapshot.tmp")
        offsets = 0
        with open(tmp, "wb", buffering=1 << 20) as f:
            f.write(file_header(KIND_SNAPSHOT))
            f.write(entry(encode_header(next_seq)))
            for group in snapshot.groups:
                f.write(entry(encode_record(group)))
            for record in snapshot.consumer:
                f.write(entry(encode_stored(record)))
            for group_id, topic, parts in snapshot.offsets:
                offsets += len(parts)
                for block in encode_offset_blocks(group_id, topic, parts):
                    f.write(entry(block))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        return offsets

    def capture(self) -> Rotation | None:
        """Clean shutdown, step 1 (synchronous, before the coordinator unloads): write what
        is buffered and take every shard's final state. No record is accepted after this."""
        self._write()
        self.closed = True
        if self.fd < 0:
            return None
        if self.size > len(file_header(KIND_RECORD_LOG)):
            final: Rotation | None = self._capture()
        else:
            self.worker.close_fd(self.fd)
            final = None
        self.fd = -1
        return final

    async def finish(self, final: Rotation | None) -> None:
        """Clean shutdown, step 2: write the captured snapshots off the loop."""
        if self._snapshot_tasks:
            await asyncio.gather(*self._snapshot_tasks, return_exceptions=True)
        if final is not None:
            await asyncio.get_running_loop().run_in_executor(None, self._write_snapshots, final)


class _ShardSink:
    """A shard's record sink (``BatchRecordSink``): records are appended to the store's
    buffer as CRC-checked entries; the store writes the buffer at the end of the loop turn,
    or before an answer goes out."""

    __slots__ = ("files", "shard", "store")

    def __init__(self, store: CoordinatorStore, shard: int) -> None:
        self.store = store
        self.shard = shard
        self.files = store.shards[shard]

    def __call__(self, record: StoredRecord, /) -> None:
        store = self.store
        if store.closed:
            log.error("record_after_close", shard=self.shard, record=type(record).__name__)
            return
        if type(record) is not OffsetCommitRecord:
            track(self.files, record)
        store.buf += entry(encode_stored(record))
        store.changed.add(self.shard)
        store._appended()

    def offset_commits(
        self,
        group_id: str,
        topic: str,
        entries: CommitEntries,
        commit_timestamp_ms: int,
        expire_timestamp_ms: int | None,
    ) -> None:
        store = self.store
        if store.closed:
            log.error("record_after_close", shard=self.shard, record="OffsetCommitRecord")
            return
        g = group_id.encode()
        t = topic.encode()
        buf = store.buf
        for partition, offset, leader_epoch, metadata in entries:
            buf += entry(
                encode_offset_commit(
                    g,
                    t,
                    partition,
                    offset,
                    leader_epoch,
                    metadata,
                    commit_timestamp_ms,
                    expire_timestamp_ms,
                )
            )
        store.changed.add(self.shard)
        store._appended()
