"""The ``__consumer_offsets`` view of a shard's records (kgroupd.broker.log.consumer_offsets),
decoded
with Kafka's own message definitions (tests/support/coordinator_records): a KIP-848 group's
ConsumerGroup* records and their tombstones, offset commits, compaction."""

from __future__ import annotations

import uuid
from typing import Any

from aiokafka.record.default_records import DefaultRecordBatch
from hypothesis import given, settings
from hypothesis import strategies as st

from kgroupd.broker.coordinator import (
    ConsumerGroupHeartbeat,
    CoordinatorConfig,
    CoordinatorShard,
    InMemoryTopics,
    ManualTimers,
    OffsetCommit,
    OffsetCommitPartition,
    OffsetCommitTopic,
)
from kgroupd.broker.coordinator.records import OffsetTombstoneRecord
from kgroupd.broker.log.consumer_offsets import COMPACT_SLACK, DELETE_RETENTION_MS, OffsetsTopic
from tests.support.coordinator_records import decode

TOPIC = uuid.UUID(int=7)
CONFIG = CoordinatorConfig(offsets_partitions=1, initial_rebalance_delay_ms=0)


def records(view: OffsetsTopic) -> list[tuple[int, str, dict[str, Any], dict[str, Any] | None]]:
    out = []
    view.flush()  # what a reader's Fetch does first (TopicManager.partition)
    for batch in view.topic.partitions[0].batches:
        parsed = DefaultRecordBatch(batch.data)
        assert parsed.validate_crc()
        for r in parsed:
            out.append((r.offset, *decode(r.key, r.value)))
    return out


def shard_with_view() -> tuple[CoordinatorShard, OffsetsTopic]:
    view = OffsetsTopic("cluster", 1)
    shard = CoordinatorShard(0, CONFIG, ManualTimers(), view.sink(0, None))
    shard.topics_view = InMemoryTopics({"t": (TOPIC, 2)})
    return shard, view


def test_a_consumer_group_s_records_decode_as_kafka_s() -> None:
    shard, view = shard_with_view()
    joined = shard.consumer_group_heartbeat(
        ConsumerGroupHeartbeat(
            "g",
            "m1",
            0,
            rebalance_timeout_ms=30_000,
            subscribed_topic_names=("t",),
            owned_partitions=(),
            client_id="c",
            client_host="/127.0.0.1",
            client_generates_member_id=True,
        )
    )
    assert joined.member_epoch == 1
    part = OffsetCommitPartition(0, 42, -1, "meta")
    commit_cmd = OffsetCommit("g", (OffsetCommitTopic("t", (part,)),), 1, "m1", None, -1, True)
    assert shard.commit_offsets(commit_cmd).topics[0][1][0][1] == 0
    found = records(view)
    by_name = {name: (key, value) for _, name, key, value in found}
    assert by_name["ConsumerGroupMetadata"][1]["Epoch"] == 1
    member_key, member = by_name["ConsumerGroupMemberMetadata"]
    assert member_key == {"GroupId": "g", "MemberId": "m1"}
    assert member["SubscribedTopicNames"] == ["t"] and member["ClientId"] == "c"
    assert member["RebalanceTimeoutMs"] == 30_000 and member["ClassicMemberMetadata"] is None
    target = by_name["ConsumerGroupTargetAssignmentMember"][1]
    assert target["TopicPartitions"] == [{"TopicId": TOPIC, "Partitions": [0, 1]}]
    assert by_name["ConsumerGroupTargetAssignmentMetadata"][1]["AssignmentEpoch"] == 1
    current = by_name["ConsumerGroupCurrentMemberAssignment"][1]
    assert (current["MemberEpoch"], current["State"]) == (1, 1)
    assert current["AssignedPartitions"] == [{"TopicId": TOPIC, "Partitions": [0, 1]}]
    commit = by_name["OffsetCommit"][1]
    assert commit is not None and (commit["offset"], commit["metadata"]) == (42, "meta")
    assert [o for o, *_ in found] == list(range(len(found)))  # one offset per record

    # the member leaves: its records' tombstones (null values, Kafka's keys)
    shard.consumer_group_heartbeat(ConsumerGroupHeartbeat("g", "m1", -1))
    after = records(view)[len(found) :]
    gone = {name for _, name, key, value in after if value is None}
    assert {
        "ConsumerGroupMemberMetadata",
        "ConsumerGroupTargetAssignmentMember",
        "ConsumerGroupCurrentMemberAssignment",
    } <= gone


