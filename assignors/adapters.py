"""aiokafka adapters: the eager assignors as ``AbstractPartitionAssignor`` subclasses.

Pass them (as instances) to any aiokafka consumer, against kgroupd or Kafka::

    from kgroupd.assignors.adapters import FailoverAssignor, StickyAssignor

    consumer = AIOKafkaConsumer(
        "orders",
        group_id="billing",
        partition_assignment_strategy=(FailoverAssignor(priority=10),),
    )

aiokafka calls ``assignor.name``, ``assignor.metadata(topics)``,
``assignor.assign(cluster, members)`` (on the leader) and
``assignor.on_assignment(assignment)`` on whatever object it is given, so the
stateless ``RangeAssignor`` / ``RoundRobinAssignor`` (classmethods) also work
passed as classes; ``StickyAssignor`` and ``FailoverAssignor`` keep per-consumer
state (owned partitions, priority) and must be passed as instances.

Wire formats are Kafka's: ``sticky`` members carry Kafka's StickyAssignor
user data (previous assignment + generation), so they interoperate with Java,
aiokafka and kafka-python ``sticky`` members; ``failover`` members carry their
priority as a 4-byte big-endian int32. aiokafka does not tell assignors the
group generation, so the ``sticky`` leader numbers its own assignments (the
highest generation claimed in the group plus one) and sends the number to
each member in the assignment user data.
"""

from __future__ import annotations

import logging
import struct
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from aiokafka.coordinator.assignors.abstract import AbstractPartitionAssignor
from aiokafka.coordinator.protocol import (
    ConsumerProtocolMemberAssignment,
    ConsumerProtocolMemberMetadata,
)

from kgroupd.assignors.codec import (
    INT32_MIN,
    CodecError,
    decode_sticky_user_data,
    encode_priority,
    encode_sticky_user_data,
)
from kgroupd.assignors.simple import failover_assign, range_assign, roundrobin_assign
from kgroupd.assignors.spec import (
    DEFAULT_GENERATION,
    GroupAssignment,
    GroupSpec,
    MemberSpec,
    TopicPartition,
)
from kgroupd.assignors.sticky import sticky_assign

__all__ = ["FailoverAssignor", "RangeAssignor", "RoundRobinAssignor", "StickyAssignor"]

log = logging.getLogger(__name__)

_I32 = struct.Struct(">i")


