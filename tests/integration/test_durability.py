"""``--data-dir`` across restarts (issue 4): what a client was told is stored stays stored.

The broker runs as a subprocess on a fixed port (``tests.support.broker_process``) so it can be
stopped with SIGTERM or killed with SIGKILL and started again on the same data dir, with the
clients reconnecting to the same address; retention and the fsync watch run in-process,
where the test can trigger retention and see every ``os.fsync``.

- Committed offsets and acks=all records: there after a clean restart and after ``kill -9``,
  under ``--fsync always``; after a clean restart under ``interval`` and ``never``.
- Static membership (confluent-kafka): across a ``kill -9`` of the broker, a live member keeps
  its partitions and generation with no rebalance callback, and a static member that was
  closed before the crash and rejoins within its session timeout gets its cached partitions.
- Snapshots: with a small ``--snapshot-log-bytes`` the shard's log is compacted into
  snapshots, the covered logs are deleted, and a restart (killed or clean) restores every
  latest offset.
- Under ``--fsync always`` nothing is acknowledged before it is fsynced: every acks=all
  record, every commit, every leader's SyncGroup (the assignment it stores) and every
  DeleteGroups and OffsetDelete (their tombstones) lies within a file's size at an fsync of
  that file that finished before the client got its answer (``os.fsync`` is watched: a
  kill -9 cannot show a missing fsync).
- Deleted groups and offsets stay deleted across restarts (tombstones, then snapshots).
- Topic data: the topic table (configs, added partitions, deletions) survives; retention
  with small segments deletes whole segment files and a restart does not bring deleted
  records back; an idempotent producer goes on with its sequence numbers across restarts.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import queue
import stat
import struct
import threading
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewPartitions, NewTopic
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType
from aiokafka.structs import OffsetAndMetadata
from confluent_kafka import Consumer
from confluent_kafka import TopicPartition as CTopicPartition

from kgroupd.broker.coordinator.placement import partition_for
from kgroupd.broker.coordinator.records import (
    GroupMetadataRecord,
    GroupTombstoneRecord,
    OffsetCommitRecord,
    OffsetTombstoneRecord,
    decode_record,
)
from kgroupd.broker.log.partition import now_ms
from kgroupd.broker.storage.coordinator_store import file_records
from kgroupd.broker.storage.entries import KIND_RECORD_LOG, scan
from kgroupd.broker.testing import running_server
from kgroupd.protocol.records import parse_header
from tests.support.broker_process import (
    BrokerProcess,
    broker_process,
    fetch_committed,
    read_partition,
)
from tests.support.groups import (
    DELETE_GROUPS,
    JOIN_GROUP,
    OFFSET_COMMIT,
    SYNC_GROUP,
    RawConnection,
    describe_group,
    wait_until,
)
from tests.support.kafka_wire import WireClient, build_batch, create_topic, produce_request

T = TypeVar("T")
WAIT_S = 20.0
OFFSET_DELETE = 47


@contextlib.asynccontextmanager
async def started(*clients: Any) -> AsyncIterator[None]:
    """Start aiokafka clients; stop (an admin client: close) them all at the end."""
    running = []
    try:
        for client in clients:
            await client.start()
            running.append(client)
        yield
    finally:
        for client in reversed(running):
            await (client.close() if isinstance(client, AIOKafkaAdminClient) else client.stop())


# --- offsets and records across restarts --------------------------------------------------------

TOPIC, PARTITIONS = "events", 3
GROUPS = ("billing", "audit")


class Written:
    """Commits and records the broker acknowledged, to check after each restart."""

    def __init__(self) -> None:
        self.offsets: dict[tuple[str, int], int] = {}
        self.records: dict[tuple[int, int], bytes] = {}
        self.round = 0

    async def write(self, bootstrap: str, fsync: str) -> None:
        """One round: every group commits every partition; a few records per partition."""
        self.round += 1
        n = self.round
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all")
        consumers = [
            AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=g, enable_auto_commit=False)
            for g in GROUPS
        ]
        async with started(producer, *consumers):
            for i in range(4):
                for p in range(PARTITIONS):
                    value = f"{fsync}:{n}:{p}:{i}".encode()
                    meta = await producer.send_and_wait(TOPIC, value, partition=p)
                    self.records[(p, meta.offset)] = value
            for g, consumer in zip(GROUPS, consumers, strict=True):
                tps = [TopicPartition(TOPIC, p) for p in range(PARTITIONS)]
                consumer.assign(tps)
                for step in range(3):  # several commits each: the latest must win
                    offsets = {tp: 10 * n + step + tp.partition for tp in tps}
                    await consumer.commit(
                        {tp: OffsetAndMetadata(o, f"{g}@{o}") for tp, o in offsets.items()}
                    )
                    for tp, o in offsets.items():
                        self.offsets[(g, tp.partition)] = o

    async def check(self, broker: BrokerProcess, where: str) -> None:
        for g in GROUPS:
            got = await fetch_committed(broker.port, g, TOPIC, list(range(PARTITIONS)))
            want = {p: (o, f"{g}@{o}") for (gg, p), o in self.offsets.items() if gg == g}
            assert got == want, f"{where}: group {g}"
        for p in range(PARTITIONS):
            values, high_watermark = await read_partition(broker.port, TOPIC, p)
            want_values = {o: v for (pp, o), v in self.records.items() if pp == p}
            assert values == want_values, f"{where}: partition {p}"
            assert high_watermark == len(want_values)
        # A real client reads the commits back too.
        consumer = AIOKafkaConsumer(
            bootstrap_servers=broker.bootstrap, group_id=GROUPS[0], enable_auto_commit=False
        )
        async with started(consumer):
            for p in range(PARTITIONS):
                assert (
                    await consumer.committed(TopicPartition(TOPIC, p))
                    == (self.offsets[(GROUPS[0], p)])
                )


@pytest.mark.parametrize("fsync", ["always", "interval", "never"])
async def test_offsets_and_records_survive_restarts(tmp_path: Path, fsync: str) -> None:
    args = ("--fsync", fsync, "--create-topic", f"{TOPIC}:{PARTITIONS}")
    written = Written()
    async with broker_process(tmp_path / "data", args=args) as broker:
        await broker.start()
        await written.write(broker.bootstrap, fsync)
        await broker.stop()
        await broker.start()
        await written.check(broker, "after SIGTERM")
        if fsync == "always":
            # Acknowledged means on disk: a kill -9 loses none of it either.
            await written.write(broker.bootstrap, fsync)
            await broker.kill()
            await broker.start()
            await written.check(broker, "after kill -9")
        await broker.stop()


async def test_deleted_groups_and_offsets_stay_deleted_across_restarts(tmp_path: Path) -> None:
    data = tmp_path / "data"
    args = ("--create-topic", f"{TOPIC}:{PARTITIONS}")
    parts = list(range(PARTITIONS))
    async with broker_process(data, args=args) as broker:
        await broker.start()
        for group in ("kept", "gone", "trimmed"):
            consumer = AIOKafkaConsumer(
                bootstrap_servers=broker.bootstrap, group_id=group, enable_auto_commit=False
            )
            async with started(consumer):
                tps = [TopicPartition(TOPIC, p) for p in parts]
                consumer.assign(tps)
                await consumer.commit({tp: OffsetAndMetadata(7, group) for tp in tps})
        async with await RawConnection.open(broker.bootstrap) as conn:
            resp = await conn.call(DELETE_GROUPS, 1, groups_names=["gone"])
            assert [r["error_code"] for r in resp["results"]] == [0]
            resp = await conn.call(OFFSET_DELETE, 0, group_id="trimmed", topics=[(TOPIC, [(1,)])])
            assert resp["error_code"] == 0
            # A barrier: a commit is answered once everything emitted before it is written
            # (DeleteGroups and OffsetDelete are answered before their tombstones are written:
            # test_under_fsync_always_nothing_is_acknowledged_before_its_fsync shows it), so
            # the kill below tests the replay of tombstones, not that race.
            resp = await conn.call(
                OFFSET_COMMIT,
                7,
                group_id="kept",
                generation_id_or_member_epoch=-1,
                member_id="",
                group_instance_id=None,
                topics=[(TOPIC, [(0, 7, -1, "kept")])],
            )
            assert resp["topics"][0]["partitions"][0]["error_code"] == 0

        async def check(where: str) -> None:
            want = {
                "kept": dict.fromkeys(parts, (7, "kept")),
                "gone": {},
                "trimmed": {0: (7, "trimmed"), 2: (7, "trimmed")},
            }
            for group, offsets in want.items():
                got = await fetch_committed(broker.port, group, TOPIC, parts)
                assert got == offsets, f"{where}: {group}"
            async with await RawConnection.open(broker.bootstrap) as conn:
                assert (await describe_group(conn, "gone")).state == "Dead", where

        await broker.kill()  # the tombstones are replayed from the log
        await broker.start()
        await check("after kill -9")
        await broker.stop()  # the snapshot drops the deleted keys
        snapshot_groups = set()
        for path in (data / "coordinator").glob("*.snapshot"):
            for record in file_records(path):
                snapshot_groups.add(record.group_id)
        assert snapshot_groups == {"kept", "trimmed"}
        await broker.start()
        await check("after SIGTERM")
        await broker.stop()


async def test_shards_share_one_log_and_rotations_keep_every_shard_right(tmp_path: Path) -> None:
    """Every shard appends to the one shared coordinator log. At a rotation only the shards
    with records since their snapshot get a new one: a shard with nothing new keeps its old
    snapshot (the logs deleted hold nothing of it), and a shard whose group was deleted gets
    an empty one, so the group does not come back."""
    data = tmp_path / "data"
    args = ("--snapshot-log-bytes", "2048", "--create-topic", f"{TOPIC}:{PARTITIONS}")
    names = [f"group-{i}" for i in range(40)]
    kept, gone, busy = (
        next(n for n in names if partition_for(n, 50) == shard)
        for shard in sorted({partition_for(n, 50) for n in names})[:3]
    )

    async def commit(conn: RawConnection, group: str, offset: int) -> None:
        resp = await conn.call(
            OFFSET_COMMIT,
            7,
            group_id=group,
            generation_id_or_member_epoch=-1,
            member_id="",
            group_instance_id=None,
            topics=[(TOPIC, [(0, offset, -1, f"{group}@{offset}")])],
        )
        assert resp["topics"][0]["partitions"][0]["error_code"] == 0

    async with broker_process(data, args=args) as broker:
        await broker.start()
        async with await RawConnection.open(broker.bootstrap) as conn:
            await commit(conn, kept, 5)
            await commit(conn, gone, 6)
        await broker.stop()  # snapshots of both shards
        await broker.start()
        rotations_before = len(broker.find("snapshots_written"))
        async with await RawConnection.open(broker.bootstrap) as conn:
            resp = await conn.call(DELETE_GROUPS, 1, groups_names=[gone])
            assert [r["error_code"] for r in resp["results"]] == [0]
            n = 0
            # commits to the busy group alone until two rotations have happened since
            while len(broker.find("snapshots_written")) < rotations_before + 2:
                n += 1
                await commit(conn, busy, n)
                assert n < 5000, "no rotation"
        # one log file for every shard
        assert not list((data / "coordinator").glob("shard-*.log"))
        assert (data / "coordinator" / f"shard-{partition_for(kept, 50):02d}.snapshot").exists()
        await broker.kill()
        await broker.start()
        assert await fetch_committed(broker.port, kept, TOPIC, [0]) == {0: (5, f"{kept}@5")}
        assert await fetch_committed(broker.port, gone, TOPIC, [0]) == {}
        assert await fetch_committed(broker.port, busy, TOPIC, [0]) == {0: (n, f"{busy}@{n}")}
        await broker.stop()


# --- static membership across a broker crash (confluent-kafka) -------------------------------

STATIC_TOPIC, STATIC_PARTITIONS, STATIC_GROUP = "static", 4, "static-group"


class ConfluentMember:
    """A confluent ``Consumer`` created, subscribed, polled and closed on its own thread (it
    serves rebalance callbacks from ``poll()``), recording its callbacks and records."""

    def __init__(self, bootstrap: str, instance: str) -> None:
        self.instance = instance
        self.config = {
            "bootstrap.servers": bootstrap,
            "group.id": STATIC_GROUP,
            "group.instance.id": instance,
            "client.id": instance,
            "session.timeout.ms": 10000,
            "heartbeat.interval.ms": 300,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "reconnect.backoff.max.ms": 200,
            "topic.metadata.refresh.interval.ms": 1000,
        }
        self.callbacks: list[tuple[str, frozenset[int]]] = []  # ("assign"|"revoke", parts)
        self.records: list[tuple[int | None, int | None, bytes | None]] = []
        self._lock = threading.Lock()
        self._loop = asyncio.get_running_loop()
        self._calls: queue.SimpleQueue[tuple[Callable[[Consumer], Any], asyncio.Future[Any]]]
        self._calls = queue.SimpleQueue()
        self._stop = threading.Event()
        self._done: asyncio.Future[None] = self._loop.create_future()
        self._failure: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name=instance, daemon=True)

    def start(self) -> ConfluentMember:
        self._thread.start()
        return self

    def assigned(self) -> frozenset[int] | None:
        """The partitions its callbacks say it holds (None before its first assignment)."""
        with self._lock:
            held: frozenset[int] | None = None
            for kind, parts in self.callbacks:
                held = parts if kind == "assign" else frozenset()
            return held

    def callback_count(self) -> int:
        with self._lock:
            return len(self.callbacks)

    def got(self, value: bytes) -> bool:
        with self._lock:
            return any(v == value for _, _, v in self.records)

    async def call(self, fn: Callable[[Consumer], T]) -> T:
        """Run ``fn(consumer)`` on the member's thread, between two polls."""
        fut: asyncio.Future[T] = self._loop.create_future()
        self._calls.put((fn, fut))
        return await asyncio.wait_for(fut, WAIT_S)

    async def generation(self) -> tuple[str, int]:
        """(member id, generation) as librdkafka sees them: its serialized group metadata is
        b"CGMDv2:", the generation as a native int32, then group id and member id."""
        member_id, meta = await self.call(lambda c: (c.memberid(), c.consumer_group_metadata()))
        assert meta.startswith(b"CGMDv2:"), meta
        (gen,) = struct.unpack_from("=i", meta, 7)
        assert meta[11:].startswith(f"{STATIC_GROUP}\0{member_id}\0".encode()), meta
        return member_id, int(gen)

    async def close(self) -> None:
        self._stop.set()
        await asyncio.wait_for(asyncio.shield(self._done), WAIT_S)
        if self._failure is not None:
            raise self._failure

    # on the member's thread
    def _settle(self, fut: asyncio.Future[Any], value: Any, exc: BaseException | None) -> None:
        def settle() -> None:
            if fut.done():
                return
            if exc is not None:
                fut.set_exception(exc)
            else:
                fut.set_result(value)

        with contextlib.suppress(RuntimeError):  # the loop is closed: the test is over
            self._loop.call_soon_threadsafe(settle)

    def _on_assign(self, consumer: Consumer, partitions: list[CTopicPartition]) -> None:
        with self._lock:
            self.callbacks.append(("assign", frozenset(p.partition for p in partitions)))
        consumer.assign(partitions)

    def _on_revoke(self, consumer: Consumer, partitions: list[CTopicPartition]) -> None:
        consumer.unassign()
        with self._lock:
            self.callbacks.append(("revoke", frozenset(p.partition for p in partitions)))

    def _run(self) -> None:
        consumer = None
        try:
            consumer = Consumer(self.config)
            consumer.subscribe([STATIC_TOPIC], on_assign=self._on_assign, on_revoke=self._on_revoke)
            while not self._stop.is_set():
                while not self._calls.empty():
                    fn, fut = self._calls.get_nowait()
                    try:
                        self._settle(fut, fn(consumer), None)
                    except Exception as exc:
                        self._settle(fut, None, exc)
                msg = consumer.poll(0.05)
                if msg is not None and not msg.error():
                    with self._lock:
                        self.records.append((msg.partition(), msg.offset(), msg.value()))
        except BaseException as exc:
            self._failure = exc
        finally:
            if consumer is not None:
                try:
                    consumer.close()  # a static member sends no LeaveGroup
                except BaseException as exc:
                    self._failure = self._failure or exc
            self._settle(self._done, None, None)


