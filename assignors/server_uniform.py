"""The KIP-848 ``uniform`` server assignor's two builders (see ``kgroupd.assignors.server``).

Both follow Kafka's group coordinator (``UniformHomogeneousAssignmentBuilder`` and
``UniformHeterogeneousAssignmentBuilder``, Kafka 4.x), with every iteration order that is a
hash order in Java made explicit so that the result is a function of the input alone:
members in member-id order, topics in Kafka's ``Uuid`` order (``kafka_topic_order``),
partitions ascending.

Inputs are already cleaned by the caller: ``subscriptions[m]`` holds only topics present in
``counts``; ``current[m]`` is the member's current target assignment as given (it may name
unsubscribed or deleted topics, or partitions beyond a topic's count: those are dropped here).
A partition claimed by two members stays with the first in member-id order.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping, Sequence

__all__ = ["kafka_topic_order", "uniform_heterogeneous", "uniform_homogeneous"]

_Assignment = dict[str, dict[uuid.UUID, frozenset[int]]]

_U64 = 1 << 64
_I64 = 1 << 63

#: Kafka stops the heterogeneous builder's balancing after this many rounds over the topics.
MAX_BALANCE_ROUNDS = 16


def kafka_topic_order(topic: uuid.UUID) -> tuple[int, int]:
    """Sort key matching Kafka's ``Uuid.compareTo``: the two 64-bit halves as *signed* longs."""
    value = topic.int
    high, low = value >> 64, value & (_U64 - 1)
    return (high - _U64 if high >= _I64 else high, low - _U64 if low >= _I64 else low)


def _valid(parts: Iterable[int], count: int) -> list[int]:
    """The partitions of ``parts`` that exist in a topic of ``count`` partitions, ascending."""
    return sorted(p for p in parts if 0 <= p < count)


# --- homogeneous: every member subscribes to the same topics ------------------------------


def uniform_homogeneous(
    member_ids: Sequence[str],
    topics: Iterable[uuid.UUID],
    counts: Mapping[uuid.UUID, int],
    current: Mapping[str, Mapping[uuid.UUID, Iterable[int]]],
) -> _Assignment:
    """Kafka's homogeneous uniform builder, for members all subscribed to ``topics``.

    Guarantees, with ``P`` partitions over ``N`` members: ``P % N`` members get
    ``P // N + 1`` partitions and the rest ``P // N`` (so counts differ by at most one);
    every partition is assigned exactly once. Each member keeps the lowest-numbered of its
    current partitions (topics in Kafka order) up to its quota; the larger quotas go, in
    member-id order, to members that keep ``P // N + 1`` partitions, and only when there
    are not enough of those to the last members in member-id order. The number of
    partitions that change owner is therefore the minimum any balanced assignment needs.
    Freed partitions are dealt in order: never-assigned ones (topic order, ascending), then
    revoked ones (member order), each under-quota member taking its whole remaining quota
    before the next. ``member_ids`` must be sorted.
    """
    ordered_topics = sorted(topics, key=kafka_topic_order)
    subscribed = set(ordered_topics)
    result: _Assignment = {m: {} for m in member_ids}
    if not ordered_topics or not member_ids:
        return result
    total = sum(counts[t] for t in ordered_topics)
    n_members = len(member_ids)
    min_quota, extra_left = divmod(total, n_members)

    claimed: dict[uuid.UUID, set[int]] = {t: set() for t in ordered_topics}
    kept: dict[str, list[tuple[uuid.UUID, list[int]]]] = {}
    for member_id in member_ids:
        mine: list[tuple[uuid.UUID, list[int]]] = []
        for topic in sorted(
            (t for t in current.get(member_id, {}) if t in subscribed), key=kafka_topic_order
        ):
            taken = claimed[topic]
            parts = [p for p in _valid(current[member_id][topic], counts[topic]) if p not in taken]
            taken.update(parts)
            if parts:
                mine.append((topic, parts))
        kept[member_id] = mine

    # Partitions nobody holds come first in the list of partitions to deal out.
    unassigned: list[tuple[uuid.UUID, int]] = []
    for topic in ordered_topics:
        taken = claimed[topic]
        unassigned.extend((topic, p) for p in range(counts[topic]) if p not in taken)

    unfilled: list[tuple[str, int]] = []
    for index, member_id in enumerate(member_ids):
        quota = min_quota
        has_extra = extra_left > 0
        if has_extra:
            quota += 1
        retained: dict[uuid.UUID, frozenset[int]] = {}
        for topic, parts in kept[member_id]:
            if len(parts) <= quota:
                quota -= len(parts)
                retained[topic] = _same_or_new(current[member_id][topic], parts)
            else:
                if quota:
                    retained[topic] = frozenset(parts[:quota])
                unassigned.extend((topic, p) for p in parts[quota:])
                quota = 0
        # A member that cannot fill the larger quota with its own partitions leaves it to a
        # later member, unless only as many members remain as larger quotas.
        if quota > 0 and has_extra and n_members - index > extra_left:
            quota -= 1
            has_extra = False
        if has_extra:
            extra_left -= 1
        if quota > 0:
            unfilled.append((member_id, quota))
        result[member_id] = retained

    position = 0
    for member_id, quota in unfilled:
        grant = unassigned[position : position + quota]
        position += quota
        _merge(result[member_id], grant)
    if position < len(unassigned):  # pragma: no cover - the quotas always sum to the total
        raise AssertionError("uniform homogeneous builder left partitions unassigned")
    return result


