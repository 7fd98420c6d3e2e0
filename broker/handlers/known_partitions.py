"""What KafkaApis checks against the metadata cache before an offset request reaches the group
coordinator (OffsetCommit, TxnOffsetCommit, OffsetDelete): a partition of a topic that does not
exist, or beyond its partitions, is answered UNKNOWN_TOPIC_OR_PARTITION and never reaches the
coordinator."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from operator import itemgetter
from typing import Any, TypeVar

from kgroupd.broker.log.topics import Topic
from kgroupd.protocol.errors import ErrorCode

P = TypeVar("P")
Errors = Sequence[tuple[int, ErrorCode]]
Answer = tuple[Any, Errors]
_first: Callable[[Any], int] = itemgetter(0)
UNKNOWN = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def valid_partitions(
    topic: Topic, parts: Sequence[P], index: Callable[[P], int] = _first
) -> tuple[Sequence[P], list[tuple[int, ErrorCode]]]:
    """(the partitions ``topic`` has, the others answered UNKNOWN_TOPIC_OR_PARTITION)."""
    n = len(topic.partitions)
    if not parts:
        return parts, []
    indexes = list(map(index, parts))
    if min(indexes) >= 0 and max(indexes) < n:  # the usual case: nothing to split
        return parts, []
    good = [p for p, i in zip(parts, indexes, strict=True) if 0 <= i < n]
    bad = [(i, UNKNOWN) for i in indexes if not 0 <= i < n]
    return good, bad


def merge_answers(
    answered: Sequence[Answer], refused: dict[Any, list[tuple[int, ErrorCode]]]
) -> list[Answer]:
    """The coordinator's (key, [(partition, error)]) answers with the refused partitions of the
    same topics added to them (one entry per topic, as Kafka's response builder merges), and
    topics refused entirely after them."""
    out: list[Answer] = []
    left = dict(refused)
    for key, parts in answered:
        extra = left.pop(key, None)
        out.append((key, [*parts, *extra]) if extra else (key, list(parts)))
    out.extend(left.items())
    return out