async def produce_each(bootstrap: str, value: str) -> dict[int, bytes]:
    """One record per partition of the static topic: {partition: value}."""
    out = {p: f"{value}-{p}".encode() for p in range(STATIC_PARTITIONS)}
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all")
    async with started(producer):
        for p, v in out.items():
            await producer.send_and_wait(STATIC_TOPIC, v, partition=p)
    return out


async def consumed(members: dict[str, ConfluentMember], values: dict[int, bytes]) -> None:
    """Until each record reached the member whose partitions hold it."""

    def check() -> bool:
        for m in members.values():
            held = m.assigned() or frozenset()
            if not all(m.got(values[p]) for p in held):
                return False
        return True

    await wait_until(check, WAIT_S, f"the members to consume {sorted(values.values())}")


async def stable_view(broker: BrokerProcess) -> dict[str, tuple[str, list[int]]]:
    """Once the group is Stable: {instance id: (member id, partitions)} per DescribeGroups."""
    async with await RawConnection.open(broker.bootstrap) as conn:
        view = None

        async def check() -> bool:
            nonlocal view
            view = await describe_group(conn, STATIC_GROUP)
            return view.state == "Stable" and len(view.members) == 2

        await wait_until(check, WAIT_S, "the static group to be Stable with two members")
    assert view is not None
    return {
        m.group_instance_id or "": (m.member_id, m.assignment.get(STATIC_TOPIC, []))
        for m in view.members.values()
    }