def _same_or_new(original: Iterable[int], parts: list[int]) -> frozenset[int]:
    """``original`` itself when it is a frozenset equal to ``parts`` (no copy), else new."""
    if isinstance(original, frozenset) and len(original) == len(parts):
        return original
    return frozenset(parts)


def _merge(target: dict[uuid.UUID, frozenset[int]], grant: list[tuple[uuid.UUID, int]]) -> None:
    by_topic: dict[uuid.UUID, list[int]] = {}
    for topic, partition in grant:
        by_topic.setdefault(topic, []).append(partition)
    for topic, parts in by_topic.items():
        old = target.get(topic)
        target[topic] = frozenset(parts) if old is None else old.union(parts)


# --- heterogeneous: subscriptions differ --------------------------------------------------


class _Balancer:
    """Hands out least-loaded receivers and most-loaded givers among one topic's subscribers.

    Kafka's ``MemberAssignmentBalancer``: subscribers sorted by (load, index); a range of the
    least loaded grows rightwards one level at a time (each member of the range receives one
    partition before the level rises), a range of the most loaded grows leftwards the same
    way. Loads are read from the shared ``sizes`` list, which the caller updates.
    """

    __slots__ = (
        "least_end",
        "least_level",
        "most_end",
        "most_level",
        "most_start",
        "next_least",
        "next_most",
        "order",
        "sizes",
    )

    def __init__(self, sizes: list[int]) -> None:
        self.sizes = sizes
        self.order: list[int] = []
        self.least_end = self.least_level = self.next_least = 0
        self.most_start = self.most_end = self.most_level = self.next_most = 0

    def initialize(self, members: Sequence[int]) -> int:
        """Reset for ``members`` (non-empty); returns max load minus min load among them."""
        sizes = self.sizes
        order = sorted(members, key=lambda m: (sizes[m], m))
        self.order = order
        n = len(order)
        self.least_end = 0
        self.least_level = sizes[order[0]] - 1
        self.next_least = 0
        self.most_start = self.most_end = n
        self.most_level = sizes[order[-1]] + 1
        self.next_most = n - 1
        return sizes[order[-1]] - sizes[order[0]]

    def next_least_loaded(self) -> int:
        """The member to receive the next partition (assumed given to it from now on)."""
        order, sizes = self.order, self.sizes
        if self.next_least >= self.least_end:
            self.least_level += 1
            while self.least_end < len(order) and sizes[order[self.least_end]] == self.least_level:
                self.least_end += 1
            self.next_least = 0
        member = order[self.next_least]
        self.next_least += 1
        return member

    def next_most_loaded(self) -> int:
        """The member to give up the next partition, or -1 when no candidate is left."""
        order, sizes = self.order, self.sizes
        if self.next_most < self.most_start:
            if self.most_end <= self.most_start and self.most_start > 0:
                # Every member of the range was excluded: restart from the next one down.
                self.most_level = sizes[order[self.most_start - 1]]
            else:
                self.most_level -= 1
            while self.most_start > 0 and sizes[order[self.most_start - 1]] == self.most_level:
                self.most_start -= 1
            self.next_most = self.most_end - 1
        if self.next_most < 0:
            return -1
        member = order[self.next_most]
        self.next_most -= 1
        return member

    def exclude_last_most_loaded(self) -> None:
        """Drop the member last returned by ``next_most_loaded`` from the most loaded range."""
        order = self.order
        i, j = self.next_most + 1, self.most_end - 1
        order[i], order[j] = order[j], order[i]
        self.most_end -= 1

    def balanced(self) -> bool:
        return self.most_level - self.least_level <= 1


