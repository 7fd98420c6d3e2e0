"""Reconciling one member's current assignment towards its target (Kafka's
CurrentAssignmentBuilder).

The rules, state by state:

- STABLE: at the target epoch nothing changes; behind it, compute the next assignment.
- UNREVOKED_PARTITIONS: while the member's heartbeat still reports (or does not report at
  all) any partition pending revocation, nothing changes; once they are gone it moves to
  ``epoch + 1``'s computation.
- UNRELEASED_PARTITIONS: recompute, so partitions released meanwhile are handed over.

Next assignment: kept = current ∩ target; revoke = current - kept; to assign = target - kept,
minus partitions another member still owns (their current epoch is not -1: "unreleased").
Revocations first (the member stays at its epoch, UNREVOKED_PARTITIONS), else new partitions
are added and the member moves to the target epoch (UNRELEASED_PARTITIONS if some were held
back, else STABLE).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import replace

from .commands import TopicPartitions
from .group import Assignment, ConsumerMember, MemberState

__all__ = ["FencedByUnknownState", "reconcile"]


class FencedByUnknownState(Exception):
    """A member in a state this coordinator does not know must rejoin (FENCED_MEMBER_EPOCH)."""


def _owns_any(owned: TopicPartitions | None, partitions: Assignment) -> bool:
    if owned is None:
        return True  # not reported: assume it still owns them
    for topic, parts in owned:
        pending = partitions.get(topic)
        if pending and any(p in pending for p in parts):
            return True
    return False


def reconcile(
    member: ConsumerMember,
    target_epoch: int,
    target: Assignment,
    partition_epoch: Callable[[uuid.UUID, int], int],
    owned: TopicPartitions | None,
) -> ConsumerMember:
    """The member after one reconciliation step (the same object if nothing changes)."""
    state = member.state
    if state is MemberState.STABLE:
        if member.member_epoch == target_epoch:
            return member
        return _next(member, member.member_epoch, target_epoch, target, partition_epoch, owned)
    if state is MemberState.UNREVOKED_PARTITIONS:
        if _owns_any(owned, member.pending_revocation):
            return member
        return _next(member, member.member_epoch + 1, target_epoch, target, partition_epoch, owned)
    if state is MemberState.UNRELEASED_PARTITIONS:
        return _next(member, member.member_epoch, target_epoch, target, partition_epoch, owned)
    if owned is None or owned:
        raise FencedByUnknownState(member.member_id)
    return _next(member, target_epoch, target_epoch, target, partition_epoch, owned)


def _with_epoch(member: ConsumerMember, epoch: int) -> tuple[int, int]:
    """(member epoch, previous member epoch) after moving to ``epoch`` (Kafka's
    updateMemberEpoch: the previous epoch becomes the current one, even if unchanged)."""
    return epoch, member.member_epoch


def _next(
    member: ConsumerMember,
    epoch: int,
    target_epoch: int,
    target: Assignment,
    partition_epoch: Callable[[uuid.UUID, int], int],
    owned: TopicPartitions | None,
) -> ConsumerMember:
    unreleased = False
    assigned: dict[uuid.UUID, frozenset[int]] = {}
    revoke: dict[uuid.UUID, frozenset[int]] = {}
    to_assign: dict[uuid.UUID, frozenset[int]] = {}
    current = member.assigned
    for topic in set(target) | set(current):
        want = target.get(topic, frozenset())
        have = current.get(topic, frozenset())
        kept = have & want
        gone = have - kept
        new = want - kept
        free = frozenset(p for p in new if partition_epoch(topic, p) == -1)
        if free != new:
            unreleased = True
        if kept:
            assigned[topic] = kept
        if gone:
            revoke[topic] = gone
        if free:
            to_assign[topic] = free
    if revoke and _owns_any(owned, revoke):
        e, prev = _with_epoch(member, epoch)
        return replace(
            member,
            state=MemberState.UNREVOKED_PARTITIONS,
            member_epoch=e,
            previous_member_epoch=prev,
            assigned=assigned,
            pending_revocation=revoke,
        )
    for topic, parts in to_assign.items():
        assigned[topic] = assigned.get(topic, frozenset()) | parts
    e, prev = _with_epoch(member, target_epoch)
    return replace(
        member,
        state=MemberState.UNRELEASED_PARTITIONS if unreleased else MemberState.STABLE,
        member_epoch=e,
        previous_member_epoch=prev,
        assigned=assigned,
        pending_revocation={},
    )
