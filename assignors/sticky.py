"""Sticky, cooperative-sticky and deferred-imbalance assignment.

The sticky target follows Kafka's ``AbstractStickyAssignor``:

* Previous ownership comes from each member's claimed partitions and the
  generation it claims them in. For each partition the claim with the highest
  generation wins; two members claiming it in that same highest generation
  invalidate each other (the partition is treated as unowned). Claims on
  topics that no longer exist, partitions beyond the topic's count, or (in
  the general case) topics the member no longer subscribes to are dropped.
  Unlike Java, this resolution does not depend on hash-map iteration order.
* All members subscribed to the same topics: Kafka's constrained algorithm.
  With ``P`` partitions and ``N`` members, ``r = P % N`` members get
  ``P // N + 1`` partitions and the others ``P // N``; every member keeps as
  many of its owned partitions as its quota allows (owned partitions kept in
  (partition, topic) order, the ``r`` larger quotas going to the first members
  in member-id order that own enough) and the remaining partitions are dealt
  round-robin, sorted by topic then partition, to the sorted under-quota
  members. The number of partitions that change owner is therefore exactly
  the minimum ``sum(owned) - (sum(min(owned_i, P // N)) + min(r, #{owned_i > P // N}))``.
* Mixed subscriptions: Kafka's general algorithm. Keep valid owned partitions,
  give each unowned partition (topics with fewer potential consumers first) to
  its least-loaded subscriber (ties: member id), then move partitions, newly
  assigned ones first, from a member to a subscriber holding at least two fewer
  (back to its previous-generation owner when that qualifies) until no such
  move exists: then no partition can go from a member to one with two or more
  fewer partitions that subscribes to its topic.

Cooperative-sticky (KIP-429) computes the same target, then withholds every
partition that would be *added* to a member while another present member
still claims it: that owner revokes it this round, and it is assigned in the
follow-up rebalance, so no partition ever has two owners.

Deferred imbalance (KIP-415 "Design II") is an option of the cooperative
assignor: when a member of the previous round is missing, its partitions stay
unassigned until ``now_ms + scheduled_rebalance_max_delay_ms``. If it comes
back in time (same ``group_instance_id``, or same member id for dynamic
members) it gets them back without any movement; once the delay has passed
they are redistributed. The previous round's assignment and the pending
departures travel in ``assignor_state``; ``next_rebalance_ms`` tells the
leader when to trigger the rebalance that redistributes them.
"""

from __future__ import annotations

import heapq
import struct
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from kgroupd.assignors.codec import CodecError, _Reader, _w_string, _w_topic_partitions
from kgroupd.assignors.spec import (
    GroupAssignment,
    GroupSpec,
    MemberSpec,
    TopicPartition,
    group_partitions,
)

__all__ = [
    "cooperative_sticky_assign",
    "minimum_moves",
    "sticky_assign",
]

_STATE_VERSION = 0


# --- ownership resolution -----------------------------------------------------------


@dataclass(slots=True)
class _Ownership:
    owned: dict[str, list[TopicPartition]]  # member -> valid owned partitions (claim order)
    multi: set[TopicPartition]  # claimed by several members in the same highest generation
    prev: dict[TopicPartition, str]  # highest claimant below the group's max generation


def _resolve(
    members: Sequence[MemberSpec], valid: Mapping[str, int], excluded: set[TopicPartition]
) -> _Ownership:
    best: dict[TopicPartition, tuple[int, str]] = {}
    multi: set[TopicPartition] = set()
    max_generation = max((m.generation for m in members), default=-1)
    prev: dict[TopicPartition, tuple[int, str]] = {}
    for member in members:
        generation, member_id = member.generation, member.member_id
        for tp in member.owned_partitions:
            count = valid.get(tp.topic)
            if count is None or not 0 <= tp.partition < count or tp in excluded:
                continue
            if generation < max_generation:
                old = prev.get(tp)
                if old is None or (generation, old[1]) > (old[0], member_id):
                    prev[tp] = (generation, member_id)  # highest generation, then smallest id
            current = best.get(tp)
            if current is None or generation > current[0]:
                best[tp] = (generation, member_id)
                multi.discard(tp)
            elif generation == current[0] and current[1] != member_id:
                multi.add(tp)
    owned: dict[str, list[TopicPartition]] = {}
    for member in members:
        key = (member.generation, member.member_id)
        seen: set[TopicPartition] = set()
        mine: list[TopicPartition] = []
        for tp in member.owned_partitions:
            if tp not in seen and best.get(tp) == key and tp not in multi:
                seen.add(tp)
                mine.append(tp)
        owned[member.member_id] = mine
    return _Ownership(owned, multi, {tp: m for tp, (_, m) in prev.items()})


