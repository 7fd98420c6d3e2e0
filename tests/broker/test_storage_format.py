"""The on-disk format of coordinator state (file format version 2) and the write path's gaps.

- A snapshot's offset blocks round-trip any offsets (unicode metadata, unset and set expire
  timestamps, more partitions than one block holds), and a snapshot written from a shard's
  state loads back (``load_offsets``, no replay) into an equal state.
- A data dir written by a kgroupd of format version 1 (JSON entries) still loads, end to end;
  its old log is left as it is and appends go to a new log in the current format.
- A record of a newer record format version stops start-up with "newer ... upgrade", even
  with --recover.
- A snapshot whose header entry is damaged: refused with a clear error; with --recover it is
  set aside (``*.snapshot.damaged``, a warning) and the shard is rebuilt from the logs left.
- A short ``os.write`` is continued (a fake ``os.write`` that takes a few bytes per call),
  and a failed write leaves no half entry behind for later appends to follow.
"""

from __future__ import annotations

import asyncio
import errno
import json
import os
import random
from collections.abc import Callable
from pathlib import Path

import pytest
from crc32c import crc32c
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kgroupd.broker.coordinator import (
    CoordinatorConfig,
    CoordinatorShard,
    GroupMetadataRecord,
    ManualTimers,
    MemberRecord,
    OffsetCommitRecord,
    OffsetTombstoneRecord,
    Record,
    record_to_dict,
)
from kgroupd.broker.coordinator.core import OffsetAndMetadata
from kgroupd.broker.coordinator.placement import partition_for
from kgroupd.broker.storage.coordinator_format import (
    BLOCK_PARTITIONS,
    decode_offset_block,
    encode_offset_blocks,
)
from kgroupd.broker.storage.coordinator_store import CoordinatorStore, file_records
from kgroupd.broker.storage.entries import (
    ENTRY_HEADER,
    FILE_HEADER,
    FORMAT_VERSION,
    KIND_RECORD_LOG,
    KIND_SNAPSHOT,
    MAGIC,
    entry,
    scan,
)
from kgroupd.broker.storage.fileio import write_all
from kgroupd.broker.storage.fsync import FsyncWorker
from kgroupd.broker.storage.partition_store import PartitionStore
from tests.broker.storage_helpers import GROUP, PARTITIONS, TOPIC, commit, committed
from tests.support.broker_process import BrokerProcess
from tests.support.groups import RawConnection, describe_group

# --- offset blocks and snapshots ------------------------------------------------------------

offsets_strategy = st.dictionaries(
    st.integers(0, 2**31 - 1),
    st.builds(
        OffsetAndMetadata,
        st.integers(-1, 2**63 - 1),
        st.integers(-(2**31), 2**31 - 1),
        st.text(max_size=12),
        st.integers(-(2**63), 2**63 - 1),
        st.none() | st.integers(-(2**63), 2**63 - 1),
    ),
    max_size=40,
)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.text(max_size=20), st.text(max_size=20), offsets_strategy)
def test_offset_blocks_round_trip(
    group: str, topic: str, offsets: dict[int, OffsetAndMetadata]
) -> None:
    decoded: dict[int, OffsetAndMetadata] = {}
    for block in encode_offset_blocks(group, topic, offsets):
        g, t, part = decode_offset_block(block)
        assert (g, t) == (group, topic)
        decoded.update(part)
    assert decoded == offsets


def test_a_large_topic_is_split_into_blocks_and_loads_whole() -> None:
    offsets = {
        p: OffsetAndMetadata(p, p % 3, "ü" * (p % 4), p * 2, None if p % 2 else p)
        for p in range(BLOCK_PARTITIONS * 2 + 5)
    }
    blocks = list(encode_offset_blocks("g", "t", offsets))
    assert len(blocks) == 3
    merged: dict[int, OffsetAndMetadata] = {}
    for block in blocks:
        merged.update(decode_offset_block(block)[2])
    assert merged == offsets


