"""``--data-dir`` across restarts (issue 4): what a client was told is stored stays stored.

The broker runs as a subprocess on a fixed port (``tests.support.broker_process``) so it can be
stopped with SIGTERM or killed with SIGKILL and started again on the same data dir, with the
clients reconnecting to the same address; retention runs in-process, where the test can
trigger it.

- Committed offsets and acks=all records: there after a clean restart and after ``kill -9``,
  under ``--fsync always``; after a clean restart under ``interval`` and ``never``.
- Snapshots: with a small ``--snapshot-log-bytes`` the shard's log is compacted into
  snapshots, the covered logs are deleted, and a restart (killed or clean) restores every
  latest offset.
- Deleted groups and offsets stay deleted across restarts (tombstones, then snapshots).
- Topic data: the topic table (configs, added partitions, deletions) survives; retention
  with small segments deletes whole segment files and a restart does not bring deleted
  records back; an idempotent producer goes on with its sequence numbers across restarts.

Static membership across a broker crash: ``test_durability_static_members.py``; nothing
acknowledged before its fsync, and wall-clock timestamps on disk: ``test_durability_on_disk.py``.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewPartitions, NewTopic
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType
from aiokafka.structs import OffsetAndMetadata

from kgroupd.broker.coordinator.placement import partition_for
from kgroupd.broker.log.partition import now_ms
from kgroupd.broker.storage.coordinator_store import file_records
from kgroupd.broker.testing import running_server
from tests.support.broker_process import (
    BrokerProcess,
    broker_process,
    fetch_committed,
    read_partition,
)
from tests.support.durability import PARTITIONS, TOPIC, WAIT_S, started
from tests.support.groups import (
    DELETE_GROUPS,
    OFFSET_COMMIT,
    OFFSET_DELETE,
    RawConnection,
    describe_group,
    wait_until,
)
from tests.support.kafka_wire import WireClient, build_batch, create_topic, produce_request

# --- offsets and records across restarts --------------------------------------------------------

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


async def commit_partition_0(conn: RawConnection, group: str, offset: int, metadata: str) -> None:
    """A simple group's OffsetCommit v7 (generation -1, no member) of partition 0 of TOPIC."""
    resp = await conn.call(
        OFFSET_COMMIT,
        7,
        group_id=group,
        generation_id_or_member_epoch=-1,
        member_id="",
        group_instance_id=None,
        topics=[(TOPIC, [(0, offset, -1, metadata)])],
    )
    assert resp["topics"][0]["partitions"][0]["error_code"] == 0


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
            await commit_partition_0(conn, "kept", 7, "kept")

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
        await commit_partition_0(conn, group, offset, f"{group}@{offset}")

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
        # the deleted topic's files are gone (or going: renamed ``-delete``, removed on a
        # thread); a partition never written to has no directory
        left = (tmp_path / "data" / "topics").iterdir()
        assert [p.name for p in left if not p.name.endswith("-delete")] == []
        producer = AIOKafkaProducer(bootstrap_servers=broker.bootstrap)
        async with started(producer):
            meta = await producer.send_and_wait("configured", b"x", partition=2)
        assert (meta.offset, meta.timestamp_type) == (0, 1)  # LogAppendTime still applies
        left = (tmp_path / "data" / "topics").iterdir()
        assert [p.name for p in left if not p.name.endswith("-delete")] == ["configured-2"]
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
