"""JoinGroup, SyncGroup, Heartbeat, LeaveGroup and the rebalance machinery (Kafka's
GroupMetadataManager classic-group paths)."""

from __future__ import annotations

import uuid

from kgroupd.protocol.errors import ErrorCode

from .commands import (
    Heartbeat,
    HeartbeatResult,
    JoinGroup,
    JoinGroupResult,
    LeaveGroup,
    LeaveGroupResult,
    LeaveMemberResult,
    SyncGroup,
    SyncGroupResult,
)
from .core import ShardCore, heartbeat_key, join_key, pending_key, sync_key
from .deferred import Deferred
from .group import ClassicGroup, Member
from .state import GroupState

__all__ = ["MembershipOps"]

_PREP = GroupState.PREPARING_REBALANCE
_COMP = GroupState.COMPLETING_REBALANCE


def _inconsistent(given: str | None, current: str | None) -> bool:
    return given is not None and current is not None and given != current


class MembershipOps(ShardCore):
    # --- JoinGroup -------------------------------------------------------------------------
    def join_group(self, cmd: JoinGroup) -> Deferred[JoinGroupResult]:
        """JoinGroup. The Deferred is already resolved unless the request is parked."""
        waiter: Deferred[JoinGroupResult] = Deferred()
        error = self._join_precheck(cmd)
        consumer = self.consumer_groups.get(cmd.group_id) if error is ErrorCode.NONE else None
        if consumer is not None:
            if consumer.members:  # a classic member joins a KIP-848 group
                waiter.resolve(self.classic_join_consumer(cmd))
                return waiter
            self.delete_consumer_group(cmd.group_id)  # an empty one becomes a classic group
        if error is not ErrorCode.NONE:
            waiter.resolve(JoinGroupResult(error, member_id=cmd.member_id))
            return waiter
        group = self.groups.get(cmd.group_id)
        unknown = cmd.member_id == ""
        created = False
        if group is None:
            if not unknown:
                waiter.resolve(
                    JoinGroupResult(ErrorCode.UNKNOWN_MEMBER_ID, member_id=cmd.member_id)
                )
                return waiter
            group = self._new_group(cmd.group_id)
            created = True
        if not self._accept_joining_member(group, cmd.member_id):
            self._drop_member(group, cmd.member_id)
            waiter.resolve(JoinGroupResult(ErrorCode.GROUP_MAX_SIZE_REACHED))
        elif unknown:
            self._join_new_member(group, cmd, waiter)
        else:
            self._join_existing_member(group, cmd, waiter)
        if created:
            # Kafka writes an empty group record for a group created by JoinGroup.
            self._emit(group.to_record(with_members=False), apply=False)
        return waiter

    def _join_precheck(self, cmd: JoinGroup) -> ErrorCode:
        if not cmd.group_id:
            return ErrorCode.INVALID_GROUP_ID
        c = self.config
        if (
            not c.group_min_session_timeout_ms
            <= cmd.session_timeout_ms
            <= (c.group_max_session_timeout_ms)
        ):
            return ErrorCode.INVALID_SESSION_TIMEOUT
        return self.availability_error()

    def _accept_joining_member(self, group: ClassicGroup, member_id: str) -> bool:
        limit = self.config.group_max_size
        if limit is None or group.state in (GroupState.EMPTY, GroupState.DEAD):
            return True
        if group.state is _PREP:
            member = group.members.get(member_id)
            return (member is not None and member.awaiting_join) or (
                group.num_awaiting_join < limit
            )
        return member_id in group.members or len(group.members) < limit

    def _join_new_member(
        self, group: ClassicGroup, cmd: JoinGroup, waiter: Deferred[JoinGroupResult]
    ) -> None:
        if group.state is GroupState.DEAD:
            waiter.resolve(JoinGroupResult(ErrorCode.COORDINATOR_NOT_AVAILABLE))
            return
        if not group.supports_protocols(cmd.protocol_type, [n for n, _ in cmd.protocols]):
            waiter.resolve(JoinGroupResult(ErrorCode.INCONSISTENT_GROUP_PROTOCOL))
            return
        prefix = cmd.group_instance_id if cmd.group_instance_id is not None else cmd.client_id
        new_id = f"{prefix}-{uuid.uuid4()}"
        if cmd.group_instance_id is not None:
            existing = group.static_members.get(cmd.group_instance_id)
            if existing is not None:
                self._replace_static_member(group, cmd, existing, new_id, waiter)
            else:
                self._add_member_then_rebalance(group, cmd, new_id, waiter)
        elif cmd.require_known_member_id:
            group.pending_join_members.add(new_id)
            gid = group.group_id
            self.timers.schedule(
                pending_key(gid, new_id),
                cmd.session_timeout_ms,
                lambda: self._expire_pending_member(gid, new_id, group),
            )
            group.log.info("member id required; pending member", member_id=new_id)
            waiter.resolve(JoinGroupResult(ErrorCode.MEMBER_ID_REQUIRED, member_id=new_id))
        else:
            self._add_member_then_rebalance(group, cmd, new_id, waiter)

    def _join_existing_member(
        self, group: ClassicGroup, cmd: JoinGroup, waiter: Deferred[JoinGroupResult]
    ) -> None:
        mid = cmd.member_id
        if group.state is GroupState.DEAD:
            waiter.resolve(JoinGroupResult(ErrorCode.COORDINATOR_NOT_AVAILABLE, member_id=mid))
            return
        if not group.supports_protocols(cmd.protocol_type, [n for n, _ in cmd.protocols]):
            waiter.resolve(JoinGroupResult(ErrorCode.INCONSISTENT_GROUP_PROTOCOL, member_id=mid))
            return
        if mid in group.pending_join_members:
            if cmd.group_instance_id is not None:
                # Kafka: IllegalStateException (pending members are never static)
                waiter.resolve(JoinGroupResult(ErrorCode.UNKNOWN_SERVER_ERROR, member_id=mid))
                return
            self.timers.cancel(pending_key(group.group_id, mid))
            self._add_member_then_rebalance(group, cmd, mid, waiter)
            return
        error = group.validate_member(mid, cmd.group_instance_id)
        if error is not ErrorCode.NONE:
            waiter.resolve(JoinGroupResult(error, member_id=mid))
            return
        member = group.members[mid]
        state = group.state
        if state is _PREP:
            self._update_member_then_rebalance(group, member, cmd, waiter, "member rejoining")
        elif state is _COMP:
            if member.matches(cmd.protocols):
                waiter.resolve(self._current_generation(group, mid, group.is_leader(mid)))
            else:
                self._update_member_then_rebalance(
                    group, member, cmd, waiter, "member changed protocols in CompletingRebalance"
                )
        elif state is GroupState.STABLE:
            if group.is_leader(mid):
                self._update_member_then_rebalance(
                    group, member, cmd, waiter, "leader rejoined in Stable"
                )
            elif not member.matches(cmd.protocols):
                self._update_member_then_rebalance(
                    group, member, cmd, waiter, "follower changed metadata in Stable"
                )
            else:
                waiter.resolve(self._current_generation(group, mid, False))
        else:
            waiter.resolve(JoinGroupResult(ErrorCode.UNKNOWN_MEMBER_ID, member_id=mid))

    def _current_generation(
        self, group: ClassicGroup, member_id: str, with_members: bool
    ) -> JoinGroupResult:
        return JoinGroupResult(
            ErrorCode.NONE,
            member_id=member_id,
            generation_id=group.generation_id,
            protocol_type=group.protocol_type,
            protocol_name=group.protocol_name,
            leader=group.leader_id or "",
            members=group.current_members_for_leader() if with_members else (),
        )

    def _add_member_then_rebalance(
        self,
        group: ClassicGroup,
        cmd: JoinGroup,
        member_id: str,
        waiter: Deferred[JoinGroupResult],
    ) -> None:
        member = Member(
            member_id=member_id,
            group_instance_id=cmd.group_instance_id,
            client_id=cmd.client_id,
            client_host=cmd.client_host,
            rebalance_timeout_ms=cmd.rebalance_timeout_ms,
            session_timeout_ms=cmd.session_timeout_ms,
            protocol_type=cmd.protocol_type,
            protocols=cmd.protocols,
            is_new=True,
        )
        if group.state is _PREP and group.previous_state is GroupState.EMPTY:
            group.new_member_added = True
        group.add(member, waiter)
        # New members cannot heartbeat while parked: bound their wait instead.
        self._reschedule_heartbeat(group, member, self.config.new_member_join_timeout_ms)
        group.log.info("member added", member_id=member_id, instance_id=cmd.group_instance_id)
        self._maybe_prepare_rebalance_or_complete_join(group, f"adding new member {member_id}")

    def _update_member_then_rebalance(
        self,
        group: ClassicGroup,
        member: Member,
        cmd: JoinGroup,
        waiter: Deferred[JoinGroupResult],
        reason: str,
    ) -> None:
        group.update_member(
            member, cmd.protocols, cmd.rebalance_timeout_ms, cmd.session_timeout_ms, waiter
        )
        self._maybe_prepare_rebalance_or_complete_join(group, f"{reason} ({member.member_id})")

    def _replace_static_member(
        self,
        group: ClassicGroup,
        cmd: JoinGroup,
        old_id: str,
        new_id: str,
        waiter: Deferred[JoinGroupResult],
    ) -> None:
        assert cmd.group_instance_id is not None
        current_leader = group.leader_id or ""
        self.timers.cancel(heartbeat_key(group.group_id, old_id))
        member = group.replace_static_member(cmd.group_instance_id, old_id, new_id)
        group.log.info(
            "static member replaced", member_id=new_id, old_member_id=old_id, state=group.state
        )
        self._reschedule_heartbeat(group, member)
        group.update_member(
            member, cmd.protocols, cmd.rebalance_timeout_ms, cmd.session_timeout_ms, waiter
        )
        if group.state is GroupState.STABLE:
            if group.protocol_name == group.select_protocol():
                self._emit(group.to_record(), apply=False)
                gen = group.generation_id
                if cmd.skip_assignment_supported:
                    is_leader = group.is_leader(new_id)
                    result = JoinGroupResult(
                        ErrorCode.NONE,
                        member_id=new_id,
                        generation_id=gen,
                        protocol_type=group.protocol_type,
                        protocol_name=group.protocol_name,
                        leader=group.leader_id or "",
                        skip_assignment=is_leader,
                        members=group.current_members_for_leader() if is_leader else (),
                    )
                else:
                    # Below v9 the previous leader id is returned, so a static ex-leader acts
                    # as a follower and does not compute an assignment a Stable group ignores.
                    result = JoinGroupResult(
                        ErrorCode.NONE,
                        member_id=new_id,
                        generation_id=gen,
                        protocol_type=group.protocol_type,
                        protocol_name=group.protocol_name,
                        leader=current_leader,
                    )
                group.complete_join(member, result)
            else:
                self._maybe_prepare_rebalance_or_complete_join(
                    group, f"static member {new_id} changes the selected protocol"
                )
        elif group.state is _COMP:
            self._prepare_rebalance(group, f"static member {new_id} rejoined during sync")
        else:
            self._maybe_complete_join_phase(group)

    # --- rebalance machinery ---------------------------------------------------------------
    def _maybe_prepare_rebalance_or_complete_join(self, group: ClassicGroup, reason: str) -> None:
        if group.can_rebalance():
            self._prepare_rebalance(group, reason)
        else:
            self._maybe_complete_join_phase(group)

    def _prepare_rebalance(self, group: ClassicGroup, reason: str) -> None:
        if group.state is _COMP:
            self._reset_and_propagate_assignment_error(group, ErrorCode.REBALANCE_IN_PROGRESS)
        gid = group.group_id
        self.timers.cancel(sync_key(gid))
        initial = group.state is GroupState.EMPTY
        if initial:
            delay = self.config.initial_rebalance_delay_ms
            remaining = max(group.rebalance_timeout_ms() - delay, 0)
            self.timers.schedule(
                join_key(gid),
                delay,
                lambda: self._try_complete_initial_rebalance(gid, group, delay, remaining),
            )
        group.transition_to(_PREP, self.now(), reason)
        self.events.rebalance_started(group.group_id, reason)
        if not initial:
            self._maybe_complete_join_phase(group)
            if group.state is _PREP:
                self.timers.schedule(
                    join_key(gid),
                    group.rebalance_timeout_ms(),
                    lambda: self._on_join_timer(gid, group),
                )

    def _try_complete_initial_rebalance(
        self, group_id: str, group: ClassicGroup, delay: int, remaining: int
    ) -> None:
        if not self._live_group(group_id, group):
            return
        if group.new_member_added and remaining != 0:
            group.new_member_added = False
            new_delay = min(self.config.initial_rebalance_delay_ms, remaining)
            new_remaining = max(remaining - delay, 0)
            self.timers.schedule(
                join_key(group_id),
                new_delay,
                lambda: self._try_complete_initial_rebalance(
                    group_id, group, new_delay, new_remaining
                ),
            )
        else:
            self._complete_join(group)

    def _on_join_timer(self, group_id: str, group: ClassicGroup) -> None:
        if self._live_group(group_id, group):
            self._complete_join(group)

    def _maybe_complete_join_phase(self, group: ClassicGroup) -> None:
        if (
            group.state is _PREP
            and group.previous_state is not GroupState.EMPTY
            and group.has_all_members_joined()
        ):
            self._complete_join(group)

    def _complete_join(self, group: ClassicGroup) -> None:
        gid = group.group_id
        self.timers.cancel(join_key(gid))
        if group.state is not _PREP:  # pragma: no cover - guarded by the join key
            return
        gone = [
            m.member_id for m in group.members.values() if not m.awaiting_join and not m.is_static
        ]
        for mid in gone:
            self._drop_member(group, mid)
        if gone:
            group.log.info("removed members that did not rejoin", members=gone)
        if not self._elect_joined_leader(group) and group.members:
            group.log.error("no member rejoined; postponing the join phase")
            self.timers.schedule(
                join_key(gid), group.rebalance_timeout_ms(), lambda: self._on_join_timer(gid, group)
            )
            return
        group.init_next_generation(self.now())
        if group.state is GroupState.EMPTY:
            self._emit(group.to_record(), apply=False)
            return
        leader_members = group.current_members_for_leader()
        for member in list(group.members.values()):
            mid = member.member_id
            group.complete_join(
                member,
                JoinGroupResult(
                    ErrorCode.NONE,
                    member_id=mid,
                    generation_id=group.generation_id,
                    protocol_type=group.protocol_type,
                    protocol_name=group.protocol_name,
                    leader=group.leader_id or "",
                    members=leader_members if group.is_leader(mid) else (),
                ),
            )
            self._reschedule_heartbeat(group, member)
            member.is_new = False
            group.pending_sync_members.add(mid)
        generation = group.generation_id
        self.timers.schedule(
            sync_key(gid),
            group.rebalance_timeout_ms(),
            lambda: self._expire_pending_sync(gid, group, generation),
        )

    @staticmethod
    def _elect_joined_leader(group: ClassicGroup) -> bool:
        if group.leader_id is None:
            return False
        if group.members[group.leader_id].awaiting_join:
            return True
        for member in group.members.values():
            if member.awaiting_join:
                group.leader_id = member.member_id
                return True
        return False

    def _reset_and_propagate_assignment_error(self, group: ClassicGroup, error: ErrorCode) -> None:
        for member in group.members.values():
            member.assignment = b""
        self._propagate_assignment(group, error)

    def _propagate_assignment(self, group: ClassicGroup, error: ErrorCode) -> None:
        ok = error is ErrorCode.NONE
        for member in list(group.members.values()):
            result = SyncGroupResult(
                error,
                protocol_type=group.protocol_type if ok else None,
                protocol_name=group.protocol_name if ok else None,
                assignment=member.assignment,
            )
            if group.complete_sync(member, result):
                self._reschedule_heartbeat(group, member)

    def _expire_pending_sync(self, group_id: str, group: ClassicGroup, generation: int) -> None:
        if not self._live_group(group_id, group) or generation != group.generation_id:
            return
        if group.state not in (_COMP, GroupState.STABLE) or not group.pending_sync_members:
            return
        missing = sorted(group.pending_sync_members)
        for mid in missing:
            self._drop_member(group, mid)
        self._prepare_rebalance(group, f"members {missing} sent no SyncGroup in time")

    def _remove_pending_sync_member(self, group: ClassicGroup, member_id: str) -> None:
        group.pending_sync_members.discard(member_id)
        if group.state not in (_COMP, GroupState.STABLE) or not group.pending_sync_members:
            self.timers.cancel(sync_key(group.group_id))

    # --- expiry ----------------------------------------------------------------------------
    def _expire_heartbeat(self, group_id: str, member_id: str, group: ClassicGroup) -> None:
        if not self._live_group(group_id, group):
            return
        member = group.members.get(member_id)
        if member is None or member.has_satisfied_heartbeat():
            return
        group.log.info("member session expired", member_id=member_id)
        self._remove_member_and_update(group, member, f"session of {member_id} expired")

    def _expire_pending_member(self, group_id: str, member_id: str, group: ClassicGroup) -> None:
        if not self._live_group(group_id, group) or member_id not in group.pending_join_members:
            return
        group.log.info("pending member expired", member_id=member_id)
        group.remove(member_id)
        if group.state is _PREP and group.has_all_members_joined():
            self._complete_join(group)

    def _remove_member_and_update(self, group: ClassicGroup, member: Member, reason: str) -> None:
        self._drop_member(group, member.member_id)
        if group.state in (GroupState.STABLE, _COMP):
            self._maybe_prepare_rebalance_or_complete_join(group, reason)
        elif group.state is _PREP and group.has_all_members_joined():
            self._complete_join(group)

    # --- SyncGroup -------------------------------------------------------------------------
    def sync_group(self, cmd: SyncGroup) -> Deferred[SyncGroupResult]:
        """SyncGroup. Parked in CompletingRebalance until the leader's assignment arrives."""
        waiter: Deferred[SyncGroupResult] = Deferred()
        if not cmd.group_id:
            waiter.resolve(SyncGroupResult(ErrorCode.INVALID_GROUP_ID))
            return waiter
        error = self.availability_error()
        if error is ErrorCode.NONE and cmd.group_id in self.consumer_groups:
            waiter.resolve(self.classic_sync_consumer(cmd))
            return waiter
        group = self.groups.get(cmd.group_id)
        if error is ErrorCode.NONE:
            error = (
                ErrorCode.UNKNOWN_MEMBER_ID if group is None else self._validate_sync(group, cmd)
            )
        if error is not ErrorCode.NONE:
            waiter.resolve(SyncGroupResult(error))
            return waiter
        assert group is not None
        mid = cmd.member_id
        if group.state is _PREP:
            waiter.resolve(SyncGroupResult(ErrorCode.REBALANCE_IN_PROGRESS))
        elif group.state is _COMP:
            group.set_sync_waiter(group.members[mid], waiter)
            self._remove_pending_sync_member(group, mid)
            if group.is_leader(mid):
                given = dict(cmd.assignments)
                missing = [m for m in group.members if m not in given]
                if missing:
                    group.log.warning("leader left members without assignment", members=missing)
                for m in group.members.values():
                    m.assignment = given.get(m.member_id, b"")
                group.transition_to(
                    GroupState.STABLE, self.now(), f"assignment received from leader {mid}"
                )
                self.events.rebalance_completed(group.group_id)
                self._emit(group.to_record(), apply=False)
                self._propagate_assignment(group, ErrorCode.NONE)
        else:  # Stable
            self._remove_pending_sync_member(group, mid)
            waiter.resolve(
                SyncGroupResult(
                    ErrorCode.NONE,
                    protocol_type=group.protocol_type,
                    protocol_name=group.protocol_name,
                    assignment=group.members[mid].assignment,
                )
            )
        return waiter

    @staticmethod
    def _validate_sync(group: ClassicGroup, cmd: SyncGroup) -> ErrorCode:
        if group.state is GroupState.DEAD:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        error = group.validate_member(cmd.member_id, cmd.group_instance_id)
        if error is not ErrorCode.NONE:
            return error
        if cmd.generation_id != group.generation_id:
            return ErrorCode.ILLEGAL_GENERATION
        if _inconsistent(cmd.protocol_type, group.protocol_type) or _inconsistent(
            cmd.protocol_name, group.protocol_name
        ):
            return ErrorCode.INCONSISTENT_GROUP_PROTOCOL
        return ErrorCode.NONE

    # --- Heartbeat -------------------------------------------------------------------------
    def heartbeat(self, cmd: Heartbeat) -> HeartbeatResult:
        """Heartbeat: resets the member's session in PreparingRebalance (answering 27),
        CompletingRebalance and Stable. NONE while the shard is loading."""
        g, gen, m, i = cmd.group_id, cmd.generation_id, cmd.member_id, cmd.group_instance_id
        return HeartbeatResult(self.heartbeat_error(g, gen, m, i))

    def heartbeat_error(
        self, group_id: str, generation: int, member_id: str, instance_id: str | None
    ) -> ErrorCode:
        """``heartbeat`` without its command and result objects (the hot path's)."""
        if not group_id:
            return ErrorCode.INVALID_GROUP_ID
        group = self.groups.get(group_id)
        if group is None or not self.owned or self.loading or group_id in self.consumer_groups:
            error = self.availability_error()
            if error is ErrorCode.COORDINATOR_LOAD_IN_PROGRESS:
                return ErrorCode.NONE
            if error is not ErrorCode.NONE:
                return error
            if group_id in self.consumer_groups:
                cmd = Heartbeat(group_id, generation, member_id, instance_id)
                return self.classic_heartbeat_consumer(cmd).error
            if group is None:
                return ErrorCode.UNKNOWN_MEMBER_ID
        if group.state is GroupState.DEAD:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        error = group.validate_member(member_id, instance_id)
        if error is not ErrorCode.NONE:
            return error
        if generation != group.generation_id:
            return ErrorCode.ILLEGAL_GENERATION
        if group.state is GroupState.EMPTY:  # pragma: no cover - an Empty group has no members
            return ErrorCode.UNKNOWN_MEMBER_ID
        self._reschedule_heartbeat(group, group.members[member_id])
        return ErrorCode.REBALANCE_IN_PROGRESS if group.state is _PREP else ErrorCode.NONE

    # --- LeaveGroup ------------------------------------------------------------------------
    def leave_group(self, cmd: LeaveGroup) -> LeaveGroupResult:
        """LeaveGroup (batch). Unknown group: every member UNKNOWN_MEMBER_ID, top-level NONE."""
        if not cmd.group_id:
            return LeaveGroupResult(ErrorCode.INVALID_GROUP_ID)
        error = self.availability_error()
        if error is not ErrorCode.NONE:
            return LeaveGroupResult(error)
        if cmd.group_id in self.consumer_groups:
            return self.classic_leave_consumer(cmd)
        group = self.groups.get(cmd.group_id)
        if group is None:
            return LeaveGroupResult(
                ErrorCode.NONE,
                tuple(LeaveMemberResult(m, i, ErrorCode.UNKNOWN_MEMBER_ID) for m, i in cmd.members),
            )
        if group.state is GroupState.DEAD:
            return LeaveGroupResult(ErrorCode.COORDINATOR_NOT_AVAILABLE)
        results: list[LeaveMemberResult] = []
        removed: list[str] = []
        for member_id, instance_id in cmd.members:
            if member_id == "":
                target = None if instance_id is None else group.static_members.get(instance_id)
                if target is None:
                    err = ErrorCode.UNKNOWN_MEMBER_ID
                else:
                    self._drop_member(group, target)
                    removed.append(target)
                    err = ErrorCode.NONE
            elif member_id in group.pending_join_members:
                self._drop_member(group, member_id)
                removed.append(member_id)
                err = ErrorCode.NONE
            else:
                err = group.validate_member(member_id, instance_id)
                if err is ErrorCode.NONE:
                    self._drop_member(group, member_id)
                    removed.append(member_id)
            results.append(LeaveMemberResult(member_id, instance_id, err))
        if removed:
            group.log.info("members left", members=removed)
            reason = f"explicit LeaveGroup for {removed}"
            if group.state in (GroupState.STABLE, _COMP):
                self._maybe_prepare_rebalance_or_complete_join(group, reason)
            elif group.state is _PREP:
                self._maybe_complete_join_phase(group)
        return LeaveGroupResult(ErrorCode.NONE, tuple(results))
