"""One coordinator shard: every group of one offsets partition."""

from __future__ import annotations

from collections.abc import Iterable

from kgroupd.protocol.errors import ErrorCode

from .commands import DescribedGroup, DescribedMember, ListedGroup
from .config import CoordinatorConfig
from .consumer.migration import MigrationOps
from .core import OffsetAndMetadata, heartbeat_key
from .group import ClassicGroup
from .membership import MembershipOps
from .offsets import OffsetOps
from .records import GroupTombstoneRecord, OffsetTombstoneRecord, Record, RecordSink
from .state import GroupState
from .timers import Timers
from .txn_offsets import TxnOffsetOps

__all__ = ["CoordinatorShard"]


class CoordinatorShard(MembershipOps, OffsetOps, TxnOffsetOps, MigrationOps):
    """Owns the groups, offsets and static-member assignments of one offsets partition.

    Every operation is a plain synchronous method: on one event loop nothing interleaves
    inside it. Pass ``loaded=False`` to start in the loading state, then ``load(records)``
    (or ``replay`` and ``load_offsets`` as a snapshot is read, then ``complete_loading``).
    """

    def __init__(
        self,
        partition: int,
        config: CoordinatorConfig,
        timers: Timers,
        sink: RecordSink | None = None,
        loaded: bool = True,
    ) -> None:
        super().__init__(partition, config, timers, sink)
        self.loading = True
        if loaded:
            self.complete_loading()

    # --- lifecycle -------------------------------------------------------------------------
    def load(self, records: Iterable[Record]) -> None:
        """Replay persisted records (start-up), then start serving."""
        self.loading = True
        for record in records:
            self.replay(record)
        self.complete_loading()

    def load_offsets(
        self, group_id: str, topic: str, offsets: dict[int, OffsetAndMetadata]
    ) -> None:
        """Bulk load (start-up, from a snapshot): the committed offsets of some partitions of
        one (group, topic), as if an ``OffsetCommitRecord`` per partition were replayed in
        order. The shard keeps ``offsets`` (the caller hands it over)."""
        if not offsets:
            return
        if group_id not in self.groups:
            # a simple group, created by its first commit (as replay does)
            first = next(iter(offsets.values()))
            self.groups[group_id] = ClassicGroup(
                group_id, first.commit_timestamp_ms, self.log, self.events
            )
        topics = self.offsets.setdefault(group_id, {})
        parts = topics.get(topic)
        if parts is None:
            topics[topic] = offsets
        else:
            parts.update(offsets)

    def complete_loading(self) -> None:
        """End of load: schedule the session timers of loaded members and the retention sweep
        (Kafka's onLoaded)."""
        self.loading = False
        self.owned = True
        for group in self.groups.values():
            for member in group.members.values():
                self._reschedule_heartbeat(group, member)
        for consumer in self.consumer_groups.values():
            # the topics subscribed (by name or regex) resolve against today's topics
            consumer.subscription_metadata = self._metadata(consumer)
            if consumer.regexes_in_use(None, None):
                self._schedule_regex_resolution(consumer, 0)
            for consumer_member in consumer.members.values():
                self._schedule_timers(consumer, consumer_member)
        self._schedule_retention()

    def _retention_key(self) -> str:
        return f"retention/{self.partition}"

    def _schedule_retention(self) -> None:
        self.timers.schedule(
            self._retention_key(),
            self.config.offsets_retention_check_interval_ms,
            self._on_retention_timer,
        )

    def _on_retention_timer(self) -> None:
        if not self._active():
            return
        self.cleanup_group_metadata()
        self._schedule_retention()

    def shutdown(self, error: ErrorCode = ErrorCode.NOT_COORDINATOR) -> None:
        """Unload: every group goes Dead, every parked JoinGroup/SyncGroup is answered with
        ``error`` (Kafka answers NOT_COORDINATOR on unload), timers are cancelled."""
        for group in list(self.groups.values()):
            if group.state is not GroupState.DEAD:
                self._kill_group(group, error, "shard unloaded")
        self.groups.clear()
        self.consumer_groups.clear()
        self.offsets.clear()
        self.pending_txn.clear()
        self.timers.cancel(self._retention_key())
        self.owned = False

    # --- DescribeGroups / ListGroups / DeleteGroups ----------------------------------------
    def describe_group(
        self, group_id: str, unknown_group_not_found: bool = False
    ) -> DescribedGroup:
        """One DescribeGroups entry; member metadata and assignments only in Stable."""
        error = self.availability_error()
        if error is not ErrorCode.NONE:
            return DescribedGroup(error, group_id)
        group = self.groups.get(group_id)
        if group_id in self.consumer_groups:  # Kafka: "Group X is not a classic group."
            return DescribedGroup(ErrorCode.GROUP_ID_NOT_FOUND, group_id)
        if group is None or group.state is GroupState.DEAD:
            if unknown_group_not_found:
                return DescribedGroup(ErrorCode.GROUP_ID_NOT_FOUND, group_id)
            return DescribedGroup(ErrorCode.NONE, group_id, state=GroupState.DEAD.value)
        stable = group.state is GroupState.STABLE
        protocol = group.protocol_name if stable else None
        members = tuple(
            DescribedMember(
                m.member_id,
                m.group_instance_id,
                m.client_id,
                m.client_host,
                m.metadata(protocol) if protocol is not None else b"",
                m.assignment if stable else b"",
            )
            for m in group.members.values()
        )
        return DescribedGroup(
            ErrorCode.NONE,
            group_id,
            state=group.state.value,
            protocol_type=group.protocol_type or "",
            protocol_data=protocol or "",
            members=members,
        )

    def list_groups(self, states_filter: Iterable[str] = ()) -> list[ListedGroup]:
        """Groups of this shard whose state matches the (case-insensitive) filter."""
        wanted = {s.lower() for s in states_filter}
        classic = [
            ListedGroup(g.group_id, g.protocol_type or "", g.state.value)
            for g in self.groups.values()
            if not wanted or g.state.value.lower() in wanted
        ]
        consumer = [
            ListedGroup(g.group_id, "consumer", g.state.value, "consumer")
            for g in self.consumer_groups.values()
            if not wanted or g.state.value.lower() in wanted
        ]
        return classic + consumer

    def delete_group(self, group_id: str) -> ErrorCode:
        """DeleteGroups for one group: NON_EMPTY_GROUP unless Empty; GROUP_ID_NOT_FOUND."""
        error = self.availability_error()
        if error is not ErrorCode.NONE:
            return error
        consumer = self.consumer_groups.get(group_id)
        if consumer is not None:
            if consumer.members:
                return ErrorCode.NON_EMPTY_GROUP
            self.delete_consumer_group(group_id)
            for topic, parts in list(self.offsets.get(group_id, {}).items()):
                for partition in list(parts):
                    self._emit(OffsetTombstoneRecord(group_id, topic, partition), apply=True)
            return ErrorCode.NONE
        group = self.groups.get(group_id)
        if group is None or group.state is GroupState.DEAD:
            return ErrorCode.GROUP_ID_NOT_FOUND
        if group.state is not GroupState.EMPTY:
            return ErrorCode.NON_EMPTY_GROUP
        for topic, parts in list(self.offsets.get(group_id, {}).items()):
            for partition in list(parts):
                self._emit(OffsetTombstoneRecord(group_id, topic, partition), apply=True)
        self._emit(GroupTombstoneRecord(group_id), apply=True)
        return ErrorCode.NONE

    # --- introspection (tests, tools) ------------------------------------------------------
    def committed(self, group_id: str) -> dict[tuple[str, int], OffsetAndMetadata]:
        return {
            (t, p): o
            for t, parts in self.offsets.get(group_id, {}).items()
            for p, o in parts.items()
        }

    def session_timer_key(self, group_id: str, member_id: str) -> str:
        return heartbeat_key(group_id, member_id)
