"""The group coordinator: one shard per offsets partition, routed by ``partition_for``."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from kgroupd.protocol.errors import ErrorCode

from .beats import consumer_beat
from .commands import (
    DeleteGroups,
    DeleteGroupsResult,
    DescribeGroups,
    DescribeGroupsResult,
    Heartbeat,
    HeartbeatResult,
    JoinGroup,
    JoinGroupResult,
    LeaveGroup,
    LeaveGroupResult,
    ListedGroup,
    ListGroups,
    ListGroupsResult,
    OffsetCommit,
    OffsetCommitResult,
    OffsetDelete,
    OffsetDeleteResult,
    OffsetFetch,
    OffsetFetchResult,
    SyncGroup,
    SyncGroupResult,
    TxnOffsetCommit,
)
from .config import CoordinatorConfig
from .consumer.commands import (
    ConsumerGroupDescribe,
    ConsumerGroupDescribeResult,
    ConsumerGroupHeartbeat,
    ConsumerGroupHeartbeatResult,
    TopicsView,
)
from .deferred import Deferred
from .events import GroupEvents
from .placement import partition_for
from .records import Record
from .shard import CoordinatorShard
from .timers import Timers

__all__ = ["CoordinatorLocation", "GroupCoordinator"]

_SHARDS_KEPT = 65536  # ``shard_of``'s group ids at most (then it starts over)


@dataclass(frozen=True, slots=True)
class CoordinatorLocation:
    """Where a group lives: its offsets partition and whether this node owns it."""

    partition: int
    owned: bool
    node_id: int


class GroupCoordinator:
    """Entry point for the wire handlers. Every method is synchronous; JoinGroup/SyncGroup
    return a ``Deferred`` (already resolved unless the request is parked)."""

    def __init__(
        self,
        config: CoordinatorConfig,
        timers: Timers,
        node_id: int,
        sink_factory: Callable[[int], Callable[[Record], None]] | None = None,
        topics: TopicsView | None = None,
    ) -> None:
        self.config = config
        self.timers = timers
        self.node_id = node_id
        self.shards = [
            CoordinatorShard(p, config, timers, sink_factory(p) if sink_factory else None)
            for p in range(config.offsets_partitions)
        ]
        if topics is not None:
            for shard in self.shards:
                shard.topics_view = topics
        self.consumer_heartbeat_ms = config.consumer_heartbeat_interval_ms
        # group id -> its shard, as ``shard_for`` found it (the hot requests read it first)
        self.shard_of: dict[str, CoordinatorShard] = {}

    def set_events(self, events: GroupEvents) -> None:
        """Tell ``events`` of every shard's rebalances and commits (the broker's metrics)."""
        for shard in self.shards:
            shard.events = events
            for group in shard.groups.values():
                group.events = events

    def partition_for(self, group_id: str) -> int:
        return partition_for(group_id, self.config.offsets_partitions)

    def shard_for(self, group_id: str) -> CoordinatorShard:
        shard = self.shard_of.get(group_id)
        if shard is None:
            shard = self.shards[partition_for(group_id, self.config.offsets_partitions)]
            if len(self.shard_of) >= _SHARDS_KEPT:
                self.shard_of.clear()
            self.shard_of[group_id] = shard
        return shard

    def coordinator_for(self, group_id: str) -> CoordinatorLocation:
        """For FindCoordinator (key type 0). A single node owns every shard."""
        shard = self.shard_for(group_id)
        return CoordinatorLocation(shard.partition, shard.owned, self.node_id)

    # --- group membership ------------------------------------------------------------------
    def join_group(self, cmd: JoinGroup) -> Deferred[JoinGroupResult]:
        return self.shard_for(cmd.group_id).join_group(cmd)

    def sync_group(self, cmd: SyncGroup) -> Deferred[SyncGroupResult]:
        return self.shard_for(cmd.group_id).sync_group(cmd)

    def heartbeat(self, cmd: Heartbeat) -> HeartbeatResult:
        return self.shard_for(cmd.group_id).heartbeat(cmd)

    def heartbeat_error(
        self, group_id: str, generation: int, member_id: str, instance_id: str | None
    ) -> ErrorCode:
        """``heartbeat``'s answer without its command and result objects (the hot path)."""
        return self.shard_for(group_id).heartbeat_error(
            group_id, generation, member_id, instance_id
        )

    def leave_group(self, cmd: LeaveGroup) -> LeaveGroupResult:
        return self.shard_for(cmd.group_id).leave_group(cmd)

    # --- KIP-848 consumer groups ------------------------------------------------------------
    def consumer_group_heartbeat(self, cmd: ConsumerGroupHeartbeat) -> ConsumerGroupHeartbeatResult:
        return self.shard_for(cmd.group_id).consumer_group_heartbeat(cmd)

    def consumer_group_steady_heartbeat(self, group_id: str, member_id: str, epoch: int) -> bool:
        """A heartbeat that changes nothing, of a reconciled member: True if answered (its
        session reset); False when the full ``consumer_group_heartbeat`` must run."""
        return consumer_beat(self.shard_for(group_id), group_id, member_id, epoch)

    def consumer_group_describe(self, cmd: ConsumerGroupDescribe) -> ConsumerGroupDescribeResult:
        return ConsumerGroupDescribeResult(
            tuple(self.shard_for(g).describe_consumer_group(g) for g in cmd.group_ids)
        )

    def on_topics_changed(self) -> None:
        """Topics were created, deleted or gained partitions (regex subscriptions, metadata)."""
        for shard in self.shards:
            shard.on_topics_changed()

    # --- offsets ---------------------------------------------------------------------------
    def commit_offsets(self, cmd: OffsetCommit) -> OffsetCommitResult:
        # shard_for inlined (the commit path is hot)
        shard = self.shards[partition_for(cmd.group_id, self.config.offsets_partitions)]
        return shard.commit_offsets(cmd)

    def commit_offsets_errors(self, cmd: OffsetCommit) -> OffsetCommitResult | None:
        """``commit_offsets``, None when every partition answers NONE (the hot path)."""
        shard = self.shards[partition_for(cmd.group_id, self.config.offsets_partitions)]
        return shard.commit_offsets_errors(cmd)

    def fetch_offsets(self, cmd: OffsetFetch) -> OffsetFetchResult:
        return self.shard_for(cmd.group_id).fetch_offsets(cmd)

    def delete_offsets(self, cmd: OffsetDelete) -> OffsetDeleteResult:
        return self.shard_for(cmd.group_id).delete_offsets(cmd)

    def txn_commit_offsets(self, cmd: TxnOffsetCommit) -> OffsetCommitResult:
        return self.shard_for(cmd.group_id).txn_commit_offsets(cmd)

    def complete_txn_offsets(self, partition: int, producer_id: int, commit: bool) -> int:
        """A transaction marker for offsets partition ``partition`` (its shard)."""
        return self.shards[partition].complete_txn_offsets(producer_id, commit)

    # --- admin -----------------------------------------------------------------------------
    def describe_groups(self, cmd: DescribeGroups) -> DescribeGroupsResult:
        return DescribeGroupsResult(
            tuple(
                self.shard_for(g).describe_group(g, cmd.unknown_group_not_found)
                for g in cmd.group_ids
            )
        )

    def list_groups(self, cmd: ListGroups) -> ListGroupsResult:
        """Groups of every owned shard; a loading shard sets COORDINATOR_LOAD_IN_PROGRESS."""
        error = ErrorCode.NONE
        groups: list[ListedGroup] = []
        for shard in self.shards:
            if not shard.owned:
                continue
            if shard.loading:
                error = ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
                continue
            groups.extend(shard.list_groups(cmd.states_filter))
        if cmd.types_filter:
            wanted = {t.lower() for t in cmd.types_filter}
            groups = [g for g in groups if g.group_type in wanted]
        return ListGroupsResult(error, tuple(groups))

    def delete_groups(self, cmd: DeleteGroups) -> DeleteGroupsResult:
        return DeleteGroupsResult(
            tuple((g, self.shard_for(g).delete_group(g)) for g in cmd.group_ids)
        )

    def shutdown(self) -> None:
        """Unload every shard: all parked requests answered (NOT_COORDINATOR), timers gone."""
        for shard in self.shards:
            if shard.owned:
                shard.shutdown()