async def test_static_members_keep_their_partitions_across_a_broker_crash(
    tmp_path: Path,
) -> None:
    args = (
        "--initial-rebalance-delay-ms",
        "200",
        "--create-topic",
        f"{STATIC_TOPIC}:{STATIC_PARTITIONS}",
    )
    members: dict[str, ConfluentMember] = {}
    async with broker_process(tmp_path / "data", args=args) as broker:
        await broker.start()
        try:
            # "a" first, so it leads; "b" joins a Stable group.
            members["a"] = ConfluentMember(broker.bootstrap, "static-a").start()
            await wait_until(
                lambda: members["a"].assigned() is not None, WAIT_S, "static-a's assignment"
            )
            members["b"] = ConfluentMember(broker.bootstrap, "static-b").start()

            def split() -> bool:
                held = [m.assigned() for m in members.values()]
                return all(held) and sorted(p for h in held if h for p in h) == list(
                    range(STATIC_PARTITIONS)
                )

            await wait_until(split, WAIT_S, "the partitions to be split between a and b")
            before = await stable_view(broker)
            await consumed(members, await produce_each(broker.bootstrap, "before"))
            held = {name: m.assigned() for name, m in members.items()}
            gen_a = await members["a"].generation()
            gen_b = await members["b"].generation()
            assert gen_a[1] == gen_b[1]
            callbacks_a = members["a"].callback_count()

            # b goes away (a static member sends no LeaveGroup), then the broker crashes.
            await members.pop("b").close()
            await broker.kill()
            await broker.start()

            # b comes back within its session timeout, under a new client.
            members["b"] = ConfluentMember(broker.bootstrap, "static-b").start()
            await wait_until(
                lambda: members["b"].assigned() is not None, WAIT_S, "static-b's assignment"
            )
            assert members["b"].assigned() == held["b"], "the rejoined static member moved"
            await consumed(members, await produce_each(broker.bootstrap, "after"))

            # Both commit with the generation they hold: the broker still knows it.
            for m in members.values():
                parts = sorted(m.assigned() or ())
                offsets = [CTopicPartition(STATIC_TOPIC, p, 2) for p in parts]

                def commit(c: Consumer, offsets: list[CTopicPartition] = offsets) -> Any:
                    return c.commit(offsets=offsets, asynchronous=False)

                await m.call(commit)
            committed = await fetch_committed(
                broker.port, STATIC_GROUP, STATIC_TOPIC, list(range(STATIC_PARTITIONS))
            )
            assert {p: o for p, (o, _) in committed.items()} == dict.fromkeys(
                range(STATIC_PARTITIONS), 2
            )

            assert await members["a"].generation() == gen_a, "a's generation changed"
            assert (await members["b"].generation())[1] == gen_b[1], "the group rebalanced"
            after = await stable_view(broker)
            assert after["static-a"] == before["static-a"]
            assert after["static-b"][1] == before["static-b"][1]
            # a went through the crash without a single rebalance callback.
            assert members["a"].callback_count() == callbacks_a, members["a"].callbacks
            assert members["b"].callbacks == [("assign", held["b"])]
        finally:
            for m in members.values():
                await m.close()
        await broker.stop()