def _topic_counts(cluster: Any, members: Mapping[str, Any]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for metadata in members.values():
        for topic in metadata.subscription:
            if topic in counts:
                continue
            partitions = cluster.partitions_for_topic(topic)
            if partitions is None:
                log.warning("No partition metadata for topic %s", topic)
                continue
            counts[topic] = len(partitions)
    return counts


def _spec(
    cluster: Any,
    members: Mapping[str, Any],
    member: Callable[[str, Any], MemberSpec] | None = None,
) -> GroupSpec:
    build = member or (
        lambda member_id, metadata: MemberSpec(
            member_id, frozenset(metadata.subscription), user_data=metadata.user_data
        )
    )
    return GroupSpec(
        tuple(build(member_id, metadata) for member_id, metadata in members.items()),
        _topic_counts(cluster, members),
    )


def _to_aiokafka(
    result: GroupAssignment, version: int, user_data: bytes = b""
) -> dict[str, ConsumerProtocolMemberAssignment]:
    return {
        member_id: ConsumerProtocolMemberAssignment(
            version, [(topic, list(parts)) for topic, parts in by_topic.items()], user_data
        )
        for member_id, by_topic in result.assignments.items()
    }


def _subscription(version: int, topics: Iterable[str], user_data: bytes) -> Any:
    return ConsumerProtocolMemberMetadata(version, sorted(topics), user_data)


class RangeAssignor(AbstractPartitionAssignor):
    """Kafka's ``range`` strategy (see ``kgroupd.assignors.simple.range_assign``)."""

    name = "range"
    version = 0

    @classmethod
    def assign(
        cls, cluster: Any, members: Mapping[str, Any]
    ) -> dict[str, ConsumerProtocolMemberAssignment]:
        return _to_aiokafka(range_assign(_spec(cluster, members)), cls.version)

    @classmethod
    def metadata(cls, topics: Iterable[str]) -> Any:
        return _subscription(cls.version, topics, b"")

    @classmethod
    def on_assignment(cls, assignment: Any) -> None:
        return None


class RoundRobinAssignor(AbstractPartitionAssignor):
    """Kafka's ``roundrobin`` strategy (see ``kgroupd.assignors.simple.roundrobin_assign``)."""

    name = "roundrobin"
    version = 0

    @classmethod
    def assign(
        cls, cluster: Any, members: Mapping[str, Any]
    ) -> dict[str, ConsumerProtocolMemberAssignment]:
        return _to_aiokafka(roundrobin_assign(_spec(cluster, members)), cls.version)

    @classmethod
    def metadata(cls, topics: Iterable[str]) -> Any:
        return _subscription(cls.version, topics, b"")

    @classmethod
    def on_assignment(cls, assignment: Any) -> None:
        return None


class StickyAssignor(AbstractPartitionAssignor):
    """Kafka's eager ``sticky`` strategy (see ``kgroupd.assignors.sticky.sticky_assign``)."""

    name = "sticky"
    version = 0

    def __init__(self) -> None:
        self.owned: list[TopicPartition] | None = None
        self.generation = DEFAULT_GENERATION

    @staticmethod
    def _member(member_id: str, metadata: Any) -> MemberSpec:
        owned: tuple[TopicPartition, ...] = ()
        generation = DEFAULT_GENERATION
        if metadata.user_data:
            try:
                data = decode_sticky_user_data(metadata.user_data)
            except CodecError as exc:
                log.error("Could not parse sticky user data of %s: %s", member_id, exc)
            else:
                owned = data.partitions
                if data.generation is not None:
                    generation = data.generation
        return MemberSpec(
            member_id,
            frozenset(metadata.subscription),
            owned_partitions=owned,
            generation=generation,
            user_data=metadata.user_data,
        )

    def assign(
        self, cluster: Any, members: Mapping[str, Any]
    ) -> dict[str, ConsumerProtocolMemberAssignment]:
        spec = _spec(cluster, members, self._member)
        generation = max((m.generation for m in spec.members), default=DEFAULT_GENERATION) + 1
        return _to_aiokafka(sticky_assign(spec), self.version, _I32.pack(generation))

    def metadata(self, topics: Iterable[str]) -> Any:
        user_data = b""
        if self.owned is not None:
            user_data = encode_sticky_user_data(self.owned, self.generation)
        return _subscription(self.version, topics, user_data)

    def on_assignment(self, assignment: Any) -> None:
        self.owned = [TopicPartition(t, p) for t, parts in assignment.assignment for p in parts]
        user_data = assignment.user_data
        if user_data and len(user_data) == 4:
            self.generation = _I32.unpack(user_data)[0]
        else:  # assigned by another implementation's leader: claim without a generation
            self.generation = DEFAULT_GENERATION


class FailoverAssignor(AbstractPartitionAssignor):
    """The ``failover`` strategy: everything to the live member with the highest priority."""

    name = "failover"
    version = 0

    def __init__(self, priority: int = 0) -> None:
        if not INT32_MIN <= priority < 2**31:
            raise ValueError(f"priority {priority} is not an int32")
        self.priority = priority

    @classmethod
    def assign(
        cls, cluster: Any, members: Mapping[str, Any]
    ) -> dict[str, ConsumerProtocolMemberAssignment]:
        return _to_aiokafka(failover_assign(_spec(cluster, members)), cls.version)

    def metadata(self, topics: Iterable[str]) -> Any:
        return _subscription(self.version, topics, encode_priority(self.priority))

    @classmethod
    def on_assignment(cls, assignment: Any) -> None:
        return None
