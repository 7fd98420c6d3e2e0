"""Online migration between the two group protocols (Kafka 4's GroupMetadataManager:
convertToConsumerGroup, convertToClassicGroup and the classicGroup*ToConsumerGroup paths).

- Upgrade: a ConsumerGroupHeartbeat joining a classic group with members converts it into a
  consumer group when ``group.consumer.migration.policy`` allows upgrades, the group uses
  the ``consumer`` embedded protocol and it fits ``group.consumer.max.size``. Each classic
  member becomes a member using the classic protocol, at the group's generation as its
  epoch, holding the partitions of its last assignment (also its target). Parked JoinGroup
  and SyncGroup requests are answered REBALANCE_IN_PROGRESS.
- Classic members in a consumer group: JoinGroup is answered at once with the member's epoch
  as the generation (no leader: the coordinator assigns), after one reconciliation step with
  the owned partitions of its subscription; SyncGroup returns its current partitions;
  Heartbeat answers REBALANCE_IN_PROGRESS while the group epoch is ahead of the member, it
  has partitions to revoke, or partitions it waits for were released (it then rejoins);
  LeaveGroup removes it. Timers: the classic session timeout, a join timeout (the rebalance
  timeout after REBALANCE_IN_PROGRESS) and a sync timeout (after the JoinGroup answer).
- Downgrade: when the last member using the consumer protocol leaves or is fenced and the
  rest use the classic protocol, the group (policy permitting, within
  ``group.max.size``) becomes a classic group at the group epoch as its generation, each
  member holding its target assignment, and a rebalance starts.

Committed offsets are the group id's and survive both conversions.
"""

from __future__ import annotations

import uuid
from dataclasses import replace

from kgroupd.assignors.codec import (
    ASSIGNMENT_MAX_VERSION,
    CodecError,
    decode_assignment,
    decode_subscription,
    encode_assignment,
    peek_version,
)
from kgroupd.assignors.codec import Assignment as EmbeddedAssignment
from kgroupd.protocol.errors import ErrorCode

