"""``__consumer_offsets`` as Kafka shows it: an internal topic (Metadata, pattern
subscriptions, refused writes and deletion) whose records, read raw by a consumer, decode with
Kafka's own message definitions, follow every commit and deletion, and go on from where a
follower was across a restart with --data-dir."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.structs import OffsetAndMetadata

from kgroupd.broker.coordinator.placement import partition_for
from kgroupd.broker.log.consumer_offsets import offsets_topic_id
from kgroupd.broker.net.server import KafkaServer
from kgroupd.broker.testing import running_server
from kgroupd.protocol.errors import ErrorCode
from tests.support.coordinator_records import decode
from tests.support.kafka_wire import (
    WireClient,
    build_batch,
    create_topic,
    only_partition,
    produce_request,
)

OFFSETS = "__consumer_offsets"
PARTITIONS = 3


def settings(**more: Any) -> dict[str, Any]:
    return {
        "log_level": "warning",
        "offsets_partitions": PARTITIONS,
        "initial_rebalance_delay_ms": 0,
        **more,
    }


async def find_coordinator(wire: WireClient, group: str) -> None:
    resp = await wire.request(10, 3, {"key": group, "key_type": 0})
    assert resp["error_code"] == 0


async def test_metadata_shows_it_internal_and_writes_and_deletes_are_refused() -> None:
    async with (
        running_server(**settings()) as server,
        await WireClient.connect(server.port) as wire,
    ):
        await create_topic(wire, "events", 1)
        everything = {"topics": None, "allow_auto_topic_creation": False}
        names = [t["name"] for t in (await wire.request(3, 12, everything))["topics"]]
        assert OFFSETS not in names  # not before the first FindCoordinator
        await find_coordinator(wire, "g")
        for body in (everything, {"topics": [{"name": OFFSETS, "topic_id": None}]}):
            resp = await wire.request(3, 12, {"allow_auto_topic_creation": False, **body})
            (entry,) = [t for t in resp["topics"] if t["name"] == OFFSETS]
            assert entry["error_code"] == 0 and entry["is_internal"] is True
            assert len(entry["partitions"]) == PARTITIONS
            assert entry["topic_id"] == offsets_topic_id(server.broker.cluster_id)
        events = [t for t in resp["topics"] if t["name"] == "events"]
        assert not events or events[0]["is_internal"] is False
        # Produce: Kafka's ReplicaManager refuses appends to internal topics from clients.
        batch = build_batch([(b"k", b"v", [])])
        resp = await wire.request(0, 8, produce_request(OFFSETS, 0, batch))
        part = only_partition(resp)
        assert part["error_code"] == ErrorCode.INVALID_TOPIC_EXCEPTION
        assert part["error_message"] == f"Cannot append to internal topic {OFFSETS}"
        resp = await wire.request(20, 4, {"topic_names": [OFFSETS], "timeout_ms": 5000})
        assert resp["responses"][0]["error_code"] == ErrorCode.INVALID_TOPIC_EXCEPTION
        resp = await wire.request(
            37,
            1,
            {
                "topics": [{"name": OFFSETS, "count": 10, "assignments": None}],
                "timeout_ms": 5000,
                "validate_only": False,
            },
        )
        assert resp["results"][0]["error_code"] == ErrorCode.INVALID_TOPIC_EXCEPTION
        # still there, unchanged
        resp = await wire.request(3, 12, everything)
        (entry,) = [t for t in resp["topics"] if t["name"] == OFFSETS]
        assert len(entry["partitions"]) == PARTITIONS


async def _subscribed_topics(bootstrap: str, **options: Any) -> set[str]:
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap, group_id="pattern", metadata_max_age_ms=200, **options
    )
    consumer.subscribe(pattern="^.*$")
    await consumer.start()
    try:
        for _ in range(100):
            topics = consumer.subscription()
            if "events" in topics:
                return set(topics)
            await asyncio.sleep(0.05)
        raise AssertionError("the pattern never matched")
    finally:
        await consumer.stop()


async def test_pattern_subscriptions_see_it_only_with_internal_topics() -> None:
    async with running_server(**settings()) as server:
        bootstrap = f"127.0.0.1:{server.port}"
        async with await WireClient.connect(server.port) as wire:
            await create_topic(wire, "events", 1)
            await find_coordinator(wire, "g")
        assert OFFSETS in await _subscribed_topics(bootstrap, exclude_internal_topics=False)
        assert OFFSETS not in await _subscribed_topics(bootstrap)


async def _read(
    follower: AIOKafkaConsumer, tp: TopicPartition, until: Any, seen: list[Any]
) -> None:
    """Poll ``tp`` into ``seen`` (offset, record name, key, value) until ``until(seen)``."""
    for _ in range(100):
        batches = await follower.getmany(tp, timeout_ms=100)
        for msg in batches.get(tp, []):
            seen.append((msg.offset, *decode(msg.key, msg.value)))
        if until(seen):
            return
    raise AssertionError(f"not seen: {seen}")


def _commits(seen: list[Any], group: str) -> list[int | None]:
    return [
        None if value is None else value["offset"]
        for _, name, key, value in seen
        if name == "OffsetCommit" and key["group"] == group
    ]


async def test_a_follower_decodes_commits_and_deletion_and_continues_after_a_restart(
    tmp_path: Path,
) -> None:
    data = tmp_path / "data"
    p = partition_for("g1", PARTITIONS)
    tp = TopicPartition(OFFSETS, p)
    seen: list[Any] = []
    async with running_server(**settings(data_dir=str(data))) as server:
        bootstrap = f"127.0.0.1:{server.port}"
        async with await WireClient.connect(server.port) as wire:
            await create_topic(wire, "events", 2)
        member = AIOKafkaConsumer("events", bootstrap_servers=bootstrap, group_id="g2")
        await member.start()  # a classic group with a member: GroupMetadata records
        committer = AIOKafkaConsumer(
            bootstrap_servers=bootstrap, group_id="g1", enable_auto_commit=False
        )
        await committer.start()
        committer.assign([TopicPartition("events", 0)])
        follower = AIOKafkaConsumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest")
        await follower.start()
        follower.assign([tp])
        await committer.commit({TopicPartition("events", 0): OffsetAndMetadata(5, "m")})
        await _read(follower, tp, lambda s: _commits(s, "g1") == [5], seen)
        await committer.commit({TopicPartition("events", 0): 7})
        await _read(follower, tp, lambda s: _commits(s, "g1") == [5, 7], seen)
        await committer.stop()
        async with await WireClient.connect(server.port) as wire:
            resp = await wire.request(42, 2, {"groups_names": ["g1"]})
            assert resp["results"][0]["error_code"] == 0

        def deleted(s: list[Any]) -> bool:
            return any(
                n == "GroupMetadata" and k["group"] == "g1" and v is None for _, n, k, v in s
            )

        await _read(follower, tp, deleted, seen)
        assert _commits(seen, "g1") == [5, 7, None]  # the offset's tombstone, then the group's
        (first,) = [v for _, n, k, v in seen if n == "OffsetCommit" and v and v["offset"] == 5]
        assert (first["_version"], first["metadata"], first["leaderEpoch"]) == (3, "m", -1)
        offsets = [o for o, *_ in seen]
        assert offsets == sorted(set(offsets))
        position = await follower.position(tp)
        # every partition decodes, g2's group metadata included
        everything = [TopicPartition(OFFSETS, i) for i in range(PARTITIONS)]
        follower.assign(everything)
        await follower.seek_to_beginning()
        records: list[Any] = []
        for _ in range(20):
            got = await follower.getmany(timeout_ms=100)
            records += [decode(m.key, m.value) for msgs in got.values() for m in msgs]
        await member.stop()
        await follower.stop()
        groups = [v for n, k, v in records if n == "GroupMetadata" and k["group"] == "g2" and v]
        assert groups and groups[-1]["protocolType"] == "consumer"
        assert any(m["memberId"] for g in groups for m in g["members"])

    async with running_server(**settings(data_dir=str(data))) as server:
        bootstrap = f"127.0.0.1:{server.port}"
        follower = AIOKafkaConsumer(bootstrap_servers=bootstrap, auto_offset_reset="none")
        await follower.start()
        try:
            follower.assign([tp])
            assert (await follower.beginning_offsets([tp]))[tp] == position
            follower.seek(tp, position)
            committer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id="g1")
            await committer.start()
            committer.assign([TopicPartition("events", 0)])
            await committer.commit({TopicPartition("events", 0): 9})
            await committer.stop()
            after: list[Any] = []
            await _read(follower, tp, lambda s: _commits(s, "g1") == [9], after)
            assert all(o >= position for o, *_ in after)
            assert (await follower.end_offsets([tp]))[tp] > position
        finally:
            await follower.stop()


async def test_compaction_keeps_the_latest_record_of_each_key(server: KafkaServer) -> None:
    """The bound on memory: past twice the live keys (plus a slack), a partition keeps only
    each key's latest record; offsets keep their gaps and Fetch reads across them."""
    topic = server.broker.offsets_topic
    async with await WireClient.connect(server.port) as wire:
        await create_topic(wire, "events", 1)
        await find_coordinator(wire, "g")
    shard = server.broker.coordinator.shard_for("g").partition
    from kgroupd.broker.log.consumer_offsets import COMPACT_SLACK
    from kgroupd.broker.log.consumer_offsets_format import offset_commit_key, offset_commit_value

    for i in range(COMPACT_SLACK + 10):
        key = offset_commit_key("g", "events", i % 3)
        topic.append(shard, (key, offset_commit_value(i, -1, "", 0, None)))
        topic.flush()
    log = topic.topic.partitions[shard]
    assert log.high_watermark == COMPACT_SLACK + 10
    assert sum(1 for _ in _records(log)) < 200
    bootstrap = f"127.0.0.1:{server.port}"
    follower = AIOKafkaConsumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest")
    await follower.start()
    try:
        tp = TopicPartition(OFFSETS, shard)
        follower.assign([tp])
        seen: list[Any] = []
        await _read(follower, tp, lambda s: s and s[-1][0] == COMPACT_SLACK + 9, seen)
        latest = {k["partition"]: v["offset"] for _, _, k, v in seen}
        assert latest == {i % 3: i for i in range(COMPACT_SLACK + 7, COMPACT_SLACK + 10)}
    finally:
        await follower.stop()


def _records(log: Any) -> Any:
    from aiokafka.record.default_records import DefaultRecordBatch

    for b in log.batches:
        yield from DefaultRecordBatch(b.data)
