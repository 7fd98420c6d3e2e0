"""The KIP-848 ConsumerGroupHeartbeat and ConsumerGroupDescribe operations of a shard (Kafka's
GroupMetadataManager.consumerGroupHeartbeat, in order):

1. Validate the request (INVALID_REQUEST, UNSUPPORTED_ASSIGNOR, INVALID_REGULAR_EXPRESSION).
2. Leaving (epoch -1, or -2 for a static member that will come back): the member goes; its
   partitions are released; the group epoch is bumped (not for -2: the static member keeps
   its place and assignment until its session times out).
3. Find the group (epoch 0 creates it; an empty classic group is converted; a classic group
   with members answers GROUP_ID_NOT_FOUND) and the member: epoch 0 joins (a new member, or
   a static member taking over its instance id's place and assignment: UNRELEASED_INSTANCE_ID
   while the previous one has not left); any other epoch must be the member's current one,
   or its previous one with owned partitions it still holds (else FENCED_MEMBER_EPOCH;
   an unknown member: UNKNOWN_MEMBER_ID). GROUP_MAX_SIZE_REACHED past
   ``group.consumer.max.size``.
4. A changed subscription (or a new member, or topics that changed) bumps the group epoch;
   a group epoch above the assignment epoch recomputes the target assignment with the
   server assignor the members name (most votes; the first configured one by default). A new
   regex is resolved after the answer, by a timer op that bumps the group epoch (see below).
5. The member is reconciled one step towards its target (``reconcile``): partitions it must
   revoke first, and only once its heartbeat no longer owns them do others get them.
6. Timers: the session timeout (``group.consumer.session.timeout.ms``) removes a member that
   stops heartbeating; the rebalance timeout removes one that does not revoke in time.

Every change is also a record for the sink (group epoch, member subscription, target member
and epoch, current member assignment, tombstones), written to the coordinator log under
``--data-dir`` and replayed at load, so a consumer group survives a restart with its epochs
and assignments. The live state is changed directly (the records are for the log).
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import replace

from kgroupd.assignors.server import DEFAULT_SERVER_ASSIGNOR, SERVER_ASSIGNORS, ServerMember
from kgroupd.protocol.errors import ErrorCode

from ..core import ShardCore
from ..group import ClassicGroup
from .commands import (
    JOIN_GROUP_MEMBER_EPOCH,
    LEAVE_GROUP_MEMBER_EPOCH,
    LEAVE_GROUP_STATIC_MEMBER_EPOCH,
    ConsumerGroupHeartbeat,
    ConsumerGroupHeartbeatResult,
    DescribedConsumerGroup,
    DescribedConsumerMember,
)
from .group import Assignment, ConsumerGroup, ConsumerMember, MemberState, to_partitions
from .reconcile import FencedByUnknownState, reconcile
from .records import (
    K_CURRENT,
    K_EPOCH,
    K_MEMBER,
    K_REGEX,
    K_TARGET,
    ConsumerGroupEpochRecord,
    ConsumerGroupRegexRecord,
    ConsumerGroupTargetEpochRecord,
    ConsumerGroupTargetMemberRecord,
    ConsumerRecord,
    ConsumerTombstoneRecord,
)
from .regex import InvalidRegex, compile_regex, matching_topics

__all__ = ["ConsumerGroupOps"]


class _Refused(Exception):
    def __init__(self, error: ErrorCode, message: str | None = None) -> None:
        super().__init__(message)
        self.error = error
        self.message = message


def session_key(group_id: str, member_id: str) -> str:
    return f"consumer-session/{group_id}/{member_id}"


def revoke_key(group_id: str, member_id: str) -> str:
    return f"consumer-revoke/{group_id}/{member_id}"


def regex_key(group_id: str) -> str:
    """The group's regex resolution: soon after a new regex, then every refresh interval
    (``CoordinatorConfig.consumer_regex_refresh_interval_ms``, 10 minutes by default)."""
    return f"consumer-regex/{group_id}"


def classic_join_key(group_id: str, member_id: str) -> str:
    """A classic member asked to rejoin must do so within its rebalance timeout."""
    return f"consumer-join/{group_id}/{member_id}"


def classic_sync_key(group_id: str, member_id: str) -> str:
    """A classic member answered its JoinGroup must sync within its rebalance timeout."""
    return f"consumer-sync/{group_id}/{member_id}"


class ConsumerGroupOps(ShardCore):
    consumer_groups: dict[str, ConsumerGroup]

    # --- ConsumerGroupHeartbeat ---------------------------------------------------------------
    def consumer_group_heartbeat(self, cmd: ConsumerGroupHeartbeat) -> ConsumerGroupHeartbeatResult:
        error = self.availability_error()
        if error is not ErrorCode.NONE:
            return ConsumerGroupHeartbeatResult(error)
        try:
            self._validate(cmd)
            if cmd.member_epoch in (LEAVE_GROUP_MEMBER_EPOCH, LEAVE_GROUP_STATIC_MEMBER_EPOCH):
                return self._leave(cmd)
            return self._heartbeat(cmd)
        except _Refused as exc:
            return ConsumerGroupHeartbeatResult(exc.error, exc.message)

    def _validate(self, cmd: ConsumerGroupHeartbeat) -> None:
        bad = ErrorCode.INVALID_REQUEST
        if not cmd.group_id:
            raise _Refused(bad, "GroupId can't be empty.")
        if cmd.instance_id == "":
            raise _Refused(bad, "InstanceId can't be empty.")
        if cmd.rack_id == "":
            raise _Refused(bad, "RackId can't be empty.")
        epoch = cmd.member_epoch
        if cmd.client_generates_member_id and not cmd.member_id:
            raise _Refused(bad, "MemberId can't be empty.")
        leaving = epoch in (LEAVE_GROUP_MEMBER_EPOCH, LEAVE_GROUP_STATIC_MEMBER_EPOCH)
        if (epoch > 0 or leaving) and not cmd.member_id:
            raise _Refused(bad, "MemberId can't be empty.")
        if epoch == JOIN_GROUP_MEMBER_EPOCH:
            if cmd.rebalance_timeout_ms == -1:
                raise _Refused(bad, "RebalanceTimeoutMs must be provided in first request.")
            if cmd.owned_partitions is None or cmd.owned_partitions:
                raise _Refused(bad, "TopicPartitions must be empty when (re-)joining.")
            if cmd.subscribed_topic_names is None and cmd.subscribed_topic_regex is None:
                raise _Refused(
                    bad,
                    "SubscribedTopicNames or SubscribedTopicRegex must be set in first request.",
                )
        elif epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH and cmd.instance_id is None:
            raise _Refused(bad, "InstanceId can't be null.")
        elif epoch < LEAVE_GROUP_STATIC_MEMBER_EPOCH:
            raise _Refused(bad, f"MemberEpoch is invalid: {epoch}.")
        assignor = cmd.server_assignor
        if assignor is not None and assignor not in self.config.consumer_assignors:
            raise _Refused(
                ErrorCode.UNSUPPORTED_ASSIGNOR,
                f"ServerAssignor {assignor} is not supported. Supported assignors: "
                f"{', '.join(self.config.consumer_assignors)}.",
            )
        if cmd.subscribed_topic_regex:
            try:
                compile_regex(cmd.subscribed_topic_regex)
            except InvalidRegex as exc:
                raise _Refused(ErrorCode.INVALID_REGULAR_EXPRESSION, str(exc)) from None

    def _group(self, group_id: str, create: bool) -> ConsumerGroup:
        group = self.consumer_groups.get(group_id)
        if group is not None:
            return group
        classic = self.groups.get(group_id)
        if classic is not None and classic.members:
            if create:
                return self._upgrade(classic)
            raise _Refused(
                ErrorCode.GROUP_ID_NOT_FOUND, f"Group {group_id} is not a consumer group."
            )
        if not create:
            raise _Refused(ErrorCode.GROUP_ID_NOT_FOUND, f"Group {group_id} not found.")
        if classic is not None:  # an empty classic group (offsets only) becomes a consumer group
            del self.groups[group_id]
        group = self.consumer_groups[group_id] = ConsumerGroup(group_id)
        self.log.info("consumer_group_created", group_id=group_id)
        return group

    def _heartbeat(self, cmd: ConsumerGroupHeartbeat) -> ConsumerGroupHeartbeatResult:
        steady = self._steady(cmd)
        if steady is not None:
            return steady
        joining = cmd.member_epoch == JOIN_GROUP_MEMBER_EPOCH
        group = self._group(cmd.group_id, create=joining)
        old = self._member_for(group, cmd) if not joining else self._joiner(group, cmd)
        member = replace(
            old,
            client_id=cmd.client_id or old.client_id,
            client_host=cmd.client_host or old.client_host,
            rack_id=cmd.rack_id if cmd.rack_id is not None else old.rack_id,
            rebalance_timeout_ms=cmd.rebalance_timeout_ms
            if cmd.rebalance_timeout_ms != -1
            else old.rebalance_timeout_ms,
            subscribed_topic_names=tuple(sorted(cmd.subscribed_topic_names))
            if cmd.subscribed_topic_names is not None
            else old.subscribed_topic_names,
            subscribed_topic_regex=(cmd.subscribed_topic_regex or None)
            if cmd.subscribed_topic_regex is not None
            else old.subscribed_topic_regex,
            server_assignor=cmd.server_assignor
            if cmd.server_assignor is not None
            else old.server_assignor,
        )
        new_member = old.member_id not in group.members
        if new_member or not member.same_subscription(old):
            group.members[member.member_id] = member
            if member.instance_id is not None:
                group.static_members[member.instance_id] = member.member_id
            self._record(member.subscription_record(group.group_id))
            self._bump(group, f"member {member.member_id} joined or changed its subscription")
        else:
            group.members[member.member_id] = member
        if group.group_epoch > group.assignment_epoch:
            self._assign(group)
        try:
            reconciled = reconcile(
                group.members[member.member_id],
                group.assignment_epoch,
                group.target.get(member.member_id, {}),
                group.current_partition_epoch,
                cmd.owned_partitions,
            )
        except FencedByUnknownState:
            self._remove_member(group, member.member_id, "unknown state")
            raise _Refused(ErrorCode.FENCED_MEMBER_EPOCH, "unknown member state") from None
        before = group.members[member.member_id]
        group._put_member(before, reconciled)
        if new_member or reconciled != before:
            self._record(reconciled.assignment_record(group.group_id))
        self._schedule_timers(group, reconciled)
        full = (
            cmd.rebalance_timeout_ms != -1
            and (cmd.subscribed_topic_names is not None or cmd.subscribed_topic_regex is not None)
            and cmd.owned_partitions is not None
        )
        send_assignment = (
            joining
            or full
            or before.assigned != reconciled.assigned
            or old.assigned != reconciled.assigned
        )
        return ConsumerGroupHeartbeatResult(
            ErrorCode.NONE,
            member_id=reconciled.member_id,
            member_epoch=reconciled.member_epoch,
            heartbeat_interval_ms=self.config.consumer_heartbeat_interval_ms,
            assignment=to_partitions(reconciled.assigned) if send_assignment else None,
        )

    def _steady(self, cmd: ConsumerGroupHeartbeat) -> ConsumerGroupHeartbeatResult | None:
        if (
            cmd.owned_partitions is not None
            or cmd.subscribed_topic_names is not None
            or cmd.subscribed_topic_regex is not None
            or cmd.server_assignor is not None
            or cmd.rack_id is not None
            or cmd.rebalance_timeout_ms != -1
        ):
            return None
        if not self.steady_heartbeat(cmd.group_id, cmd.member_id, cmd.member_epoch):
            return None
        return ConsumerGroupHeartbeatResult(
            ErrorCode.NONE,
            member_id=cmd.member_id,
            member_epoch=cmd.member_epoch,
            heartbeat_interval_ms=self.config.consumer_heartbeat_interval_ms,
        )

    def steady_heartbeat(self, group_id: str, member_id: str, epoch: int) -> bool:
        """The common heartbeat, answered at once: a reconciled member at the group's epoch
        whose request changes nothing (every optional field null) only resets its session.
        False when the full operation must run."""
        if not self._active():
            return False
        group = self.consumer_groups.get(group_id)
        if group is None:
            return False
        member = group.members.get(member_id)
        if (
            member is None
            or member.member_epoch != epoch
            or member.state is not MemberState.STABLE
            or epoch != group.assignment_epoch
            or group.group_epoch != epoch
        ):
            return False
        self._schedule_session(group, member_id)
        return True

    def _joiner(self, group: ConsumerGroup, cmd: ConsumerGroupHeartbeat) -> ConsumerMember:
        member_id = cmd.member_id if cmd.client_generates_member_id or cmd.member_id else ""
        if not member_id:
            member_id = str(uuid.uuid4())
        if cmd.instance_id is not None:
            previous = group.static_member(cmd.instance_id)
            if previous is not None and previous.member_id != member_id:
                if previous.member_epoch != LEAVE_GROUP_STATIC_MEMBER_EPOCH:
                    raise _Refused(
                        ErrorCode.UNRELEASED_INSTANCE_ID,
                        f"Static member {previous.member_id} with instance id "
                        f"{cmd.instance_id} is not released yet.",
                    )
                # The static member comes back: its place, epoch and assignment carry over.
                self._forget_member(group, previous.member_id)
                del group.members[previous.member_id]
                group.target[member_id] = group.target.pop(previous.member_id, {})
                epoch = previous.previous_member_epoch
                taken = replace(previous, member_id=member_id, member_epoch=epoch)
                group._put_member(taken, taken)
                gid = group.group_id
                for kind in (K_CURRENT, K_TARGET, K_MEMBER):
                    self._record(ConsumerTombstoneRecord(kind, gid, previous.member_id))
                self._record(taken.subscription_record(gid))
                target = to_partitions(group.target.get(member_id, {}))
                self._record(ConsumerGroupTargetMemberRecord(gid, member_id, target))
                self._record(taken.assignment_record(gid))
                self.log.info(
                    "consumer_static_member_replaced",
                    group_id=group.group_id,
                    old_member_id=previous.member_id,
                    member_id=member_id,
                )
                return taken
        existing = group.members.get(member_id)
        if existing is not None:
            # A member that rejoins (epoch 0) starts again: what it held is released.
            self._remove_member(group, member_id, "rejoined with epoch 0")
        limit = self.config.consumer_max_size
        if limit is not None and len(group.members) >= limit:
            raise _Refused(
                ErrorCode.GROUP_MAX_SIZE_REACHED,
                f"The consumer group has reached its maximum capacity of {limit} members.",
            )
        return ConsumerMember(member_id, instance_id=cmd.instance_id, state=MemberState.STABLE)

    def _member_for(self, group: ConsumerGroup, cmd: ConsumerGroupHeartbeat) -> ConsumerMember:
        member = group.members.get(cmd.member_id)
        if member is None:
            raise _Refused(
                ErrorCode.UNKNOWN_MEMBER_ID,
                f"Member {cmd.member_id} is not a member of group {group.group_id}.",
            )
        epoch = cmd.member_epoch
        if epoch > member.member_epoch:
            raise _Refused(
                ErrorCode.FENCED_MEMBER_EPOCH,
                f"The consumer group member has a greater member epoch ({epoch}) than the one "
                f"known by the group coordinator ({member.member_epoch}).",
            )
        if epoch < member.member_epoch and (
            epoch != member.previous_member_epoch
            or not _is_subset(cmd.owned_partitions, member.assigned)
        ):
            raise _Refused(
                ErrorCode.FENCED_MEMBER_EPOCH,
                f"The consumer group member has a smaller member epoch ({epoch}) than the one "
                f"known by the group coordinator ({member.member_epoch}).",
            )
        return member

    # --- leaving, expiry --------------------------------------------------------------------
    def _leave(self, cmd: ConsumerGroupHeartbeat) -> ConsumerGroupHeartbeatResult:
        group = self._group(cmd.group_id, create=False)
        member_id = cmd.member_id
        member = group.members.get(member_id)
        if member is None and cmd.instance_id is not None:
            member = group.static_member(cmd.instance_id)
        if member is None:
            raise _Refused(
                ErrorCode.UNKNOWN_MEMBER_ID,
                f"Member {member_id} is not a member of group {group.group_id}.",
            )
        if cmd.member_epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH:
            # Kept, with its assignment, until it rejoins or its session times out.
            left = replace(
                member,
                member_epoch=LEAVE_GROUP_STATIC_MEMBER_EPOCH,
                previous_member_epoch=member.member_epoch,
            )
            group._put_member(member, left)  # its partitions stay held, now at epoch -2
            self._record(left.assignment_record(group.group_id))
            self.timers.cancel(revoke_key(group.group_id, member.member_id))
            self._schedule_session(group, member.member_id)
        else:
            self._fence_member(group, member.member_id, "left the group")
        return ConsumerGroupHeartbeatResult(
            ErrorCode.NONE, member_id=member.member_id, member_epoch=cmd.member_epoch
        )

    def _upgrade(self, classic: ClassicGroup) -> ConsumerGroup:
        """A classic group with members met by a joining consumer member (the migration
        mixin converts it when the policy allows)."""
        raise _Refused(
            ErrorCode.GROUP_ID_NOT_FOUND, f"Group {classic.group_id} is not a consumer group."
        )

    def _fence_member(self, group: ConsumerGroup, member_id: str, reason: str) -> None:
        """A member leaves or is fenced (the migration mixin may downgrade the group)."""
        self._remove_member(group, member_id, reason)

    def _remove_member(
        self, group: ConsumerGroup, member_id: str, reason: str, bump: bool = True
    ) -> None:
        if member_id not in group.members:
            return
        self._forget_member(group, member_id)
        member = group.members.pop(member_id)
        instance = member.instance_id
        if instance is not None and group.static_members.get(instance) == member_id:
            del group.static_members[instance]
        group.target.pop(member_id, None)
        for kind in (K_CURRENT, K_TARGET, K_MEMBER):
            self._record(ConsumerTombstoneRecord(kind, group.group_id, member_id))
        if bump:
            self._bump(group, f"member {member_id} {reason}")

    def _forget_member(self, group: ConsumerGroup, member_id: str) -> None:
        member = group.members.get(member_id)
        if member is not None:
            group._remove_partition_epochs(member)
        group.assignment_epochs.pop(member_id, None)
        for key in (session_key, revoke_key, classic_join_key, classic_sync_key):
            self.timers.cancel(key(group.group_id, member_id))

    def _schedule_timers(self, group: ConsumerGroup, member: ConsumerMember) -> None:
        self._schedule_session(group, member.member_id)
        key = revoke_key(group.group_id, member.member_id)
        if member.state is MemberState.UNREVOKED_PARTITIONS:
            if not self.timers_scheduled(key):
                gid, mid = group.group_id, member.member_id
                timeout = max(member.rebalance_timeout_ms, 0)
                self.timers.schedule(key, timeout, lambda: self._fence(gid, mid, group, "revoke"))
        else:
            self.timers.cancel(key)

    def timers_scheduled(self, key: str) -> bool:
        check = getattr(self.timers, "is_scheduled", None)
        return bool(check(key)) if check is not None else False

    def _schedule_session(self, group: ConsumerGroup, member_id: str) -> None:
        gid = group.group_id
        member = group.members.get(member_id)
        classic = member.classic if member is not None else None
        self.timers.schedule(
            session_key(gid, member_id),
            classic.session_timeout_ms
            if classic is not None
            else self.config.consumer_session_timeout_ms,
            lambda: self._fence(gid, member_id, group, "session"),
        )

    def _fence(self, group_id: str, member_id: str, group: ConsumerGroup, why: str) -> None:
        if not self._active() or self.consumer_groups.get(group_id) is not group:
            return
        if member_id in group.members:
            self.log.info(
                "consumer_member_fenced", group_id=group_id, member_id=member_id, timeout=why
            )
            self._fence_member(group, member_id, f"fenced ({why} timeout)")

    # --- epochs and assignment ----------------------------------------------------------------
    def _bump(self, group: ConsumerGroup, reason: str) -> None:
        self._update_regexes(group)
        group.group_epoch += 1
        self.events.rebalance_started(group.group_id, reason, consumer=True)
        group.subscription_metadata = self._metadata(group)
        self._record(ConsumerGroupEpochRecord(group.group_id, group.group_epoch))
        self.log.info(
            "consumer_group_epoch", group_id=group.group_id, epoch=group.group_epoch, reason=reason
        )

    def _metadata(self, group: ConsumerGroup) -> tuple[tuple[str, uuid.UUID, int], ...]:
        topics = self.topics_view.topics()
        names = group.subscribed_topic_names()
        return tuple(sorted((n, *topics[n]) for n in names if n in topics))

    # --- regular expressions (Kafka's maybeUpdateRegularExpressions) ---------------------------
    def _update_regexes(self, group: ConsumerGroup) -> None:
        """Drop the regexes no member subscribes to any more; a new one is resolved off the
        request path (a timer due at once), so the answer at hand is computed without it."""
        in_use = group.regexes_in_use(None, None)
        for regex in [r for r in group.resolved_regexes if r not in in_use]:
            del group.resolved_regexes[regex]
            self._record(ConsumerTombstoneRecord(K_REGEX, group.group_id, regex))
        if not in_use:
            self.timers.cancel(regex_key(group.group_id))
        elif any(r not in group.resolved_regexes for r in in_use):
            self._schedule_regex_resolution(group, 0)

    def _schedule_regex_resolution(self, group: ConsumerGroup, delay_ms: int) -> None:
        gid = group.group_id
        self.timers.schedule(regex_key(gid), delay_ms, lambda: self._resolve_regexes(gid, group))

    def _resolve_regexes(self, group_id: str, group: ConsumerGroup) -> None:
        """Resolve every subscribed regex against the topics; a changed resolution bumps the
        group epoch (the members get the new assignment on a later heartbeat). Runs again
        every refresh interval while the group has regexes."""
        if not self._active() or self.consumer_groups.get(group_id) is not group:
            return
        topics, changed = self.topics_view.topics(), False
        for regex in sorted(group.regexes_in_use(None, None)):
            resolved = matching_topics(regex, topics)
            if group.resolved_regexes.get(regex) != resolved:
                group.resolved_regexes[regex] = resolved
                self._record(ConsumerGroupRegexRecord(group_id, regex, resolved))
                changed = True
        if group.resolved_regexes:
            interval = self.config.consumer_regex_refresh_interval_ms
            self._schedule_regex_resolution(group, interval)
        if changed and group.members and self._metadata_changed(group):
            self._bump(group, "subscribed regular expressions resolved")
            self._assign(group)

    def _metadata_changed(self, group: ConsumerGroup) -> bool:
        return self._metadata(group) != group.subscription_metadata

    def _assign(self, group: ConsumerGroup) -> None:
        """The target assignment for the group epoch, by the members' preferred assignor."""
        ids = {name: (topic_id, count) for name, topic_id, count in group.subscription_metadata}
        partitions = {topic_id: count for topic_id, count in ids.values()}
        members = {
            m.member_id: ServerMember(
                m.member_id,
                m.instance_id,
                m.rack_id,
                frozenset(ids[t][0] for t in group.member_topics(m) if t in ids),
                group.target.get(m.member_id, {}),
            )
            for m in group.members.values()
        }
        name = group.preferred_assignor() or (
            self.config.consumer_assignors[0]
            if self.config.consumer_assignors
            else DEFAULT_SERVER_ASSIGNOR
        )
        result = SERVER_ASSIGNORS[name].assign(members, partitions)
        old_target = group.target
        group.target = {mid: dict(result.get(mid, {})) for mid in group.members}
        group.assignment_epoch = group.group_epoch
        group.assignor_name = name
        if self.persisting:
            gid = group.group_id
            for mid, target in group.target.items():
                if old_target.get(mid) != target:
                    self._record(ConsumerGroupTargetMemberRecord(gid, mid, to_partitions(target)))
            self._record(ConsumerGroupTargetEpochRecord(gid, group.assignment_epoch))

    def _record(self, record: ConsumerRecord) -> None:
        """To the sink only: the live group already holds the change (records are replayed
        at load)."""
        if self.persisting:
            self.sink(record)

    def delete_consumer_group(self, group_id: str) -> None:
        del self.consumer_groups[group_id]
        self.timers.cancel(regex_key(group_id))
        self._record(ConsumerTombstoneRecord(K_EPOCH, group_id))

    def on_topics_changed(self) -> None:
        """Topics were created, deleted or grew: groups whose subscriptions resolve to other
        metadata get a new epoch (their members learn of it at their next heartbeat)."""
        if not self._active():
            return
        for group in self.consumer_groups.values():
            if group.regexes_in_use(None, None):
                self._schedule_regex_resolution(group, 0)
            if group.members and self._metadata_changed(group):
                self._bump(group, "subscribed topics changed")
                self._assign(group)

    # --- describe, list ------------------------------------------------------------------------
    def describe_consumer_group(self, group_id: str) -> DescribedConsumerGroup:
        error = self.availability_error()
        if error is not ErrorCode.NONE:
            return DescribedConsumerGroup(error, group_id)
        group = self.consumer_groups.get(group_id)
        if group is None:
            message = (
                f"Group {group_id} is not a consumer group."
                if group_id in self.groups
                else f"Group {group_id} not found."
            )
            return DescribedConsumerGroup(ErrorCode.GROUP_ID_NOT_FOUND, group_id, message)
        return DescribedConsumerGroup(
            ErrorCode.NONE,
            group_id,
            state=group.state.value,
            group_epoch=group.group_epoch,
            assignment_epoch=group.assignment_epoch,
            assignor_name=group.assignor_name,
            members=tuple(
                DescribedConsumerMember(
                    m.member_id,
                    m.instance_id,
                    m.rack_id,
                    m.member_epoch,
                    m.client_id,
                    m.client_host,
                    m.subscribed_topic_names,
                    m.subscribed_topic_regex,
                    to_partitions(m.assigned),
                    to_partitions(group.target.get(m.member_id, {})),
                    0 if m.uses_classic else 1,
                )
                for m in group.members.values()
            ),
        )


def _is_subset(owned: object, assigned: Mapping[uuid.UUID, frozenset[int]]) -> bool:
    if owned is None:
        return True
    for topic, parts in owned:  # type: ignore[attr-defined]
        have = assigned.get(topic, frozenset())
        if any(p not in have for p in parts):
            return False
    return True


_ = Assignment  # re-exported type for readers of this module
