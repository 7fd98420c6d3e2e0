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
import json
import os
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import structlog

from broker.coordinator.consumer.records import (
    CONSUMER_RECORD_TYPES,
    K_EPOCH,
    ConsumerRecord,
    ConsumerTombstoneRecord,
)
from broker.coordinator.core import OffsetAndMetadata
from broker.coordinator.placement import partition_for
from broker.coordinator.records import (
    CommitEntries,
    GroupMetadataRecord,
    GroupTombstoneRecord,
    NewerRecordFormat,
    OffsetCommitRecord,
    Record,
    RecordFormatError,
    TxnOffsetCommitRecord,
    TxnOffsetMarkerRecord,
    decode_record,
    encode_offset_commit,
    encode_record,
    record_from_dict,
)
from broker.coordinator.txn.records import (
    TXN_RECORD_TYPES,
    TransactionMetadataRecord,
    TransactionTombstoneRecord,
    TxnRecord,
    decode_txn_record,
    encode_txn_record,
)
from broker.storage.coordinator_format import (
    TYPE_OFFSET_BLOCK,
    decode_header,
    decode_offset_block,
    encode_header,
    encode_offset_blocks,
)
from broker.storage.entries import (
    FILE_HEADER,
    FORMAT_VERSION,
    KIND_RECORD_LOG,
    KIND_SNAPSHOT,
    ScanResult,
    StorageError,
    entry,
    file_header,
    iter_entries,
)
from broker.storage.fileio import fsync_dir, write_all
from broker.storage.fsync import FsyncWorker

__all__ = ["CoordinatorStore", "ShardLoader", "file_records", "fsync_dir"]

log = structlog.get_logger("kgroupd.storage")

_LOG_NAME = re.compile(r"^shard-(\d+)-(\d+)\.log$")  # a shard's own log (before the shared log)
_SHARED_NAME = re.compile(r"^log-(\d+)\.log$")

# What a snapshot holds of a shard's offsets: (group, topic, {partition: offset}), copied.
OffsetsOf = Callable[[int], list[tuple[str, str, Mapping[int, OffsetAndMetadata]]]]


TXN_RECORD_CLASSES = (TransactionMetadataRecord, TransactionTombstoneRecord)
_TXN_TYPE_NUMBERS = frozenset(TXN_RECORD_TYPES.values())

# What the shared log holds: the group coordinator's records and the transaction
# coordinator's (types 13/14, owned by the shard of their transactional id's hash).
StoredRecord = Record | TxnRecord


def owner_of(record: StoredRecord) -> str:
    """The id whose hash picks the file shard of a record: its group or transactional id."""
    if isinstance(record, TXN_RECORD_CLASSES):
        return record.transactional_id
    return record.group_id


def encode_stored(record: StoredRecord) -> bytes:
    if isinstance(record, TXN_RECORD_CLASSES):
        return encode_txn_record(record)
    return encode_record(record)


class ShardLoader(Protocol):
    """What start-up loads a shard through (``CoordinatorShard``, with the transaction
    coordinator's records routed by ``broker.storage.durability``)."""

    def replay(self, record: StoredRecord) -> None: ...

    def load_offsets(
        self, group_id: str, topic: str, offsets: dict[int, OffsetAndMetadata]
    ) -> None: ...


def _decode(path: Path, at: int, payload: bytes, version: int) -> StoredRecord:
    """One record of a log (or a version 1 snapshot) of format ``version``."""
    try:
        if version == 1:
            return record_from_dict(json.loads(payload))
        if len(payload) >= 2 and payload[1] in _TXN_TYPE_NUMBERS:
            return decode_txn_record(payload)
        return decode_record(payload)
    except NewerRecordFormat as exc:
        raise StorageError(f"{path}: entry at byte offset {at}: {exc}") from None
    except (ValueError, KeyError, TypeError) as exc:
        raise StorageError(f"{path}: unreadable record at byte offset {at}: {exc}") from None


@dataclass
class ShardFiles:
    shard: int
    # Latest group metadata per group: a snapshot needs the records as emitted (a live
    # group in PreparingRebalance may differ from its last record).
    groups: dict[str, GroupMetadataRecord] = field(default_factory=dict)
    # Latest KIP-848 consumer-group record per key (a tombstone removes its key).
    consumer: dict[tuple[str, ...], ConsumerRecord] = field(default_factory=dict)
    # Offsets pending in transactions, per key (their producer's marker removes them).
    txn_offsets: dict[tuple[str, ...], TxnOffsetCommitRecord] = field(default_factory=dict)
    # Latest transaction-coordinator record per transactional id (a tombstone removes it).
    txns: dict[str, TxnRecord] = field(default_factory=dict)


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


