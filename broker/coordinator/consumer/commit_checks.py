"""Offset commits and fetches of a KIP-848 consumer group's members, checked as Kafka's
ConsumerGroup.validateOffsetCommit / validateOffsetFetch check them (Kafka 4.3: with KIP-1251's
assignment epochs)."""

from __future__ import annotations

from collections.abc import Iterable

from kgroupd.broker.coordinator.consumer.commands import TopicsView
from kgroupd.broker.coordinator.consumer.group import ConsumerGroup
from kgroupd.protocol.errors import ErrorCode

__all__ = ["validate_consumer_commit", "validate_consumer_fetch"]


def validate_consumer_commit(
    group: ConsumerGroup,
    topics: TopicsView,
    member_id: str,
    epoch: int,
    epochs_supported: bool,
    partitions: Iterable[tuple[str, Iterable[int]]] = (),
) -> ErrorCode:
    """Kafka's ConsumerGroup.validateOffsetCommit (non-transactional), with KIP-1251's
    assignment epochs: a consumer-protocol member may commit with an epoch older than its
    current one for partitions it was given at or before that epoch and still owns (its
    heartbeat's answer and its commit crossed)."""
    if epoch < 0 and not group.members:
        return ErrorCode.NONE  # the admin client, or manual assignment, on an empty group
    member = group.members.get(member_id)
    if member is None:
        return ErrorCode.UNKNOWN_MEMBER_ID
    if member.uses_classic:  # a classic member commits with its generation (its epoch)
        return ErrorCode.NONE if epoch == member.member_epoch else ErrorCode.ILLEGAL_GENERATION
    if not epochs_supported:
        return ErrorCode.UNSUPPORTED_VERSION
    if epoch == member.member_epoch:
        return ErrorCode.NONE
    if epoch > member.member_epoch:
        return ErrorCode.STALE_MEMBER_EPOCH
    ids = topics.topics()
    for name, parts in partitions:
        known = ids.get(name)
        for p in parts:
            given = None if known is None else group.given_epoch(member_id, known[0], p)
            if given is None or given > epoch:
                return ErrorCode.STALE_MEMBER_EPOCH
    return ErrorCode.NONE


def validate_consumer_fetch(group: ConsumerGroup, member_id: str | None, epoch: int) -> ErrorCode:
    """Kafka's ConsumerGroup.validateOffsetFetch: only a member's own fetch is checked."""
    if member_id is None or epoch < 0:
        return ErrorCode.NONE
    member = group.members.get(member_id)
    if member is None:
        return ErrorCode.UNKNOWN_MEMBER_ID
    if epoch != member.member_epoch:
        return ErrorCode.ILLEGAL_GENERATION if member.uses_classic else ErrorCode.STALE_MEMBER_EPOCH
    return ErrorCode.NONE
