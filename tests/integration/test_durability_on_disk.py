"""What ``--data-dir`` holds, and when (issue 4).

- Under ``--fsync always`` nothing is acknowledged before it is fsynced: every acks=all
  record, every commit, every leader's SyncGroup (the assignment it stores) and every
  DeleteGroups and OffsetDelete (their tombstones) lies within a file's size at an fsync of
  that file that finished before the client got its answer (``os.fsync`` is watched: a
  kill -9 cannot show a missing fsync). The broker runs in-process, where the test sees every
  ``os.fsync``.
- Commit and group-state timestamps on disk are wall-clock milliseconds.
"""

from __future__ import annotations

import asyncio
import os
import stat
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from kgroupd.broker.coordinator.records import (
    GroupMetadataRecord,
    GroupTombstoneRecord,
    OffsetCommitRecord,
    OffsetTombstoneRecord,
    decode_record,
)
from kgroupd.broker.storage.coordinator_store import file_records
from kgroupd.broker.storage.entries import KIND_RECORD_LOG, scan
from kgroupd.broker.testing import running_server
from kgroupd.protocol.records import parse_header
from tests.support.broker_process import broker_process
from tests.support.durability import PARTITIONS, TOPIC, started
from tests.support.groups import DELETE_GROUPS, JOIN_GROUP, OFFSET_DELETE, SYNC_GROUP, RawConnection
from tests.support.kafka_wire import WireClient, create_topic

# --- fsync before the answer ------------------------------------------------------------------


async def lead_alone(
    bootstrap: str, group: str, rounds: int, synced: Callable[[str, int], None]
) -> None:
    """Join a group alone, as its leader, and SyncGroup an assignment (b"assignment"); again
    ``rounds`` times (each rejoin of the leader is a new generation). ``synced(member id,
    generation)`` is called as soon as each SyncGroup is answered."""
    async with await RawConnection.open(bootstrap) as conn:
        fields: dict[str, Any] = {
            "group_id": group,
            "session_timeout_ms": 30000,
            "rebalance_timeout_ms": 10000,
            "member_id": "",
            "group_instance_id": None,
            "protocol_type": "consumer",
            "protocols": [("range", b"subscription")],
        }
        first = await conn.call(JOIN_GROUP, 5, **fields)
        assert first["error_code"] == 79  # MEMBER_ID_REQUIRED, with the id to use
        fields["member_id"] = member = first["member_id"]
        for _ in range(rounds):
            joined = await conn.call(JOIN_GROUP, 5, **fields)
            assert joined["error_code"] == 0 and joined["leader"] == member
            generation = joined["generation_id"]
            resp = await conn.call(
                SYNC_GROUP,
                3,
                group_id=group,
                generation_id=generation,
                member_id=member,
                group_instance_id=None,
                assignments=[(member, b"assignment")],
            )
            assert resp["error_code"] == 0
            synced(member, generation)


