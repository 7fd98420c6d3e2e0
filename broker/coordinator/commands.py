"""Version-free commands the wire handlers build, and the results they turn back into replies.

Version-dependent rules are flags set by the handler (never a version number):
``JoinGroup.require_known_member_id`` (v4+), ``JoinGroup.skip_assignment_supported`` (v9+),
``OffsetCommit.group_id_not_found`` (v9+), ``DescribeGroups.unknown_group_not_found`` (v6+).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

from kgroupd.protocol.errors import ErrorCode

__all__ = [
    "CommitPartitionLike",
    "DeleteGroups",
    "DeleteGroupsResult",
    "DescribeGroups",
    "DescribeGroupsResult",
    "DescribedGroup",
    "DescribedMember",
    "Heartbeat",
    "HeartbeatResult",
    "JoinGroup",
    "JoinGroupMember",
    "JoinGroupResult",
    "LeaveGroup",
    "LeaveGroupResult",
    "LeaveMemberResult",
    "ListGroups",
    "ListGroupsResult",
    "ListedGroup",
    "OffsetCommit",
    "OffsetCommitPartition",
    "OffsetCommitResult",
    "OffsetCommitTopic",
    "OffsetDelete",
    "OffsetDeleteResult",
    "OffsetFetch",
    "OffsetFetchPartition",
    "OffsetFetchResult",
    "OffsetFetchTopic",
    "SyncGroup",
    "SyncGroupResult",
    "TxnOffsetCommit",
]

Protocols = tuple[tuple[str, bytes], ...]


# --- JoinGroup ---------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class JoinGroup:
    group_id: str
    member_id: str
    session_timeout_ms: int
    rebalance_timeout_ms: int  # v0: the handler passes the session timeout
    protocol_type: str
    protocols: Protocols  # (name, metadata) in the client's preference order
    group_instance_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    require_known_member_id: bool = False  # JoinGroup v4+
    skip_assignment_supported: bool = False  # JoinGroup v9+
    reason: str | None = None


@dataclass(frozen=True, slots=True)
class JoinGroupMember:
    member_id: str
    group_instance_id: str | None
    metadata: bytes


@dataclass(frozen=True, slots=True)
class JoinGroupResult:
    error: ErrorCode
    member_id: str = ""
    generation_id: int = -1
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader: str = ""
    skip_assignment: bool = False
    members: tuple[JoinGroupMember, ...] = ()


# --- SyncGroup ---------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class SyncGroup:
    group_id: str
    generation_id: int
    member_id: str
    group_instance_id: str | None = None
    protocol_type: str | None = None  # v5+, None when absent
    protocol_name: str | None = None  # v5+, None when absent
    assignments: tuple[tuple[str, bytes], ...] = ()


@dataclass(frozen=True, slots=True)
class SyncGroupResult:
    error: ErrorCode
    protocol_type: str | None = None
    protocol_name: str | None = None
    assignment: bytes = b""


# --- Heartbeat ---------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Heartbeat:
    group_id: str
    generation_id: int
    member_id: str
    group_instance_id: str | None = None


@dataclass(frozen=True, slots=True)
class HeartbeatResult:
    error: ErrorCode


# --- LeaveGroup --------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class LeaveGroup:
    group_id: str
    members: tuple[tuple[str, str | None], ...]  # (member_id, group_instance_id)


@dataclass(frozen=True, slots=True)
class LeaveMemberResult:
    member_id: str
    group_instance_id: str | None
    error: ErrorCode


@dataclass(frozen=True, slots=True)
class LeaveGroupResult:
    error: ErrorCode
    members: tuple[LeaveMemberResult, ...] = ()


# --- OffsetCommit ------------------------------------------------------------------------
class OffsetCommitPartition(NamedTuple):
    """A named tuple, not a dataclass: a commit carries many and they are built per request."""

    partition: int
    offset: int
    leader_epoch: int = -1
    metadata: str | None = None


# What a commit's partitions must be: ``OffsetCommitPartition`` or a plain tuple in its order
# (the wire decoder's, handed on as it is).
CommitPartitionLike = tuple[int, int, int, str | None]


class OffsetCommitTopic(NamedTuple):
    name: str
    partitions: Sequence[CommitPartitionLike]


class OffsetCommit(NamedTuple):
    group_id: str
    topics: tuple[OffsetCommitTopic, ...]
    generation_id: int = -1
    member_id: str = ""
    group_instance_id: str | None = None
    retention_time_ms: int = -1  # v2-v4; -1 = broker default
    # v9+: an unknown group answers GROUP_ID_NOT_FOUND, and consumer-group members commit
    # with their member epoch (below v9 they get UNSUPPORTED_VERSION)
    group_id_not_found: bool = False


@dataclass(frozen=True, slots=True)
class TxnOffsetCommit:
    """TxnOffsetCommit: offsets committed inside ``producer_id``'s transaction (v3+ carry the
    member's generation, member id and instance id for KIP-447 fencing)."""

    transactional_id: str
    group_id: str
    producer_id: int
    producer_epoch: int
    topics: tuple[OffsetCommitTopic, ...]
    generation_id: int = -1
    member_id: str = ""
    group_instance_id: str | None = None


