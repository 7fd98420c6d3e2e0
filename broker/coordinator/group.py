"""The in-memory classic group: members, static members, protocol bookkeeping, state."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kgroupd.protocol.errors import ErrorCode

from .commands import JoinGroupMember, JoinGroupResult, Protocols, SyncGroupResult
from .consumer_protocol import CONSUMER_PROTOCOL_TYPE, ConsumerProtocolError, subscription_topics
from .deferred import Deferred
from .events import NO_EVENTS, GroupEvents
from .records import GroupMetadataRecord, MemberRecord
from .state import GroupState, check_transition

__all__ = ["ClassicGroup", "Member"]


@dataclass(eq=False)
class Member:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    protocol_type: str
    protocols: Protocols
    assignment: bytes = b""
    is_new: bool = False
    join_waiter: Deferred[JoinGroupResult] | None = field(default=None, repr=False)
    sync_waiter: Deferred[SyncGroupResult] | None = field(default=None, repr=False)
    # (its group, its heartbeat timer's key, the op expiring it): ShardCore._reschedule_heartbeat
    expiry: tuple[Any, str, Callable[[], None]] | None = field(default=None, repr=False)

    @property
    def is_static(self) -> bool:
        return self.group_instance_id is not None

    @property
    def awaiting_join(self) -> bool:
        return self.join_waiter is not None

    @property
    def awaiting_sync(self) -> bool:
        return self.sync_waiter is not None

    def protocol_names(self) -> list[str]:
        return [name for name, _ in self.protocols]

    def metadata(self, protocol: str) -> bytes:
        for name, meta in self.protocols:
            if name == protocol:
                return meta
        raise KeyError(protocol)

    def matches(self, protocols: Protocols) -> bool:
        return self.protocols == protocols

    def vote(self, candidates: set[str]) -> str:
        for name, _ in self.protocols:
            if name in candidates:
                return name
        raise ValueError("member does not support any candidate protocol")

    def has_satisfied_heartbeat(self) -> bool:
        """New members can always expire; members parked in a rebalance are alive."""
        if self.is_new:
            return False
        return self.awaiting_join or self.awaiting_sync

    def to_record(self) -> MemberRecord:
        return MemberRecord(
            member_id=self.member_id,
            group_instance_id=self.group_instance_id,
            client_id=self.client_id,
            client_host=self.client_host,
            rebalance_timeout_ms=self.rebalance_timeout_ms,
            session_timeout_ms=self.session_timeout_ms,
            protocol_type=self.protocol_type,
            protocols=self.protocols,
            assignment=self.assignment,
        )

    @classmethod
    def from_record(cls, r: MemberRecord) -> Member:
        return cls(
            member_id=r.member_id,
            group_instance_id=r.group_instance_id,
            client_id=r.client_id,
            client_host=r.client_host,
            rebalance_timeout_ms=r.rebalance_timeout_ms,
            session_timeout_ms=r.session_timeout_ms,
            protocol_type=r.protocol_type,
            protocols=r.protocols,
            assignment=r.assignment,
        )


class ClassicGroup:
    """One classic group. Mutated only by its shard's operations (one at a time)."""

    def __init__(
        self, group_id: str, now_ms: int, log: Any, events: GroupEvents = NO_EVENTS
    ) -> None:
        self.group_id = group_id
        self.events = events  # its shard's (GroupCoordinator.set_events)
        self.state = GroupState.EMPTY
        self.previous_state = GroupState.EMPTY
        self.state_timestamp_ms = now_ms
        self.generation_id = 0
        self.protocol_type: str | None = None
        self.protocol_name: str | None = None
        self.leader_id: str | None = None
        self.members: dict[str, Member] = {}  # insertion ordered
        self.static_members: dict[str, str] = {}  # instance id -> member id
        self.pending_join_members: set[str] = set()  # KIP-394 ids handed out
        self.pending_sync_members: set[str] = set()
        self.new_member_added = False
        self.subscribed_topics: frozenset[str] | None = None
        self.num_awaiting_join = 0
        self._supported: Counter[str] = Counter()
        self.log = log.bind(group_id=group_id)

    # --- state -----------------------------------------------------------------------------
    def transition_to(self, target: GroupState, now_ms: int, reason: str) -> None:
        check_transition(self.state, target)
        self.log.info(
            "group state transition",
            from_state=self.state.value,
            to_state=target.value,
            generation=self.generation_id,
            reason=reason,
        )
        self.previous_state = self.state
        self.state = target
        self.state_timestamp_ms = now_ms
        self.events.group_state_changed(self.group_id, target.value, self.generation_id)

    def in_state(self, *states: GroupState) -> bool:
        return self.state in states

    def can_rebalance(self) -> bool:
        return self.state in (
            GroupState.STABLE,
            GroupState.COMPLETING_REBALANCE,
            GroupState.EMPTY,
        )

    # --- members ---------------------------------------------------------------------------
    def is_leader(self, member_id: str) -> bool:
        return self.leader_id == member_id

    def has_member(self, member_id: str) -> bool:
        return member_id in self.members

    def uses_consumer_protocol(self) -> bool:
        return self.protocol_type == CONSUMER_PROTOCOL_TYPE

    def add(self, member: Member, waiter: Deferred[JoinGroupResult] | None) -> None:
        if not self.members:
            self.protocol_type = member.protocol_type
        self.pending_join_members.discard(member.member_id)
        self.members[member.member_id] = member
        self._supported.update(member.protocol_names())
        if self.leader_id is None:
            self.leader_id = member.member_id
        if member.group_instance_id is not None:
            self.static_members[member.group_instance_id] = member.member_id
        self.set_join_waiter(member, waiter)

    def remove(self, member_id: str) -> Member | None:
        member = self.members.pop(member_id, None)
        if member is not None:
            self._supported.subtract(member.protocol_names())
            if member.awaiting_join:
                self.num_awaiting_join -= 1
            if member.group_instance_id is not None:
                self.static_members.pop(member.group_instance_id, None)
        if self.leader_id == member_id:
            self.leader_id = next(iter(self.members), None)
        self.pending_join_members.discard(member_id)
        self.pending_sync_members.discard(member_id)
        return member

    def set_join_waiter(self, member: Member, waiter: Deferred[JoinGroupResult] | None) -> None:
        old = member.join_waiter
        if old is not None and waiter is not None:
            # Kafka overwrites the future; a superseded request must still be answered.
            old.resolve(
                JoinGroupResult(ErrorCode.REBALANCE_IN_PROGRESS, member_id=member.member_id)
            )
        if waiter is not None and old is None:
            self.num_awaiting_join += 1
        elif waiter is None and old is not None:
            self.num_awaiting_join -= 1
        member.join_waiter = waiter

    def complete_join(self, member: Member, result: JoinGroupResult) -> bool:
        waiter = member.join_waiter
        if waiter is None:
            return False
        self.set_join_waiter(member, None)
        waiter.resolve(result)
        return True

    def set_sync_waiter(self, member: Member, waiter: Deferred[SyncGroupResult]) -> None:
        if member.sync_waiter is not None:
            member.sync_waiter.resolve(SyncGroupResult(ErrorCode.REBALANCE_IN_PROGRESS))
        member.sync_waiter = waiter

    def complete_sync(self, member: Member, result: SyncGroupResult) -> bool:
        waiter = member.sync_waiter
        if waiter is None:
            return False
        member.sync_waiter = None
        waiter.resolve(result)
        return True

    def update_member(
        self,
        member: Member,
        protocols: Protocols,
        rebalance_timeout_ms: int,
        session_timeout_ms: int,
        waiter: Deferred[JoinGroupResult] | None,
    ) -> None:
        self._supported.subtract(member.protocol_names())
        member.protocols = protocols
        self._supported.update(member.protocol_names())
        member.rebalance_timeout_ms = rebalance_timeout_ms
        member.session_timeout_ms = session_timeout_ms
        self.set_join_waiter(member, waiter)

    def replace_static_member(self, instance_id: str, old_id: str, new_id: str) -> Member:
        old = self.members.pop(old_id)
        self.complete_join(
            old,
            JoinGroupResult(ErrorCode.FENCED_INSTANCE_ID, member_id=old_id),
        )
        self.complete_sync(old, SyncGroupResult(ErrorCode.FENCED_INSTANCE_ID))
        new = Member(
            member_id=new_id,
            group_instance_id=old.group_instance_id,
            client_id=old.client_id,
            client_host=old.client_host,
            rebalance_timeout_ms=old.rebalance_timeout_ms,
            session_timeout_ms=old.session_timeout_ms,
            protocol_type=old.protocol_type,
            protocols=old.protocols,
            assignment=old.assignment,
        )
        self.members[new_id] = new
        if self.leader_id == old_id:
            self.leader_id = new_id
        self.static_members[instance_id] = new_id
        return new

    def validate_member(self, member_id: str, instance_id: str | None) -> ErrorCode:
        if instance_id is not None:
            existing = self.static_members.get(instance_id)
            if existing is None:
                return ErrorCode.UNKNOWN_MEMBER_ID
            if existing != member_id:
                return ErrorCode.FENCED_INSTANCE_ID
            return ErrorCode.NONE
        if member_id not in self.members:
            return ErrorCode.UNKNOWN_MEMBER_ID
        return ErrorCode.NONE

    def has_all_members_joined(self) -> bool:
        return len(self.members) == self.num_awaiting_join and not self.pending_join_members

    def rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    # --- protocols -------------------------------------------------------------------------
    def supports_protocols(self, protocol_type: str, names: list[str]) -> bool:
        if self.state is GroupState.EMPTY:
            return bool(protocol_type) and bool(names)
        n = len(self.members)
        return protocol_type == self.protocol_type and any(
            self._supported.get(name, 0) == n for name in names
        )

    def candidate_protocols(self) -> set[str]:
        n = len(self.members)
        return {name for name, count in self._supported.items() if count == n and n > 0}

    def select_protocol(self) -> str:
        """Each member votes for its first candidate; most votes wins.

        Kafka breaks ties by HashMap order; here the tie goes to the protocol that received
        its first vote earliest in member order (deterministic)."""
        candidates = self.candidate_protocols()
        votes: Counter[str] = Counter()
        for m in self.members.values():
            votes[m.vote(candidates)] += 1  # Counter keeps first-seen order
        best = max(votes.values())
        return next(name for name, count in votes.items() if count == best)

    def compute_subscribed_topics(self) -> frozenset[str] | None:
        if self.protocol_type != CONSUMER_PROTOCOL_TYPE:
            return None
        if not self.members:
            return frozenset()
        if self.protocol_name is None:
            return None
        topics: set[str] = set()
        try:
            for m in self.members.values():
                topics.update(subscription_topics(m.metadata(self.protocol_name)))
        except (ConsumerProtocolError, KeyError):
            self.log.warning("cannot parse consumer protocol subscriptions", generation=0)
            return None
        return frozenset(topics)

    def is_subscribed_to_topic(self, topic: str) -> bool:
        if self.subscribed_topics is None:
            return self.uses_consumer_protocol()
        return topic in self.subscribed_topics

    def init_next_generation(self, now_ms: int) -> None:
        self.generation_id += 1
        if self.members:
            self.protocol_name = self.select_protocol()
            self.subscribed_topics = self.compute_subscribed_topics()
            self.transition_to(GroupState.COMPLETING_REBALANCE, now_ms, "join phase completed")
        else:
            self.protocol_name = None
            self.subscribed_topics = self.compute_subscribed_topics()
            self.transition_to(GroupState.EMPTY, now_ms, "join phase completed with no members")
        self.pending_sync_members.clear()

    def current_members_for_leader(self) -> tuple[JoinGroupMember, ...]:
        assert self.protocol_name is not None
        name = self.protocol_name
        return tuple(
            JoinGroupMember(m.member_id, m.group_instance_id, m.metadata(name))
            for m in self.members.values()
        )

    # --- persistence -----------------------------------------------------------------------
    def to_record(self, with_members: bool = True) -> GroupMetadataRecord:
        return GroupMetadataRecord(
            group_id=self.group_id,
            protocol_type=self.protocol_type,
            generation_id=self.generation_id,
            protocol_name=self.protocol_name if with_members else None,
            leader_id=self.leader_id if with_members else None,
            current_state_timestamp_ms=self.state_timestamp_ms,
            members=tuple(m.to_record() for m in self.members.values()) if with_members else (),
        )

    @classmethod
    def from_record(cls, record: GroupMetadataRecord, log: Any) -> ClassicGroup:
        group = cls(record.group_id, record.current_state_timestamp_ms, log)
        group.protocol_type = record.protocol_type or None
        group.generation_id = record.generation_id
        group.protocol_name = record.protocol_name
        group.leader_id = record.leader_id
        for mr in record.members:
            member = Member.from_record(mr)
            group.members[member.member_id] = member
            group._supported.update(member.protocol_names())
            if member.group_instance_id is not None:
                group.static_members[member.group_instance_id] = member.member_id
        if group.members:
            group.state = GroupState.STABLE
        group.subscribed_topics = group.compute_subscribed_topics()
        return group
