"""The pure assignor interface: a frozen group spec in, a frozen assignment out.

Nothing here does I/O or imports from ``broker`` or ``protocol``: the same
functions serve a Python consumer acting as group leader (client-side
assignment) and, later, the broker's server-side assignment (KIP-848).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import NamedTuple

__all__ = [
    "DEFAULT_GENERATION",
    "GroupAssignment",
    "GroupSpec",
    "MemberSpec",
    "TopicPartition",
    "group_partitions",
]

#: The generation a member reports when it has none (Kafka's ``DEFAULT_GENERATION``).
DEFAULT_GENERATION = -1


class TopicPartition(NamedTuple):
    """A (topic, partition) pair; orders by topic, then partition."""

    topic: str
    partition: int


def group_partitions(partitions: Iterable[TopicPartition]) -> dict[str, tuple[int, ...]]:
    """``[tp, ...]`` -> ``{topic: (sorted partitions)}``, topics in sorted order."""
    by_topic: dict[str, list[int]] = {}
    for topic, partition in partitions:
        by_topic.setdefault(topic, []).append(partition)
    return {topic: tuple(sorted(by_topic[topic])) for topic in sorted(by_topic)}


@dataclass(frozen=True, slots=True)
class MemberSpec:
    """One group member as the assignor sees it (from its JoinGroup subscription).

    ``owned_partitions`` and ``generation`` are what the member claims to own
    and the generation it owned them in (ConsumerProtocolSubscription v1/v2,
    or the eager sticky assignor's user data); ``generation`` resolves
    conflicting claims. ``group_instance_id`` (static membership, KIP-345) is
    optional: range and round-robin order members by it like Kafka does, and
    deferred imbalance recognises a returning member by it.
    """

    member_id: str
    topics: frozenset[str]
    owned_partitions: tuple[TopicPartition, ...] = ()
    generation: int = DEFAULT_GENERATION
    rack: str | None = None
    user_data: bytes | None = None
    group_instance_id: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.topics, frozenset):
            object.__setattr__(self, "topics", frozenset(self.topics))
        owned = self.owned_partitions
        if not (isinstance(owned, tuple) and all(type(tp) is TopicPartition for tp in owned)):
            object.__setattr__(
                self, "owned_partitions", tuple(TopicPartition(t, p) for t, p in owned)
            )

    @property
    def identity(self) -> str:
        """The key that survives a restart: the static instance id if any, else member id."""
        return self.group_instance_id if self.group_instance_id is not None else self.member_id


@dataclass(frozen=True, slots=True)
class GroupSpec:
    """Everything an assignment depends on.

    ``topics`` maps each topic known to the leader to its partition count
    (partitions are ``0 .. count - 1``); subscribed topics missing from it are
    ignored, as Kafka does for topics without metadata. ``now_ms`` and
    ``assignor_state`` (the opaque ``GroupAssignment.assignor_state`` of the
    previous round; in a live group it rides in the leader's user data) let
    time-dependent assignors stay pure functions.
    """

    members: tuple[MemberSpec, ...]
    topics: Mapping[str, int]
    now_ms: int = 0
    assignor_state: bytes | None = None

    def __post_init__(self) -> None:
        members = tuple(self.members)
        seen: set[str] = set()
        for member in members:
            if member.member_id in seen:
                raise ValueError(f"duplicate member id {member.member_id!r}")
            seen.add(member.member_id)
        object.__setattr__(self, "members", members)
        topics = dict(self.topics)
        for topic, count in topics.items():
            if count < 0:
                raise ValueError(f"topic {topic!r} has a negative partition count")
        object.__setattr__(self, "topics", MappingProxyType(topics))

    def member(self, member_id: str) -> MemberSpec:
        for member in self.members:
            if member.member_id == member_id:
                return member
        raise KeyError(member_id)

    def subscribed_topics(self) -> list[str]:
        """Sorted topics that at least one member subscribes to and that have metadata."""
        wanted: set[str] = set()
        for member in self.members:
            wanted.update(member.topics)
        return sorted(t for t in wanted if t in self.topics)


@dataclass(frozen=True, slots=True)
class GroupAssignment:
    """The result: ``assignments[member_id][topic] == (partition, ...)`` (sorted).

    Every member of the spec has an entry, possibly empty. ``assignor_state``
    is opaque and must be handed back in the next round's
    ``GroupSpec.assignor_state``; ``next_rebalance_ms`` (deferred imbalance)
    is when the leader should trigger a rebalance, or None.
    """

    assignments: Mapping[str, Mapping[str, tuple[int, ...]]]
    assignor_state: bytes | None = None
    next_rebalance_ms: int | None = None

    @classmethod
    def from_partitions(
        cls,
        members: Iterable[str],
        assignment: Mapping[str, Iterable[TopicPartition]],
        assignor_state: bytes | None = None,
        next_rebalance_ms: int | None = None,
    ) -> GroupAssignment:
        result: dict[str, Mapping[str, tuple[int, ...]]] = {}
        for member_id in members:
            result[member_id] = MappingProxyType(group_partitions(assignment.get(member_id, ())))
        return cls(MappingProxyType(result), assignor_state, next_rebalance_ms)

    def partitions(self, member_id: str) -> list[TopicPartition]:
        """The member's partitions, sorted."""
        return [
            TopicPartition(topic, p)
            for topic, parts in self.assignments.get(member_id, {}).items()
            for p in parts
        ]

    def iter_all(self) -> Iterator[tuple[str, TopicPartition]]:
        for member_id, by_topic in self.assignments.items():
            for topic, parts in by_topic.items():
                for p in parts:
                    yield member_id, TopicPartition(topic, p)

    def owners(self) -> dict[TopicPartition, str]:
        """partition -> member (if a partition were assigned twice, the last one wins)."""
        return {tp: m for m, tp in self.iter_all()}

    def counts(self) -> dict[str, int]:
        return {m: sum(len(p) for p in t.values()) for m, t in self.assignments.items()}