# --- snapshots ------------------------------------------------------------------------------------

SNAP_TOPIC, SNAP_PARTITIONS, SNAP_GROUP = "snap", 8, "snapshotted"


def coordinator_logs(data: Path) -> list[int]:
    """Sequence numbers of the broker's shared coordinator log files, sorted."""
    return sorted(int(p.stem.rsplit("-", 1)[1]) for p in (data / "coordinator").glob("log-*.log"))


async def test_snapshots_compact_the_log_and_restore_every_latest_offset(tmp_path: Path) -> None:
    data = tmp_path / "data"
    args = ("--snapshot-log-bytes", "1024", "--create-topic", f"{SNAP_TOPIC}:{SNAP_PARTITIONS}")
    async with broker_process(data, args=args) as broker:
        await broker.start()
        latest: dict[int, int] = {}
        consumer = AIOKafkaConsumer(
            bootstrap_servers=broker.bootstrap, group_id=SNAP_GROUP, enable_auto_commit=False
        )
        async with started(consumer):
            tps = [TopicPartition(SNAP_TOPIC, p) for p in range(SNAP_PARTITIONS)]
            consumer.assign(tps)
            for n in range(1, 121):
                tp = tps[n % SNAP_PARTITIONS]
                await consumer.commit({tp: OffsetAndMetadata(n, f"n{n}")})
                latest[tp.partition] = n
        rotations = broker.find("snapshots_written")
        assert len(rotations) >= 3, rotations
        # only the shard with records since its last snapshot is rewritten
        assert {e["shards"] for e in rotations} == {1}
        snapshot = data / "coordinator" / f"shard-{partition_for(SNAP_GROUP, 50):02d}.snapshot"

        # Once the last snapshots are written, only the log they did not cover is left.
        def settled() -> bool:
            newest = max(e["next_log_seq"] for e in broker.find("snapshots_written"))
            return coordinator_logs(data) == [newest]

        await wait_until(settled, WAIT_S, "the logs the snapshots cover to be deleted")
        assert coordinator_logs(data)[0] >= 3
        assert snapshot.exists()

        want = {p: (o, f"n{o}") for p, o in latest.items()}
        all_parts = list(range(SNAP_PARTITIONS))
        await broker.kill()  # the snapshot plus the log after it
        await broker.start()
        assert await fetch_committed(broker.port, SNAP_GROUP, SNAP_TOPIC, all_parts) == want
        await broker.stop()  # a clean stop: one final snapshot, no log left behind
        assert coordinator_logs(data) == []
        await broker.start()
        assert await fetch_committed(broker.port, SNAP_GROUP, SNAP_TOPIC, all_parts) == want
        await broker.stop()


