"""Topic data on disk: ``topics.json`` and one directory of segment files per partition.

A segment is the partition's record batches back to back, exactly as stored (base offset
rewritten), named after its first offset. Batches are self-delimiting and carry their own
CRC-32C, so start-up rebuilds the in-memory offset index by reading batch headers, cutting
a torn tail and refusing (or, with ``--recover``, cutting at) damage elsewhere. Retention
deletes whole segments once every batch in them is below the log start offset.
"""

from __future__ import annotations

import json
import os
import shutil
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import structlog

from broker.storage.entries import StorageError
from broker.storage.fileio import fsync_dir, write_all
from broker.storage.fsync import FsyncWorker
from protocol.records import HEADER_SIZE, CorruptBatch, InvalidBatch, check_crc, parse_header

if TYPE_CHECKING:
    from broker.log.partition import PartitionLog
    from broker.log.topics import TopicManager

log = structlog.get_logger("kgroupd.storage")


@dataclass
class Segment:
    base_offset: int
    path: Path
    size: int = 0
    last_offset: int = -1


@dataclass
class PartitionStore:
    """The segment files of one partition; the last one is open for appends."""

    directory: Path
    worker: FsyncWorker
    segment_bytes: int
    segments: list[Segment] = field(default_factory=list)
    fd: int = -1

    def append(self, batch: bytes, base_offset: int, last_offset: int) -> None:
        if not self.segments or (
            self.segments[-1].size > 0 and self.segments[-1].size + len(batch) > self.segment_bytes
        ):
            self._roll(base_offset)
        seg = self.segments[-1]
        try:
            write_all(self.fd, batch)
        except OSError as exc:
            # No half batch stays for later appends to follow (damage in the middle).
            log.error("segment_write_failed", file=str(seg.path), error=str(exc))
            os.ftruncate(self.fd, seg.size)
            raise
        seg.size += len(batch)
        seg.last_offset = last_offset
        self.worker.dirty(self.fd)

    def _roll(self, base_offset: int) -> None:
        if self.fd >= 0:
            self.worker.retire(self.fd)  # fsynced (before any waiter is answered), then closed
        path = self.directory / f"{base_offset:020d}.log"
        self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        self.segments.append(Segment(base_offset, path))
        # The new name is durable once the directory is, before any answer that waits for a
        # batch in this segment.
        self.worker.dirty_dir(self.directory)

    def delete_below(self, log_start_offset: int) -> int:
        """Record the new log start (as Kafka's log-start-offset checkpoint: the segment that
        holds it may keep older batches) and delete whole segments entirely below it (never
        the active one)."""
        path = self.directory / "log-start-offset"
        tmp = path.with_suffix(".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            write_all(fd, str(log_start_offset).encode())
            os.fsync(fd)  # rare (retention moved the start): not worth a round trip
        finally:
            os.close(fd)
        os.replace(tmp, path)
        self.worker.dirty_dir(self.directory)  # the rename, with the next fsync round
        deleted = 0
        while len(self.segments) > 1 and self.segments[0].last_offset < log_start_offset:
            self.segments.pop(0).path.unlink(missing_ok=True)
            deleted += 1
        return deleted

    def close(self) -> None:
        if self.fd >= 0:
            os.fsync(self.fd)
            self.worker.close_fd(self.fd)
            self.fd = -1


class TopicStore:
    def __init__(self, root: Path, worker: FsyncWorker, recover: bool) -> None:
        self.root = root
        self.dir = root / "topics"
        if not self.dir.exists():
            self.dir.mkdir(parents=True)
            fsync_dir(root)
        self.worker = worker
        self.recover = recover
        self.partitions: dict[tuple[str, int], PartitionStore] = {}

    # --- topics.json -----------------------------------------------------------------------
    def save_topics(self, topics: TopicManager) -> None:
        """Write the topic table atomically (temp file, fsync, rename, fsync the dir)."""
        table = {
            name: {
                "partitions": len(t.partitions),
                "configs": t.configs,
                "topic_id": str(t.topic_id),
            }
            for name, t in topics.topics.items()
        }
        path = self.root / "topics.json"
        tmp = path.with_suffix(".tmp")
        with open(tmp, "w") as f:
            json.dump({"version": 1, "topics": table}, f, indent=1)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        fsync_dir(self.root)

    def attach(self, log: PartitionLog, segment_bytes: int) -> PartitionStore:
        directory = self.dir / f"{log.topic}-{log.partition}"
        if not directory.exists():
            directory.mkdir(parents=True)
            self.worker.dirty_dir(self.dir)  # with the first segment's directory fsync
        store = PartitionStore(directory, self.worker, segment_bytes)
        self.partitions[(log.topic, log.partition)] = store
        log.store = store
        return store

    def set_segment_bytes(self, name: str, segment_bytes: int) -> None:
        """An altered segment.bytes: each partition's next roll follows it."""
        for (topic, _), store in self.partitions.items():
            if topic == name:
                store.segment_bytes = segment_bytes

    def drop_topic(self, name: str, partitions: int) -> None:
        for p in range(partitions):
            store = self.partitions.pop((name, p), None)
            if store is not None and store.fd >= 0:
                self.worker.close_fd(store.fd)
                store.fd = -1
            shutil.rmtree(self.dir / f"{name}-{p}", ignore_errors=True)

    # --- start-up --------------------------------------------------------------------------
    def load(self, topics: TopicManager) -> None:
        """Recreate every topic and partition log from disk."""
        path = self.root / "topics.json"
        if not path.exists():
            return
        table = json.loads(path.read_text())
        if table.get("version", 0) > 1:
            raise StorageError(
                f"{path}: format version {table['version']} is newer than this kgroupd reads (1)"
            )
        for name, spec in table["topics"].items():
            topic = topics.create(
                name, spec["partitions"], spec["configs"], uuid.UUID(spec["topic_id"])
            )
            segment_bytes = int(topic.config("segment.bytes"))
            for plog in topic.partitions:
                store = self.attach(plog, segment_bytes)
                self._load_partition(plog, store)

    def _load_partition(self, plog: PartitionLog, store: PartitionStore) -> None:
        files = sorted(store.directory.glob("*.log"))
        damaged = False
        for i, path in enumerate(files):
            if damaged:
                log.warning("segment_dropped_after_damage", file=str(path))
                path.unlink()
                continue
            seg = Segment(int(path.stem), path)
            data = path.read_bytes()
            pos, end = 0, len(data)
            expected = seg.base_offset
            while pos < end:
                problem = None
                try:
                    header = parse_header(data, pos)
                    if header.length < HEADER_SIZE or header.magic != 2:
                        raise InvalidBatch("bad batch length or magic")
                    if pos + header.length > end:
                        # Cut short by a crash, or a damaged length with batches after it.
                        problem = "corrupt" if _good_batch_after(data, pos + 1) else "torn"
                    else:
                        check_crc(data, pos, header)
                        if header.base_offset != expected:  # outside the CRC: check it here
                            problem = "corrupt"
                except CorruptBatch:
                    last = pos + header.length == end
                    problem = "torn" if last or not _good_batch_after(data, pos + 1) else "corrupt"
                except InvalidBatch:
                    problem = "torn" if end - pos < HEADER_SIZE else "corrupt"
                if problem is not None:
                    last_file = i == len(files) - 1
                    if problem == "torn" and last_file:
                        log.warning(
                            "torn_tail_cut", file=str(path), offset=pos, bytes_dropped=end - pos
                        )
                    elif not self.recover:
                        raise StorageError(
                            f"{path}: damaged record batch at byte offset {pos} "
                            f"({end - pos} bytes from there on); start with --recover to keep "
                            "what precedes the damage and drop the rest"
                        )
                    else:
                        log.warning(
                            "recovered_damaged_file",
                            file=str(path),
                            offset=pos,
                            bytes_dropped=end - pos,
                        )
                        damaged = True
                    os.truncate(path, pos)
                    break
                batch = data[pos : pos + header.length]
                plog.restore(batch, header)
                seg.size += header.length
                seg.last_offset = header.base_offset + header.last_offset_delta
                pos += header.length
                expected = seg.last_offset + 1
            store.segments.append(seg)
        checkpoint = store.directory / "log-start-offset"
        if checkpoint.exists():
            plog.drop_below(int(checkpoint.read_text()))
        if store.segments:
            if plog.batches:
                plog.log_start_offset = max(plog.log_start_offset, plog.batches[0].base_offset)
            store.fd = os.open(store.segments[-1].path, os.O_WRONLY | os.O_APPEND)

    def close(self) -> None:
        for store in self.partitions.values():
            store.close()


def _good_batch_after(data: bytes, pos: int) -> bool:
    """Whether a complete record batch with a matching CRC starts anywhere after ``pos``."""
    end = len(data)
    for at in range(pos, end - HEADER_SIZE + 1):
        if data[at + 16] != 2:  # magic
            continue
        try:
            header = parse_header(data, at)
        except InvalidBatch:
            return False
        if header.length < HEADER_SIZE or at + header.length > end:
            continue
        try:
            check_crc(data, at, header)
        except CorruptBatch:
            continue
        return True
    return False
