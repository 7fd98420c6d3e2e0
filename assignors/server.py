"""KIP-848 server-side assignors: ``uniform`` (the default) and ``range``.

With the consumer group protocol of KIP-848 the broker computes each member's target
assignment itself, with the assignor named by the member's ``group.remote.assignor``.
These are pure functions of the group (members with their subscriptions and current target
assignments) and the partition counts of the subscribed topics; topics are keyed by topic id.
The behaviour is that of Kafka 4.x's ``UniformAssignor`` and ``RangeAssignor``
(``group-coordinator/.../group/assignor``) with its hash-map iteration orders pinned down
(members by member id, topics by Kafka's ``Uuid`` order), so the same input always gives
the same output.

Differences from Kafka: a member subscribed to a topic missing from ``partitions`` is not an
error (the topic is ignored); homogeneity is decided on existing topics only; rack ids are
not used (Kafka 4.x's server assignors ignore them too).
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

from kgroupd.assignors.server_uniform import (
    kafka_topic_order,
    uniform_heterogeneous,
    uniform_homogeneous,
)

__all__ = [
    "DEFAULT_SERVER_ASSIGNOR",
    "SERVER_ASSIGNORS",
    "RangeServerAssignor",
    "ServerAssignment",
    "ServerAssignor",
    "ServerMember",
    "TopicKey",
    "UniformServerAssignor",
    "kafka_topic_order",
    "range_server_assign",
    "uniform_assign",
]

#: Topics are identified by topic id.
TopicKey = uuid.UUID

#: member id -> topic id -> partitions; every member appears (possibly with ``{}``).
ServerAssignment = dict[str, dict[TopicKey, frozenset[int]]]


@dataclass(frozen=True, slots=True)
class ServerMember:
    """One member as a server assignor sees it.

    ``subscribed``: topic ids the member subscribes to (existing topics only).
    ``assigned``: the member's current *target* assignment (used for stickiness); empty for
    a new member. ``instance_id`` is the static membership id (KIP-345), ``rack_id`` the
    client rack.
    """

    member_id: str
    instance_id: str | None
    rack_id: str | None
    subscribed: frozenset[TopicKey]
    assigned: Mapping[TopicKey, frozenset[int]]

    def __post_init__(self) -> None:
        if not isinstance(self.subscribed, frozenset):
            object.__setattr__(self, "subscribed", frozenset(self.subscribed))


class ServerAssignor(Protocol):
    """A KIP-848 server assignor: ``partitions`` maps each subscribed, existing topic id to
    its partition count; the result has an entry for every member."""

    name: str

    def assign(
        self, members: Mapping[str, ServerMember], partitions: Mapping[TopicKey, int]
    ) -> ServerAssignment: ...


def _subscriptions(
    members: Mapping[str, ServerMember], partitions: Mapping[TopicKey, int]
) -> dict[str, frozenset[TopicKey]]:
    """member id -> its subscribed topics that exist in ``partitions``."""
    known = partitions.keys()
    out: dict[str, frozenset[TopicKey]] = {}
    for member_id, member in members.items():
        subscribed = member.subscribed
        if not subscribed <= known:
            subscribed = frozenset(t for t in subscribed if t in known)
        out[member_id] = subscribed
    return out


def uniform_assign(
    members: Mapping[str, ServerMember], partitions: Mapping[TopicKey, int]
) -> ServerAssignment:
    """Kafka's ``uniform`` assignor.

    If every member subscribes to the same topics, the homogeneous builder: member counts
    differ by at most one and the number of moved partitions is the minimum that balance
    requires (see ``uniform_homogeneous``). Otherwise the heterogeneous builder: partitions
    go only to subscribers of their topic, current partitions are kept unless balancing
    moves them, and balancing stops when no partition can go to a subscriber of its topic
    holding two or more fewer partitions (see ``uniform_heterogeneous``). Topics without a
    subscriber are not assigned; current partitions of deleted or unsubscribed topics, or
    beyond a topic's partition count, are dropped. Deterministic; every member appears.
    """
    if not members:
        return {}
    subscriptions = _subscriptions(members, partitions)
    member_ids = sorted(members)
    current = {m: members[m].assigned for m in member_ids}
    first = subscriptions[member_ids[0]]
    if all(subscriptions[m] == first for m in member_ids):
        return uniform_homogeneous(member_ids, first, partitions, current)
    return uniform_heterogeneous(member_ids, subscriptions, partitions, current)


def _range_order(member: ServerMember) -> tuple[int, str, str]:
    """Static members first, by instance id; then dynamic members, by member id. (Instance
    ids are unique in a valid group; should two members share one, member id decides.)"""
    if member.instance_id is not None:
        return (0, member.instance_id, member.member_id)
    return (1, member.member_id, "")


def range_server_assign(
    members: Mapping[str, ServerMember], partitions: Mapping[TopicKey, int]
) -> ServerAssignment:
    """Kafka 4.x's server-side ``range`` assignor.

    For each topic, its subscribers in order (static members first, sorted by instance id,
    then the others sorted by member id) receive consecutive ranges: with ``n`` partitions
    and ``m`` subscribers, the first ``n % m`` get ``n // m + 1`` partitions and the rest
    ``n // m`` (none when ``n < m`` leaves them nothing). Topics with the same partition
    count and the same subscribers are therefore co-partitioned (a member gets the same
    partition numbers of each). As in Kafka since 3.9, the assignment is recomputed from
    scratch: ``assigned`` is ignored, and stickiness comes only from the order, which is
    stable for static members across restarts (a returning instance id gets its ranges
    back). Deterministic; every member appears.
    """
    subscriptions = _subscriptions(members, partitions)
    ordered = sorted(members, key=lambda m: _range_order(members[m]))
    result: ServerAssignment = {m: {} for m in ordered}
    if not ordered:
        return result
    first = subscriptions[ordered[0]]
    if all(subscriptions[m] == first for m in ordered):
        # Homogeneous: every topic is split over the same member list.
        per_topic = {t: ordered for t in first}
    else:
        per_topic = {}
        for member_id in ordered:
            for topic in subscriptions[member_id]:
                per_topic.setdefault(topic, []).append(member_id)
    ranges: dict[tuple[int, int], list[frozenset[int]]] = {}
    for topic, subscribers in per_topic.items():
        shape = (partitions[topic], len(subscribers))
        split = ranges.get(shape)
        if split is None:
            split = ranges[shape] = _split(*shape)
        for member_id, parts in zip(subscribers, split, strict=False):
            result[member_id][topic] = parts
    return result


def _split(count: int, n_members: int) -> list[frozenset[int]]:
    """Partitions ``0 .. count - 1`` as consecutive non-empty ranges for ``n_members``
    members in order: the first ``count % n_members`` one larger than the others."""
    quota, extra = divmod(count, n_members)
    out: list[frozenset[int]] = []
    start = 0
    for position in range(min(count, n_members)):
        size = quota + 1 if position < extra else quota
        out.append(frozenset(range(start, start + size)))
        start += size
    return out


class UniformServerAssignor:
    """The ``uniform`` server assignor (``uniform_assign``), Kafka's default."""

    name: str = "uniform"

    def assign(
        self, members: Mapping[str, ServerMember], partitions: Mapping[TopicKey, int]
    ) -> ServerAssignment:
        return uniform_assign(members, partitions)


class RangeServerAssignor:
    """The ``range`` server assignor (``range_server_assign``)."""

    name: str = "range"

    def assign(
        self, members: Mapping[str, ServerMember], partitions: Mapping[TopicKey, int]
    ) -> ServerAssignment:
        return range_server_assign(members, partitions)


#: ``group.remote.assignor`` name -> assignor.
SERVER_ASSIGNORS: dict[str, ServerAssignor] = {
    "uniform": UniformServerAssignor(),
    "range": RangeServerAssignor(),
}

#: The assignor used when a member names none (Kafka's default).
DEFAULT_SERVER_ASSIGNOR = "uniform"
