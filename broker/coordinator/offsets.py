"""OffsetCommit, OffsetFetch, OffsetDelete and KIP-211 offset retention."""

from __future__ import annotations

from collections.abc import Sequence
from typing import cast

from kgroupd.protocol.errors import ErrorCode

from .commands import (
    CommitPartitionLike,
    OffsetCommit,
    OffsetCommitResult,
    OffsetDelete,
    OffsetDeleteResult,
    OffsetFetch,
    OffsetFetchPartition,
    OffsetFetchResult,
)
from .consumer.commit_checks import validate_consumer_commit, validate_consumer_fetch
from .core import OffsetAndMetadata, ShardCore
from .group import ClassicGroup
from .records import (
    CommitEntries,
    GroupTombstoneRecord,
    OffsetCommitRecord,
    OffsetTombstoneRecord,
)
from .state import GroupState

__all__ = ["OffsetOps", "java_string_length"]


def java_string_length(s: str) -> int:
    """``String.length()``: UTF-16 code units (what offset.metadata.max.bytes is checked on)."""
    if s.isascii():
        return len(s)
    return len(s.encode("utf-16-le")) // 2


# Enum members read once: ``ErrorCode.NONE`` goes through EnumType.__getattr__ on 3.11 (a
# slow attribute lookup each time), and the commit path reads them on every request.
_NONE = ErrorCode.NONE
_EMPTY = GroupState.EMPTY
_BEATING = (GroupState.STABLE, GroupState.PREPARING_REBALANCE)

_tuple_new = tuple.__new__  # a named tuple without its Python-level __new__


def _too_large(metadata: str | None, limit: int) -> bool:
    """offset.metadata.max.bytes exceeded (OFFSET_METADATA_TOO_LARGE)."""
    return (
        metadata is not None and len(metadata) > limit // 2 and java_string_length(metadata) > limit
    )


def _answers(partitions: Sequence[CommitPartitionLike], limit: int) -> list[tuple[int, ErrorCode]]:
    """Each partition's answer to a commit that passed the group's checks."""
    return [
        (p[0], ErrorCode.OFFSET_METADATA_TOO_LARGE if _too_large(p[3], limit) else _NONE)
        for p in partitions
    ]


def _applied(
    partitions: Sequence[CommitPartitionLike], answers: Sequence[tuple[int, ErrorCode]] | None
) -> CommitEntries:
    """The entries a commit applied (answered NONE; ``answers`` None: all of them), null
    metadata as the empty string."""
    if answers is None:
        return [(p, o, e, m or "") for p, o, e, m in partitions]
    return [
        (p, o, e, m or "")
        for (p, o, e, m), (_, error) in zip(partitions, answers, strict=True)
        if error is _NONE
    ]