def shard(p: int = 0, loaded: bool = True) -> CoordinatorShard:
    return CoordinatorShard(
        p, CoordinatorConfig(offsets_partitions=1), ManualTimers(), None, loaded
    )


def offsets_of(s: CoordinatorShard) -> Callable[[int], list[tuple[str, str, dict[int, object]]]]:
    return lambda _p: [(g, t, dict(ps)) for g, ts in s.offsets.items() for t, ps in ts.items()]


async def test_a_snapshot_loads_back_into_an_equal_shard(tmp_path: Path) -> None:
    rng = random.Random(4)
    worker = FsyncWorker(asyncio.get_running_loop(), "always", 1000)
    store = CoordinatorStore(tmp_path, 1, worker, 1 << 30, recover=False)
    live = shard()
    store.load([live])
    store.offsets_of = offsets_of(live)  # type: ignore[assignment]
    sink = store.sink_for(0)
    member = MemberRecord("m-1", "static-1", "c", "/h", 1000, 2000, "consumer", (), b"\xff")
    group = GroupMetadataRecord("led", "consumer", 4, "range", "m-1", 77, (member,))
    live.replay(group)
    sink(group)
    for n in range(3000):
        g = rng.choice(["led", "simple-ä", "other"])
        t = rng.choice(["t", "ü-topic"])
        record: Record = OffsetCommitRecord(
            g,
            t,
            rng.randrange(1200),
            n,
            rng.randrange(-1, 5),
            rng.choice(["", "meta", "日本"]),
            1000 + n,
            rng.choice([None, 5000 + n]),
        )
        if n % 7 == 0:
            record = OffsetTombstoneRecord(g, t, rng.randrange(1200))
        live.replay(record)
        sink(record)
    await store.finish(store.capture())
    worker.close()
    snapshot = tmp_path / "coordinator" / "shard-00.snapshot"
    assert not list((tmp_path / "coordinator").glob("log-*.log"))

    worker = FsyncWorker(asyncio.get_running_loop(), "always", 1000)
    store = CoordinatorStore(tmp_path, 1, worker, 1 << 30, recover=False)
    fresh = shard(loaded=False)
    store.load([fresh])
    fresh.complete_loading()
    await store.finish(store.capture())
    worker.close()
    assert fresh.offsets == live.offsets
    assert set(fresh.groups) == set(live.groups) == {"led", "simple-ä", "other"}
    assert fresh.groups["led"].to_record() == group
    # what tools read of it is the same state
    records = list(file_records(snapshot))
    assert sum(isinstance(r, OffsetCommitRecord) for r in records) == sum(
        len(ps) for ts in live.offsets.values() for ps in ts.values()
    )


# --- through a broker ------------------------------------------------------------------------


def v1_file(kind: int, payloads: list[bytes]) -> bytes:
    """A file as kgroupd wrote them in format version 1: JSON entries."""
    return FILE_HEADER.pack(MAGIC, 1, kind) + b"".join(entry(p) for p in payloads)


def v1_record(record: Record) -> bytes:
    return json.dumps(record_to_dict(record), separators=(",", ":")).encode()


