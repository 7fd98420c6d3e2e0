"""Share-group state on disk under ``--data-dir``: ``share-state/share-SEQ.log``, a log of the
records of ``kgroupd.broker.share.records`` (JSON, one CRC-checked entry each, in the entry
format of ``kgroupd.broker.storage.entries``).

Records are written on the event loop (``write_pending``: the broker calls it before it sends
answers, and a callback soon after any record made outside a request), so a record reaches
the page cache, which a killed process does not lose, before the answer it belongs to leaves;
under ``--fsync always`` the answer waits for ``synced()`` as well.

Start-up replays every log in order and writes the compacted state to a new log (written
and fsynced under a temporary name, renamed, the directory fsynced) before the older logs are
deleted; so does a log that grows past ``max_log_bytes`` while running. A crash at any point
leaves logs whose replay in order gives the same state. A torn last entry (a crash mid-write)
is dropped; damage with good entries after it stops the start-up.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Callable, Iterable
from pathlib import Path

import structlog

from kgroupd.broker.share.records import Record, ShareState
from kgroupd.broker.storage.entries import (
    ScanResult,
    StorageError,
    entry,
    file_header,
    iter_entries,
)
from kgroupd.broker.storage.fileio import fsync_dir, write_all
from kgroupd.broker.storage.fsync import ALWAYS, FsyncWorker

log = structlog.get_logger("kgroupd.storage")

KIND_SHARE_LOG = 3
DIRECTORY = "share-state"
_PREFIX, _SUFFIX = "share-", ".log"


def _encode(record: Record) -> bytes:
    return entry(json.dumps(record, separators=(",", ":")).encode())


class ShareStore:
    def __init__(self, data_dir: Path, worker: FsyncWorker, max_log_bytes: int) -> None:
        self.directory = data_dir / DIRECTORY
        self.worker = worker
        self.max_log_bytes = max_log_bytes
        self.fd = -1
        self.seq = 0
        self.size = 0
        self._pending: list[bytes] = []
        self._scheduled = False
        # the live state's compacted records, for a snapshot while running (set by the broker)
        self.snapshot_source: Callable[[], Iterable[Record]] | None = None

    # --- start-up ---------------------------------------------------------------------------

    def load(self) -> ShareState:
        """Replay every log, then start a compacted one (on the loading thread)."""
        self.directory.mkdir(parents=True, exist_ok=True)
        for tmp in self.directory.glob("*.tmp"):
            tmp.unlink()
        state = ShareState()
        logs = self._logs()
        for i, path in enumerate(logs):
            data = path.read_bytes()
            result = ScanResult()
            for _pos, payload in iter_entries(str(path), data, KIND_SHARE_LOG, result):
                state.replay(json.loads(payload))
            if result.corrupt_at is not None:
                raise StorageError(
                    f"{path}: damaged entry at byte {result.corrupt_at} with entries after it"
                )
            if result.torn_at is not None:
                if i != len(logs) - 1:
                    raise StorageError(f"{path}: cut short at byte {result.torn_at}")
                log.warning("share_log_torn_tail", file=str(path), dropped=result.dropped_bytes)
        self.seq = int(logs[-1].name[len(_PREFIX) : -len(_SUFFIX)]) if logs else 0
        self._start_log(state.records(), logs)
        return state

    def _logs(self) -> list[Path]:
        return sorted(
            p
            for p in self.directory.glob(f"{_PREFIX}*{_SUFFIX}")
            if p.name[len(_PREFIX) : -len(_SUFFIX)].isdigit()
        )

    def _start_log(self, records: Iterable[Record], old: list[Path]) -> None:
        """A new log holding ``records`` (durable before ``old`` are deleted) to append to."""
        self.seq += 1
        path = self.directory / f"{_PREFIX}{self.seq:020d}{_SUFFIX}"
        tmp = path.with_suffix(".tmp")
        data = bytearray(file_header(KIND_SHARE_LOG))
        for record in records:
            data += _encode(record)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o644)
        try:
            write_all(fd, data)
            os.fsync(fd)
        except BaseException:
            os.close(fd)
            raise
        os.rename(tmp, path)
        fsync_dir(self.directory)
        previous, self.fd, self.size = self.fd, fd, len(data)
        if previous >= 0:
            self.worker.close_fd(previous)
        for p in old:
            p.unlink(missing_ok=True)

    # --- running ----------------------------------------------------------------------------

    def append(self, record: Record) -> None:
        """A record to write: before the next answers go out, or soon."""
        self._pending.append(_encode(record))
        if not self._scheduled:
            self._scheduled = True
            self.worker.loop.call_soon(self.write_pending)

    def write_pending(self) -> None:
        self._scheduled = False
        if not self._pending or self.fd < 0:
            return
        data = b"".join(self._pending)
        self._pending.clear()
        write_all(self.fd, data)
        self.worker.dirty(self.fd)
        self.size += len(data)
        if self.size > self.max_log_bytes and self.snapshot_source is not None:
            self._rotate()

    def _rotate(self) -> None:
        assert self.snapshot_source is not None
        old = self._logs()
        self._start_log(self.snapshot_source(), old)
        log.info("share_log_compacted", file_seq=self.seq, bytes=self.size)

    def synced(self) -> asyncio.Future[None] | None:
        """What was written so far on disk: under ``--fsync always`` a future for it."""
        self.write_pending()
        if self.worker.mode != ALWAYS:
            return None
        return self.worker.sync()

    def close(self) -> None:
        """Clean shutdown: the pending records written (the fsync worker's last round makes
        them durable); the file is closed by ``close_fd`` after it."""
        self.write_pending()

    def close_fd(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
