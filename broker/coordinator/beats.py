"""The steady heartbeats of both protocols, answered without building anything (issue 26).

A classic Heartbeat of a known member at its group's generation, and a KIP-848 heartbeat of
a reconciled member that changes nothing, only push back the member's session timer. These
functions answer exactly those, as ``MembershipOps.heartbeat_error`` and
``ConsumerOps.steady_heartbeat`` would, reading the shard's state directly: no enum member
looked up (``ErrorCode.NONE`` is a slow class attribute on 3.11), no timer key or op built
(both made once per member and kept). Anything else goes to those methods.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from kgroupd.protocol.errors import ErrorCode

from .consumer.group import MemberState
from .consumer.ops import session_key
from .state import GroupState

if TYPE_CHECKING:
    from .consumer.group import ConsumerGroup, ConsumerMember
    from .shard import CoordinatorShard

__all__ = ["classic_beat", "consumer_beat"]

_DEAD = GroupState.DEAD
_EMPTY = GroupState.EMPTY
_PREP = GroupState.PREPARING_REBALANCE
_STABLE = MemberState.STABLE
_REBALANCING = int(ErrorCode.REBALANCE_IN_PROGRESS)


def classic_beat(
    shard: CoordinatorShard, group_id: str, generation: int, member_id: str, instance: str | None
) -> int:
    """``shard.heartbeat_error``'s answer, as an int."""
    group = shard.groups.get(group_id)
    if (
        group is None
        or instance is not None
        or not shard.owned
        or shard.loading
        or group_id in shard.consumer_groups
    ):
        return int(shard.heartbeat_error(group_id, generation, member_id, instance))
    state = group.state
    member = group.members.get(member_id)
    if (
        member is None
        or generation != group.generation_id
        or state is _DEAD
        or state is _EMPTY
        or not group_id
    ):
        return int(shard.heartbeat_error(group_id, generation, member_id, instance))
    expiry = member.expiry  # _reschedule_heartbeat's key and op, made once
    if expiry is None or expiry[0] is not group:
        shard._reschedule_heartbeat(group, member)
    else:
        shard.timers.schedule(expiry[1], member.session_timeout_ms, expiry[2])
    return _REBALANCING if state is _PREP else 0


def consumer_beat(shard: CoordinatorShard, group_id: str, member_id: str, epoch: int) -> bool:
    """``shard.steady_heartbeat``: True if answered (the session pushed back)."""
    if not shard.owned or shard.loading:
        return False
    group = shard.consumer_groups.get(group_id)
    if group is None:
        return False
    member = group.members.get(member_id)
    if (
        member is None
        or member.member_epoch != epoch
        or member.state is not _STABLE
        or epoch != group.assignment_epoch
        or group.group_epoch != epoch
    ):
        return False
    if member.classic is not None:  # a classic member's own session timeout
        shard._schedule_session(group, member_id)
        return True
    kept = group.beats.get(member_id)
    if kept is None or kept[0] is not member:
        kept = _session(shard, group, member)
    shard.timers.schedule(kept[1], shard.config.consumer_session_timeout_ms, kept[2])
    return True


def _session(
    shard: CoordinatorShard, group: ConsumerGroup, member: ConsumerMember
) -> tuple[ConsumerMember, str, Callable[[], None]]:
    """The session timer's key and op of ``member`` (as ``_schedule_session`` makes them),
    kept on its group while the member object is current."""
    beats = group.beats
    if len(beats) > 2 * len(group.members) + 16:  # members gone since
        beats.clear()
    gid, mid = group.group_id, member.member_id

    def fence() -> None:
        shard._fence(gid, mid, group, "session")

    kept = beats[mid] = (member, session_key(gid, mid), fence)
    return kept