def test_compaction_keeps_each_key_s_latest_record_and_drops_old_tombstones() -> None:
    view = OffsetsTopic("cluster", 1)
    sink = view.sink(0, None)
    assert hasattr(sink, "offset_commits")
    for i in range(COMPACT_SLACK + 5):
        sink.offset_commits("g", "t", [(i % 2, i, -1, "")], 0, None)  # type: ignore[attr-defined]
        view.flush()
    log = view.topic.partitions[0]
    kept = records(view)
    assert log.high_watermark == COMPACT_SLACK + 5  # the end never moves back
    assert len(kept) < COMPACT_SLACK  # compacted at least once
    latest = {k["partition"]: (o, v["offset"]) for o, _, k, v in kept if v}
    assert latest == {p: (o, o) for p, o in ((0, COMPACT_SLACK + 4), (1, COMPACT_SLACK + 3))}
    # a tombstone stays through compaction until delete.retention.ms has passed
    sink(OffsetTombstoneRecord("g", "t", 0))
    view.flush()
    view.compact(0)
    assert any(v is None for *_, v in records(view))
    view.compact(0, now=10**13 + DELETE_RETENTION_MS)
    assert [k["partition"] for _, _, k, _ in records(view)] == [1]
    assert log.high_watermark == COMPACT_SLACK + 6


# (kind, group, partitions or partition, read afterwards): a commit of one topic's partitions,
# or an offset tombstone; ``read`` flushes the view as a follower's Fetch would.
_ops = st.lists(
    st.tuples(
        st.sampled_from(["commit", "commit", "commit", "tombstone"]),
        st.sampled_from(["g1", "g2"]),
        st.lists(st.integers(0, 3), min_size=1, max_size=4, unique=True),
        st.booleans(),
    ),
    max_size=60,
)


@settings(max_examples=150, deadline=None)
@given(ops=_ops, slack=st.sampled_from([0, 3, COMPACT_SLACK]))
def test_commits_spelled_out_when_read_match_one_record_per_partition(
    ops: list[tuple[str, str, list[int], bool]], slack: int
) -> None:
    """Commits are kept one tuple a commit and folded while nobody reads; whatever a reader
    sees must be what one record per partition would give: each record at the offset it was
    handed, offsets never reused, the latest value of every key at its newest offset, and
    nothing superseded appearing after a newer record of its key was shown."""
    import kgroupd.broker.log.consumer_offsets as co

    saved = co.COMPACT_SLACK
    co.COMPACT_SLACK = slack
    try:
        view = OffsetsTopic("cluster", 1)
        view.create()
        sink = view.sink(0, None)
        newest: dict[tuple[str, int], tuple[int, int | None]] = {}  # key -> (offset, value)
        shown: dict[tuple[str, int], int] = {}
        next_offset = 0
        seen = 0
        for n, (kind, group, parts, read) in enumerate(ops):
            if kind == "commit":
                entries = [(p, n * 10 + p, -1, "") for p in parts]
                sink.offset_commits(group, "t", entries, 0, None)  # type: ignore[attr-defined]
                for p in parts:
                    newest[(group, p)] = (next_offset, n * 10 + p)
                    next_offset += 1
            else:
                sink(OffsetTombstoneRecord(group, "t", parts[0]))
                newest[(group, parts[0])] = (next_offset, None)
                next_offset += 1
            if read:
                out = records(view)
                for offset, _name, key, value in out[seen:]:
                    k = (key["group"], key["partition"])
                    assert offset > shown.get(k, -1)
                    shown[k] = offset
                    assert offset <= newest[k][0]
                    if offset == newest[k][0]:
                        assert (value["offset"] if value else None) == newest[k][1]
                offsets = [o for o, *_ in out]
                assert offsets == sorted(set(offsets))
                seen = len(out)
        view.flush()
        view.compact(0, now=0)
        final = {
            (k["group"], k["partition"]): (o, v["offset"] if v else None)
            for o, _, k, v in records(view)
        }
        assert final == newest
        assert view.topic.partitions[0].high_watermark == next_offset
    finally:
        co.COMPACT_SLACK = saved