async def test_a_data_dir_of_format_version_1_still_loads(broker: BrokerProcess) -> None:
    data = Path(broker.data_dir)
    await broker.start()  # makes meta.json and the directories
    await broker.stop()
    coordinator = data / "coordinator"
    for p in coordinator.iterdir():
        p.unlink()
    group = GroupMetadataRecord("old-group", "consumer", 3, "range", None, 1_700_000_000_000, ())
    snapshot = coordinator / "shard-00.snapshot"
    snapshot.write_bytes(
        v1_file(
            KIND_SNAPSHOT,
            [
                json.dumps({"next_log_seq": 1}).encode(),
                v1_record(group),
                *(
                    v1_record(OffsetCommitRecord(GROUP, TOPIC, p, 10 + p, -1, f"m{10 + p}", 5))
                    for p in range(PARTITIONS)
                ),
            ],
        )
    )
    old_log = coordinator / "shard-00-000001.log"
    old_log.write_bytes(
        v1_file(
            KIND_RECORD_LOG,
            [
                v1_record(OffsetCommitRecord(GROUP, TOPIC, 1, 21, -1, "m21", 6)),
                v1_record(OffsetTombstoneRecord(GROUP, TOPIC, 3)),
            ],
        )
    )
    old_bytes = old_log.read_bytes()

    await broker.start()
    assert await committed(broker) == {0: 10, 1: 21, 2: 12}
    async with await RawConnection.open(broker.bootstrap) as conn:
        described = await describe_group(conn, "old-group")
    assert (described.state, described.protocol_type) == ("Empty", "consumer")
    await commit(broker, {3: 42})
    await broker.kill()
    # The old log was not appended to: the commit went to the shared log, in the current
    # format.
    assert old_log.read_bytes() == old_bytes
    new_log = coordinator / "log-000000.log"
    new = scan(str(new_log), new_log.read_bytes(), KIND_RECORD_LOG)
    assert new.version == FORMAT_VERSION and len(new.payloads) == 1

    await broker.start()  # a version 1 snapshot, a version 1 shard log, a shared log
    assert await committed(broker) == {0: 10, 1: 21, 2: 12, 3: 42}
    await broker.stop()  # the snapshot is rewritten in the current format; old logs go
    assert scan(str(snapshot), snapshot.read_bytes(), KIND_SNAPSHOT).version == FORMAT_VERSION
    assert not old_log.exists()
    await broker.start()
    assert await committed(broker) == {0: 10, 1: 21, 2: 12, 3: 42}
    await broker.stop()


async def test_a_record_of_a_newer_format_version_says_upgrade(broker: BrokerProcess) -> None:
    data = Path(broker.data_dir)
    await broker.start()
    await commit(broker, {0: 1})
    await commit(broker, {1: 2})
    await broker.kill()
    (log_path,) = [p for p in (data / "coordinator").glob("*.log") if p.stat().st_size > 8]
    raw = bytearray(log_path.read_bytes())
    at = FILE_HEADER.size  # the first entry: a later one follows, so not a torn tail
    (length, _crc) = ENTRY_HEADER.unpack_from(raw, at)
    start = at + ENTRY_HEADER.size
    raw[start] += 1  # the record's version byte
    ENTRY_HEADER.pack_into(raw, at, length, crc32c(bytes(raw[start : start + length])))
    log_path.write_bytes(bytes(raw))

    for extra in ((), ("--recover",)):  # --recover never drops data it cannot read
        code, err = await broker.run_refused(*extra)
        assert code == 2, err
        assert str(log_path) in err and f"byte offset {at}" in err
        assert "record format version 3 is newer than this kgroupd reads (2)" in err
        assert "upgrade kgroupd" in err and "unreadable" not in err
        assert log_path.read_bytes() == raw


async def test_a_damaged_snapshot_header_is_refused_and_recover_rebuilds_from_the_logs(
    broker: BrokerProcess,
) -> None:
    data = Path(broker.data_dir)
    await broker.start()
    await commit(broker, {0: 1, 1: 2})
    await broker.stop()  # into the snapshot
    await broker.start()
    await commit(broker, {2: 3})
    await commit(broker, {0: 5})
    await broker.kill()  # in the log after the snapshot
    snapshot = data / "coordinator" / "shard-00.snapshot"
    raw = bytearray(snapshot.read_bytes())
    raw[FILE_HEADER.size + ENTRY_HEADER.size + 3] ^= 0x5A  # inside the header entry
    snapshot.write_bytes(bytes(raw))

    code, err = await broker.run_refused()
    assert code == 2, err
    assert str(snapshot) in err and "header entry is damaged" in err
    assert f"byte offset {FILE_HEADER.size}" in err and "--recover" in err
    assert snapshot.read_bytes() == raw

    await broker.start("--recover")
    (dropped,) = broker.find("damaged_snapshot_dropped", file=str(snapshot))
    assert dropped["level"] == "warning" and dropped["moved_to"] == f"{snapshot}.damaged"
    assert not snapshot.exists()
    assert Path(f"{snapshot}.damaged").read_bytes() == raw
    # What only the snapshot held (partition 1) is lost; the log after it is replayed.
    assert await committed(broker) == {0: 5, 2: 3}
    await broker.stop()
    await broker.start()  # rebuilt for good: no --recover needed
    assert await committed(broker) == {0: 5, 2: 3}
    await broker.stop()


