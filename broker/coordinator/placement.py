"""Which offsets partition (coordinator shard) owns a group: Java's ``String.hashCode``."""

from __future__ import annotations

import functools

__all__ = ["java_string_hashcode", "partition_for"]

_INT_MIN = -(2**31)


def java_string_hashcode(s: str) -> int:
    """``s.hashCode()`` as Java computes it: over UTF-16 code units, int32 wraparound."""
    h = 0
    data = s.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


@functools.lru_cache(maxsize=65536)
def partition_for(group_id: str, partitions: int) -> int:
    """Kafka's ``Utils.abs(groupId.hashCode()) % partitions`` (MIN_VALUE maps to 0)."""
    h = java_string_hashcode(group_id)
    non_negative = 0 if h == _INT_MIN else abs(h)
    return non_negative % partitions