async def test_under_fsync_always_nothing_is_acknowledged_before_its_fsync(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fsyncs: list[tuple[int, int, float]] = []  # (inode, size when it started, when it ended)
    # Directories: (inode, the names in it when the fsync started, when it ended). A new file
    # is there after a crash only once its directory entry is on disk.
    dir_fsyncs: list[tuple[int, frozenset[str], float]] = []
    lock = threading.Lock()
    real_fsync = os.fsync

    def watched_fsync(fd: int) -> None:
        st = os.fstat(fd)  # fails on a closed fd just as fsync would
        names = frozenset(os.listdir(fd)) if stat.S_ISDIR(st.st_mode) else None
        real_fsync(fd)
        done = time.monotonic()
        with lock:
            if names is None:
                fsyncs.append((st.st_ino, st.st_size, done))
            else:
                dir_fsyncs.append((st.st_ino, names, done))

    monkeypatch.setattr(os, "fsync", watched_fsync)
    data = tmp_path / "data"
    records_acked: dict[int, float] = {}  # offset -> when its producer got the answer
    commits_acked: dict[tuple[str, int], float] = {}  # (group, offset) -> when answered
    syncs_acked: dict[tuple[str, str, int], float] = {}  # (group, member, generation) -> when
    # (group,) or (group, topic, partition) -> when its DeleteGroups / OffsetDelete was answered
    deletes_acked: dict[tuple[Any, ...], float] = {}
    groups = [f"synced-{i}" for i in range(4)]

    async with running_server(
        data_dir=str(data), log_level="warning", initial_rebalance_delay_ms=0
    ) as server:
        bootstrap = f"127.0.0.1:{server.port}"
        async with await WireClient.connect(server.port) as wire:
            # Small segments: segments roll while other batches wait for their fsync.
            await create_topic(wire, "synced", 1, {"segment.bytes": "1024"})

        async def produce(i: int) -> None:
            producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all")
            async with started(producer):
                for n in range(25):
                    value = f"{i}:{n}:".encode() * 20
                    meta = await producer.send_and_wait("synced", value, partition=0)
                    records_acked[meta.offset] = time.monotonic()

        async def commit(group: str) -> None:
            consumer = AIOKafkaConsumer(
                bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False
            )
            async with started(consumer):
                tp = TopicPartition("synced", 0)
                consumer.assign([tp])
                for n in range(1, 26):
                    await consumer.commit({tp: n})
                    commits_acked[(group, n)] = time.monotonic()
            async with await RawConnection.open(bootstrap) as conn:
                if group in groups[:2]:
                    resp = await conn.call(DELETE_GROUPS, 1, groups_names=[group])
                    assert [r["error_code"] for r in resp["results"]] == [0]
                    deletes_acked[(group,)] = time.monotonic()
                elif group == groups[2]:
                    resp = await conn.call(
                        OFFSET_DELETE, 0, group_id=group, topics=[("synced", [(0,)])]
                    )
                    assert resp["error_code"] == 0, resp
                    deletes_acked[(group, "synced", 0)] = time.monotonic()

        async def lead(group: str) -> None:
            def synced(member: str, generation: int) -> None:
                syncs_acked[(group, member, generation)] = time.monotonic()

            await lead_alone(bootstrap, group, 10, synced)

        await asyncio.gather(
            *(produce(i) for i in range(6)),
            *(commit(g) for g in groups),
            *(lead(f"led-{i}") for i in range(3)),
        )
        with lock:
            seen = list(fsyncs)
            seen_dirs = list(dir_fsyncs)
        first_ack: dict[Path, float] = {}  # every file holding acknowledged data

        def named(path: Path, acked_at: float) -> bool:
            """Whether ``path``'s name was in an fsync of its directory done by ``acked_at``."""
            ino = path.parent.stat().st_ino
            return any(i == ino and path.name in ns and at <= acked_at for i, ns, at in seen_dirs)

        def fsynced(path: Path, end: int, acked_at: float) -> bool:
            first_ack[path] = min(acked_at, first_ack.get(path, acked_at))
            ino = path.stat().st_ino
            return any(i == ino and size >= end and at <= acked_at for i, size, at in seen)

        not_synced = []
        for path in sorted((data / "topics" / "synced-0").glob("*.log")):
            buf, pos = path.read_bytes(), 0
            while pos < len(buf):
                header = parse_header(buf, pos)
                pos += header.length
                for offset in range(header.base_offset, header.base_offset + header.record_count):
                    if offset in records_acked and not fsynced(path, pos, records_acked[offset]):
                        not_synced.append(f"record {offset} ({path.name} up to byte {pos})")
        found: set[tuple[Any, ...]] = set()
        for path in sorted((data / "coordinator").glob("log-*.log")):
            buf = path.read_bytes()
            pos = 8
            for payload in scan(str(path), buf, KIND_RECORD_LOG).payloads:
                pos += 8 + len(payload)
                record = decode_record(payload)
                if isinstance(record, OffsetCommitRecord):
                    key = (record.group_id, record.offset)
                    if key in commits_acked:
                        found.add(key)
                        if not fsynced(path, pos, commits_acked[key]):
                            not_synced.append(f"commit {key} ({path.name} up to byte {pos})")
                elif isinstance(record, GroupTombstoneRecord | OffsetTombstoneRecord):
                    tomb_key: tuple[Any, ...] = (record.group_id,)
                    if isinstance(record, OffsetTombstoneRecord):
                        tomb_key = (record.group_id, record.topic, record.partition)
                    if tomb_key in deletes_acked:
                        found.add(tomb_key)
                        if not fsynced(path, pos, deletes_acked[tomb_key]):
                            not_synced.append(f"delete {tomb_key} ({path.name} up to {pos})")
                elif isinstance(record, GroupMetadataRecord) and record.leader_id is not None:
                    sync_key = (record.group_id, record.leader_id, record.generation_id)
                    stored = [m.assignment for m in record.members]
                    if sync_key in syncs_acked and stored == [b"assignment"]:
                        found.add(sync_key)
                        if not fsynced(path, pos, syncs_acked[sync_key]):
                            not_synced.append(f"sync {sync_key} ({path.name} up to byte {pos})")
        assert len(records_acked) == 150
        assert found == set(commits_acked) | set(syncs_acked) | set(deletes_acked)
        assert not not_synced, f"acknowledged before any fsync covered them: {not_synced}"
        # The files themselves (new segments as they roll, the coordinator logs) and the
        # partition directory were in a directory fsync before their first answer.
        segments = [p for p in first_ack if p.parent.name == "synced-0"]
        assert len(segments) >= 3, "no segment rolled under the load"
        unnamed = [
            str(p)
            for p, acked_at in first_ack.items()
            if not (named(p, acked_at) and named(p.parent, acked_at))
        ]
        assert not unnamed, f"acknowledged before their directory entry was fsynced: {unnamed}"


# --- timestamps on disk -----------------------------------------------------------------------


async def test_timestamps_on_disk_are_wall_clock_time(tmp_path: Path) -> None:
    """Commit and group-state timestamps are persisted and, after a restart, offsets expire by
    them (offsets.retention.minutes): they must be wall-clock milliseconds, as Kafka's, not the
    event loop's monotonic clock, which means nothing on another host or after a reboot (a
    container moved to a host up for longer would expire every offset at once)."""
    data = tmp_path / "data"
    args = ("--initial-rebalance-delay-ms", "0", "--create-topic", f"{TOPIC}:{PARTITIONS}")
    async with broker_process(data, args=args) as broker:
        await broker.start()
        before = int(time.time() * 1000)
        consumer = AIOKafkaConsumer(
            bootstrap_servers=broker.bootstrap, group_id="clocked", enable_auto_commit=False
        )
        async with started(consumer):
            consumer.assign([TopicPartition(TOPIC, 0)])
            await consumer.commit({TopicPartition(TOPIC, 0): 3})
        await lead_alone(broker.bootstrap, "clocked-group", 1, lambda _m, _g: None)
        after = int(time.time() * 1000)
        await broker.stop()
    stamps = {}
    for path in (data / "coordinator").glob("*.snapshot"):
        for record in file_records(path):
            if isinstance(record, OffsetCommitRecord):
                stamps[f"commit of {record.group_id}"] = record.commit_timestamp_ms
            elif isinstance(record, GroupMetadataRecord):
                stamps[f"state of {record.group_id}"] = record.current_state_timestamp_ms
    assert set(stamps) == {"commit of clocked", "state of clocked-group"}
    wrong = {k: v for k, v in stamps.items() if not before - 1000 <= v <= after + 1000}
    assert not wrong, f"not wall-clock ms (between {before} and {after}): {wrong}"