class CoordinatorStore:
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

    def _snapshot_path(self, shard: int) -> Path:
        return self.root / f"shard-{shard:02d}.snapshot"

    def _scan_dir(self) -> tuple[dict[int, list[tuple[int, Path]]], list[tuple[int, Path]]]:
        """(each shard's own logs, written before the shared log; the shared logs), sorted."""
        own: dict[int, list[tuple[int, Path]]] = {}
        shared: list[tuple[int, Path]] = []
        for path in self.root.iterdir():
            m = _LOG_NAME.match(path.name)
            if m:
                own.setdefault(int(m.group(1)), []).append((int(m.group(2)), path))
            elif m := _SHARED_NAME.match(path.name):
                shared.append((int(m.group(1)), path))
        return {k: sorted(v) for k, v in own.items()}, sorted(shared)

    # --- start-up --------------------------------------------------------------------------
    def load(self, into: Sequence[ShardLoader]) -> None:
        """Load every shard (``into[p]`` for shard ``p``): its snapshot, then its own logs
        from before the shared log, then the shared logs' entries for it that its snapshot
        does not cover (repairing a torn tail); then open the shared log for appends."""
        own, shared = self._scan_dir()
        covered: list[int] = []  # per shard: the first shared log its snapshot does not cover
        for files in self.shards:
            loader = into[files.shard]
            next_seq, is_shared = self._load_snapshot(files, loader, own.get(files.shard, []))
            if is_shared:
                for _seq, path in own.get(files.shard, []):
                    path.unlink()  # covered by a snapshot taken after them
                covered.append(next_seq)
            else:
                self._replay_own_logs(files, loader, own.get(files.shard, []), next_seq)
                covered.append(0)
                if own.get(files.shard) or self._snapshot_path(files.shard).exists():
                    self.changed.add(files.shard)  # rewrite its snapshot at the next rotation
        partitions = self.partitions
        damaged = False
        last_seq, version = -1, FORMAT_VERSION
        oldest = min(covered, default=0)
        live = [(seq, path) for seq, path in shared if seq >= oldest]
        for seq, path in shared:
            if seq < oldest:
                path.unlink()  # covered by every snapshot (a crash came before cleanup)
        for i, (seq, path) in enumerate(live):
            if damaged:
                log.warning("log_dropped_after_damage", file=str(path))
                path.unlink()
                continue
            data = path.read_bytes()
            result = ScanResult()
            for at, payload in iter_entries(str(path), data, KIND_RECORD_LOG, result):
                record = _decode(path, at, payload, result.version)
                shard = partition_for(owner_of(record), partitions)
                if seq >= covered[shard]:
                    self._track(self.shards[shard], record)
                    into[shard].replay(record)
                    self.changed.add(shard)
            damaged = self._check(path, result, allow_torn=i == len(live) - 1)
            last_seq, version = seq, result.version
        # Append to the last log unless a snapshot already covers it (or it is of an older
        # format): a record in a covered log would be skipped at the next load.
        seq = max(last_seq, max(covered, default=0))
        if last_seq >= 0 and (last_seq < seq or version != FORMAT_VERSION):
            seq = max(seq, last_seq + 1)
        self._open_log(seq)

    def _replay_own_logs(
        self, files: ShardFiles, into: ShardLoader, logs: list[tuple[int, Path]], next_seq: int
    ) -> None:
        """A shard's own logs (written before the shared log) after its snapshot."""
        damaged = False
        live = [(seq, path) for seq, path in logs if seq >= next_seq]
        for seq, path in logs:
            if seq < next_seq:
                path.unlink()  # covered by the snapshot
        for i, (_seq, path) in enumerate(live):
            if damaged:
                log.warning("log_dropped_after_damage", file=str(path))
                path.unlink()
                continue
            data = path.read_bytes()
            result = ScanResult()
            for at, payload in iter_entries(str(path), data, KIND_RECORD_LOG, result):
                record = _decode(path, at, payload, result.version)
                self._track(files, record)
                into.replay(record)
            damaged = self._check(path, result, allow_torn=i == len(live) - 1)

    def _load_snapshot(
        self, files: ShardFiles, into: ShardLoader, own_logs: list[tuple[int, Path]]
    ) -> tuple[int, bool]:
        """Load the snapshot, if any; returns (the first log it does not cover, whether that
        counts shared logs rather than the shard's own)."""
        path = self._snapshot_path(files.shard)
        if not path.exists():
            return 0, False
        data = path.read_bytes()
        result = ScanResult()
        entries = iter_entries(str(path), data, KIND_SNAPSHOT, result)
        first = next(entries, None)
        header: tuple[int, bool] | None = None
        if first is not None:
            try:
                if result.version == 1:
                    header = int(json.loads(first[1])["next_log_seq"]), False
                else:
                    header = decode_header(first[1])
            except (ValueError, KeyError, TypeError):
                header = None
        if header is None:
            return self._drop_damaged_snapshot(files.shard, path, result, own_logs), False
        for at, payload in entries:
            if result.version == 1:
                record = _decode(path, at, payload, 1)
            elif len(payload) >= 2 and payload[1] == TYPE_OFFSET_BLOCK and payload[0] == 2:
                try:
                    group_id, topic, offsets = decode_offset_block(payload)
                except RecordFormatError as exc:
                    raise StorageError(
                        f"{path}: unreadable offset block at byte offset {at}: {exc}"
                    ) from None
                into.load_offsets(group_id, topic, offsets)
                continue
            else:
                record = _decode(path, at, payload, result.version)
            self._track(files, record)
            into.replay(record)
        self._check(path, result, allow_torn=False)
        return header

    def _drop_damaged_snapshot(
        self, shard: int, path: Path, result: ScanResult, own_logs: list[tuple[int, Path]]
    ) -> int:
        """The snapshot's header entry is damaged or missing: nothing in it can be placed
        (which logs it covers is unknown). Refuse; with --recover, set it aside and rebuild
        the shard from the logs that remain."""
        where = result.bad_at if result.bad_at is not None else FILE_HEADER.size
        remaining = [*sorted(p.name for _s, p in own_logs), "log-*.log"]
        if not self.recover:
            raise StorageError(
                f"{path}: the snapshot's header entry is damaged (at byte offset {where}); "
                "start with --recover to set this snapshot aside and rebuild the shard from "
                "the logs that remain (what only the snapshot held is lost)"
            )
        aside = path.with_name(path.name + ".damaged")
        os.replace(path, aside)
        fsync_dir(self.root)
        log.warning(
            "damaged_snapshot_dropped",
            file=str(path),
            moved_to=str(aside),
            offset=where,
            bytes=aside.stat().st_size,
            logs_replayed=remaining,
            note="state held only by this snapshot is lost",
        )
        return 0

    def _check(self, path: Path, result: ScanResult, allow_torn: bool) -> bool:
        """After reading a file: cut a torn tail (warning), or refuse damage (or, with
        --recover, cut it). Returns whether entries were cut off by damage."""
        if result.torn_at is not None and allow_torn:
            log.warning(
                "torn_tail_cut",
                file=str(path),
                offset=result.torn_at,
                bytes_dropped=result.dropped_bytes,
            )
            os.truncate(path, result.valid_end)
            return False
        bad_at = result.bad_at
        if bad_at is None:
            return False
        if not self.recover:
            raise StorageError(
                f"{path}: damaged entry at byte offset {bad_at} "
                f"({result.dropped_bytes} bytes from there on); start with --recover to "
                "keep what precedes the damage and drop the rest"
            )
        log.warning(
            "recovered_damaged_file",
            file=str(path),
            offset=bad_at,
            bytes_dropped=result.dropped_bytes,
        )
        os.truncate(path, result.valid_end)
        return True

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
    def _track(self, files: ShardFiles, record: StoredRecord) -> None:
        if isinstance(record, GroupMetadataRecord):
            files.groups[record.group_id] = record
        elif isinstance(record, GroupTombstoneRecord):
            files.groups.pop(record.group_id, None)
        elif isinstance(record, ConsumerTombstoneRecord):
            files.consumer.pop(record.key(), None)
            if record.kind == K_EPOCH:  # the group is gone: every record of it
                for key in [k for k in files.consumer if k[1] == record.group_id]:
                    del files.consumer[key]
        elif type(record) in CONSUMER_RECORD_TYPES:
            files.consumer[record.key()] = record  # type: ignore[assignment]
        elif isinstance(record, TransactionMetadataRecord):
            files.txns[record.transactional_id] = record
        elif isinstance(record, TransactionTombstoneRecord):
            files.txns.pop(record.transactional_id, None)
        elif isinstance(record, TxnOffsetCommitRecord):
            files.txn_offsets[record.key()] = record
        elif isinstance(record, TxnOffsetMarkerRecord):
            done = record.key()
            for key in [k for k in files.txn_offsets if k[:3] == done]:
                del files.txn_offsets[key]

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
            shared = _SHARED_NAME.match(p.name)
            own = _LOG_NAME.match(p.name)
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


def file_records(path: Path, data: bytes | None = None) -> Iterator[StoredRecord]:
    """The records in a coordinator log or snapshot file, of either format version, for tools
    and tests: a snapshot's offset blocks come out as one ``OffsetCommitRecord`` per
    partition and its header entry is skipped. Stops at the first damaged entry."""
    raw = path.read_bytes() if data is None else data
    snapshot = path.name.endswith(".snapshot")
    result = ScanResult()
    entries = iter_entries(str(path), raw, KIND_SNAPSHOT if snapshot else KIND_RECORD_LOG, result)
    if snapshot:
        next(entries, None)  # the header
    for at, payload in entries:
        if result.version >= 2 and payload[1:2] == bytes([TYPE_OFFSET_BLOCK]):
            group_id, topic, offsets = decode_offset_block(payload)
            for p, o in offsets.items():
                yield OffsetCommitRecord(
                    group_id,
                    topic,
                    p,
                    o.offset,
                    o.leader_epoch,
                    o.metadata,
                    o.commit_timestamp_ms,
                    o.expire_timestamp_ms,
                )
        else:
            yield _decode(path, at, payload, result.version)


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
            store._track(self.files, record)
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