# --- the constrained (identical subscriptions) algorithm --------------------------------


def _constrained(
    member_ids: list[str],
    all_partitions: list[TopicPartition],
    owned: Mapping[str, list[TopicPartition]],
) -> dict[str, list[TopicPartition]]:
    total = len(all_partitions)
    min_quota, expected_over = divmod(total, len(member_ids))
    max_quota = min_quota + (1 if expected_over else 0)
    current_over = 0
    assignment: dict[str, list[TopicPartition]] = {}
    assigned: set[TopicPartition] = set()
    under: list[str] = []
    exact: list[str] = []
    for member_id in sorted(member_ids):
        mine = sorted(owned.get(member_id, ()), key=lambda tp: (tp.partition, tp.topic))
        if len(mine) < min_quota:
            keep = mine
            under.append(member_id)
        elif len(mine) >= max_quota and current_over < expected_over:
            current_over += 1
            if current_over == expected_over:
                exact.clear()
            keep = mine[:max_quota]
        else:
            keep = mine[:min_quota]
            if current_over < expected_over:
                exact.append(member_id)
        assignment[member_id] = keep
        assigned.update(keep)

    unassigned = [tp for tp in all_partitions if tp not in assigned] if assigned else all_partitions
    exact_queue = deque(exact)  # already in member-id order
    i = 0
    for tp in unassigned:
        if i < len(under):
            member_id = under[i]
            from_under = True
        elif under:
            i = 0
            member_id = under[0]
            from_under = True
        elif exact_queue:
            member_id = exact_queue.popleft()
            from_under = False
        else:  # pragma: no cover - the quotas add up to the partition count
            raise AssertionError("sticky: no member left below its quota")
        mine = assignment[member_id]
        mine.append(tp)
        if from_under:
            if len(mine) == min_quota:
                del under[i]
                exact_queue.append(member_id)
            else:
                i += 1
    return assignment


def minimum_moves(owned_counts: Iterable[int], members: int, partitions: int) -> int:
    """The fewest partitions that must change owner to balance ``partitions`` over
    ``members`` identical subscribers, given how many each validly owns (and all
    owned partitions distinct): the closed form the constrained algorithm meets."""
    counts = list(owned_counts)
    counts += [0] * (members - len(counts))
    if members == 0:
        return 0
    quota, extra = divmod(partitions, members)
    kept = sum(min(c, quota) for c in counts) + min(extra, sum(1 for c in counts if c > quota))
    return sum(counts) - kept


# --- the general (mixed subscriptions) algorithm ------------------------------------


class _LeastLoaded:
    """The least-loaded (then smallest id) member of a fixed candidate set.

    A lazy heap: ``touch`` pushes a member's new load, stale entries are dropped
    when they surface. Every member always has an entry with its current load.
    """

    __slots__ = ("heap", "load")

    def __init__(self, members: Iterable[str], load: dict[str, int]) -> None:
        self.load = load
        self.heap = [(load[m], m) for m in members]
        heapq.heapify(self.heap)

    def touch(self, member_id: str) -> None:
        heapq.heappush(self.heap, (self.load[member_id], member_id))

    def peek(self) -> str:
        heap, load = self.heap, self.load
        while True:
            n, member_id = heap[0]
            if load[member_id] == n:
                return member_id
            heapq.heappop(heap)


