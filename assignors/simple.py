"""The stateless assignors: range, round-robin and failover."""

from __future__ import annotations

from kgroupd.assignors.codec import decode_priority
from kgroupd.assignors.spec import GroupAssignment, GroupSpec, MemberSpec, TopicPartition

__all__ = ["failover_assign", "member_order_key", "range_assign", "roundrobin_assign"]


def member_order_key(member: MemberSpec) -> tuple[int, str]:
    """Kafka's ``MemberInfo`` order: static members by instance id first, then member id."""
    if member.group_instance_id is not None:
        return (0, member.group_instance_id)
    return (1, member.member_id)


def range_assign(spec: GroupSpec) -> GroupAssignment:
    """Kafka's RangeAssignor: per topic, contiguous ranges over the sorted subscribers.

    With ``n`` partitions and ``c`` subscribers the first ``n % c`` members get
    ``n // c + 1`` partitions and the rest ``n // c``, so members subscribed to
    co-partitioned topics get the same partition numbers of each.
    """
    ordered = sorted(spec.members, key=member_order_key)
    result: dict[str, list[TopicPartition]] = {m.member_id: [] for m in spec.members}
    for topic in spec.subscribed_topics():
        consumers = [m.member_id for m in ordered if topic in m.topics]
        per_member, extra = divmod(spec.topics[topic], len(consumers))
        for i, member_id in enumerate(consumers):
            start = per_member * i + min(i, extra)
            length = per_member + (1 if i < extra else 0)
            result[member_id].extend(TopicPartition(topic, p) for p in range(start, start + length))
    return GroupAssignment.from_partitions(result, result)


def roundrobin_assign(spec: GroupSpec) -> GroupAssignment:
    """Kafka's RoundRobinAssignor: all partitions, sorted by topic then partition,
    dealt to the sorted members in turn, skipping members not subscribed to the topic."""
    ordered = sorted(spec.members, key=member_order_key)
    result: dict[str, list[TopicPartition]] = {m.member_id: [] for m in spec.members}
    n = len(ordered)
    position = 0
    for topic in spec.subscribed_topics():
        for partition in range(spec.topics[topic]):
            # some member subscribes to topic, so this terminates within n steps
            while topic not in ordered[position % n].topics:
                position += 1
            result[ordered[position % n].member_id].append(TopicPartition(topic, partition))
            position += 1
    return GroupAssignment.from_partitions(result, result)


def failover_assign(spec: GroupSpec) -> GroupAssignment:
    """Every partition of a topic goes to its subscriber with the highest priority.

    The priority is the big-endian int32 at the start of the member's
    subscription user data (missing or shorter than 4 bytes: INT32_MIN);
    ties go to the smallest member id. When that member leaves, the next
    highest takes over at the next rebalance.
    """
    result: dict[str, list[TopicPartition]] = {m.member_id: [] for m in spec.members}
    ranked = sorted(spec.members, key=lambda m: (-decode_priority(m.user_data), m.member_id))
    for topic in spec.subscribed_topics():
        winner = next(m for m in ranked if topic in m.topics)
        result[winner.member_id].extend(TopicPartition(topic, p) for p in range(spec.topics[topic]))
    return GroupAssignment.from_partitions(result, result)
