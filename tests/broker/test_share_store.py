"""The share store: records replayed in order at start-up (updates over snapshots, deletions),
the logs compacted into one, a torn last entry dropped, damage refused."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from kgroupd.broker.share.records import ShareState, configs_record, partition_record
from kgroupd.broker.storage.entries import StorageError
from kgroupd.broker.storage.fsync import FsyncWorker
from kgroupd.broker.storage.share_store import DIRECTORY, ShareStore

T = uuid.UUID(int=7)


@pytest.fixture
def worker() -> Iterator[FsyncWorker]:
    loop = asyncio.new_event_loop()
    w = FsyncWorker(loop, "never", 1000)
    yield w
    w.close()
    loop.close()


def reopen(tmp_path: Path, worker: FsyncWorker) -> tuple[ShareStore, ShareState]:
    store = ShareStore(tmp_path, worker, 1 << 20)
    return store, store.load()


def test_updates_replay_over_snapshots_and_logs_compact(
    tmp_path: Path, worker: FsyncWorker
) -> None:
    store, state = reopen(tmp_path, worker)
    assert state == ShareState()
    key = ("g", T, 0)
    for record in (
        configs_record("g", {"share.auto.offset.reset": "earliest"}),
        partition_record(key, 0, [], True),
        partition_record(key, 0, [(0, 2, 2, 1), (4, 4, 0, 1)], False),  # 0-2 acked, 4 released
        partition_record(key, 3, [(5, 5, 4, 1)], False),  # the start moved to 3; 5 archived
        partition_record(("g", T, 1), 9, [], True),
        {"t": "sp-", "g": "g", "tid": T.hex, "p": 1},
        {"t": "group", "g": "g", "ge": 3, "ae": 3, "m": []},
        {"t": "group", "g": "gone", "ge": 1, "ae": 1, "m": []},
        {"t": "group-", "g": "gone"},
    ):
        store.append(record)
    store.write_pending()
    store.close_fd()
    store, state = reopen(tmp_path, worker)
    assert state.configs == {"g": {"share.auto.offset.reset": "earliest"}}
    assert list(state.groups) == ["g"]
    assert list(state.partitions) == [key]
    assert state.partitions[key].start == 3
    assert state.partitions[key].batches() == [(4, 4, 0, 1), (5, 5, 4, 1)]
    # start-up compacted the log: one file, the same state from it
    assert len(list((tmp_path / DIRECTORY).glob("*.log"))) == 1
    store.close_fd()
    store, again = reopen(tmp_path, worker)
    assert again == state
    store.close_fd()


def test_a_torn_tail_is_dropped_and_damage_refused(tmp_path: Path, worker: FsyncWorker) -> None:
    store, _ = reopen(tmp_path, worker)
    store.append(configs_record("a", {"x": "1"}))
    store.append(configs_record("b", {"y": "2"}))
    store.write_pending()
    store.close_fd()
    (path,) = (tmp_path / DIRECTORY).glob("*.log")
    data = path.read_bytes()
    path.write_bytes(data[:-3])  # the last entry cut short: a crash mid-write
    store, state = reopen(tmp_path, worker)
    assert state.configs == {"a": {"x": "1"}}
    store.append(configs_record("b", {"y": "2"}))
    store.append(configs_record("c", {"z": "3"}))
    store.write_pending()
    store.close_fd()
    (path,) = (tmp_path / DIRECTORY).glob("*.log")
    data = bytearray(path.read_bytes())
    first = data.index(b'"a"')
    data[first] ^= 0xFF  # damage with good entries after it
    path.write_bytes(bytes(data))
    with pytest.raises(StorageError, match="damaged entry"):
        reopen(tmp_path, worker)


def test_a_long_log_is_compacted_while_running(tmp_path: Path, worker: FsyncWorker) -> None:
    store = ShareStore(tmp_path, worker, 300)
    store.load()
    live = {"n": 0}
    store.snapshot_source = lambda: [configs_record("g", {"n": str(live["n"])})]
    for n in range(1, 30):
        live["n"] = n
        store.append(configs_record("g", {"n": str(n)}))
        store.write_pending()
    assert store.size < 300 + 100  # compacted on the way, not 29 records long
    assert len(list((tmp_path / DIRECTORY).glob("*.log"))) == 1
    store.close_fd()
    _, state = reopen(tmp_path, worker)
    assert state.configs == {"g": {"n": "29"}}
