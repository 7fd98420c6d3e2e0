"""Offsets committed inside transactions (TxnOffsetCommit, KIP-98 and KIP-447's fencing),
as Kafka's OffsetMetadataManager keeps them.

A transactional commit is validated like an offset commit, except that the group state is
not enforced (no REBALANCE_IN_PROGRESS) and a commit without member id or generation is
accepted (older clients send none); a consumer-group member's stale epoch is
ILLEGAL_GENERATION. The offsets stay pending, per producer, invisible to OffsetFetch (a
``require_stable`` fetch gets UNSTABLE_OFFSET_COMMIT for them), until the transaction
coordinator writes its marker to this shard: a commit makes them the group's committed
offsets (offset commit records), an abort drops them. Both the pending offsets and the
marker are records, so a restart keeps pending offsets pending until the marker arrives.
"""

from __future__ import annotations

from kgroupd.protocol.errors import ErrorCode

from .commands import OffsetCommitResult, TxnOffsetCommit
from .consumer.commit_checks import validate_consumer_commit
from .core import ShardCore
from .group import ClassicGroup
from .offsets import java_string_length
from .records import OffsetCommitRecord, TxnOffsetCommitRecord, TxnOffsetMarkerRecord
from .state import GroupState

__all__ = ["TxnOffsetOps"]


class TxnOffsetOps(ShardCore):
    def txn_commit_offsets(self, cmd: TxnOffsetCommit) -> OffsetCommitResult:
        """TxnOffsetCommit: one error per partition (group-level errors fill every one)."""
        error = self._validate_txn_commit(cmd)
        if error is not ErrorCode.NONE:
            return OffsetCommitResult(
                tuple((t.name, tuple((p[0], error) for p in t.partitions)) for t in cmd.topics)
            )
        now = self.now()
        limit = self.config.offset_metadata_max_bytes
        topics = []
        for name, partitions in cmd.topics:
            parts = []
            for partition, offset, leader_epoch, metadata in partitions:
                meta = metadata or ""
                if len(meta) > limit // 2 and java_string_length(meta) > limit:
                    parts.append((partition, ErrorCode.OFFSET_METADATA_TOO_LARGE))
                    continue
                record = TxnOffsetCommitRecord(
                    cmd.group_id,
                    cmd.producer_id,
                    cmd.producer_epoch,
                    name,
                    partition,
                    offset,
                    leader_epoch,
                    meta,
                    now,
                )
                self._emit(record, apply=True)
                parts.append((partition, ErrorCode.NONE))
            topics.append((name, tuple(parts)))
        return OffsetCommitResult(tuple(topics))

    def _validate_txn_commit(self, cmd: TxnOffsetCommit) -> ErrorCode:
        error = self.availability_error()
        if error is not ErrorCode.NONE:
            return error
        if not cmd.group_id:
            return ErrorCode.INVALID_GROUP_ID
        consumer = self.consumer_groups.get(cmd.group_id)
        if consumer is not None:
            error = validate_consumer_commit(
                consumer,
                self.topics_view,
                cmd.member_id,
                cmd.generation_id,
                True,
                ((t.name, (p[0] for p in t.partitions)) for t in cmd.topics),
            )
            return ErrorCode.ILLEGAL_GENERATION if error is ErrorCode.STALE_MEMBER_EPOCH else error
        group = self.groups.get(cmd.group_id)
        if group is None:
            if cmd.generation_id >= 0:
                return ErrorCode.ILLEGAL_GENERATION
            group = self._new_group(cmd.group_id)  # a "simple" group
            group.log.info("simple group created by a transactional offset commit")
        return _validate_classic(group, cmd)

    def complete_txn_offsets(self, producer_id: int, commit: bool) -> int:
        """The transaction marker for this shard: ``producer_id``'s pending offsets become
        committed offsets (``commit``) or are dropped. Returns how many were pending."""
        done = 0
        for group_id in [g for g, by in self.pending_txn.items() if producer_id in by]:
            pending = self.pending_txn[group_id][producer_id]
            done += len(pending)
            if commit:
                for (topic, partition), o in sorted(pending.items()):
                    self._emit(
                        OffsetCommitRecord(
                            group_id,
                            topic,
                            partition,
                            o.offset,
                            o.leader_epoch,
                            o.metadata,
                            o.commit_timestamp_ms,
                        ),
                        apply=True,
                    )
            self._emit(TxnOffsetMarkerRecord(group_id, producer_id, commit), apply=True)
        return done

    def has_pending_txn_offset(self, group_id: str, topic: str, partition: int) -> bool:
        by_producer = self.pending_txn.get(group_id)
        if not by_producer:
            return False
        return any((topic, partition) in offsets for offsets in by_producer.values())


def _validate_classic(group: ClassicGroup, cmd: TxnOffsetCommit) -> ErrorCode:
    """Kafka's ClassicGroup.validateOffsetCommit for a transactional commit."""
    if group.state is GroupState.DEAD:
        return ErrorCode.COORDINATOR_NOT_AVAILABLE
    if cmd.generation_id < 0 and group.state is GroupState.EMPTY:
        return ErrorCode.NONE
    if cmd.generation_id >= 0 or cmd.member_id or cmd.group_instance_id is not None:
        error = group.validate_member(cmd.member_id, cmd.group_instance_id)
        if error is not ErrorCode.NONE:
            return error
        if cmd.generation_id != group.generation_id:
            return ErrorCode.ILLEGAL_GENERATION
    return ErrorCode.NONE