def uniform_heterogeneous(
    member_ids: Sequence[str],
    subscriptions: Mapping[str, frozenset[uuid.UUID]],
    counts: Mapping[uuid.UUID, int],
    current: Mapping[str, Mapping[uuid.UUID, Iterable[int]]],
) -> _Assignment:
    """Kafka's heterogeneous uniform builder, for members with differing subscriptions.

    Guarantees: every partition of a topic with at least one subscriber is assigned exactly
    once, to a subscriber of that topic; nothing else is assigned. Each member keeps all its
    current partitions of topics it still subscribes to, except those moved by balancing.
    Unheld partitions go topic by topic (most partitions per subscriber first, then fewest
    subscribers, then topic id) to the least loaded subscribers in turn. Balancing then
    repeatedly moves, within each topic, the highest-numbered partition of its most loaded
    holder to its least loaded subscriber, until a round over all topics moves nothing (at
    most ``MAX_BALANCE_ROUNDS`` rounds, as in Kafka). When it stops before that limit, no
    member holds a partition that a subscriber with two or more fewer partitions could
    take, and running the builder again on its own output changes nothing.
    ``member_ids`` must be sorted.
    """
    index_of = {m: i for i, m in enumerate(member_ids)}
    subscribers: dict[uuid.UUID, list[int]] = {}
    for i, member_id in enumerate(member_ids):
        for topic in subscriptions[member_id]:
            subscribers.setdefault(topic, []).append(i)
    sizes = [0] * len(member_ids)
    owners: dict[uuid.UUID, list[int]] = {t: [-1] * counts[t] for t in subscribers}

    # Keep current partitions of still-subscribed topics; drop the rest.
    for member_id in member_ids:
        i = index_of[member_id]
        mine = subscriptions[member_id]
        for topic, parts in current.get(member_id, {}).items():
            if topic not in mine:
                continue
            topic_owners = owners[topic]
            count = len(topic_owners)
            for p in parts:
                if 0 <= p < count and topic_owners[p] == -1:
                    topic_owners[p] = i
                    sizes[i] += 1

    def topic_key(topic: uuid.UUID) -> tuple[float, int, tuple[int, int]]:
        n_subscribers = len(subscribers[topic])
        return (-(counts[topic] / n_subscribers), n_subscribers, kafka_topic_order(topic))

    balancer = _Balancer(sizes)
    unassigned = {t: [p for p, owner in enumerate(o) if owner == -1] for t, o in owners.items()}
    for topic in sorted((t for t, parts in unassigned.items() if parts), key=topic_key):
        balancer.initialize(subscribers[topic])
        topic_owners = owners[topic]
        for p in unassigned[topic]:
            receiver = balancer.next_least_loaded()
            topic_owners[p] = receiver
            sizes[receiver] += 1

    movable = sorted((t for t in subscribers if len(subscribers[t]) >= 2), key=topic_key)
    if movable:
        _balance(movable, subscribers, owners, sizes, balancer)

    result: _Assignment = {m: {} for m in member_ids}
    for topic, topic_owners in owners.items():
        grouped: dict[int, list[int]] = {}
        for p, owner in enumerate(topic_owners):
            grouped.setdefault(owner, []).append(p)
        for owner, parts in grouped.items():
            result[member_ids[owner]][topic] = frozenset(parts)
    return result


def _balance(
    topics: list[uuid.UUID],
    subscribers: Mapping[uuid.UUID, list[int]],
    owners: Mapping[uuid.UUID, list[int]],
    sizes: list[int],
    balancer: _Balancer,
) -> None:
    """Round-robin over ``topics`` moving partitions until a full round moves none."""
    last_moved = -1
    for _ in range(MAX_BALANCE_ROUNDS):
        for position, topic in enumerate(topics):
            if position == last_moved:
                return  # a whole round since the last move: nothing more to do
            moved = _balance_topic(subscribers[topic], owners[topic], sizes, balancer)
            if moved or last_moved == -1:
                last_moved = position


def _balance_topic(
    members: list[int], topic_owners: list[int], sizes: list[int], balancer: _Balancer
) -> int:
    """Move one topic's partitions from its most to its least loaded subscribers; returns
    how many moved. Stops once the two loads differ by at most one or no holder is left."""
    if balancer.initialize(members) <= 1:
        return 0
    # Partitions grouped by owner (ascending within an owner); each owner gives up its
    # highest-numbered partitions first.
    by_owner = sorted(range(len(topic_owners)), key=topic_owners.__getitem__)
    start: dict[int, int] = {}
    end: dict[int, int] = {}
    for position, p in enumerate(by_owner):
        owner = topic_owners[p]
        start.setdefault(owner, position)
        end[owner] = position + 1
    moved = 0
    while not balancer.balanced():
        giver = balancer.next_most_loaded()
        while giver != -1 and end.get(giver, 0) - start.get(giver, 0) <= 0:
            balancer.exclude_last_most_loaded()
            giver = balancer.next_most_loaded()
        if giver == -1:
            break
        end[giver] -= 1
        partition = by_owner[end[giver]]
        receiver = balancer.next_least_loaded()
        if balancer.balanced():
            break
        topic_owners[partition] = receiver
        sizes[giver] -= 1
        sizes[receiver] += 1
        moved += 1
    return moved