# --- short and failed writes -----------------------------------------------------------------


def test_write_all_continues_short_writes_and_refuses_a_zero_write(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_write = os.write
    sizes: list[int] = []

    def short_write(fd: int, data: bytes) -> int:
        sizes.append(len(data))
        return real_write(fd, bytes(data[:5]))

    path = tmp_path / "f"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    try:
        monkeypatch.setattr(os, "write", short_write)
        write_all(fd, bytearray(b"0123456789abcdef-"))
        assert sizes == [17, 12, 7, 2]
        monkeypatch.setattr(os, "write", lambda _fd, _data: 0)
        with pytest.raises(OSError, match="took 0 of 3 bytes"):
            write_all(fd, b"xyz")
    finally:
        monkeypatch.undo()
        os.close(fd)
    assert path.read_bytes() == b"0123456789abcdef-"


async def test_short_writes_lose_nothing_in_a_log_or_a_segment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_write = os.write
    calls = 0

    def short_write(fd: int, data: bytes) -> int:
        nonlocal calls
        calls += 1
        return real_write(fd, bytes(data[:7]))

    worker = FsyncWorker(asyncio.get_running_loop(), "always", 1000)
    store = CoordinatorStore(tmp_path, 1, worker, 1 << 30, recover=False)
    store.load([shard()])
    records = [OffsetCommitRecord("g", "t", p, p * 10, -1, "ü" * p, 1, None) for p in range(20)]
    segment = PartitionStore(tmp_path / "seg", worker, 1 << 20)
    (tmp_path / "seg").mkdir()
    batch = bytes(range(256)) * 3
    try:
        monkeypatch.setattr(os, "write", short_write)
        for r in records:
            store.sink_for(0)(r)
        synced = store.flush()
        segment.append(batch, 0, 0)
        monkeypatch.undo()
        assert synced is not None
        await asyncio.wait_for(synced, 10)
        assert calls > len(records) + 1  # the writes were cut short indeed
        (log_path,) = (tmp_path / "coordinator").glob("log-*.log")
        assert list(file_records(log_path)) == records
        assert (tmp_path / "seg" / f"{0:020d}.log").read_bytes() == batch
    finally:
        monkeypatch.undo()
        await store.finish(store.capture())
        segment.close()
        worker.close()


async def test_a_failed_write_leaves_no_half_entry_and_is_retried(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_write = os.write
    calls = 0

    def failing_write(fd: int, data: bytes) -> int:
        nonlocal calls
        calls += 1
        if calls == 1:
            return real_write(fd, bytes(data[:10]))  # part of the first entry...
        raise OSError(errno.ENOSPC, "No space left on device")  # ...then the disk is full

    worker = FsyncWorker(asyncio.get_running_loop(), "always", 1000)
    store = CoordinatorStore(tmp_path, 1, worker, 1 << 30, recover=False)
    store.load([shard()])
    (log_path,) = (tmp_path / "coordinator").glob("log-*.log")
    records = [OffsetCommitRecord("g", "t", p, p, -1, "", 1, None) for p in range(3)]
    try:
        for r in records:
            store.sink_for(0)(r)
        monkeypatch.setattr(os, "write", failing_write)
        with pytest.raises(OSError, match="No space left"):
            store.flush()
        monkeypatch.undo()
        assert log_path.stat().st_size == FILE_HEADER.size  # the half entry was cut off
        synced = store.flush()  # the disk has room again: the same records go out whole
        assert synced is not None
        await asyncio.wait_for(synced, 10)
        assert list(file_records(log_path)) == records
    finally:
        monkeypatch.undo()
        await store.finish(store.capture())
        worker.close()


@given(
    group=st.text(max_size=12),
    topic=st.text(max_size=12),
    entries=st.lists(
        st.tuples(
            st.integers(-(2**31), 2**31 - 1),
            st.integers(-(2**63), 2**63 - 1),
            st.integers(-(2**31), 2**31 - 1),
            st.text(max_size=8),
        ),
        max_size=5,
    ),
    now=st.integers(0, 2**62),
    expire=st.none() | st.integers(0, 2**62),
)
@settings(suppress_health_check=[HealthCheck.function_scoped_fixture], deadline=None)
def test_the_batch_commit_sink_writes_the_bytes_of_one_record_per_partition(
    tmp_path: Path,
    group: str,
    topic: str,
    entries: list[tuple[int, int, int, str]],
    now: int,
    expire: int | None,
) -> None:
    async def emitted(batch: bool) -> bytes:
        worker = FsyncWorker(asyncio.get_running_loop(), "never", 1000)
        store = CoordinatorStore(tmp_path / str(batch), 1, worker, 1 << 30, recover=False)
        try:
            sink = store.sink_for(0)
            if batch:
                sink.offset_commits(group, topic, entries, now, expire)
            else:
                for p, o, e, m in entries:
                    sink(OffsetCommitRecord(group, topic, p, o, e, m, now, expire))
            return bytes(store.buf)
        finally:
            store.buf.clear()
            await store.finish(store.capture())
            worker.close()

    async def run() -> tuple[bytes, bytes]:
        return await emitted(True), await emitted(False)

    batch_bytes, plain_bytes = asyncio.run(run())
    assert batch_bytes == plain_bytes


async def test_a_failed_rotation_keeps_its_shards_due_for_the_next_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A rotation whose snapshots fail deletes nothing, and its shards stay due: a later
    rotation that deletes the logs must first snapshot them too, or their records are lost."""
    names = [f"g{i}" for i in range(20)]
    first = next(n for n in names if partition_for(n, 2) == 0)
    second = next(n for n in names if partition_for(n, 2) == 1)
    worker = FsyncWorker(asyncio.get_running_loop(), "always", 1000)
    store = CoordinatorStore(tmp_path, 2, worker, 1 << 30, recover=False)
    live = [shard(0), shard(1)]
    store.load(live)
    store.offsets_of = lambda p: offsets_of(live[p])(p)  # type: ignore[assignment]

    def emit(record: OffsetCommitRecord) -> None:
        p = partition_for(record.group_id, 2)
        live[p].replay(record)
        store.sink_for(p)(record)

    def disk_full(*_args: object) -> int:
        raise OSError(errno.ENOSPC, "No space left on device")

    real = store._write_snapshot
    monkeypatch.setattr(store, "_write_snapshot", disk_full)
    emit(OffsetCommitRecord(first, "t", 0, 7, -1, "", 1, None))
    store.flush()
    store._start_snapshot()
    await asyncio.gather(*store._snapshot_tasks, return_exceptions=True)
    monkeypatch.setattr(store, "_write_snapshot", real)
    emit(OffsetCommitRecord(second, "t", 0, 8, -1, "", 2, None))
    store.flush()
    store._start_snapshot()  # succeeds and deletes the logs holding the first commit
    await asyncio.gather(*store._snapshot_tasks)
    await store.finish(store.capture())
    worker.close()

    worker = FsyncWorker(asyncio.get_running_loop(), "always", 1000)
    store = CoordinatorStore(tmp_path, 2, worker, 1 << 30, recover=False)
    fresh = [shard(0, loaded=False), shard(1, loaded=False)]
    store.load(fresh)
    await store.finish(store.capture())
    worker.close()
    assert [f.offsets for f in fresh] == [live[0].offsets, live[1].offsets]
    assert fresh[0].offsets == {first: {"t": {0: live[0].offsets[first]["t"][0]}}}
