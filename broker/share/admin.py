"""Share-group administration as Kafka's group coordinator answers it: the share-partition
start offsets of a group (DescribeShareGroupOffsets, with KIP-1226's lag), resetting them
(AlterShareGroupOffsets) and forgetting them (DeleteShareGroupOffsets), and deleting a whole
share group (DeleteGroups).

- A group id that names no share group is GROUP_ID_NOT_FOUND ("Group X not found." or, for a
  classic or consumer group, "Group X is not a share group."); an empty one INVALID_GROUP_ID.
- Resetting or forgetting offsets, and deleting, need a group without members:
  NON_EMPTY_GROUP otherwise. AlterShareGroupOffsets of a group that does not exist yet makes
  it (an Empty share group holding the offsets), as committing offsets makes a simple group.
- A topic the broker does not have (or a partition past its count) is UNKNOWN_TOPIC_OR_PARTITION
  for that topic or partition only.
- A partition with no share-partition state yet has start offset -1 (and lag -1): the first
  fetch will start it at share.auto.offset.reset.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from kgroupd.broker.log.topics import Topic
from kgroupd.broker.share.partition import RecordState
from kgroupd.broker.share.service import ShareService
from kgroupd.protocol.errors import ErrorCode

NO_TOPIC = uuid.UUID(int=0)
UNKNOWN_TOPIC = "This server does not host this topic-partition."

TopicByName = Callable[[str], Topic | None]


@dataclass(frozen=True, slots=True)
class PartitionOffset:
    partition: int
    start_offset: int = -1
    leader_epoch: int = -1
    lag: int = -1
    error: ErrorCode = ErrorCode.NONE
    error_message: str | None = None


@dataclass(frozen=True, slots=True)
class TopicOffsets:
    name: str
    topic_id: uuid.UUID
    partitions: tuple[PartitionOffset, ...]


@dataclass(frozen=True, slots=True)
class GroupOffsets:
    group_id: str
    topics: tuple[TopicOffsets, ...] = ()
    error: ErrorCode = ErrorCode.NONE
    error_message: str | None = None


def group_error(share: ShareService, group_id: str) -> tuple[ErrorCode, str | None]:
    """Why ``group_id`` is not a share group this broker has (NONE if it is one)."""
    if not group_id:
        return ErrorCode.INVALID_GROUP_ID, "The group id must not be empty."
    if group_id in share.coordinator.groups:
        return ErrorCode.NONE, None
    if share.coordinator.other_group_exists(group_id):
        return ErrorCode.GROUP_ID_NOT_FOUND, f"Group {group_id} is not a share group."
    return ErrorCode.GROUP_ID_NOT_FOUND, f"Group {group_id} not found."


def describe_offsets(
    share: ShareService,
    group_id: str,
    topics: Sequence[tuple[str, Sequence[int]]] | None,
    topic_by_name: TopicByName,
    names_by_id: Callable[[uuid.UUID], str | None],
) -> GroupOffsets:
    """``topics`` None: every partition the group has state for."""
    error, message = group_error(share, group_id)
    if error:
        return GroupOffsets(group_id, error=error, error_message=message)
    if topics is None:
        held: dict[str, list[int]] = {}
        for g, topic_id, index in sorted(share.partitions, key=lambda k: (str(k[1]), k[2])):
            name = names_by_id(topic_id) if g == group_id else None
            if name is not None:
                held.setdefault(name, []).append(index)
        topics = sorted(held.items())
    out = []
    for name, partitions in topics:
        topic = topic_by_name(name)
        if topic is None:
            out.append(
                TopicOffsets(
                    name,
                    NO_TOPIC,
                    tuple(
                        PartitionOffset(
                            p,
                            error=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                            error_message=UNKNOWN_TOPIC,
                        )
                        for p in partitions
                    ),
                )
            )
            continue
        out.append(
            TopicOffsets(
                name, topic.topic_id, tuple(_offset(share, group_id, topic, p) for p in partitions)
            )
        )
    return GroupOffsets(group_id, tuple(out))


def _offset(share: ShareService, group_id: str, topic: Topic, index: int) -> PartitionOffset:
    if not 0 <= index < len(topic.partitions):
        return PartitionOffset(
            index, error=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, error_message=UNKNOWN_TOPIC
        )
    sp = share.partitions.get((group_id, topic.topic_id, index))
    if sp is None:
        return PartitionOffset(index)
    log = topic.partitions[index]
    states = sp.state_counts()
    settled = states[RecordState.ACKNOWLEDGED] + states[RecordState.ARCHIVED]
    lag = max(0, log.high_watermark - max(sp.start_offset, log.log_start_offset) - settled)
    return PartitionOffset(index, sp.start_offset, 0, lag)


def alter_offsets(
    share: ShareService,
    group_id: str,
    topics: Sequence[tuple[str, Sequence[tuple[int, int]]]],
    topic_by_name: TopicByName,
) -> tuple[
    ErrorCode, str | None, list[tuple[str, uuid.UUID, list[tuple[int, ErrorCode, str | None]]]]
]:
    """(top error, its message, per topic: (name, id, per partition: (index, error, message)))."""
    if not group_id:
        return ErrorCode.INVALID_GROUP_ID, "The group id must not be empty.", []
    group = share.coordinator.groups.get(group_id)
    if group is None and share.coordinator.other_group_exists(group_id):
        return ErrorCode.GROUP_ID_NOT_FOUND, f"Group {group_id} is not a share group.", []
    if group is not None and group.members:
        return ErrorCode.NON_EMPTY_GROUP, f"Share group {group_id} is not empty.", []
    share.coordinator.ensure_group(group_id)
    out = []
    for name, partitions in topics:
        topic = topic_by_name(name)
        results: list[tuple[int, ErrorCode, str | None]] = []
        for index, start in partitions:
            if topic is None or not 0 <= index < len(topic.partitions):
                results.append((index, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, UNKNOWN_TOPIC))
            elif start < 0:
                results.append((index, ErrorCode.INVALID_REQUEST, "The start offset is negative."))
            else:
                share.reset_partition(group_id, topic.topic_id, index, start)
                results.append((index, ErrorCode.NONE, None))
        out.append((name, topic.topic_id if topic is not None else NO_TOPIC, results))
    return ErrorCode.NONE, None, out


def delete_offsets(
    share: ShareService, group_id: str, names: Sequence[str], topic_by_name: TopicByName
) -> tuple[ErrorCode, str | None, list[tuple[str, uuid.UUID, ErrorCode, str | None]]]:
    """(top error, its message, per topic: (name, id, error, message))."""
    error, message = group_error(share, group_id)
    if error:
        return error, message, []
    if share.coordinator.groups[group_id].members:
        return ErrorCode.NON_EMPTY_GROUP, f"Share group {group_id} is not empty.", []
    out: list[tuple[str, uuid.UUID, ErrorCode, str | None]] = []
    for name in names:
        topic = topic_by_name(name)
        held = (
            []
            if topic is None
            else [k for k in share.partitions if k[:2] == (group_id, topic.topic_id)]
        )
        if topic is None or not held:
            out.append(
                (
                    name,
                    NO_TOPIC if topic is None else topic.topic_id,
                    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                    UNKNOWN_TOPIC,
                )
            )
            continue
        for key in held:
            share.drop_partition(*key)
        out.append((name, topic.topic_id, ErrorCode.NONE, None))
    return ErrorCode.NONE, None, out


def delete_group(share: ShareService, group_id: str) -> ErrorCode:
    """DeleteGroups of a share group: NON_EMPTY_GROUP while it has members; its share-partition
    state and sessions go with it."""
    error = share.coordinator.delete(group_id)
    if error == ErrorCode.NONE:
        for key in [k for k in share.partitions if k[0] == group_id]:
            share.drop_partition(*key)
        for session in [k for k in share.sessions if k[0] == group_id]:
            del share.sessions[session]
    return error