from ..commands import (
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
from ..group import ClassicGroup, Member
from ..records import GroupTombstoneRecord
from ..state import GroupState
from .group import (
    Assignment,
    ClassicMeta,
    ConsumerGroup,
    ConsumerMember,
    MemberState,
    to_partitions,
)
from .ops import ConsumerGroupOps, _Refused, classic_join_key, classic_sync_key
from .reconcile import reconcile
from .records import (
    K_CURRENT,
    K_MEMBER,
    K_TARGET,
    ConsumerGroupEpochRecord,
    ConsumerGroupTargetEpochRecord,
    ConsumerGroupTargetMemberRecord,
    ConsumerTombstoneRecord,
)

__all__ = ["MigrationOps"]

CONSUMER = "consumer"


class MigrationOps(ConsumerGroupOps):
    # --- policy ---------------------------------------------------------------------------
    def _upgrade_enabled(self) -> bool:
        return self.config.consumer_migration_policy in ("upgrade", "bidirectional")

    def _downgrade_enabled(self) -> bool:
        return self.config.consumer_migration_policy in ("downgrade", "bidirectional")

    # --- upgrade: classic -> consumer -----------------------------------------------------
    def _upgrade(self, classic: ClassicGroup) -> ConsumerGroup:
        gid = classic.group_id
        why = None
        limit = self.config.consumer_max_size
        if not self._upgrade_enabled():
            why = "the online upgrade is disabled"
        elif not classic.uses_consumer_protocol():
            why = "the group does not use the consumer embedded protocol"
        elif limit is not None and len(classic.members) > limit:
            why = "the group size exceeds the consumer group maximum size"
        if why is not None:
            self.log.info("classic_group_not_upgraded", group_id=gid, reason=why)
            raise _Refused(
                ErrorCode.GROUP_ID_NOT_FOUND,
                f"Cannot upgrade classic group {gid} to consumer group because {why}.",
            )
        try:
            members = [self._converted(classic, m) for m in classic.members.values()]
        except CodecError as exc:
            raise _Refused(
                ErrorCode.GROUP_ID_NOT_FOUND,
                f"Cannot upgrade the classic group {gid} to consumer group because the "
                f"embedded consumer protocol is malformed: {exc}.",
            ) from None
        epoch = classic.generation_id
        self._kill_group(classic, ErrorCode.REBALANCE_IN_PROGRESS, "upgraded to a consumer group")
        del self.groups[gid]
        self._emit(GroupTombstoneRecord(gid), apply=False)
        group = self.consumer_groups[gid] = ConsumerGroup(gid)
        group.group_epoch = group.assignment_epoch = epoch
        for member in members:
            group._put_member(member, member)
            group.target[member.member_id] = member.assigned
        group.subscription_metadata = self._metadata(group)
        self._record(ConsumerGroupEpochRecord(gid, epoch))
        for member in members:
            self._record(member.subscription_record(gid))
            self._record(ConsumerGroupTargetMemberRecord(gid, member.member_id, _tp(member)))
        self._record(ConsumerGroupTargetEpochRecord(gid, epoch))
        for member in members:
            self._record(member.assignment_record(gid))
            self._schedule_session(group, member.member_id)
        self.log.info("classic_group_upgraded", group_id=gid, epoch=epoch, members=len(members))
        return group

    def _converted(self, classic: ClassicGroup, m: Member) -> ConsumerMember:
        name = classic.protocol_name or m.protocols[0][0]
        sub = decode_subscription(m.metadata(name))
        assigned = decode_assignment(m.assignment).assigned_partitions if m.assignment else ()
        epoch = classic.generation_id
        return ConsumerMember(
            m.member_id,
            instance_id=m.group_instance_id,
            rack_id=sub.rack_id,
            client_id=m.client_id,
            client_host=m.client_host,
            rebalance_timeout_ms=m.rebalance_timeout_ms,
            subscribed_topic_names=tuple(sorted(set(sub.topics))),
            member_epoch=epoch,
            previous_member_epoch=epoch,
            state=MemberState.STABLE,
            assigned=self._by_id(assigned),
            classic=ClassicMeta(m.session_timeout_ms, m.protocols),
        )

    def _by_id(self, parts: tuple[tuple[str, tuple[int, ...]], ...]) -> Assignment:
        """Partitions named by topic name, by topic id (unknown topics and partitions out of
        range are dropped)."""
        topics = self.topics_view.topics()
        out: dict[uuid.UUID, frozenset[int]] = {}
        for name, ps in parts:
            known = topics.get(name)
            if known is None:
                continue
            tid, count = known
            got = frozenset(p for p in ps if 0 <= p < count)
            if got:
                out[tid] = out.get(tid, frozenset()) | got
        return out

    def _by_name(self, assignment: Assignment) -> tuple[tuple[str, tuple[int, ...]], ...]:
        names = {tid: name for name, (tid, _) in self.topics_view.topics().items()}
        return tuple(
            (names[t], tuple(sorted(ps))) for t, ps in sorted(assignment.items()) if t in names
        )

    def _encode_assignment(self, classic: ClassicMeta, assignment: Assignment) -> bytes:
        try:
            version = min(max(peek_version(classic.protocols[0][1]), 0), ASSIGNMENT_MAX_VERSION)
        except CodecError:
            version = 0
        return encode_assignment(EmbeddedAssignment(self._by_name(assignment)), version)

    # --- downgrade: consumer -> classic ---------------------------------------------------
    def _fence_member(self, group: ConsumerGroup, member_id: str, reason: str) -> None:
        if self._downgrade_valid(group, member_id):
            self._downgrade(group, member_id)
        else:
            self._remove_member(group, member_id, reason)

    def _downgrade_valid(self, group: ConsumerGroup, member_id: str) -> bool:
        if not group.all_classic_except(member_id) or len(group.members) <= 1:
            return False
        limit = self.config.group_max_size
        if not self._downgrade_enabled() or (limit is not None and len(group.members) - 1 > limit):
            self.log.info("consumer_group_not_downgraded", group_id=group.group_id)
            return False
        return True

    def _downgrade_valid_replacing(self, group: ConsumerGroup, replaced_id: str) -> bool:
        """A classic static member replaces the last consumer-protocol member (Kafka:
        validateOnlineDowngradeWithReplacedMemberId): the group may become classic."""
        if not group.all_classic_except(replaced_id):
            return False
        limit = self.config.group_max_size
        if not self._downgrade_enabled() or (limit is not None and len(group.members) > limit):
            self.log.info("consumer_group_not_downgraded", group_id=group.group_id)
            return False
        return True

    def _downgrade(self, group: ConsumerGroup, leaving: str | None) -> None:
        """Convert to a classic group of every member but ``leaving``, each holding its target
        assignment; a member leaving starts a rebalance, a static replacement (``leaving``
        None: the joiner already holds the replaced member's place) does not."""
        gid = group.group_id
        for mid in list(group.members):
            self._forget_member(group, mid)
            for kind in (K_CURRENT, K_TARGET, K_MEMBER):
                self._record(ConsumerTombstoneRecord(kind, gid, mid))
        self.delete_consumer_group(gid)
        classic = self._new_group(gid)
        classic.generation_id = group.group_epoch
        for m in group.members.values():
            if m.member_id == leaving or m.classic is None:
                continue
            member = Member(
                m.member_id,
                m.instance_id,
                m.client_id,
                m.client_host,
                m.rebalance_timeout_ms,
                m.classic.session_timeout_ms,
                CONSUMER,
                m.classic.protocols,
            )
            classic.add(member, None)
        classic.protocol_name = classic.select_protocol()
        for member in classic.members.values():
            meta = group.members[member.member_id].classic
            assert meta is not None
            target = group.target.get(member.member_id, {})
            member.assignment = self._encode_assignment(meta, target)
            self._reschedule_heartbeat(classic, member)
        classic.state = GroupState.STABLE
        classic.subscribed_topics = classic.compute_subscribed_topics()
        self._emit(classic.to_record(), apply=False)
        self.log.info("consumer_group_downgraded", group_id=gid, generation=group.group_epoch)
        if leaving is not None:
            self._prepare_rebalance(classic, f"Downgrade group {gid} from consumer to classic.")

    # --- classic members in a consumer group ----------------------------------------------
    def classic_join_consumer(self, cmd: JoinGroup) -> JoinGroupResult:
        group = self.consumer_groups[cmd.group_id]
        unknown = cmd.member_id == ""
        member_id = str(uuid.uuid4()) if unknown else cmd.member_id
        limit = self.config.consumer_max_size
        if limit is not None and member_id not in group.members and len(group.members) >= limit:
            return JoinGroupResult(ErrorCode.GROUP_MAX_SIZE_REACHED, member_id=cmd.member_id)
        if not cmd.protocols or not group.supports_classic_protocols(
            cmd.protocol_type, [n for n, _ in cmd.protocols]
        ):
            return JoinGroupResult(ErrorCode.INCONSISTENT_GROUP_PROTOCOL, member_id=cmd.member_id)
        if unknown and cmd.require_known_member_id and cmd.group_instance_id is None:
            return JoinGroupResult(ErrorCode.MEMBER_ID_REQUIRED, member_id=member_id)
        replaced = group.static_member(cmd.group_instance_id) if cmd.group_instance_id else None
        # The last consumer-protocol member replaced by a classic static member: the group
        # becomes classic once this join is done (as Kafka 4.3 converts it).
        downgrade = (
            unknown
            and replaced is not None
            and self._downgrade_valid_replacing(group, replaced.member_id)
        )
        try:
            sub = decode_subscription(cmd.protocols[0][1])
            old = self._classic_joiner(group, cmd, member_id, unknown)
        except CodecError:
            return JoinGroupResult(ErrorCode.INCONSISTENT_GROUP_PROTOCOL, member_id=cmd.member_id)
        except _Refused as exc:
            return JoinGroupResult(exc.error, member_id=cmd.member_id)
        member = replace(
            old,
            instance_id=cmd.group_instance_id,
            rack_id=sub.rack_id if sub.rack_id is not None else old.rack_id,
            rebalance_timeout_ms=cmd.rebalance_timeout_ms,
            server_assignor=None,
            subscribed_topic_names=tuple(sorted(set(sub.topics))),
            subscribed_topic_regex=None,
            client_id=cmd.client_id,
            client_host=cmd.client_host,
            classic=ClassicMeta(cmd.session_timeout_ms, cmd.protocols),
        )
        gid = group.group_id
        new_member = member_id not in group.members
        group._put_member(old, member)
        if new_member or member.subscription_record(gid) != old.subscription_record(gid):
            self._record(member.subscription_record(gid))
        if (
            new_member
            or member.subscribed_topic_names != old.subscribed_topic_names
            or old.subscribed_topic_regex is not None
        ):
            self._bump(group, f"classic member {member_id} joined or changed its subscription")
        elif self._metadata_changed(group):
            self._bump(group, "subscribed topics changed")
        if group.group_epoch > group.assignment_epoch:
            self._assign(group)
        owned = tuple(self._by_id(sub.owned_partitions).items())
        before = group.members[member_id]
        reconciled = self._reconcile_classic(group, before, owned)
        if new_member or reconciled != before:
            self._record(reconciled.assignment_record(gid))
        self.timers.cancel(classic_join_key(gid, member_id))
        if downgrade:
            self._downgrade(group, None)
            return JoinGroupResult(
                ErrorCode.NONE,
                member_id=member_id,
                generation_id=reconciled.member_epoch,
                protocol_type=CONSUMER,
                protocol_name=cmd.protocols[0][0],
            )
        self._schedule_session(group, member_id)
        self.timers.schedule(
            classic_sync_key(gid, member_id),
            max(cmd.rebalance_timeout_ms, 0),
            lambda: self._fence(gid, member_id, group, "sync"),
        )
        return JoinGroupResult(
            ErrorCode.NONE,
            member_id=member_id,
            generation_id=reconciled.member_epoch,
            protocol_type=CONSUMER,
            protocol_name=cmd.protocols[0][0],
        )

    def _reconcile_classic(
        self,
        group: ConsumerGroup,
        member: ConsumerMember,
        owned: tuple[tuple[uuid.UUID, frozenset[int]], ...],
    ) -> ConsumerMember:
        if member.is_reconciled_to(group.assignment_epoch):
            return member
        reconciled = reconcile(
            member,
            group.assignment_epoch,
            group.target.get(member.member_id, {}),
            group.current_partition_epoch,
            tuple((t, tuple(sorted(ps))) for t, ps in owned),
        )
        group._put_member(member, reconciled)
        return reconciled

    def _classic_joiner(
        self, group: ConsumerGroup, cmd: JoinGroup, member_id: str, unknown: bool
    ) -> ConsumerMember:
        instance = cmd.group_instance_id
        if instance is None:
            return group.members.get(member_id) or ConsumerMember(member_id)
        existing = group.static_member(instance)
        if not unknown:
            if existing is None:
                raise _Refused(ErrorCode.UNKNOWN_MEMBER_ID)
            if existing.member_id != member_id:
                raise _Refused(ErrorCode.FENCED_INSTANCE_ID)
            return existing
        if existing is None:
            return ConsumerMember(member_id, instance_id=instance)
        # A static member rejoins with a new member id: it takes the place of the old one.
        gid = group.group_id
        self._forget_member(group, existing.member_id)
        del group.members[existing.member_id]
        group.target[member_id] = group.target.pop(existing.member_id, {})
        for kind in (K_CURRENT, K_TARGET, K_MEMBER):
            self._record(ConsumerTombstoneRecord(kind, gid, existing.member_id))
        taken = replace(existing, member_id=member_id, member_epoch=0, previous_member_epoch=0)
        group._put_member(taken, taken)
        self._record(taken.subscription_record(gid))
        self._record(ConsumerGroupTargetMemberRecord(gid, member_id, _tp(taken, group)))
        self._record(taken.assignment_record(gid))
        self.log.info(
            "consumer_static_member_replaced",
            group_id=gid,
            old_member_id=existing.member_id,
            member_id=member_id,
        )
        return taken

    def _classic_member(
        self, group: ConsumerGroup, member_id: str, instance_id: str | None
    ) -> ConsumerMember:
        if instance_id is None:
            member = group.members.get(member_id)
            if member is None:
                raise _Refused(ErrorCode.UNKNOWN_MEMBER_ID)
        else:
            member = group.static_member(instance_id)
            if member is None:
                raise _Refused(ErrorCode.UNKNOWN_MEMBER_ID)
            if member.member_id != member_id:
                raise _Refused(ErrorCode.FENCED_INSTANCE_ID)
        if not member.uses_classic:
            raise _Refused(ErrorCode.UNKNOWN_MEMBER_ID)
        return member

    def _rejoin_needed(self, group: ConsumerGroup, member: ConsumerMember) -> None:
        gid, mid = group.group_id, member.member_id
        key = classic_join_key(gid, mid)
        if not self.timers_scheduled(key):
            self.timers.schedule(
                key,
                max(member.rebalance_timeout_ms, 0),
                lambda: self._fence(gid, mid, group, "join"),
            )

    def classic_sync_consumer(self, cmd: SyncGroup) -> SyncGroupResult:
        group = self.consumer_groups[cmd.group_id]
        try:
            member = self._classic_member(group, cmd.member_id, cmd.group_instance_id)
        except _Refused as exc:
            return SyncGroupResult(exc.error)
        assert member.classic is not None
        if cmd.generation_id != member.member_epoch:
            return SyncGroupResult(ErrorCode.ILLEGAL_GENERATION)
        if (cmd.protocol_type is not None and cmd.protocol_type != CONSUMER) or (
            cmd.protocol_name is not None and cmd.protocol_name != member.classic.protocol_name
        ):
            return SyncGroupResult(ErrorCode.INCONSISTENT_GROUP_PROTOCOL)
        if (
            group.group_epoch > member.member_epoch
            and member.state is not MemberState.UNREVOKED_PARTITIONS
        ):
            self._rejoin_needed(group, member)
            return SyncGroupResult(ErrorCode.REBALANCE_IN_PROGRESS)
        self.timers.cancel(classic_sync_key(group.group_id, member.member_id))
        self._schedule_session(group, member.member_id)
        return SyncGroupResult(
            ErrorCode.NONE,
            protocol_type=cmd.protocol_type,
            protocol_name=cmd.protocol_name,
            assignment=self._encode_assignment(member.classic, member.assigned),
        )

    def classic_heartbeat_consumer(self, cmd: Heartbeat) -> HeartbeatResult:
        group = self.consumer_groups[cmd.group_id]
        try:
            member = self._classic_member(group, cmd.member_id, cmd.group_instance_id)
        except _Refused as exc:
            return HeartbeatResult(exc.error)
        if cmd.generation_id != member.member_epoch:
            return HeartbeatResult(ErrorCode.ILLEGAL_GENERATION)
        self._schedule_session(group, member.member_id)
        if (
            member.member_epoch < group.group_epoch
            or member.state is MemberState.UNREVOKED_PARTITIONS
            or (
                member.state is MemberState.UNRELEASED_PARTITIONS
                and not group.waiting_on_unreleased_partition(member)
            )
        ):
            self._rejoin_needed(group, member)
            return HeartbeatResult(ErrorCode.REBALANCE_IN_PROGRESS)
        return HeartbeatResult(ErrorCode.NONE)

    def classic_leave_consumer(self, cmd: LeaveGroup) -> LeaveGroupResult:
        group = self.consumer_groups[cmd.group_id]
        results: list[LeaveMemberResult] = []
        removed: list[str] = []
        for member_id, instance_id in cmd.members:
            member = (
                group.members.get(member_id)
                if instance_id is None
                else group.static_member(instance_id)
            )
            error = ErrorCode.NONE
            if member is None or not member.uses_classic:
                error = ErrorCode.UNKNOWN_MEMBER_ID
            elif instance_id is not None and member_id not in ("", member.member_id):
                error = ErrorCode.FENCED_INSTANCE_ID
            if member is None or error is not ErrorCode.NONE:
                results.append(LeaveMemberResult(member_id, instance_id, error))
                continue
            self._remove_member(group, member.member_id, "left the group", bump=False)
            removed.append(member.member_id)
            results.append(LeaveMemberResult(member.member_id, instance_id, ErrorCode.NONE))
        if removed:
            self._bump(group, f"classic members {removed} left the group")
        return LeaveGroupResult(ErrorCode.NONE, tuple(results))


def _tp(
    member: ConsumerMember, group: ConsumerGroup | None = None
) -> tuple[tuple[uuid.UUID, tuple[int, ...]], ...]:
    if group is None:
        return to_partitions(member.assigned)
    return to_partitions(group.target.get(member.member_id, {}))