# --- topic data ---------------------------------------------------------------------------------


async def test_the_topic_table_survives_a_restart(tmp_path: Path) -> None:
    """Configs, added partitions and deletions all come back as they were left."""
    configs = {
        "retention.ms": "3600000",
        "segment.bytes": "65536",
        "message.timestamp.type": "LogAppendTime",
        "cleanup.policy": "delete",
    }

    async def table(bootstrap: str) -> tuple[dict[str, int], dict[str, tuple[str, int]]]:
        """({topic: partitions}, {config: (value, source)} of "configured")."""
        admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
        await admin.start()
        try:
            topics = await admin.describe_topics()
            (resp,) = await admin.describe_configs(
                [ConfigResource(ConfigResourceType.TOPIC, "configured")]
            )
        finally:
            await admin.close()
        ((error, _msg, _type, name, entries),) = resp.resources
        assert (error, name) == (0, "configured")
        return (
            {t["topic"]: len(t["partitions"]) for t in topics},
            {e[0]: (e[1], e[3]) for e in entries},
        )

    async with broker_process(tmp_path / "data") as broker:
        await broker.start()
        admin = AIOKafkaAdminClient(bootstrap_servers=broker.bootstrap)
        producer = AIOKafkaProducer(bootstrap_servers=broker.bootstrap)
        async with started(admin, producer):
            await admin.create_topics(
                [NewTopic("configured", 2, 1, topic_configs=configs), NewTopic("doomed", 1, 1)],
                timeout_ms=10000,
            )
            await producer.send_and_wait("doomed", b"gone soon", partition=0)
            await admin.create_partitions({"configured": NewPartitions(3)})
            await admin.delete_topics(["doomed"])
        before = await table(broker.bootstrap)
        assert before[0] == {"configured": 3}
        assert {k: before[1][k][0] for k in configs} == configs
        await broker.kill()
        await broker.start()
        assert await table(broker.bootstrap) == before
        assert sorted(p.name for p in (tmp_path / "data" / "topics").iterdir()) == [
            "configured-0",
            "configured-1",
            "configured-2",
        ]
        producer = AIOKafkaProducer(bootstrap_servers=broker.bootstrap)
        async with started(producer):
            meta = await producer.send_and_wait("configured", b"x", partition=2)
        assert (meta.offset, meta.timestamp_type) == (0, 1)  # LogAppendTime still applies
        await broker.stop()


