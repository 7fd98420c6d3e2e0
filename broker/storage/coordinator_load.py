"""Coordinator state on disk, the reading side: what start-up loads (``Loading.load``: each
shard's snapshot, its own logs from before the shared log, then the shared logs), the records
a file holds (``file_records``), and what a shard's snapshot keeps of the records (``track``).
The writing side, and the files, are described in ``kgroupd.broker.storage.coordinator_store``."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import structlog

from kgroupd.broker.coordinator.consumer.records import (
    CONSUMER_RECORD_TYPES,
    K_EPOCH,
    ConsumerRecord,
    ConsumerTombstoneRecord,
)
from kgroupd.broker.coordinator.core import OffsetAndMetadata
from kgroupd.broker.coordinator.placement import partition_for
from kgroupd.broker.coordinator.records import (
    GroupMetadataRecord,
    GroupTombstoneRecord,
    NewerRecordFormat,
    OffsetCommitRecord,
    Record,
    RecordFormatError,
    TxnOffsetCommitRecord,
    TxnOffsetMarkerRecord,
    decode_record,
    record_from_dict,
)
from kgroupd.broker.coordinator.txn.records import (
    TXN_RECORD_TYPES,
    TransactionMetadataRecord,
    TransactionTombstoneRecord,
    TxnRecord,
    decode_txn_record,
)
from kgroupd.broker.storage.coordinator_format import (
    TYPE_OFFSET_BLOCK,
    decode_header,
    decode_offset_block,
)
from kgroupd.broker.storage.entries import (
    FILE_HEADER,
    FORMAT_VERSION,
    KIND_RECORD_LOG,
    KIND_SNAPSHOT,
    ScanResult,
    StorageError,
    iter_entries,
)
from kgroupd.broker.storage.fileio import fsync_dir

__all__ = [
    "LOG_NAME",
    "SHARED_NAME",
    "TXN_RECORD_CLASSES",
    "Loading",
    "ShardFiles",
    "ShardLoader",
    "StoredRecord",
    "file_records",
    "owner_of",
    "track",
]

log = structlog.get_logger("kgroupd.storage")

LOG_NAME = re.compile(r"^shard-(\d+)-(\d+)\.log$")  # a shard's own log (before the shared log)
SHARED_NAME = re.compile(r"^log-(\d+)\.log$")


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


class ShardLoader(Protocol):
    """What start-up loads a shard through (``CoordinatorShard``, with the transaction
    coordinator's records routed by ``kgroupd.broker.storage.durability``)."""

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


def track(files: ShardFiles, record: StoredRecord) -> None:
    """What a shard's next snapshot needs of ``record`` besides the live offsets: group
    metadata as emitted, consumer-group records, pending transactional offsets,
    transactions."""
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


class Loading:
    """The loading half of ``CoordinatorStore`` (these attributes are its ``__init__``'s)."""

    root: Path
    partitions: int
    recover: bool
    shards: list[ShardFiles]
    changed: set[int]

    def _snapshot_path(self, shard: int) -> Path:
        return self.root / f"shard-{shard:02d}.snapshot"

    def _open_log(self, seq: int) -> None:
        raise NotImplementedError

    def _scan_dir(self) -> tuple[dict[int, list[tuple[int, Path]]], list[tuple[int, Path]]]:
        """(each shard's own logs, written before the shared log; the shared logs), sorted."""
        own: dict[int, list[tuple[int, Path]]] = {}
        shared: list[tuple[int, Path]] = []
        for path in self.root.iterdir():
            m = LOG_NAME.match(path.name)
            if m:
                own.setdefault(int(m.group(1)), []).append((int(m.group(2)), path))
            elif m := SHARED_NAME.match(path.name):
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
                    track(self.shards[shard], record)
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
                track(files, record)
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
            track(files, record)
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