class OffsetOps(ShardCore):
    # --- OffsetCommit ----------------------------------------------------------------------
    def commit_offsets(self, cmd: OffsetCommit) -> OffsetCommitResult:
        """OffsetCommit: one error per partition (group-level errors fill every partition)."""
        result = self.commit_offsets_errors(cmd)
        if result is not None:
            return result
        return OffsetCommitResult(
            tuple((t.name, tuple((p[0], _NONE) for p in t.partitions)) for t in cmd.topics)
        )

    def commit_offsets_errors(self, cmd: OffsetCommit) -> OffsetCommitResult | None:
        """``commit_offsets``, but None when every partition answers NONE (all committed):
        the hot path then builds no answer pair per partition."""
        # availability_error inlined (the commit path is hot)
        error = self.availability_error() if self.loading or not self.owned else _NONE
        consumer = self.consumer_groups.get(cmd.group_id) if self.consumer_groups else None
        group = self.groups.get(cmd.group_id)
        if consumer is not None:
            if error is _NONE:
                error = validate_consumer_commit(
                    consumer,
                    self.topics_view,
                    cmd.member_id,
                    cmd.generation_id,
                    cmd.group_id_not_found,
                    ((t.name, (p[0] for p in t.partitions)) for t in cmd.topics),
                )
        elif error is _NONE and group is None:
            if cmd.generation_id < 0:
                group = self._new_group(cmd.group_id)  # a "simple" group
                group.log.info("simple group created by an offset commit")
            else:
                error = (
                    ErrorCode.GROUP_ID_NOT_FOUND
                    if cmd.group_id_not_found
                    else ErrorCode.ILLEGAL_GENERATION
                )
        if error is _NONE and consumer is None:
            assert group is not None
            # a simple group's commit (no generation, Empty) passes without the call
            if cmd.generation_id >= 0 or group.state is not _EMPTY:
                error = self._validate_commit(group, cmd)
        if error is not _NONE:
            return OffsetCommitResult(
                tuple((t.name, tuple((p[0], error) for p in t.partitions)) for t in cmd.topics)
            )
        if group is not None and group.state in _BEATING:
            member = group.members.get(cmd.member_id)
            if member is not None:
                self._reschedule_heartbeat(group, member)
        now = self.timers.now_ms()  # self.now() inlined
        expire = None if cmd.retention_time_ms == -1 else now + cmd.retention_time_ms
        limit = self.config.offset_metadata_max_bytes
        half = limit // 2
        group_id = cmd.group_id
        # The live path applies what replay(OffsetCommitRecord) would, without building a
        # record unless a sink persists it (the replay property test checks both agree).
        stored = self.offsets.get(group_id)
        # Records go to a batch sink a topic at a time, else one per partition to a plain one.
        commit_sink = self.commit_sink
        per_record = self.persisting and commit_sink is None
        # OffsetAndMetadata from a tuple without its Python-level __new__ (one a partition),
        # tuple.__new__ called directly (through functools.partial: ~1k instructions more)
        new_offset = _tuple_new
        committed = 0
        refused = False  # a partition's metadata over the limit (answered per partition)
        for name, partitions in cmd.topics:
            stored_parts = None
            clean = True  # each entry as a sink takes it: the sink gets ``partitions`` itself
            too_large = False
            for partition, offset, leader_epoch, metadata in partitions:
                if not metadata:
                    if metadata is None:
                        clean = False
                    metadata = ""
                elif len(metadata) > half and java_string_length(metadata) > limit:
                    too_large = True
                    continue
                if stored_parts is None:
                    if stored is None:
                        stored = self.offsets[group_id] = {}
                    stored_parts = stored.get(name)
                    if stored_parts is None:
                        stored_parts = stored[name] = {}
                stored_parts[partition] = new_offset(
                    OffsetAndMetadata, (offset, leader_epoch, metadata, now, expire)
                )
                if per_record:
                    self.sink(
                        OffsetCommitRecord(
                            group_id, name, partition, offset, leader_epoch, metadata, now, expire
                        )
                    )
            if too_large:
                refused = True
                answers = _answers(partitions, limit)
                committed += sum(1 for _p, e in answers if e is _NONE)
                if commit_sink is not None and stored_parts is not None:
                    commit_sink(group_id, name, _applied(partitions, answers), now, expire)
                continue
            committed += len(partitions)
            if commit_sink is not None and stored_parts is not None:
                applied = cast(CommitEntries, partitions) if clean else _applied(partitions, None)
                commit_sink(group_id, name, applied, now, expire)
        self.offsets_committed += committed
        self.events.offsets_committed(group_id, committed)
        if not refused:
            return None
        return _tuple_new(
            OffsetCommitResult,
            (tuple((t.name, tuple(_answers(t.partitions, limit))) for t in cmd.topics),),
        )

    @staticmethod
    def _validate_commit(group: ClassicGroup, cmd: OffsetCommit) -> ErrorCode:
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
        elif group.state is not GroupState.EMPTY:
            return ErrorCode.UNKNOWN_MEMBER_ID
        if group.state is GroupState.COMPLETING_REBALANCE:
            return ErrorCode.REBALANCE_IN_PROGRESS
        return ErrorCode.NONE

    # --- OffsetFetch -----------------------------------------------------------------------
    def fetch_offsets(self, cmd: OffsetFetch) -> OffsetFetchResult:
        """OffsetFetch; unknown groups answer offset -1 per requested partition, error NONE."""
        error = self.availability_error()
        if error is not ErrorCode.NONE:
            return OffsetFetchResult(error)
        group = self.groups.get(cmd.group_id)
        known = group is not None and group.state is not GroupState.DEAD
        consumer = self.consumer_groups.get(cmd.group_id) if self.consumer_groups else None
        if consumer is not None:
            known = True
            error = validate_consumer_fetch(consumer, cmd.member_id, cmd.member_epoch)
            if error is not ErrorCode.NONE:
                return OffsetFetchResult(error)
        stored = self.offsets.get(cmd.group_id, {}) if known else {}
        if cmd.require_stable and cmd.group_id in self.pending_txn:
            return self._fetch_stable(cmd, stored)
        if cmd.topics is None:
            return OffsetFetchResult(
                ErrorCode.NONE,
                tuple(
                    (
                        topic,
                        tuple(self._fetched(p, parts[p]) for p in sorted(parts)),
                    )
                    for topic, parts in sorted(stored.items())
                ),
            )
        out = []
        for t in cmd.topics:
            parts = stored.get(t.name, {})
            out.append(
                (
                    t.name,
                    tuple(
                        self._fetched(p, parts[p]) if p in parts else OffsetFetchPartition(p, -1)
                        for p in t.partitions
                    ),
                )
            )
        return OffsetFetchResult(ErrorCode.NONE, tuple(out))

    def _fetch_stable(
        self, cmd: OffsetFetch, stored: dict[str, dict[int, OffsetAndMetadata]]
    ) -> OffsetFetchResult:
        """A require_stable fetch of a group with offsets pending in a transaction: those
        partitions answer UNSTABLE_OFFSET_COMMIT (the client retries)."""
        pending: set[tuple[str, int]] = set()
        for offsets in self.pending_txn.get(cmd.group_id, {}).values():
            pending.update(offsets)
        wanted = (
            [(t, sorted(parts)) for t, parts in sorted(stored.items())]
            if cmd.topics is None
            else [(t.name, list(t.partitions)) for t in cmd.topics]
        )
        out = []
        for topic, partitions in wanted:
            parts = stored.get(topic, {})
            answers = []
            for p in partitions:
                if (topic, p) in pending:
                    unstable = ErrorCode.UNSTABLE_OFFSET_COMMIT
                    answers.append(OffsetFetchPartition(p, -1, error=unstable))
                elif p in parts:
                    answers.append(self._fetched(p, parts[p]))
                else:
                    answers.append(OffsetFetchPartition(p, -1))
            out.append((topic, tuple(answers)))
        return OffsetFetchResult(ErrorCode.NONE, tuple(out))

    @staticmethod
    def _fetched(partition: int, o: OffsetAndMetadata) -> OffsetFetchPartition:
        return OffsetFetchPartition(partition, o.offset, o.leader_epoch, o.metadata)

    # --- OffsetDelete ----------------------------------------------------------------------
    def delete_offsets(self, cmd: OffsetDelete) -> OffsetDeleteResult:
        """OffsetDelete: GROUP_SUBSCRIBED_TO_TOPIC for topics the group consumes."""
        error = self.availability_error()
        if error is not ErrorCode.NONE:
            return OffsetDeleteResult(error)
        group = self.groups.get(cmd.group_id)
        consumer = self.consumer_groups.get(cmd.group_id)
        subscribed: set[str] = set()
        if consumer is not None:
            subscribed = consumer.subscribed_topic_names()
        elif group is None or group.state is GroupState.DEAD:
            return OffsetDeleteResult(ErrorCode.GROUP_ID_NOT_FOUND)
        elif group.state is not GroupState.EMPTY and not group.uses_consumer_protocol():
            return OffsetDeleteResult(ErrorCode.NON_EMPTY_GROUP)
        out = []
        for topic, partitions in cmd.topics:
            if topic in subscribed or (group is not None and group.is_subscribed_to_topic(topic)):
                out.append(
                    (topic, tuple((p, ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC) for p in partitions))
                )
                continue
            stored = self.offsets.get(cmd.group_id, {}).get(topic, {})
            for p in partitions:
                if p in stored:
                    self._emit(OffsetTombstoneRecord(cmd.group_id, topic, p), apply=True)
            out.append((topic, tuple((p, ErrorCode.NONE) for p in partitions)))
        return OffsetDeleteResult(ErrorCode.NONE, tuple(out))

    # --- retention (KIP-211) ---------------------------------------------------------------
    def cleanup_group_metadata(self) -> int:
        """Expire offsets and delete Empty groups left without offsets. Returns the number
        of offsets removed. Runs every offsets.retention.check.interval.ms."""
        removed = 0
        for group_id in list(self.groups):
            all_expired, n = self._cleanup_expired_offsets(group_id)
            removed += n
            group = self.groups.get(group_id)
            if all_expired and group is not None and group.state is GroupState.EMPTY:
                group.log.info("deleting Empty group with no offsets left")
                self._emit(GroupTombstoneRecord(group_id), apply=True)
        return removed

    def _cleanup_expired_offsets(self, group_id: str) -> tuple[bool, int]:
        topics = self.offsets.get(group_id)
        if topics is None:
            return True, 0
        group = self.groups[group_id]
        base = self._expiration_base(group)
        if base is None:
            return False, 0
        now = self.now()
        retention = self.config.offsets_retention_ms
        all_expired = True
        expired: list[tuple[str, int]] = []
        for topic, parts in topics.items():
            if group.is_subscribed_to_topic(topic):
                all_expired = False
                continue
            for partition, o in parts.items():
                if o.expire_timestamp_ms is not None:
                    gone = now >= o.expire_timestamp_ms
                else:
                    start = group.state_timestamp_ms if base == "state" else o.commit_timestamp_ms
                    gone = now - start >= retention
                if gone:
                    expired.append((topic, partition))
                else:
                    all_expired = False
        for topic, partition in expired:
            self._emit(OffsetTombstoneRecord(group_id, topic, partition), apply=True)
        return all_expired, len(expired)

    @staticmethod
    def _expiration_base(group: ClassicGroup) -> str | None:
        """'state': from when the group became Empty; 'commit': from each commit; None: keep."""
        if group.protocol_type is None:
            return "commit"  # simple group
        if group.state is GroupState.EMPTY:
            return "state"
        if (
            group.uses_consumer_protocol()
            and group.subscribed_topics is not None
            and group.state is GroupState.STABLE
        ):
            return "commit"
        return None
