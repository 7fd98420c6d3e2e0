"""What the test controls (``--test-controls``) ask of the coordinator: a rebalance forced on a
group, a member's session ended now. Plain functions on the owning shard, run on the loop like
every other shard operation."""

from __future__ import annotations

from .coordinator import GroupCoordinator
from .state import GroupState

__all__ = ["ControlRefused", "expire_member", "force_rebalance"]


class ControlRefused(Exception):
    """The group or member cannot take the control; ``status`` is the HTTP status to answer."""

    def __init__(self, status: int, error: str, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.error = error
        self.reason = reason


def _unknown_group(group_id: str) -> ControlRefused:
    return ControlRefused(404, "GROUP_ID_NOT_FOUND", f"no group {group_id!r}")


def force_rebalance(coordinator: GroupCoordinator, group_id: str) -> dict[str, object]:
    """A classic group rebalances as when a member joins (its members learn it from their
    next Heartbeat, REBALANCE_IN_PROGRESS); a consumer group (KIP-848) bumps its epoch, so
    its members are given a new target assignment on their next heartbeat."""
    shard = coordinator.shard_for(group_id)
    reason = "rebalance forced by the test controls"
    consumer = shard.consumer_groups.get(group_id)
    if consumer is not None:
        shard._bump(consumer, reason)
        return {"group": group_id, "type": "consumer", "group_epoch": consumer.group_epoch}
    group = shard.groups.get(group_id)
    if group is None or group.state is GroupState.DEAD:
        raise _unknown_group(group_id)
    if not group.members:
        raise ControlRefused(409, "GROUP_IS_EMPTY", f"group {group_id!r} has no members")
    if group.state is not GroupState.PREPARING_REBALANCE:
        shard._prepare_rebalance(group, reason)
    return {"group": group_id, "type": "classic", "state": group.state.value}


def expire_member(
    coordinator: GroupCoordinator, group_id: str, member_id: str
) -> dict[str, object]:
    """The member's session ends now, as when its session timeout passes without a heartbeat:
    it leaves the group and the group rebalances (classic) or bumps its epoch (consumer)."""
    shard = coordinator.shard_for(group_id)
    reason = f"session of {member_id} expired (test controls)"
    consumer = shard.consumer_groups.get(group_id)
    if consumer is not None:
        if member_id not in consumer.members:
            raise _unknown_member(group_id, member_id)
        shard.log.info("consumer_member_fenced", group_id=group_id, member_id=member_id)
        shard._fence_member(consumer, member_id, reason)
        return {"group": group_id, "member": member_id, "type": "consumer"}
    group = shard.groups.get(group_id)
    if group is None or group.state is GroupState.DEAD:
        raise _unknown_group(group_id)
    member = group.members.get(member_id)
    if member is None:
        raise _unknown_member(group_id, member_id)
    group.log.info("member session expired", member_id=member_id, by="test controls")
    shard._remove_member_and_update(group, member, reason)
    return {"group": group_id, "member": member_id, "type": "classic"}


def _unknown_member(group_id: str, member_id: str) -> ControlRefused:
    return ControlRefused(
        404, "UNKNOWN_MEMBER_ID", f"no member {member_id!r} in group {group_id!r}"
    )
