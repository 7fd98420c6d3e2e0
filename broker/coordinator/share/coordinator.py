"""The share-group coordinator (KIP-932): membership by ShareGroupHeartbeat, member epochs,
session expiry on the injected clock and the server-side assignment.

Kafka's rules, as its GroupMetadataManager applies them to share groups:

- A member joins with epoch 0 and the member id it generated, naming the topics it subscribes
  to; it leaves with epoch -1. Any other epoch must equal the member's current one
  (FENCED_MEMBER_EPOCH otherwise); a member id the group does not know is UNKNOWN_MEMBER_ID.
- The group epoch rises when the membership, a subscription or the subscribed topics' partitions
  change; the target assignment is then recomputed (its epoch is the group epoch), and each
  member moves to it at its next heartbeat. Share groups have no revocation phase: records are
  shared, not owned, so a member takes its new assignment at once.
- The assignment is the simple assignor's (``assignor``): each partition goes to
  ceil(members / partitions) of the members subscribed to its topic, and each member gets an
  even share; one partition is shared by every member.
- Each heartbeat resets the member's session timer (share.session.timeout.ms, a group config);
  a member that stops heartbeating is removed when it fires.
- A group id names one group of one type: a share heartbeat for a classic or consumer group is
  GROUP_ID_NOT_FOUND; group.share.max.size bounds the members (GROUP_MAX_SIZE_REACHED).

Pure: plain functions on the caller's thread, no I/O, no wire structs.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Protocol

import structlog

from kgroupd.broker.coordinator.share.assignor import assign
from kgroupd.broker.coordinator.share.commands import (
    JOIN_EPOCH,
    LEAVE_EPOCH,
    DescribedShareGroup,
    DescribedShareMember,
    ShareGroupHeartbeat,
    ShareGroupHeartbeatResult,
    TopicPartitions,
)
from kgroupd.broker.coordinator.timers import Timers
from kgroupd.protocol.errors import ErrorCode

log = structlog.get_logger("kgroupd.coordinator.share")

ASSIGNOR_NAME = "simple"


class ShareGroupState(Enum):
    """Kafka's share group states. EMPTY: no member (offsets may remain); STABLE: members,
    every one at the target assignment's epoch or about to be; DEAD: deleted."""

    EMPTY = "Empty"
    STABLE = "Stable"
    DEAD = "Dead"


class TopicsView(Protocol):
    """name -> (topic id, partition count)."""

    def topics(self) -> Mapping[str, tuple[uuid.UUID, int]]: ...


class ShareGroupTimeouts(Protocol):
    """The group configs the coordinator reads (``kgroupd.broker.share.group_config``)."""

    def int_value(self, group_id: str, name: str) -> int: ...


@dataclass(slots=True)
class ShareMember:
    member_id: str
    member_epoch: int
    subscribed_topic_names: tuple[str, ...]
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    assignment: TopicPartitions = ()


@dataclass(slots=True)
class ShareGroup:
    group_id: str
    group_epoch: int = 0
    assignment_epoch: int = 0
    members: dict[str, ShareMember] = field(default_factory=dict)
    # topic name -> (id, partitions) of the subscribed topics when the epoch last rose
    subscribed: dict[str, tuple[uuid.UUID, int]] = field(default_factory=dict)
    target: dict[str, TopicPartitions] = field(default_factory=dict)

    @property
    def state(self) -> ShareGroupState:
        return ShareGroupState.STABLE if self.members else ShareGroupState.EMPTY


