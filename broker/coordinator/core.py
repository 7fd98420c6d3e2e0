"""Shared state and plumbing of a coordinator shard: groups, offsets, timers, records."""

from __future__ import annotations

import functools
from typing import Any, NamedTuple

import structlog

from kgroupd.protocol.errors import ErrorCode

from .commands import (
    Heartbeat,
    HeartbeatResult,
    JoinGroup,
    JoinGroupResult,
    LeaveGroup,
    LeaveGroupResult,
    SyncGroup,
    SyncGroupResult,
)
from .config import CoordinatorConfig
from .consumer.commands import InMemoryTopics, TopicsView
from .consumer.group import ConsumerGroup
from .consumer.records import CONSUMER_RECORD_TYPES, ConsumerRecord, ConsumerTombstoneRecord
from .events import NO_EVENTS, GroupEvents
from .group import ClassicGroup, Member
from .records import (
    BatchRecordSink,
    GroupMetadataRecord,
    GroupTombstoneRecord,
    OffsetCommitRecord,
    OffsetTombstoneRecord,
    Record,
    RecordSink,
    TxnOffsetCommitRecord,
    TxnOffsetMarkerRecord,
)
from .state import GroupState
from .timers import Timers

__all__ = ["OffsetAndMetadata", "ShardCore"]


def _no_sink(record: Record) -> None:
    return None


class OffsetAndMetadata(NamedTuple):
    """A committed offset (a named tuple: the shards hold one per partition, millions of them,
    and a commit builds one per partition)."""

    offset: int
    leader_epoch: int
    metadata: str
    commit_timestamp_ms: int
    expire_timestamp_ms: int | None = None


def heartbeat_key(group_id: str, member_id: str) -> str:
    return f"heartbeat/{group_id}/{member_id}"


def pending_key(group_id: str, member_id: str) -> str:
    return f"pending/{group_id}/{member_id}"


def join_key(group_id: str) -> str:
    return f"join/{group_id}"


def sync_key(group_id: str) -> str:
    return f"sync/{group_id}"


