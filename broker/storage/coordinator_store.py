"""Coordinator state on disk: one record log per shard, compacted into snapshots.

Every record a shard emits is appended (as a binary record, ``encode_record``, in a
CRC-checked entry) to its current log file, written on the event loop; ``flush()`` hands back
a future for the fsync when the policy is ``always``. When a log passes ``snapshot_bytes``
(and at clean shutdown) the shard's compacted state is written to a snapshot: a new log is
started at once, the snapshot is written and fsynced off the loop, renamed into place, and
only then are the logs it covers deleted, so a crash at any point leaves a snapshot plus the
logs after it.

A snapshot (``coordinator_format``) holds the group metadata records and the committed
offsets packed per (group, topic); start-up decodes the offsets straight into the shard's
dictionaries (``load_offsets``) and replays only the logs written after the snapshot,
through the same ``replay`` the live path uses. Loading streams: one entry at a time.

Files of format version 1 (JSON entries) are still read: their records are replayed, and the
next record is written to a new log in the current format.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import structlog

from broker.coordinator.core import OffsetAndMetadata
from broker.coordinator.records import (
    CommitEntries,
    GroupMetadataRecord,
    GroupTombstoneRecord,
    NewerRecordFormat,
    OffsetCommitRecord,
    Record,
    RecordFormatError,
    decode_record,
    encode_offset_commit,
    encode_record,
    record_from_dict,
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

_LOG_NAME = re.compile(r"^shard-(\d+)-(\d+)\.log$")

# What a snapshot holds of a shard's offsets: (group, topic, {partition: offset}), copied.
OffsetsOf = Callable[[int], list[tuple[str, str, Mapping[int, OffsetAndMetadata]]]]


class ShardLoader(Protocol):
    """What start-up loads a shard through (``CoordinatorShard``)."""

    def replay(self, record: Record) -> None: ...

    def load_offsets(
        self, group_id: str, topic: str, offsets: dict[int, OffsetAndMetadata]
    ) -> None: ...


def _decode(path: Path, at: int, payload: bytes, version: int) -> Record:
    """One record of a log (or a version 1 snapshot) of format ``version``."""
    try:
        if version == 1:
            return record_from_dict(json.loads(payload))
        return decode_record(payload)
    except NewerRecordFormat as exc:
        raise StorageError(f"{path}: entry at byte offset {at}: {exc}") from None
    except (ValueError, KeyError, TypeError) as exc:
        raise StorageError(f"{path}: unreadable record at byte offset {at}: {exc}") from None


@dataclass
class ShardFiles:
    shard: int
    seq: int = 0  # the current log's sequence number
    fd: int = -1
    size: int = 0
    buf: bytearray = field(default_factory=bytearray)
    # Latest group metadata per group: a snapshot needs the records as emitted (a live
    # group in PreparingRebalance may differ from its last record).
    groups: dict[str, GroupMetadataRecord] = field(default_factory=dict)
    snapshotting: bool = False


@dataclass
class Snapshot:
    """A shard's state captured on the loop, for a thread to write."""

    shard: int
    groups: list[GroupMetadataRecord]
    offsets: list[tuple[str, str, Mapping[int, OffsetAndMetadata]]]
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
        self._dirty: set[int] = set()
        self._flush_scheduled = False
        self._unsynced = False
        self._last_sync: asyncio.Future[None] | None = None
        self.closed = False
        self._snapshot_tasks: set[asyncio.Future[None]] = set()
        self._logs: dict[int, list[tuple[int, Path]]] | None = None
        # Set by the broker: the live offsets of a shard (for snapshots).
        self.offsets_of: OffsetsOf = lambda _p: []

    # --- paths -----------------------------------------------------------------------------
    def _log_path(self, shard: int, seq: int) -> Path:
        return self.root / f"shard-{shard:02d}-{seq:06d}.log"

    def _snapshot_path(self, shard: int) -> Path:
        return self.root / f"shard-{shard:02d}.snapshot"

    # --- start-up --------------------------------------------------------------------------
    def load_shard(self, shard: int, into: ShardLoader) -> None:
        """Load one shard's snapshot and logs into ``into`` (repairing a torn tail), then
        open its log for appends."""
        if self._logs is None:
            self._logs = {}
            for path in self.root.iterdir():
                m = _LOG_NAME.match(path.name)
                if m:
                    self._logs.setdefault(int(m.group(1)), []).append((int(m.group(2)), path))
        files = self.shards[shard]
        next_seq = self._load_snapshot(files, into)
        all_logs = sorted(self._logs.get(shard, []))
        shard_logs = [x for x in all_logs if x[0] >= next_seq]
        for seq, path in all_logs:
            if seq < next_seq:
                path.unlink()  # covered by the snapshot (a crash came before cleanup)
        damaged = False
        version = FORMAT_VERSION
        for i, (seq, path) in enumerate(shard_logs):
            if damaged:
                log.warning("log_dropped_after_damage", file=str(path))
                path.unlink()
                continue
            last = i == len(shard_logs) - 1
            data = path.read_bytes()
            result = ScanResult()
            for at, payload in iter_entries(str(path), data, KIND_RECORD_LOG, result):
                record = _decode(path, at, payload, result.version)
                self._track(files, record)
                into.replay(record)
            damaged = self._check(path, result, allow_torn=last)
            files.seq = seq
            version = result.version
        if not shard_logs:
            files.seq = next_seq
        elif version != FORMAT_VERSION:
            files.seq += 1  # appends go to a new log, in the current format
        self._open_log(files, files.seq)

    def _load_snapshot(self, files: ShardFiles, into: ShardLoader) -> int:
        """Load the snapshot, if any; returns the first log sequence number it does not
        cover."""
        path = self._snapshot_path(files.shard)
        if not path.exists():
            return 0
        data = path.read_bytes()
        result = ScanResult()
        entries = iter_entries(str(path), data, KIND_SNAPSHOT, result)
        first = next(entries, None)
        next_seq: int | None = None
        if first is not None:
            try:
                if result.version == 1:
                    next_seq = int(json.loads(first[1])["next_log_seq"])
                else:
                    next_seq = decode_header(first[1])
            except (ValueError, KeyError, TypeError):
                next_seq = None
        if next_seq is None:
            return self._drop_damaged_snapshot(files.shard, path, result)
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
        return next_seq

    def _drop_damaged_snapshot(self, shard: int, path: Path, result: ScanResult) -> int:
        """The snapshot's header entry is damaged or missing: nothing in it can be placed
        (which logs it covers is unknown). Refuse; with --recover, set it aside and rebuild
        the shard from the logs that remain."""
        where = result.bad_at if result.bad_at is not None else FILE_HEADER.size
        remaining = sorted(p.name for _s, p in (self._logs or {}).get(shard, []))
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

    def _open_log(self, files: ShardFiles, seq: int) -> None:
        path = self._log_path(files.shard, seq)
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
        files.fd, files.seq, files.size = fd, seq, size

    # --- the live path ---------------------------------------------------------------------
    def _track(self, files: ShardFiles, record: Record) -> None:
        if isinstance(record, GroupMetadataRecord):
            files.groups[record.group_id] = record
        elif isinstance(record, GroupTombstoneRecord):
            files.groups.pop(record.group_id, None)

    def sink_for(self, shard: int) -> _ShardSink:
        return _ShardSink(self, shard)

    def _appended(self, shard: int) -> None:
        self._dirty.add(shard)
        if not self._flush_scheduled:
            self._flush_scheduled = True
            asyncio.get_running_loop().call_soon(self._write)

    def write_pending(self) -> None:
        """Write what was emitted (before an answer goes out, so whatever a client is told
        is at least in the page cache, whatever the fsync policy)."""
        if self._dirty:
            self._write()

    def _write(self) -> None:
        self._flush_scheduled = False
        for shard in self._dirty:
            files = self.shards[shard]
            if files.buf:
                try:
                    write_all(files.fd, files.buf)
                except OSError as exc:
                    # Leave no half entry for later appends to follow (that would read as
                    # damage in the middle); the records stay buffered for the next write.
                    log.error("coordinator_log_write_failed", shard=shard, error=str(exc))
                    os.ftruncate(files.fd, files.size)
                    raise
                files.size += len(files.buf)
                files.buf.clear()
                self.worker.dirty(files.fd)
                self._unsynced = True
                if files.size >= self.snapshot_bytes and not files.snapshotting:
                    self._start_snapshot(files)
        self._dirty.clear()

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
    def _capture(self, files: ShardFiles, old_fd: int) -> Snapshot:
        """The shard's state now (on the loop): group records, and its offsets copied per
        (group, topic), which is cheap (``OffsetAndMetadata`` is immutable)."""
        return Snapshot(
            files.shard,
            list(files.groups.values()),
            self.offsets_of(files.shard),
            files.seq + 1,
            old_fd,
        )

    def _start_snapshot(self, files: ShardFiles) -> None:
        """Rotate to a new log now; write the snapshot of the state at this point off the
        loop; delete the covered logs once it is durable."""
        snapshot = self._capture(files, files.fd)
        self.worker.dirty(files.fd)
        self._open_log(files, files.seq + 1)
        files.snapshotting = True
        loop = asyncio.get_running_loop()
        task = loop.run_in_executor(None, self._write_snapshot, snapshot)
        self._snapshot_tasks.add(task)

        def done(f: asyncio.Future[None]) -> None:
            self._snapshot_tasks.discard(f)
            files.snapshotting = False
            if not f.cancelled() and f.exception() is not None:
                log.error("snapshot_failed", shard=files.shard, error=str(f.exception()))

        task.add_done_callback(done)

    def _write_snapshot(self, snapshot: Snapshot) -> None:
        os.fsync(snapshot.old_fd)  # the rotated log is complete on disk before any deletion
        os.close(snapshot.old_fd)
        shard, next_seq = snapshot.shard, snapshot.next_seq
        path = self._snapshot_path(shard)
        tmp = path.with_suffix(".snapshot.tmp")
        offsets = 0
        with open(tmp, "wb", buffering=1 << 20) as f:
            f.write(file_header(KIND_SNAPSHOT))
            f.write(entry(encode_header(next_seq)))
            for group in snapshot.groups:
                f.write(entry(encode_record(group)))
            for group_id, topic, parts in snapshot.offsets:
                offsets += len(parts)
                for block in encode_offset_blocks(group_id, topic, parts):
                    f.write(entry(block))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        fsync_dir(self.root)
        for p in self.root.iterdir():
            m = _LOG_NAME.match(p.name)
            if m and int(m.group(1)) == shard and int(m.group(2)) < next_seq:
                p.unlink()
        log.info(
            "snapshot_written",
            shard=shard,
            groups=len(snapshot.groups),
            offsets=offsets,
            next_log_seq=next_seq,
        )

    def capture(self) -> list[Snapshot]:
        """Clean shutdown, step 1 (synchronous, before the coordinator unloads): write what
        is buffered and take every shard's final state. No record is accepted after this."""
        self._write()
        self.closed = True
        final = []
        for files in self.shards:
            if files.fd < 0:
                continue
            if files.size > len(file_header(KIND_RECORD_LOG)):
                final.append(self._capture(files, files.fd))
            else:
                os.close(files.fd)
            files.fd = -1
        return final

    async def finish(self, final: list[Snapshot]) -> None:
        """Clean shutdown, step 2: write the captured snapshots off the loop."""
        if self._snapshot_tasks:
            await asyncio.gather(*self._snapshot_tasks, return_exceptions=True)
        loop = asyncio.get_running_loop()
        for snapshot in final:
            await loop.run_in_executor(None, self._write_snapshot, snapshot)


def file_records(path: Path, data: bytes | None = None) -> Iterator[Record]:
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
    """A shard's record sink (``BatchRecordSink``): records are appended to the shard's
    buffer as CRC-checked entries; the store writes the buffer at the end of the loop turn,
    or before an answer goes out."""

    __slots__ = ("files", "shard", "store")

    def __init__(self, store: CoordinatorStore, shard: int) -> None:
        self.store = store
        self.shard = shard
        self.files = store.shards[shard]

    def __call__(self, record: Record, /) -> None:
        store = self.store
        if store.closed:
            log.error("record_after_close", shard=self.shard, record=type(record).__name__)
            return
        if type(record) is not OffsetCommitRecord:
            store._track(self.files, record)
        self.files.buf += entry(encode_record(record))
        store._appended(self.shard)

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
        buf = self.files.buf
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
        store._appended(self.shard)
