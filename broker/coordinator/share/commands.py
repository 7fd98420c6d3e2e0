"""Version-free share-group commands and results (ShareGroupHeartbeat, ShareGroupDescribe).

``None`` fields of a heartbeat mean "unchanged since the last heartbeat", as on the wire.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

from kgroupd.protocol.errors import ErrorCode

JOIN_EPOCH = 0
LEAVE_EPOCH = -1

# ((topic id, (partition, ...)), ...), topic ids sorted
TopicPartitions = tuple[tuple[uuid.UUID, tuple[int, ...]], ...]


@dataclass(frozen=True, slots=True)
class ShareGroupHeartbeat:
    group_id: str
    member_id: str
    member_epoch: int
    rack_id: str | None = None
    subscribed_topic_names: tuple[str, ...] | None = None
    client_id: str = ""
    client_host: str = ""


@dataclass(frozen=True, slots=True)
class ShareGroupHeartbeatResult:
    error: ErrorCode = ErrorCode.NONE
    error_message: str | None = None
    member_id: str | None = None
    member_epoch: int = 0
    heartbeat_interval_ms: int = 0
    # None: unchanged since the member's last heartbeat
    assignment: TopicPartitions | None = None


@dataclass(frozen=True, slots=True)
class DescribedShareMember:
    member_id: str
    rack_id: str | None
    member_epoch: int
    client_id: str
    client_host: str
    subscribed_topic_names: tuple[str, ...]
    # (topic id, topic name, partitions)
    assignment: tuple[tuple[uuid.UUID, str, tuple[int, ...]], ...]


@dataclass(frozen=True, slots=True)
class DescribedShareGroup:
    group_id: str
    error: ErrorCode = ErrorCode.NONE
    error_message: str | None = None
    state: str = ""
    group_epoch: int = 0
    assignment_epoch: int = 0
    assignor_name: str = ""
    members: tuple[DescribedShareMember, ...] = field(default_factory=tuple)