async def test_retention_deletes_whole_segment_files(tmp_path: Path) -> None:
    data = tmp_path / "data"
    directory = data / "topics" / "retained-0"
    values = [f"{i:03d}".encode() * 60 for i in range(40)]  # ~250-byte batches
    async with running_server(data_dir=str(data), log_level="warning") as server:
        async with await WireClient.connect(server.port) as wire:
            await create_topic(
                wire, "retained", 1, {"segment.bytes": "2048", "retention.bytes": "4500"}
            )
            for v in values:
                batch = build_batch([(None, v, [])])
                resp = await wire.request(0, 8, produce_request("retained", 0, batch))
                assert resp["responses"][0]["partition_responses"][0]["error_code"] == 0
        files = sorted(directory.glob("*.log"))
        bases = [int(p.stem) for p in files]
        assert len(files) >= 5 and bases[0] == 0
        dropped = server.broker.topics.apply_retention(now_ms())
        log = server.broker.topics.partition("retained", 0)
        assert log is not None and dropped > 0
        start = log.log_start_offset
        # A segment goes once every batch in it is below the log start, and only then.
        ends = [b - 1 for b in bases[1:]] + [len(values) - 1]
        kept = [p for p, end in zip(files, ends, strict=True) if end >= start]
        assert sorted(directory.glob("*.log")) == kept
        assert len(kept) < len(files)
        assert int(kept[0].stem) <= start  # the files hold at least every retained batch
        assert sum(p.stat().st_size for p in kept) >= log.size_bytes
        records_before, _ = await read_partition(server.port, "retained", 0)
        assert min(records_before) == start
    # A restart serves the same log: what retention deleted stays deleted.
    async with running_server(data_dir=str(data), log_level="warning") as server:
        records_after, high_watermark = await read_partition(server.port, "retained", 0)
        assert high_watermark == len(values)
        assert records_after == records_before
        assert records_after == {o: values[o] for o in range(start, len(values))}


async def test_an_idempotent_producer_goes_on_across_restarts(tmp_path: Path) -> None:
    async with broker_process(tmp_path / "data", args=("--create-topic", "idem:2")) as broker:
        await broker.start()
        producer = AIOKafkaProducer(
            bootstrap_servers=broker.bootstrap,
            enable_idempotence=True,
            retry_backoff_ms=50,
            request_timeout_ms=15000,
        )
        sent: list[tuple[int, int, bytes]] = []

        async def send(tag: str) -> None:
            for i in range(5):
                for p in (0, 1):
                    value = f"{tag}-{i}".encode()
                    meta = await producer.send_and_wait("idem", value, partition=p)
                    sent.append((p, meta.offset, value))

        async with started(producer):
            await send("first")
            await broker.stop()
            await broker.start()
            await send("after-sigterm")
            await broker.kill()
            await broker.start()
            await send("after-kill")
        for p in (0, 1):
            values, high_watermark = await read_partition(broker.port, "idem", p)
            want = {o: v for pp, o, v in sent if pp == p}
            assert values == want and list(want) == list(range(15)) and high_watermark == 15
        await broker.stop()


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
