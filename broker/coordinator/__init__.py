"""kgroupd's classic consumer-group coordinator (pure: no asyncio, sockets or aiokafka).

What the wire handlers call
---------------------------
``GroupCoordinator(config: CoordinatorConfig, timers: Timers, node_id: int)`` owns one
``CoordinatorShard`` per offsets partition (``config.offsets_partitions``, default 50); a group
lives on ``partition_for(group_id, partitions)`` (Java ``String.hashCode``). Handlers turn a
versioned wire struct into a version-free command from ``commands`` (version rules become
flags: ``JoinGroup.require_known_member_id`` for v4+, ``skip_assignment_supported`` for v9+,
``OffsetCommit.group_id_not_found`` for v9+, ``DescribeGroups.unknown_group_not_found`` for
v6+) and call, synchronously on the event loop:

- ``coordinator_for(group_id) -> CoordinatorLocation(partition, owned, node_id)`` (FindCoordinator)
- ``join_group(JoinGroup) -> Deferred[JoinGroupResult]``
- ``sync_group(SyncGroup) -> Deferred[SyncGroupResult]``
- ``heartbeat(Heartbeat) -> HeartbeatResult``
- ``leave_group(LeaveGroup) -> LeaveGroupResult`` (per-member errors; v0-v2 handlers map the
  single member's error to the top level)
- ``commit_offsets(OffsetCommit) -> OffsetCommitResult`` (per-partition errors)
- ``fetch_offsets(OffsetFetch) -> OffsetFetchResult`` (``topics=None``: all)
- ``delete_offsets(OffsetDelete) -> OffsetDeleteResult``
- ``describe_groups(DescribeGroups)``, ``list_groups(ListGroups)``, ``delete_groups(DeleteGroups)``
- ``shutdown()``: every parked request answered NOT_COORDINATOR, timers cancelled.

Protocol errors are returned as ``kgroupd.protocol.errors.ErrorCode`` values, never raised.
NOT_COORDINATOR / COORDINATOR_LOAD_IN_PROGRESS come from the shard's ``owned`` / ``loading``
flags (Heartbeat answers NONE while loading).

The Deferred bridge
-------------------
JoinGroup and SyncGroup may have to wait for other members. They return a ``Deferred``
that is already ``done()`` when the answer is immediate; otherwise only the shard resolves it
(join completion, new rebalance, fencing, expiry, shutdown). The handler bridges it::

    d = coordinator.join_group(cmd)
    if d.done():
        reply(d.result())
    else:
        fut = loop.create_future()
        d.add_callback(lambda r: fut.done() or fut.set_result(r))
        reply(await fut)  # pause this connection meanwhile, so replies stay in order

Timers and records
------------------
The clock and timers are injected through the ``Timers`` protocol (``schedule(key, delay_ms,
op)``, ``cancel(key)``, ``now_ms()``); keys are ``heartbeat/<group>/<member>``,
``pending/<group>/<member>``, ``join/<group>``, ``sync/<group>``, ``retention/<partition>``.
Production uses ``LoopTimers`` (``loop.call_at``, stale-timer guard); tests use
``ManualTimers.advance(ms)``. Every state change is a record (``records``) handed to the
shard's ``RecordSink``; ``CoordinatorShard.load(records)`` replays them at start-up.
"""

from .commands import *  # noqa: F403
from .commands import __all__ as _commands_all
from .config import CoordinatorConfig
from .consumer.commands import (
    ConsumerGroupDescribe,
    ConsumerGroupDescribeResult,
    ConsumerGroupHeartbeat,
    ConsumerGroupHeartbeatResult,
    DescribedConsumerGroup,
    DescribedConsumerMember,
    InMemoryTopics,
    TopicsView,
)
from .coordinator import CoordinatorLocation, GroupCoordinator
from .deferred import Deferred, DeferredError
from .placement import java_string_hashcode, partition_for
from .records import (
    GroupMetadataRecord,
    GroupTombstoneRecord,
    MemberRecord,
    OffsetCommitRecord,
    OffsetTombstoneRecord,
    Record,
    RecordSink,
    record_from_dict,
    record_to_dict,
)
from .shard import CoordinatorShard
from .state import ALLOWED_PREVIOUS, GroupState, IllegalStateTransition
from .timers import LoopTimers, ManualTimers, Timers

__all__ = [
    *_commands_all,
    "ALLOWED_PREVIOUS",
    "CoordinatorConfig",
    "CoordinatorLocation",
    "ConsumerGroupDescribe",
    "ConsumerGroupDescribeResult",
    "ConsumerGroupHeartbeat",
    "ConsumerGroupHeartbeatResult",
    "CoordinatorShard",
    "DescribedConsumerGroup",
    "DescribedConsumerMember",
    "InMemoryTopics",
    "TopicsView",
    "Deferred",
    "DeferredError",
    "GroupCoordinator",
    "GroupMetadataRecord",
    "GroupState",
    "GroupTombstoneRecord",
    "IllegalStateTransition",
    "LoopTimers",
    "ManualTimers",
    "MemberRecord",
    "OffsetCommitRecord",
    "OffsetTombstoneRecord",
    "Record",
    "RecordSink",
    "Timers",
    "java_string_hashcode",
    "partition_for",
    "record_from_dict",
    "record_to_dict",
]
