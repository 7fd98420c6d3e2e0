"""Kafka's ``simple`` share-group assignor (its SimpleAssignor since Kafka 4.1), written anew.

Share groups may give one partition to several members (its records are shared, not owned),
so the assignment balances partitions over members the other way too. For each topic, with
``P`` partitions and ``M`` members subscribed to it:

- every partition goes to ``ceil(M / P)`` members (its desired sharing): one member each
  while members are no more than partitions, every member when one partition has them all;
- member ``i`` (in member order) takes ``ceil(r * (i + 1)) - ceil(r * i)`` of them, with
  ``r = sharing * P / M``, so counts differ by at most one;
- balance first, then stickiness: a member keeps what it had where the counts allow;
  partitions shared more than desired lose members (the overfilled first), overfilled
  members lose partitions, then partitions short of members go round the unfilled members.

Kafka computes a group whose members all subscribe to the same topics over all their
partitions at once and other groups topic by topic; the counts above are per topic in both
cases here, which is the same for a group of one topic. Pure: no I/O.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence

# ((topic id, (partition, ...)), ...), topic ids sorted
TopicPartitions = tuple[tuple[uuid.UUID, tuple[int, ...]], ...]


def assign(
    members: Sequence[str],
    subscriptions: Mapping[str, tuple[str, ...]],
    topics: Mapping[str, tuple[uuid.UUID, int]],
    current: Mapping[str, TopicPartitions],
) -> dict[str, TopicPartitions]:
    """The target assignment of ``members`` (in the group's member order).

    ``subscriptions``: member -> topic names; ``topics``: name -> (id, partitions) of the
    topics that exist; ``current``: member -> its previous target (kept where balance
    allows)."""
    out: dict[str, dict[uuid.UUID, list[int]]] = {m: {} for m in members}
    for name in sorted({n for m in members for n in subscriptions.get(m, ())}):
        found = topics.get(name)
        if found is None or found[1] <= 0:
            continue
        topic_id, count = found
        subscribed = [m for m in members if name in subscriptions.get(m, ())]
        owned = {
            m: {p for tid, parts in current.get(m, ()) if tid == topic_id for p in parts}
            for m in subscribed
        }
        for member, parts in _assign_topic(subscribed, count, owned).items():
            if parts:
                out[member][topic_id] = sorted(parts)
    return {m: tuple((tid, tuple(ps)) for tid, ps in sorted(out[m].items())) for m in members}


def _assign_topic(
    members: list[str], partitions: int, owned: dict[str, set[int]]
) -> dict[str, set[int]]:
    sharing = -(-len(members) // partitions)  # ceil(M / P)
    total = sharing * partitions  # assignments to hand out
    n = len(members)
    # member i's share: ceil(total * (i + 1) / n) - ceil(total * i / n)
    desired = {m: -(-total * (i + 1) // n) - -(-total * i // n) for i, m in enumerate(members)}
    held = {m: {p for p in owned.get(m, set()) if 0 <= p < partitions} for m in members}
    holders: dict[int, list[str]] = {p: [] for p in range(partitions)}
    for m in members:
        for p in sorted(held[m]):
            holders[p].append(m)

    def drop(m: str, p: int) -> None:
        held[m].discard(p)
        holders[p].remove(m)

    # partitions shared more than desired lose members: the overfilled ones first
    for p in range(partitions):
        over = len(holders[p]) - sharing
        if over <= 0:
            continue
        by_fill = sorted(holders[p], key=lambda m: len(held[m]) <= desired[m])
        for m in by_fill[:over]:
            drop(m, p)
    # overfilled members give up partitions (the highest first)
    for m in members:
        for p in sorted(held[m], reverse=True)[: max(0, len(held[m]) - desired[m])]:
            drop(m, p)
    # partitions short of members go round the unfilled members
    unfilled = [m for m in members if len(held[m]) < desired[m]]
    turn = 0
    for p in range(partitions):
        need = sharing - len(holders[p])
        tried = 0
        while need > 0 and unfilled and tried < len(unfilled):
            m = unfilled[turn % len(unfilled)]
            if p in held[m]:
                turn += 1
                tried += 1
                continue
            held[m].add(p)
            holders[p].append(m)
            need -= 1
            tried = 0
            if len(held[m]) >= desired[m]:
                unfilled.remove(m)
            else:
                turn += 1
    return held
