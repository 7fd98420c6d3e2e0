"""Coordinator state on disk: one record log per shard, compacted into snapshots.

Every record a shard emits is appended (as JSON in a CRC-checked entry) to its current log
file, written on the event loop; ``flush()`` hands back a future for the fsync when the
policy is ``always``. When a log passes ``snapshot_bytes`` (and at clean shutdown) the
shard's compacted state is written to a snapshot: a new log is started at once, the
snapshot is written and fsynced off the loop, renamed into place, and only then are the
logs it covers deleted, so a crash at any point leaves a snapshot plus the logs after it.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

import structlog

from broker.coordinator.records import (
    GroupMetadataRecord,
    GroupTombstoneRecord,
    Record,
    RecordSink,
    record_from_dict,
    record_to_dict,
)
from broker.storage.entries import (
    KIND_RECORD_LOG,
    KIND_SNAPSHOT,
    StorageError,
    entry,
    file_header,
    scan,
)
from broker.storage.fsync import FsyncWorker

log = structlog.get_logger("kgroupd.storage")

_LOG_NAME = re.compile(r"^shard-(\d+)-(\d+)\.log$")


def _encode(record: Record) -> bytes:
    return json.dumps(record_to_dict(record), separators=(",", ":")).encode()


def _decode(path: Path, payload: bytes) -> Record:
    try:
        return record_from_dict(json.loads(payload))
    except (ValueError, KeyError, TypeError) as exc:
        raise StorageError(f"{path}: unreadable record: {exc}") from None


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


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
        self.root.mkdir(parents=True, exist_ok=True)
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
        # Set by the broker: the live offsets of a shard, as records (for snapshots).
        self.offsets_of: Callable[[int], Iterable[Record]] = lambda _p: ()

    # --- paths -----------------------------------------------------------------------------
    def _log_path(self, shard: int, seq: int) -> Path:
        return self.root / f"shard-{shard:02d}-{seq:06d}.log"

    def _snapshot_path(self, shard: int) -> Path:
        return self.root / f"shard-{shard:02d}.snapshot"

    # --- start-up --------------------------------------------------------------------------
    def load(self) -> dict[int, list[Record]]:
        """Every shard's records (snapshot, then logs), repairing a torn tail."""
        logs: dict[int, list[tuple[int, Path]]] = {}
        for path in self.root.iterdir():
            m = _LOG_NAME.match(path.name)
            if m:
                logs.setdefault(int(m.group(1)), []).append((int(m.group(2)), path))
        out: dict[int, list[Record]] = {}
        for files in self.shards:
            records, next_seq = self._load_snapshot(files.shard)
            shard_logs = sorted(x for x in logs.get(files.shard, []) if x[0] >= next_seq)
            for seq, path in sorted(logs.get(files.shard, [])):
                if seq < next_seq:
                    path.unlink()  # covered by the snapshot (a crash came before cleanup)
            damaged = False
            for i, (seq, path) in enumerate(shard_logs):
                if damaged:
                    log.warning("log_dropped_after_damage", file=str(path))
                    path.unlink()
                    continue
                last = i == len(shard_logs) - 1
                payloads, cut = self._read(path, KIND_RECORD_LOG, allow_torn=last)
                records += [_decode(path, p) for p in payloads]
                damaged = cut
                files.seq = seq
            for r in records:
                self._track(files, r)
            out[files.shard] = records
            if not shard_logs:
                files.seq = next_seq
            self._open_log(files, files.seq)
        return out

    def _load_snapshot(self, shard: int) -> tuple[list[Record], int]:
        path = self._snapshot_path(shard)
        if not path.exists():
            return [], 0
        payloads, _ = self._read(path, KIND_SNAPSHOT, allow_torn=False)
        if not payloads:
            raise StorageError(f"{path}: snapshot has no header entry")
        meta = json.loads(payloads[0])
        return [_decode(path, p) for p in payloads[1:]], int(meta["next_log_seq"])

    def _read(self, path: Path, kind: int, allow_torn: bool) -> tuple[list[bytes], bool]:
        """Entries of one file; returns (payloads, whether entries after them were cut)."""
        data = path.read_bytes()
        result = scan(str(path), data, kind)
        if result.torn_at is not None and allow_torn:
            log.warning(
                "torn_tail_cut",
                file=str(path),
                offset=result.torn_at,
                bytes_dropped=result.dropped_bytes,
            )
            os.truncate(path, result.valid_end)
            return result.payloads, False
        bad_at = result.corrupt_at if result.corrupt_at is not None else result.torn_at
        if bad_at is not None:
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
                entries_kept=len(result.payloads),
            )
            os.truncate(path, result.valid_end)
            return result.payloads, True
        return result.payloads, False

    def _open_log(self, files: ShardFiles, seq: int) -> None:
        path = self._log_path(files.shard, seq)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        size = os.fstat(fd).st_size
        if size == 0:
            os.write(fd, file_header(KIND_RECORD_LOG))
            size = os.fstat(fd).st_size
        files.fd, files.seq, files.size = fd, seq, size

    # --- the live path ---------------------------------------------------------------------
    def _track(self, files: ShardFiles, record: Record) -> None:
        if isinstance(record, GroupMetadataRecord):
            files.groups[record.group_id] = record
        elif isinstance(record, GroupTombstoneRecord):
            files.groups.pop(record.group_id, None)

    def sink_for(self, shard: int) -> RecordSink:
        files = self.shards[shard]

        def sink(record: Record) -> None:
            if self.closed:
                log.error("record_after_close", shard=shard, record=type(record).__name__)
                return
            self._track(files, record)
            files.buf += entry(_encode(record))
            self._dirty.add(shard)
            if not self._flush_scheduled:
                self._flush_scheduled = True
                asyncio.get_running_loop().call_soon(self._write)

        return sink

    def _write(self) -> None:
        self._flush_scheduled = False
        for shard in self._dirty:
            files = self.shards[shard]
            if files.buf:
                os.write(files.fd, files.buf)
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
    def _snapshot_records(self, files: ShardFiles) -> list[Record]:
        return [*files.groups.values(), *self.offsets_of(files.shard)]

    def _start_snapshot(self, files: ShardFiles) -> None:
        """Rotate to a new log now; write the snapshot of the state at this point off the
        loop; delete the covered logs once it is durable."""
        records = self._snapshot_records(files)
        old_fd, covered_up_to = files.fd, files.seq
        self.worker.dirty(old_fd)
        self._open_log(files, files.seq + 1)
        files.snapshotting = True
        loop = asyncio.get_running_loop()
        task = loop.run_in_executor(
            None, self._write_snapshot, files.shard, records, covered_up_to + 1, old_fd
        )
        self._snapshot_tasks.add(task)

        def done(f: asyncio.Future[None]) -> None:
            self._snapshot_tasks.discard(f)
            files.snapshotting = False
            if not f.cancelled() and f.exception() is not None:
                log.error("snapshot_failed", shard=files.shard, error=str(f.exception()))

        task.add_done_callback(done)

    def _write_snapshot(
        self, shard: int, records: list[Record], next_seq: int, old_fd: int
    ) -> None:
        os.fsync(old_fd)  # the rotated log is complete on disk before anything is deleted
        os.close(old_fd)
        path = self._snapshot_path(shard)
        tmp = path.with_suffix(".snapshot.tmp")
        with open(tmp, "wb") as f:
            f.write(file_header(KIND_SNAPSHOT))
            f.write(entry(json.dumps({"next_log_seq": next_seq}).encode()))
            for record in records:
                f.write(entry(_encode(record)))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        fsync_dir(self.root)
        for p in self.root.iterdir():
            m = _LOG_NAME.match(p.name)
            if m and int(m.group(1)) == shard and int(m.group(2)) < next_seq:
                p.unlink()
        log.info("snapshot_written", shard=shard, records=len(records), next_log_seq=next_seq)

    def capture(self) -> list[tuple[int, list[Record], int, int]]:
        """Clean shutdown, step 1 (synchronous, before the coordinator unloads): write what
        is buffered and take every shard's final state. No record is accepted after this."""
        self._write()
        self.closed = True
        final = []
        for files in self.shards:
            if files.fd < 0:
                continue
            if files.size > len(file_header(KIND_RECORD_LOG)):
                final.append((files.shard, self._snapshot_records(files), files.seq + 1, files.fd))
            else:
                os.close(files.fd)
            files.fd = -1
        return final

    async def finish(self, final: list[tuple[int, list[Record], int, int]]) -> None:
        """Clean shutdown, step 2: write the captured snapshots off the loop."""
        if self._snapshot_tasks:
            await asyncio.gather(*self._snapshot_tasks, return_exceptions=True)
        loop = asyncio.get_running_loop()
        for shard, records, next_seq, fd in final:
            await loop.run_in_executor(None, self._write_snapshot, shard, records, next_seq, fd)