class _Refused(Exception):
    def __init__(self, error: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.error = error
        self.message = message


def _session_key(group_id: str, member_id: str) -> str:
    return f"share-session/{group_id}/{member_id}"


class ShareGroupCoordinator:
    """Every share group of this broker (one node: every group is ours)."""

    def __init__(
        self,
        timers: Timers,
        topics: TopicsView,
        configs: ShareGroupTimeouts,
        max_size: int = 200,
        other_group_exists: Callable[[str], bool] = lambda _g: False,
    ) -> None:
        self.timers = timers
        self.topics = topics
        self.configs = configs
        self.max_size = max_size
        self.other_group_exists = other_group_exists
        self.groups: dict[str, ShareGroup] = {}
        # called with (group id, member id) when a member's session expires, so the share
        # partitions release what it holds
        self.on_member_removed: Callable[[str, str], None] = lambda _g, _m: None
        # what is persisted (the share groups' records): a group whose members, epochs or
        # assignments changed, and a group deleted
        self.on_group_changed: Callable[[ShareGroup], None] = lambda _g: None
        self.on_group_deleted: Callable[[str], None] = lambda _g: None

    # --- heartbeat -------------------------------------------------------------------------

    def heartbeat(self, cmd: ShareGroupHeartbeat) -> ShareGroupHeartbeatResult:
        """Join (epoch 0), heartbeat (the member's epoch) or leave (epoch -1)."""
        before = _signature(self.groups.get(cmd.group_id))
        try:
            _check_request(cmd)
            if cmd.member_epoch == LEAVE_EPOCH:
                return self._leave(cmd)
            return self._heartbeat(cmd)
        except _Refused as exc:
            return ShareGroupHeartbeatResult(exc.error, exc.message)
        finally:
            group = self.groups.get(cmd.group_id)
            if group is not None and _signature(group) != before:
                self.on_group_changed(group)

    def _heartbeat(self, cmd: ShareGroupHeartbeat) -> ShareGroupHeartbeatResult:
        group = self.groups.get(cmd.group_id)
        if group is None:
            if cmd.member_epoch != JOIN_EPOCH:
                raise _Refused(
                    ErrorCode.UNKNOWN_MEMBER_ID,
                    f"Member {cmd.member_id} is not a member of group {cmd.group_id}.",
                )
            if self.other_group_exists(cmd.group_id):
                raise _Refused(
                    ErrorCode.GROUP_ID_NOT_FOUND, f"Group {cmd.group_id} is not a share group."
                )
            group = ShareGroup(cmd.group_id)
        member = group.members.get(cmd.member_id)
        joining = member is None
        if member is None:
            if cmd.member_epoch != JOIN_EPOCH:
                raise _Refused(
                    ErrorCode.UNKNOWN_MEMBER_ID,
                    f"Member {cmd.member_id} is not a member of group {cmd.group_id}.",
                )
            if len(group.members) >= self.max_size:
                raise _Refused(
                    ErrorCode.GROUP_MAX_SIZE_REACHED,
                    f"The share group has reached its maximum capacity of {self.max_size} members.",
                )
            member = ShareMember(cmd.member_id, 0, cmd.subscribed_topic_names or ())
        elif cmd.member_epoch not in (JOIN_EPOCH, member.member_epoch):
            raise _Refused(
                ErrorCode.FENCED_MEMBER_EPOCH,
                f"The share group member has a member epoch ({cmd.member_epoch}) different "
                f"from the one known by the group coordinator ({member.member_epoch}). The "
                "member must abandon all its partitions and rejoin.",
            )
        self.groups[cmd.group_id] = group
        bump = joining
        if cmd.subscribed_topic_names is not None and (
            tuple(cmd.subscribed_topic_names) != member.subscribed_topic_names
        ):
            member.subscribed_topic_names = tuple(cmd.subscribed_topic_names)
            bump = True
        if cmd.rack_id is not None:
            member.rack_id = cmd.rack_id
        member.client_id, member.client_host = cmd.client_id, cmd.client_host
        group.members[member.member_id] = member
        subscribed = self._subscribed_topics(group)
        if subscribed != group.subscribed:
            group.subscribed = subscribed
            bump = True
        if bump:
            group.group_epoch += 1
            log.info(
                "share_group_epoch",
                group_id=group.group_id,
                member_id=member.member_id,
                group_epoch=group.group_epoch,
                reason="member joined" if joining else "subscriptions changed",
            )
        if group.assignment_epoch != group.group_epoch:
            self._retarget(group)
        changed = cmd.member_epoch == JOIN_EPOCH
        if member.member_epoch != group.assignment_epoch:
            new = group.target.get(member.member_id, ())
            changed = changed or new != member.assignment
            member.assignment = new
            member.member_epoch = group.assignment_epoch
        session_ms = self.configs.int_value(group.group_id, "share.session.timeout.ms")
        self.timers.schedule(
            _session_key(group.group_id, member.member_id),
            session_ms,
            lambda: self._expire(group.group_id, member.member_id),
        )
        return ShareGroupHeartbeatResult(
            member_id=member.member_id,
            member_epoch=member.member_epoch,
            heartbeat_interval_ms=self.configs.int_value(
                group.group_id, "share.heartbeat.interval.ms"
            ),
            assignment=member.assignment if changed else None,
        )

    def _leave(self, cmd: ShareGroupHeartbeat) -> ShareGroupHeartbeatResult:
        group = self.groups.get(cmd.group_id)
        if group is None or cmd.member_id not in group.members:
            raise _Refused(
                ErrorCode.UNKNOWN_MEMBER_ID,
                f"Member {cmd.member_id} is not a member of group {cmd.group_id}.",
            )
        # its share sessions stay: the client closes them itself, with its last acknowledgements
        self._remove(group, cmd.member_id, "member left", notify=False)
        return ShareGroupHeartbeatResult(member_id=cmd.member_id, member_epoch=LEAVE_EPOCH)

    def _expire(self, group_id: str, member_id: str) -> None:
        group = self.groups.get(group_id)
        if group is not None and member_id in group.members:
            self._remove(group, member_id, "session timed out")
            self.on_group_changed(group)

    def _remove(self, group: ShareGroup, member_id: str, reason: str, notify: bool = True) -> None:
        del group.members[member_id]
        group.target.pop(member_id, None)
        self.timers.cancel(_session_key(group.group_id, member_id))
        group.group_epoch += 1
        self._retarget(group)
        log.info(
            "share_member_removed",
            group_id=group.group_id,
            member_id=member_id,
            group_epoch=group.group_epoch,
            reason=reason,
        )
        if notify:
            self.on_member_removed(group.group_id, member_id)

    def _retarget(self, group: ShareGroup) -> None:
        """A new target assignment at the group epoch (the simple assignor, sticky to the
        previous target)."""
        group.target = assign(
            list(group.members),
            {m.member_id: m.subscribed_topic_names for m in group.members.values()},
            group.subscribed,
            group.target,
        )
        group.assignment_epoch = group.group_epoch

    def _time_session(self, group_id: str, member_id: str) -> None:
        self.timers.schedule(
            _session_key(group_id, member_id),
            self.configs.int_value(group_id, "share.session.timeout.ms"),
            lambda: self._expire(group_id, member_id),
        )

    def _subscribed_topics(self, group: ShareGroup) -> dict[str, tuple[uuid.UUID, int]]:
        names = {n for m in group.members.values() for n in m.subscribed_topic_names}
        topics = self.topics.topics()
        return {n: topics[n] for n in sorted(names) if n in topics}

    def on_topics_changed(self) -> None:
        """Partitions added or topics created/deleted: groups whose subscribed topics changed
        get a new epoch and target assignment, taken by each member at its next heartbeat."""
        for group in self.groups.values():
            subscribed = self._subscribed_topics(group)
            if subscribed != group.subscribed and group.members:
                group.subscribed = subscribed
                group.group_epoch += 1
                self._retarget(group)
                self.on_group_changed(group)

    def restore(
        self, group_id: str, group_epoch: int, assignment_epoch: int, members: list[ShareMember]
    ) -> ShareGroup:
        """Start-up: a persisted group back, its members' sessions timed from now (they keep
        their epochs and assignments; the target is what they were given)."""
        group = ShareGroup(group_id, group_epoch, assignment_epoch)
        for m in members:
            group.members[m.member_id] = m
            group.target[m.member_id] = m.assignment
            self._time_session(group_id, m.member_id)
        group.subscribed = self._subscribed_topics(group)
        self.groups[group_id] = group
        return group

    # --- reads and admin ---------------------------------------------------------------------

    def is_member(self, group_id: str, member_id: str) -> bool:
        group = self.groups.get(group_id)
        return group is not None and member_id in group.members

    def assigned(self, group_id: str, member_id: str) -> TopicPartitions:
        group = self.groups.get(group_id)
        member = group.members.get(member_id) if group is not None else None
        return member.assignment if member is not None else ()

    def ensure_group(self, group_id: str) -> ShareGroup:
        """The share group ``group_id``, made Empty if it does not exist (AlterShareGroupOffsets
        of a new group)."""
        group = self.groups.get(group_id)
        if group is None:
            group = self.groups[group_id] = ShareGroup(group_id)
            self.on_group_changed(group)
        return group

    def describe(self, group_id: str) -> DescribedShareGroup:
        """ShareGroupDescribe of one group: GROUP_ID_NOT_FOUND for an unknown group or one of
        another type; INVALID_GROUP_ID for an empty id."""
        if not group_id:
            return DescribedShareGroup(
                group_id, ErrorCode.INVALID_GROUP_ID, "The group id must not be empty."
            )
        group = self.groups.get(group_id)
        if group is None:
            if self.other_group_exists(group_id):
                return DescribedShareGroup(
                    group_id,
                    ErrorCode.GROUP_ID_NOT_FOUND,
                    f"Group {group_id} is not a share group.",
                )
            return DescribedShareGroup(
                group_id, ErrorCode.GROUP_ID_NOT_FOUND, f"Group {group_id} not found."
            )
        names = {tid: name for name, (tid, _n) in self.topics.topics().items()}
        members = tuple(
            DescribedShareMember(
                m.member_id,
                m.rack_id,
                m.member_epoch,
                m.client_id,
                m.client_host,
                m.subscribed_topic_names,
                tuple((tid, names.get(tid, ""), parts) for tid, parts in m.assignment),
            )
            for m in group.members.values()
        )
        return DescribedShareGroup(
            group_id,
            state=group.state.value,
            group_epoch=group.group_epoch,
            assignment_epoch=group.assignment_epoch,
            assignor_name=ASSIGNOR_NAME,
            members=members,
        )

    def delete(self, group_id: str) -> ErrorCode:
        """DeleteGroups of a share group: NON_EMPTY_GROUP while it has members."""
        group = self.groups.get(group_id)
        if group is None:
            return ErrorCode.GROUP_ID_NOT_FOUND
        if group.members:
            return ErrorCode.NON_EMPTY_GROUP
        del self.groups[group_id]
        self.on_group_deleted(group_id)
        return ErrorCode.NONE


def _signature(group: ShareGroup | None) -> object:
    """What of a group is persisted, to tell whether a heartbeat changed it."""
    if group is None:
        return None
    return (
        group.group_epoch,
        group.assignment_epoch,
        [
            (m.member_id, m.member_epoch, m.subscribed_topic_names, m.rack_id, m.assignment)
            for m in group.members.values()
        ],
    )


def _check_request(cmd: ShareGroupHeartbeat) -> None:
    """Kafka's request checks, in its order: INVALID_REQUEST with its message."""
    if not cmd.group_id:
        raise _Refused(ErrorCode.INVALID_REQUEST, "GroupId can't be empty.")
    if cmd.rack_id is not None and not cmd.rack_id:
        raise _Refused(ErrorCode.INVALID_REQUEST, "RackId can't be empty.")
    if not cmd.member_id:
        raise _Refused(ErrorCode.INVALID_REQUEST, "MemberId can't be empty.")
    if cmd.member_epoch == JOIN_EPOCH:
        if not cmd.subscribed_topic_names:
            raise _Refused(
                ErrorCode.INVALID_REQUEST, "SubscribedTopicNames must be set in first request."
            )
    elif cmd.member_epoch < LEAVE_EPOCH:
        raise _Refused(ErrorCode.INVALID_REQUEST, "MemberEpoch is invalid.")