def _general(
    member_topics: Mapping[str, frozenset[str]],
    counts: Mapping[str, int],
    excluded: set[TopicPartition],
    ownership: _Ownership,
) -> dict[str, list[TopicPartition]]:
    member_ids = sorted(member_topics)
    topic_consumers: dict[str, list[str]] = {t: [] for t in counts}
    for member_id in member_ids:
        for topic in member_topics[member_id]:
            if topic in topic_consumers:
                topic_consumers[topic].append(member_id)

    current: dict[str, set[TopicPartition]] = {m: set() for m in member_ids}
    owner: dict[TopicPartition, str] = {}
    revocation_required = False
    for member_id in member_ids:
        topics = member_topics[member_id]
        for tp in ownership.owned.get(member_id, ()):
            if tp.topic in topics:
                current[member_id].add(tp)
                owner[tp] = member_id
            else:
                revocation_required = True
    load = {m: len(current[m]) for m in member_ids}

    # one least-loaded index per distinct set of potential consumers
    indexes: dict[tuple[str, ...], _LeastLoaded] = {}
    topic_index: dict[str, _LeastLoaded] = {}
    member_indexes: dict[str, list[_LeastLoaded]] = {m: [] for m in member_ids}
    for topic, consumers in topic_consumers.items():
        key = tuple(consumers)
        index = indexes.get(key)
        if index is None:
            index = indexes[key] = _LeastLoaded(consumers, load)
            for member_id in consumers:
                member_indexes[member_id].append(index)
        topic_index[topic] = index

    def place(tp: TopicPartition, new_owner: str) -> None:
        old = owner.get(tp)
        if old is not None:
            current[old].discard(tp)
            load[old] -= 1
            for index in member_indexes[old]:
                index.touch(old)
        current[new_owner].add(tp)
        owner[tp] = new_owner
        load[new_owner] += 1
        for index in member_indexes[new_owner]:
            index.touch(new_owner)

    sorted_topics = sorted(counts, key=lambda t: (len(topic_consumers[t]), t))
    movable = [
        TopicPartition(t, p)
        for t in sorted_topics
        if len(topic_consumers[t]) >= 2
        for p in range(counts[t])
        if TopicPartition(t, p) not in excluded
    ]
    unassigned: list[TopicPartition] = []
    for topic in sorted_topics:
        if not topic_consumers[topic]:
            continue
        index = topic_index[topic]
        for p in range(counts[topic]):
            tp = TopicPartition(topic, p)
            if tp in owner or tp in excluded:
                continue
            place(tp, index.peek())
            unassigned.append(tp)

    if max(load.values(), default=0) - min(load.values(), default=0) > 1:
        prev = ownership.prev

        def rebalance(partitions: list[TopicPartition]) -> None:
            while True:
                modified = False
                for tp in partitions:
                    holder = owner[tp]
                    before = prev.get(tp)
                    if (
                        before is not None
                        and before != holder
                        and tp.topic in member_topics[before]
                        and load[holder] > load[before] + 1
                    ):
                        place(tp, before)
                        modified = True
                        continue
                    target = topic_index[tp.topic].peek()
                    if load[holder] > load[target] + 1:
                        place(tp, target)
                        modified = True
                if not modified:
                    return

        if not revocation_required:
            movable_set = set(movable)
            rebalance([tp for tp in unassigned if tp in movable_set])
        rebalance(movable)

    return {m: sorted(current[m]) for m in member_ids}


# --- the sticky target ---------------------------------------------------------------


def _valid_counts(spec: GroupSpec, members: Sequence[MemberSpec]) -> dict[str, int]:
    wanted: set[str] = set()
    for member in members:
        wanted.update(member.topics)
    return {t: spec.topics[t] for t in sorted(wanted) if t in spec.topics}


def _sticky_target(
    members: Sequence[MemberSpec],
    counts: Mapping[str, int],
    excluded: set[TopicPartition] | None = None,
    extra_owned: Mapping[str, list[TopicPartition]] | None = None,
) -> dict[str, list[TopicPartition]]:
    if not members:
        return {}
    excluded = excluded or set()
    ownership = _resolve(members, counts, excluded)
    if extra_owned:
        claimed = {tp for mine in ownership.owned.values() for tp in mine} | ownership.multi
        for member_id, parts in extra_owned.items():
            mine = ownership.owned.setdefault(member_id, [])
            for tp in parts:
                count = counts.get(tp.topic)
                valid = count is not None and 0 <= tp.partition < count
                if valid and tp not in claimed and tp not in excluded:
                    claimed.add(tp)
                    mine.append(tp)
    if len({m.topics for m in members}) == 1:
        all_partitions = [
            TopicPartition(t, p)
            for t in counts  # already sorted
            for p in range(counts[t])
        ]
        if excluded:
            all_partitions = [tp for tp in all_partitions if tp not in excluded]
        return _constrained([m.member_id for m in members], all_partitions, ownership.owned)
    return _general({m.member_id: m.topics for m in members}, counts, excluded, ownership)


def sticky_assign(spec: GroupSpec) -> GroupAssignment:
    """Kafka's (eager) StickyAssignor semantics; see the module docstring."""
    counts = _valid_counts(spec, spec.members)
    target = _sticky_target(spec.members, counts)
    return GroupAssignment.from_partitions((m.member_id for m in spec.members), target)


