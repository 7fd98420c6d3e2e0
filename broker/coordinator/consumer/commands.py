"""Version-free ConsumerGroupHeartbeat / ConsumerGroupDescribe commands and results, and the
injected view of the cluster's topics.

Version rules are flags: ``ConsumerGroupHeartbeat.client_generates_member_id`` is v1+
(KIP-1082: the client sends its own member id, also on epoch 0; in v0 the server makes one).
``None`` fields of a heartbeat mean "unchanged since the last heartbeat", as on the wire.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

from kgroupd.protocol.errors import ErrorCode

__all__ = [
    "JOIN_GROUP_MEMBER_EPOCH",
    "LEAVE_GROUP_MEMBER_EPOCH",
    "LEAVE_GROUP_STATIC_MEMBER_EPOCH",
    "ConsumerGroupDescribe",
    "ConsumerGroupDescribeResult",
    "ConsumerGroupHeartbeat",
    "ConsumerGroupHeartbeatResult",
    "DescribedConsumerGroup",
    "DescribedConsumerMember",
    "InMemoryTopics",
    "TopicPartitions",
    "TopicsView",
]

JOIN_GROUP_MEMBER_EPOCH = 0
LEAVE_GROUP_MEMBER_EPOCH = -1
LEAVE_GROUP_STATIC_MEMBER_EPOCH = -2

# ((topic id, (partition, ...)), ...): the wire's TopicPartitions, topic ids sorted.
TopicPartitions = tuple[tuple[uuid.UUID, tuple[int, ...]], ...]


class TopicsView(Protocol):
    """The cluster's topics as the coordinator sees them (the broker implements it):
    name -> (topic id, partition count), internal topics excluded."""

    def topics(self) -> Mapping[str, tuple[uuid.UUID, int]]: ...


class InMemoryTopics:
    """A ``TopicsView`` over a dict (tests; a broker without a metadata image)."""

    def __init__(self, topics: Mapping[str, tuple[uuid.UUID, int]] | None = None) -> None:
        self._topics: dict[str, tuple[uuid.UUID, int]] = dict(topics or {})

    def topics(self) -> Mapping[str, tuple[uuid.UUID, int]]:
        return self._topics

    def create(self, name: str, partitions: int, topic_id: uuid.UUID | None = None) -> uuid.UUID:
        tid = topic_id or uuid.uuid4()
        self._topics[name] = (tid, partitions)
        return tid

    def delete(self, name: str) -> None:
        self._topics.pop(name, None)

    def id(self, name: str) -> uuid.UUID:
        return self._topics[name][0]


@dataclass(frozen=True, slots=True)
class ConsumerGroupHeartbeat:
    group_id: str
    member_id: str
    member_epoch: int
    instance_id: str | None = None
    rack_id: str | None = None
    rebalance_timeout_ms: int = -1  # -1: unchanged
    subscribed_topic_names: tuple[str, ...] | None = None
    subscribed_topic_regex: str | None = None  # v1+
    server_assignor: str | None = None
    owned_partitions: TopicPartitions | None = None
    client_id: str = ""
    client_host: str = ""
    client_generates_member_id: bool = False  # v1+ (KIP-1082)


@dataclass(frozen=True, slots=True)
class ConsumerGroupHeartbeatResult:
    error: ErrorCode
    error_message: str | None = None
    member_id: str | None = None
    member_epoch: int = 0
    heartbeat_interval_ms: int = 0
    # None: not sent (unchanged); a tuple (maybe empty): the member's full assignment
    assignment: TopicPartitions | None = None


@dataclass(frozen=True, slots=True)
class ConsumerGroupDescribe:
    group_ids: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class DescribedConsumerMember:
    member_id: str
    instance_id: str | None
    rack_id: str | None
    member_epoch: int
    client_id: str
    client_host: str
    subscribed_topic_names: tuple[str, ...]
    subscribed_topic_regex: str | None
    assignment: TopicPartitions
    target_assignment: TopicPartitions
    member_type: int = 1  # Kafka's MemberType: 0 classic protocol, 1 consumer protocol


@dataclass(frozen=True, slots=True)
class DescribedConsumerGroup:
    error: ErrorCode
    group_id: str
    error_message: str | None = None
    state: str = ""
    group_epoch: int = 0
    assignment_epoch: int = 0
    assignor_name: str = ""
    members: tuple[DescribedConsumerMember, ...] = ()


@dataclass(frozen=True, slots=True)
class ConsumerGroupDescribeResult:
    groups: tuple[DescribedConsumerGroup, ...]
