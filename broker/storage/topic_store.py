"""Topic data on disk: ``topics.json`` and one directory of segment files per partition.

A segment is the partition's record batches back to back, exactly as stored (base offset
rewritten), named after its first offset, with its index file beside it
(``kgroupd.broker.storage.segment``). Reads below the cached tail are served from the files
(``os.pread``, at most ``READ_CAP`` a partition per fetch): one the page cache holds of at
most ``INLINE_READ_BYTES`` on the event loop, any other on a reader thread (``ReadFds``).
Start-up reads the index files and the tail after the last one
(``kgroupd.broker.storage.segment_recovery``). Retention deletes whole segments, as Kafka: the
oldest while older than retention.ms or while the log without them still holds
retention.bytes; DeleteRecords deletes those wholly below the new log start offset.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
import os
import re
import shutil
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import structlog

from kgroupd.broker.storage.entries import StorageError
from kgroupd.broker.storage.fileio import fsync_dir, write_all
from kgroupd.broker.storage.fsync import FsyncWorker
from kgroupd.broker.storage.partition_store import (
    PartitionStore,
    ReadFds,
)
from kgroupd.broker.storage.segment import (
    INDEX_INTERVAL_BYTES,
    ProducerEntry,
)
from kgroupd.broker.storage.segment_recovery import load_partition

if TYPE_CHECKING:
    from kgroupd.broker.log.partition import PartitionLog
    from kgroupd.broker.log.producers import ProducerStateManager
    from kgroupd.broker.log.topics import TopicManager

log = structlog.get_logger("kgroupd.storage")

# a deleted partition's directory, renamed until its files are removed (Kafka's suffix)
DELETED_SUFFIX = "-delete"


def _remove_later(directories: list[Path]) -> None:
    """Remove ``directories`` and their files on a thread of their own."""

    def remove() -> None:
        for directory in directories:
            shutil.rmtree(directory, ignore_errors=True)

    threading.Thread(target=remove, name="topic-delete", daemon=True).start()


_PLAIN = re.compile(r"[a-zA-Z0-9._-]+")  # a legal topic name: JSON as it is


def _entry(name: str, partitions: int, configs: dict[str, str], topic_id: uuid.UUID | str) -> bytes:
    """One topic's entry in topics.json (``"name": {...}``; JSON's escapes keep it ASCII)."""
    key = f'"{name}"' if _PLAIN.fullmatch(name) else json.dumps(name)
    spec = json.dumps(configs) if configs else "{}"
    entry = f'{key}: {{"partitions": {partitions}, "configs": {spec}, "topic_id": "{topic_id}"}}'
    return entry.encode()


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
        self.by_topic: dict[str, list[PartitionStore]] = {}  # the same, per topic
        self.read_fds = ReadFds()
        # The idempotent producers, for the index files (set by Durability).
        self.producers: ProducerStateManager | None = None
        # topics.json's entry of each topic, serialized (``save_topics``), in the file's order
        self._entries: dict[str, bytes] = {}
        self._held = 0  # inside ``held``: the write waits for its end
        self._unsaved = False
        self._drops: list[tuple[str, int]] = []  # drop_topic calls waiting for that write
        self.batches_read = 0  # at start-up, read back from the segment files
        self.bytes_read = 0

    # --- topics.json -----------------------------------------------------------------------
    def save_topics(self, topics: TopicManager, changed: str | None = None) -> None:
        """Write the topic table atomically (temp file, fsync, rename, fsync the dir).

        Each topic's entry is kept serialized (``_entries``): a change serializes only the
        topic ``changed`` (every topic if None), and the file is their concatenation (one
        join), so a change at 10,000 or 100,000 topics costs no JSON encoding of them all."""
        entries = self._entries
        if changed is None:
            entries.clear()
            for name, t in topics.topics.items():
                entries[name] = _entry(name, len(t.partitions), t.configs, t.topic_id)
        else:
            found = topics.topics.get(changed)
            if found is None:
                entries.pop(changed, None)
            else:
                entries[changed] = _entry(
                    changed, len(found.partitions), found.configs, found.topic_id
                )
        if self._held:
            self._unsaved = True  # written once, as the outermost ``held`` ends
            return
        self._write()

    @contextlib.contextmanager
    def held(self) -> Iterator[None]:
        """Topic changes made inside are written to topics.json once, as it ends, and the
        directories of topics deleted meanwhile renamed only after (as each would be after
        its own write): a request creating or deleting many topics rewrites the file once,
        not once per topic. Nothing inside may wait (the changes are not on disk yet)."""
        self._held += 1
        try:
            yield
        finally:  # (also when the request failed: what it changed is written)
            self._held -= 1
            if not self._held:
                drops, self._drops = self._drops, []
                if self._unsaved:
                    self._unsaved = False
                    self._write()
                for name, partitions in drops:
                    self._drop(name, partitions)

    def _write(self) -> None:
        body = b",\n".join(self._entries.values())
        path = self.root / "topics.json"
        tmp = path.with_suffix(".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            write_all(fd, b'{"version": 1, "topics": {\n')
            write_all(fd, body)
            write_all(fd, b"\n}}\n")
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
        fsync_dir(self.root)

    def files_done(self) -> asyncio.Future[None] | None:
        """A future for when the file work retention left to the file thread is done."""
        return self.worker.drained()

    def attach(
        self,
        plog: PartitionLog,
        segment_bytes: int,
        index_interval: int = INDEX_INTERVAL_BYTES,
        on_disk: bool = False,
    ) -> PartitionStore:
        """The partition's store. Its directory is made with its first segment (or log start
        offset): a partition nothing was written to costs no file, so creating or loading
        many partitions stays cheap. ``on_disk``: the directory exists (start-up)."""
        topic, partition = plog.topic, plog.partition
        store = PartitionStore(
            (self.dir, f"{topic}-{partition}"),
            self.worker,
            segment_bytes,
            index_interval,
            self.read_fds,
            log=plog,
            on_disk=on_disk,
        )

        def producers_of() -> list[ProducerEntry]:
            return [] if self.producers is None else self.producers.entries(topic, partition)

        store.producers_of = producers_of
        self.partitions[(topic, partition)] = store
        self.by_topic.setdefault(topic, []).append(store)
        plog.store = store
        return store

    def set_segment_bytes(self, name: str, segment_bytes: int) -> None:
        """An altered segment.bytes: each partition's next roll follows it."""
        for store in self.by_topic.get(name, ()):
            store.segment_bytes = segment_bytes

    def set_roll_ms(self, name: str, segment_ms: int, jitter_ms: int) -> None:
        """segment.ms and segment.jitter.ms (new or altered): each partition's next append
        checks them; the jitter is drawn at the next roll."""
        for store in self.by_topic.get(name, ()):
            store.segment_ms, store.segment_jitter_ms = segment_ms, jitter_ms

    def set_index_interval(self, name: str, index_interval: int) -> None:
        """An altered index.interval.bytes: each partition's next segment follows it."""
        for store in self.by_topic.get(name, ()):
            store.index_interval = index_interval

    def drop_topic(self, name: str, partitions: int) -> None:
        """A deleted topic: each partition's directory is renamed ``...-delete`` here (one
        rename each, so a topic of the same name made next starts clean) and removed with
        its files on a thread (as Kafka's delayed deletion), not on the event loop; a
        directory left ``-delete`` by a crash is removed at the next start."""
        if self._held:
            self._drops.append((name, partitions))
        else:
            self._drop(name, partitions)

    def _drop(self, name: str, partitions: int) -> None:
        self.by_topic.pop(name, None)
        doomed = []
        for p in range(partitions):
            store = self.partitions.pop((name, p), None)
            if store is not None:
                store.forget()
                if not store.on_disk:  # a partition never written to has no directory
                    continue
            directory = self.dir / f"{name}-{p}"
            target = self.dir / f"{directory.name}.{uuid.uuid4().hex}{DELETED_SUFFIX}"
            try:
                os.rename(directory, target)
            except FileNotFoundError:
                continue
            doomed.append(target)
        if doomed:
            self.worker.dirty_dir(self.dir)  # the renames, with the next fsync round
            _remove_later(doomed)

    def forget_partitions(self, name: str, first: int, end: int) -> None:
        """Partitions made for a topic but never added to it (never written: no files)."""
        gone = set()
        for p in range(first, end):
            store = self.partitions.pop((name, p), None)
            if store is not None:
                store.forget()
                gone.add(id(store))
        kept = self.by_topic.get(name)
        if kept is not None:
            self.by_topic[name] = [s for s in kept if id(s) not in gone]

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
        # No collection while every partition's objects are made (each full one would walk
        # all made so far); once loaded they are kept out of the collector's way (they live
        # until their topic is deleted: TopicManager.create_in_slices says why).
        collecting = gc.isenabled()
        gc.disable()
        try:
            self._load(topics, table["topics"])
        finally:
            if collecting:
                gc.enable()
            gc.freeze()
        log.info(
            "topic_data_loaded",
            partitions=len(self.partitions),
            batches_read=self.batches_read,
            bytes_read=self.bytes_read,
            index_bytes=sum(seg.memory() for p in self.partitions.values() for seg in p.segments),
        )

    def _load(self, topics: TopicManager, table: dict[str, Any]) -> None:
        # One listing of topics/: a partition without a directory was never written to
        # (nothing to read); only the others are read back.
        on_disk = set(os.listdir(self.dir))
        left = [self.dir / n for n in on_disk if n.endswith(DELETED_SUFFIX)]
        if left:  # a deleted topic's directories a crash left
            _remove_later(left)
        entries = self._entries
        for name, spec in table.items():
            topic = topics.create(
                name, spec["partitions"], spec["configs"], uuid.UUID(spec["topic_id"])
            )
            # (the id as read: str() of 100,000 UUIDs would add 0.13 s to the start)
            entries[name] = _entry(name, len(topic.partitions), topic.configs, spec["topic_id"])
            segment_bytes = int(topic.config("segment.bytes"))
            index_interval = int(topic.config("index.interval.bytes"))
            for plog in topic.partitions:
                found = f"{name}-{plog.partition}" in on_disk
                store = self.attach(plog, segment_bytes, index_interval, on_disk=found)
                if found:
                    loaded = load_partition(plog, store, self.recover)
                    self.batches_read += loaded.batches_read
                    self.bytes_read += loaded.bytes_read
            self.set_roll_ms(
                name, int(topic.config("segment.ms")), int(topic.config("segment.jitter.ms"))
            )

    def close(self) -> None:
        for store in self.partitions.values():
            store.close()
        self.read_fds.close()