def _withhold_transfers(
    members: Sequence[MemberSpec], target: dict[str, list[TopicPartition]]
) -> dict[str, list[TopicPartition]]:
    claims: dict[TopicPartition, set[str]] = {}
    for member in members:
        for tp in member.owned_partitions:
            claims.setdefault(tp, set()).add(member.member_id)
    result: dict[str, list[TopicPartition]] = {}
    for member_id, parts in target.items():
        kept: list[TopicPartition] = []
        for tp in parts:
            claimants = claims.get(tp)
            if not claimants or member_id in claimants:
                kept.append(tp)
            # else: another member still owns it: it revokes now, we get it next round
        result[member_id] = kept
    return result


# --- deferred imbalance state ---------------------------------------------------------


@dataclass(slots=True)
class _DeferredState:
    previous: dict[str, list[TopicPartition]]  # identity -> partitions after the last round
    pending: dict[str, tuple[int, list[TopicPartition]]]  # identity -> (deadline, partitions)


def _encode_state(state: _DeferredState) -> bytes:
    out: list[bytes] = [struct.pack(">hi", _STATE_VERSION, len(state.previous))]
    for identity in sorted(state.previous):
        _w_string(out, identity)
        _w_topic_partitions(out, tuple(group_partitions(state.previous[identity]).items()))
    out.append(struct.pack(">i", len(state.pending)))
    for identity in sorted(state.pending):
        deadline, parts = state.pending[identity]
        _w_string(out, identity)
        out.append(struct.pack(">q", deadline))
        _w_topic_partitions(out, tuple(group_partitions(parts).items()))
    return b"".join(out)


def _decode_state(data: bytes | None) -> _DeferredState:
    state = _DeferredState({}, {})
    if not data:
        return state
    try:
        r = _Reader(data)
        if r.i16() != _STATE_VERSION:
            return state

        def parts() -> list[TopicPartition]:
            return [TopicPartition(t, p) for t, ps in r.topic_partitions() for p in ps]

        for _ in range(r.count()):
            identity = r.string()
            state.previous[identity] = parts()
        for _ in range(r.count()):
            identity = r.string()
            deadline = r.i64()
            state.pending[identity] = (deadline, parts())
    except CodecError:
        return _DeferredState({}, {})  # an unreadable state only costs stickiness
    return state


# --- cooperative-sticky ---------------------------------------------------------------


def cooperative_sticky_assign(
    spec: GroupSpec, *, scheduled_rebalance_max_delay_ms: int = 0
) -> GroupAssignment:
    """KIP-429 cooperative-sticky, optionally with KIP-415 deferred imbalance.

    With ``scheduled_rebalance_max_delay_ms <= 0`` the result is the sticky
    target minus the partitions another member must revoke first, and no
    ``assignor_state`` is produced. Otherwise see the module docstring.
    """
    members = spec.members
    counts = _valid_counts(spec, members)
    ids = [m.member_id for m in members]
    if scheduled_rebalance_max_delay_ms <= 0:
        target = _sticky_target(members, counts)
        return GroupAssignment.from_partitions(ids, _withhold_transfers(members, target))

    now = spec.now_ms
    state = _decode_state(spec.assignor_state)
    by_identity = {m.identity: m for m in members}
    claimed = {tp for m in members for tp in m.owned_partitions}

    def still_valid(tp: TopicPartition) -> bool:
        count = counts.get(tp.topic)
        return count is not None and 0 <= tp.partition < count

    pending: dict[str, tuple[int, list[TopicPartition]]] = {}
    returning: dict[str, list[TopicPartition]] = {}
    for identity, (deadline, parts) in state.pending.items():
        if identity in by_identity:
            returning[by_identity[identity].member_id] = parts
        elif deadline > now:
            pending[identity] = (deadline, parts)
    for identity, parts in state.previous.items():
        if identity not in by_identity and identity not in state.pending:
            pending[identity] = (now + scheduled_rebalance_max_delay_ms, parts)

    reserved: set[TopicPartition] = set()
    for identity, (deadline, parts) in list(pending.items()):
        keep = [tp for tp in parts if still_valid(tp) and tp not in claimed]
        if keep:
            pending[identity] = (deadline, keep)
            reserved.update(keep)
        else:
            del pending[identity]

    target = _sticky_target(members, counts, excluded=reserved, extra_owned=returning)
    final = _withhold_transfers(members, target)
    new_state = _DeferredState(
        previous={m.identity: final[m.member_id] for m in members if final.get(m.member_id)},
        pending=pending,
    )
    next_rebalance = min((d for d, _ in pending.values()), default=None)
    return GroupAssignment.from_partitions(ids, final, _encode_state(new_state), next_rebalance)
