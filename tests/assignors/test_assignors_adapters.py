"""The aiokafka adapters, driven through aiokafka's own leader/follower code paths offline."""

from __future__ import annotations

from typing import Any

import pytest
from aiokafka.coordinator.assignors.abstract import AbstractPartitionAssignor
from aiokafka.coordinator.protocol import ConsumerProtocol

from kgroupd.assignors import FailoverAssignor, RangeAssignor, RoundRobinAssignor, StickyAssignor
from kgroupd.assignors.codec import decode_priority, decode_sticky_user_data
from kgroupd.assignors.spec import TopicPartition

TP = TopicPartition


class FakeCluster:
    def __init__(self, topics: dict[str, int]) -> None:
        self.topics = topics

    def partitions_for_topic(self, topic: str) -> set[int] | None:
        n = self.topics.get(topic)
        return None if n is None else set(range(n))


def run_group(
    cluster: FakeCluster, assignors: dict[str, Any], leader: Any, topics: list[str]
) -> dict[str, list[TP]]:
    """One JoinGroup/SyncGroup round the way aiokafka's coordinator does it: every
    member's metadata() is encoded, the leader decodes them with ConsumerProtocol.METADATA
    and calls assign(); every member decodes its bytes and calls on_assignment()."""
    members = {}
    for member_id, assignor in assignors.items():
        metadata = assignor.metadata(set(topics))
        raw = metadata if isinstance(metadata, bytes) else metadata.encode()
        members[member_id] = ConsumerProtocol.METADATA.decode(raw)
    result = leader.assign(cluster, members)
    out = {}
    for member_id, assignor in assignors.items():
        decoded = ConsumerProtocol.ASSIGNMENT.decode(result[member_id].encode())
        assignor.on_assignment(decoded)
        out[member_id] = sorted(TP(t, p) for t, p in decoded.partitions())
    return out


def test_names_and_base_class() -> None:
    assert [
        a.name for a in (RangeAssignor, RoundRobinAssignor, StickyAssignor, FailoverAssignor)
    ] == ["range", "roundrobin", "sticky", "failover"]
    for cls in (RangeAssignor, RoundRobinAssignor, StickyAssignor, FailoverAssignor):
        assert issubclass(cls, AbstractPartitionAssignor)
    assert FailoverAssignor(priority=10).name == "failover"


def test_failover_metadata_carries_the_priority() -> None:
    meta = FailoverAssignor(priority=10).metadata({"t"})
    assert decode_priority(meta.user_data) == 10
    assert FailoverAssignor(priority=-(2**31)).priority == -(2**31)
    with pytest.raises(ValueError):
        FailoverAssignor(priority=2**31)


def test_failover_group_all_to_highest_then_next() -> None:
    cluster = FakeCluster({"t": 4})
    group = {
        "m-a": FailoverAssignor(priority=10),
        "m-b": FailoverAssignor(priority=5),
        "m-c": FailoverAssignor(priority=1),
    }
    out = run_group(cluster, group, group["m-c"], ["t"])
    assert out == {"m-a": [TP("t", p) for p in range(4)], "m-b": [], "m-c": []}
    del group["m-a"]
    out = run_group(cluster, group, group["m-c"], ["t"])
    assert out["m-b"] == [TP("t", p) for p in range(4)]


@pytest.mark.parametrize("cls", [RangeAssignor, RoundRobinAssignor])
def test_stateless_adapters_work_as_class_or_instance(cls: Any) -> None:
    cluster = FakeCluster({"t": 5, "u": 2})
    for leader in (cls, cls()):
        group = {"a": leader, "b": leader}
        out = run_group(cluster, group, leader, ["t", "u", "missing"])
        assert sorted(out["a"] + out["b"]) == sorted(
            [TP("t", p) for p in range(5)] + [TP("u", p) for p in range(2)]
        )


def test_sticky_moves_only_the_departed_members_partitions() -> None:
    cluster = FakeCluster({"t": 12})
    group = {f"m{i}": StickyAssignor() for i in range(3)}
    first = run_group(cluster, group, group["m0"], ["t"])
    assert sorted(len(p) for p in first.values()) == [4, 4, 4]
    meta = group["m1"].metadata({"t"})
    data = decode_sticky_user_data(meta.user_data)  # Kafka StickyAssignor user data v1
    assert sorted(data.partitions) == first["m1"] and data.generation == 0
    del group["m2"]
    second = run_group(cluster, group, group["m1"], ["t"])
    for m in ("m0", "m1"):
        assert set(first[m]) <= set(second[m])
        assert len(second[m]) == 6
    assert group["m0"].generation == 1
    group["m3"] = StickyAssignor()
    third = run_group(cluster, group, group["m0"], ["t"])
    assert sum(len(set(second[m]) - set(third[m])) for m in ("m0", "m1")) == 4  # the minimum


def test_sticky_reads_aiokafkas_own_sticky_user_data() -> None:
    from aiokafka.coordinator.assignors.sticky.sticky_assignor import StickyPartitionAssignor
    from aiokafka.structs import TopicPartition as AkTP

    theirs = StickyPartitionAssignor._metadata(["t"], [AkTP("t", 0), AkTP("t", 1)], 3)
    ours = StickyAssignor().metadata({"t"})
    members = {
        "aio": ConsumerProtocol.METADATA.decode(theirs.encode()),
        "ours": ConsumerProtocol.METADATA.decode(ours.encode()),
    }
    result = StickyAssignor().assign(FakeCluster({"t": 4}), members)
    assert sorted(result["aio"].partitions()) == [AkTP("t", 0), AkTP("t", 1)]


async def test_aiokafka_consumer_accepts_the_instances() -> None:
    from aiokafka import AIOKafkaConsumer

    consumer = AIOKafkaConsumer(
        "t",
        bootstrap_servers="localhost:1",
        group_id="g",
        partition_assignment_strategy=(
            FailoverAssignor(priority=10),
            StickyAssignor(),
            RangeAssignor,
        ),
    )
    try:
        names = [a.name for a in consumer._partition_assignment_strategy]
        assert names == ["failover", "sticky", "range"]
    finally:
        await consumer.stop()