class OffsetCommitResult(NamedTuple):
    topics: tuple[tuple[str, tuple[tuple[int, ErrorCode], ...]], ...]

    def errors(self) -> dict[tuple[str, int], ErrorCode]:
        return {(t, p): e for t, parts in self.topics for p, e in parts}


# --- OffsetFetch -------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class OffsetFetchTopic:
    name: str
    partitions: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class OffsetFetch:
    group_id: str
    topics: tuple[OffsetFetchTopic, ...] | None  # None: all (v2+)
    require_stable: bool = False
    member_id: str | None = None  # v9+: a consumer-group member's own fetch
    member_epoch: int = -1


@dataclass(frozen=True, slots=True)
class OffsetFetchPartition:
    partition: int
    offset: int
    leader_epoch: int = -1
    metadata: str = ""
    error: ErrorCode = ErrorCode.NONE


@dataclass(frozen=True, slots=True)
class OffsetFetchResult:
    error: ErrorCode
    topics: tuple[tuple[str, tuple[OffsetFetchPartition, ...]], ...] = ()

    def offsets(self) -> dict[tuple[str, int], OffsetFetchPartition]:
        return {(t, p.partition): p for t, parts in self.topics for p in parts}


# --- OffsetDelete ------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class OffsetDelete:
    group_id: str
    topics: tuple[tuple[str, tuple[int, ...]], ...]


@dataclass(frozen=True, slots=True)
class OffsetDeleteResult:
    error: ErrorCode
    topics: tuple[tuple[str, tuple[tuple[int, ErrorCode], ...]], ...] = ()


# --- DescribeGroups / ListGroups / DeleteGroups ------------------------------------------
@dataclass(frozen=True, slots=True)
class DescribeGroups:
    group_ids: tuple[str, ...]
    unknown_group_not_found: bool = False  # v6+: GROUP_ID_NOT_FOUND instead of "Dead"


@dataclass(frozen=True, slots=True)
class DescribedMember:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    metadata: bytes
    assignment: bytes


@dataclass(frozen=True, slots=True)
class DescribedGroup:
    error: ErrorCode
    group_id: str
    state: str = ""
    protocol_type: str = ""
    protocol_data: str = ""
    members: tuple[DescribedMember, ...] = ()


@dataclass(frozen=True, slots=True)
class DescribeGroupsResult:
    groups: tuple[DescribedGroup, ...]


@dataclass(frozen=True, slots=True)
class ListGroups:
    states_filter: tuple[str, ...] = ()  # v4+, case-insensitive; empty = all
    types_filter: tuple[str, ...] = ()  # v5+, case-insensitive ("classic", "consumer")


@dataclass(frozen=True, slots=True)
class ListedGroup:
    group_id: str
    protocol_type: str
    state: str
    group_type: str = "classic"


@dataclass(frozen=True, slots=True)
class ListGroupsResult:
    error: ErrorCode
    groups: tuple[ListedGroup, ...]


@dataclass(frozen=True, slots=True)
class DeleteGroups:
    group_ids: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class DeleteGroupsResult:
    results: tuple[tuple[str, ErrorCode], ...]