class ShardCore:
    """Groups and offsets of one offsets partition, plus the helpers every operation uses."""

    # The broker's topics (names, ids, partition counts), set by the coordinator
    topics_view: TopicsView = InMemoryTopics()

    def __init__(
        self,
        partition: int,
        config: CoordinatorConfig,
        timers: Timers,
        sink: RecordSink | None = None,
    ) -> None:
        self.partition = partition
        self.config = config
        self.timers = timers
        self.sink: RecordSink = sink or _no_sink
        self.persisting = sink is not None  # without a sink, hot paths skip building records
        # A sink that takes a topic's offset commits at once (no record per partition).
        self.commit_sink = sink.offset_commits if isinstance(sink, BatchRecordSink) else None
        self.groups: dict[str, ClassicGroup] = {}
        # KIP-848 groups (kgroupd.broker.coordinator.consumer): a group id is classic or consumer
        self.consumer_groups: dict[str, ConsumerGroup] = {}
        self.offsets: dict[str, dict[str, dict[int, OffsetAndMetadata]]] = {}
        # Offsets committed inside transactions, until their marker:
        # group -> producer id -> (topic, partition) -> offset
        self.pending_txn: dict[str, dict[int, dict[tuple[str, int], OffsetAndMetadata]]] = {}
        self.owned = True
        self.loading = False
        # partitions' offsets committed by OffsetCommit since start (read by the metrics)
        self.offsets_committed = 0
        # who hears of rebalances (the broker's metrics; GroupCoordinator.set_events). Set
        # here, not later only: an attribute added after __init__ would give every shard a
        # dict of its own, and every attribute read on the hot paths would slow down.
        self.events: GroupEvents = NO_EVENTS
        self.log: Any = structlog.get_logger("kgroupd.coordinator").bind(shard=partition)

    # --- availability ----------------------------------------------------------------------
    def availability_error(self) -> ErrorCode:
        if not self.owned:
            return ErrorCode.NOT_COORDINATOR
        if self.loading:
            return ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
        return ErrorCode.NONE

    def _active(self) -> bool:
        return self.owned and not self.loading

    def now(self) -> int:
        return self.timers.now_ms()

    # --- groups ----------------------------------------------------------------------------
    def _new_group(self, group_id: str) -> ClassicGroup:
        group = ClassicGroup(group_id, self.now(), self.log, self.events)
        self.groups[group_id] = group
        return group

    def _live_group(self, group_id: str, group: ClassicGroup) -> bool:
        """True if ``group`` is still the shard's live object for ``group_id`` (timer guard)."""
        return self._active() and self.groups.get(group_id) is group

    # --- records ---------------------------------------------------------------------------
    def _emit(self, record: Record, apply: bool) -> None:
        """Hand a record to the sink; ``apply`` replays it on the live state too.

        Group metadata records are not replayed live (Kafka's replayRecords=false for classic
        groups): the live group already holds that state and its parked requests."""
        if apply:
            self.replay(record)
        self.sink(record)

    def replay(self, record: Record) -> None:
        """Apply one record: used live for offsets/tombstones and for everything at load."""
        if isinstance(record, OffsetCommitRecord):
            if record.group_id not in self.groups:
                # a simple group, created by its first commit
                group = ClassicGroup(
                    record.group_id, record.commit_timestamp_ms, self.log, self.events
                )
                self.groups[record.group_id] = group
            self.offsets.setdefault(record.group_id, {}).setdefault(record.topic, {})[
                record.partition
            ] = OffsetAndMetadata(
                record.offset,
                record.leader_epoch,
                record.metadata,
                record.commit_timestamp_ms,
                record.expire_timestamp_ms,
            )
        elif isinstance(record, OffsetTombstoneRecord):
            topics = self.offsets.get(record.group_id)
            if topics is None:
                return
            parts = topics.get(record.topic)
            if parts is not None:
                parts.pop(record.partition, None)
                if not parts:
                    del topics[record.topic]
            if not topics:
                del self.offsets[record.group_id]
        elif isinstance(record, TxnOffsetCommitRecord):
            gid = record.group_id
            if gid not in self.groups and gid not in self.consumer_groups:
                self.groups[gid] = ClassicGroup(
                    gid, record.commit_timestamp_ms, self.log, self.events
                )
            self.pending_txn.setdefault(gid, {}).setdefault(record.producer_id, {})[
                (record.topic, record.partition)
            ] = OffsetAndMetadata(
                record.offset, record.leader_epoch, record.metadata, record.commit_timestamp_ms
            )
        elif isinstance(record, TxnOffsetMarkerRecord):
            by_producer = self.pending_txn.get(record.group_id)
            if by_producer is not None:
                by_producer.pop(record.producer_id, None)
                if not by_producer:
                    del self.pending_txn[record.group_id]
        elif isinstance(record, GroupMetadataRecord):
            loaded = ClassicGroup.from_record(record, self.log)
            loaded.events = self.events
            self.groups[record.group_id] = loaded
        elif isinstance(record, GroupTombstoneRecord):
            dead = self.groups.pop(record.group_id, None)
            if dead is not None:
                self._kill_group(dead, ErrorCode.COORDINATOR_NOT_AVAILABLE, "group deleted")
        elif type(record) in CONSUMER_RECORD_TYPES:
            self._replay_consumer(record)
        else:  # pragma: no cover
            raise TypeError(f"unknown record {record!r}")

    def _replay_consumer(self, record: ConsumerRecord) -> None:
        """A KIP-848 group's record (load; live state is changed directly, as Kafka's
        consumer groups replay their records live)."""
        group = self.consumer_groups.get(record.group_id)
        if group is None:
            if isinstance(record, ConsumerTombstoneRecord):
                return
            group = self.consumer_groups[record.group_id] = ConsumerGroup(record.group_id)
            self.groups.pop(record.group_id, None)  # offsets replayed first made a simple one
        group.apply(record)
        if group.dead:
            del self.consumer_groups[record.group_id]

    def _kill_group(self, group: ClassicGroup, error: ErrorCode, reason: str) -> None:
        """Move to Dead, answer every parked request with ``error`` and drop its timers."""
        group.transition_to(GroupState.DEAD, self.now(), reason)
        self.timers.cancel(join_key(group.group_id))
        self.timers.cancel(sync_key(group.group_id))
        for member in list(group.members.values()):
            self.timers.cancel(heartbeat_key(group.group_id, member.member_id))
            group.complete_join(member, JoinGroupResult(error, member_id=member.member_id))
            group.complete_sync(member, SyncGroupResult(error))
        for pending in group.pending_join_members:
            self.timers.cancel(pending_key(group.group_id, pending))

    # --- members ---------------------------------------------------------------------------
    def _reschedule_heartbeat(
        self, group: ClassicGroup, member: Member, delay_ms: int | None = None
    ) -> None:
        expiry = member.expiry  # its key and op, made once (a heartbeat is hot)
        if expiry is None or expiry[0] is not group:
            gid, mid = group.group_id, member.member_id
            op = functools.partial(self._expire_heartbeat, gid, mid, group)
            expiry = member.expiry = (group, heartbeat_key(gid, mid), op)
        delay = member.session_timeout_ms if delay_ms is None else delay_ms
        self.timers.schedule(expiry[1], delay, expiry[2])

    def _expire_heartbeat(self, group_id: str, member_id: str, group: ClassicGroup) -> None:
        raise NotImplementedError

    def _prepare_rebalance(self, group: ClassicGroup, reason: str) -> None:
        raise NotImplementedError  # MembershipOps

    # Classic members in a KIP-848 group (consumer.migration.MigrationOps)
    def classic_join_consumer(self, cmd: JoinGroup) -> JoinGroupResult:
        raise NotImplementedError

    def classic_sync_consumer(self, cmd: SyncGroup) -> SyncGroupResult:
        raise NotImplementedError

    def classic_heartbeat_consumer(self, cmd: Heartbeat) -> HeartbeatResult:
        raise NotImplementedError

    def classic_leave_consumer(self, cmd: LeaveGroup) -> LeaveGroupResult:
        raise NotImplementedError

    def delete_consumer_group(self, group_id: str) -> None:
        raise NotImplementedError

    def _drop_member(self, group: ClassicGroup, member_id: str) -> Member | None:
        """Remove a member, answering whatever it has parked (UNKNOWN_MEMBER_ID)."""
        member = group.members.get(member_id)
        if member is not None:
            group.complete_join(member, JoinGroupResult(ErrorCode.UNKNOWN_MEMBER_ID, member_id=""))
            group.complete_sync(member, SyncGroupResult(ErrorCode.UNKNOWN_MEMBER_ID))
        self.timers.cancel(heartbeat_key(group.group_id, member_id))
        self.timers.cancel(pending_key(group.group_id, member_id))
        return group.remove(member_id)
