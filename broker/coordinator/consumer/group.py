"""The in-memory KIP-848 consumer group: members, target assignment, partition epochs, and
the one ``apply`` that replays its records (live and at load alike)."""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from enum import Enum, IntEnum

from .commands import TopicPartitions
from .records import (
    K_CURRENT,
    K_EPOCH,
    K_MEMBER,
    K_METADATA,
    K_REGEX,
    K_TARGET,
    K_TARGET_EPOCH,
    ClassicMeta,
    ConsumerGroupCurrentMemberRecord,
    ConsumerGroupEpochRecord,
    ConsumerGroupMemberRecord,
    ConsumerGroupPartitionMetadataRecord,
    ConsumerGroupRegexRecord,
    ConsumerGroupTargetEpochRecord,
    ConsumerGroupTargetMemberRecord,
    ConsumerRecord,
    ConsumerTombstoneRecord,
    TopicMetadata,
)

__all__ = [
    "Assignment",
    "ClassicMeta",
    "ConsumerGroup",
    "ConsumerGroupState",
    "ConsumerMember",
    "MemberState",
    "from_partitions",
    "to_partitions",
]

# topic id -> partitions; never holds an empty set
Assignment = Mapping[uuid.UUID, frozenset[int]]
EMPTY: Assignment = {}


def to_partitions(a: Assignment) -> TopicPartitions:
    """The wire/record form: topic ids and partitions sorted."""
    return tuple((t, tuple(sorted(a[t]))) for t in sorted(a) if a[t])


def from_partitions(
    tp: Iterable[tuple[uuid.UUID, Iterable[int]]],
) -> dict[uuid.UUID, frozenset[int]]:
    out: dict[uuid.UUID, set[int]] = {}
    for t, ps in tp:
        out.setdefault(t, set()).update(ps)
    return {t: frozenset(ps) for t, ps in out.items() if ps}


class MemberState(IntEnum):
    """A member's reconciliation state (Kafka's MemberState)."""

    STABLE = 1  # holds exactly its target at its epoch (or waits for a new target)
    UNREVOKED_PARTITIONS = 2  # must revoke partitions before it gets the next epoch
    UNRELEASED_PARTITIONS = 3  # at the target epoch; waits for others to release some
    UNKNOWN = 0


class ConsumerGroupState(Enum):
    """A consumer group's state, derived from epochs and members (never stored)."""

    EMPTY = "Empty"  # no members
    ASSIGNING = "Assigning"  # group epoch above the target assignment epoch
    RECONCILING = "Reconciling"  # some member not yet at the target assignment
    STABLE = "Stable"  # every member reconciled to the target assignment
    DEAD = "Dead"  # deleted or unloaded


@dataclass(frozen=True, slots=True)
class ConsumerMember:
    """One member; immutable, replaced on every change (so old and new can be compared)."""

    member_id: str
    instance_id: str | None = None
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    rebalance_timeout_ms: int = -1
    subscribed_topic_names: tuple[str, ...] = ()
    subscribed_topic_regex: str | None = None
    server_assignor: str | None = None
    member_epoch: int = 0
    previous_member_epoch: int = 0
    state: MemberState = MemberState.STABLE
    assigned: Assignment = field(default_factory=dict)
    pending_revocation: Assignment = field(default_factory=dict)
    classic: ClassicMeta | None = None  # set for a member using the classic protocol

    @property
    def uses_classic(self) -> bool:
        return self.classic is not None

    def is_reconciled_to(self, target_epoch: int) -> bool:
        return self.state is MemberState.STABLE and self.member_epoch == target_epoch

    def subscription_record(self, group_id: str) -> ConsumerGroupMemberRecord:
        return ConsumerGroupMemberRecord(
            group_id,
            self.member_id,
            self.instance_id,
            self.rack_id,
            self.client_id,
            self.client_host,
            self.rebalance_timeout_ms,
            self.subscribed_topic_names,
            self.subscribed_topic_regex,
            self.server_assignor,
            self.classic,
        )

    def assignment_record(self, group_id: str) -> ConsumerGroupCurrentMemberRecord:
        return ConsumerGroupCurrentMemberRecord(
            group_id,
            self.member_id,
            self.member_epoch,
            self.previous_member_epoch,
            int(self.state),
            to_partitions(self.assigned),
            to_partitions(self.pending_revocation),
        )

    def same_subscription(self, other: ConsumerMember) -> bool:
        return self.subscription_record("") == other.subscription_record("")


class ConsumerGroup:
    """One consumer group, mutated only through ``apply(record)``."""

    def __init__(self, group_id: str) -> None:
        self.group_id = group_id
        self.group_epoch = 0
        self.assignment_epoch = 0
        self.members: dict[str, ConsumerMember] = {}
        self.static_members: dict[str, str] = {}  # instance id -> member id
        self.target: dict[str, Assignment] = {}
        self.subscription_metadata: TopicMetadata = ()
        self.resolved_regexes: dict[str, tuple[str, ...]] = {}
        # topic id -> partition -> epoch of the member owning it (assigned or revoking)
        self.partition_epochs: dict[uuid.UUID, dict[int, int]] = {}
        # KIP-1251: member id -> (topic id, partition) -> the member epoch at which the member
        # was given the partition (kept while it is assigned or pending revocation). Not in the
        # records: after a load every owned partition's epoch is the member's epoch, as Kafka
        # defaults records without them.
        self.assignment_epochs: dict[str, dict[tuple[uuid.UUID, int], int]] = {}
        self.assignor_name = ""
        self.dead = False
        # member id -> (the member, its session timer's key and op): coordinator/beats.py
        self.beats: dict[str, tuple[ConsumerMember, str, Callable[[], None]]] = {}

    # --- derived state -----------------------------------------------------------------------
    @property
    def state(self) -> ConsumerGroupState:
        if self.dead:
            return ConsumerGroupState.DEAD
        if not self.members:
            return ConsumerGroupState.EMPTY
        if self.group_epoch > self.assignment_epoch:
            return ConsumerGroupState.ASSIGNING
        for m in self.members.values():
            if not m.is_reconciled_to(self.assignment_epoch):
                return ConsumerGroupState.RECONCILING
        return ConsumerGroupState.STABLE

    def static_member(self, instance_id: str | None) -> ConsumerMember | None:
        if instance_id is None:
            return None
        mid = self.static_members.get(instance_id)
        return None if mid is None else self.members.get(mid)

    def current_partition_epoch(self, topic: uuid.UUID, partition: int) -> int:
        return self.partition_epochs.get(topic, {}).get(partition, -1)

    def subscribed_topic_names(
        self,
        old: ConsumerMember | None = None,
        new: ConsumerMember | None = None,
        regexes: Mapping[str, tuple[str, ...]] | None = None,
    ) -> set[str]:
        """Topics subscribed by name or by a resolved regex, with ``old`` replaced by ``new``."""
        resolved = self.resolved_regexes if regexes is None else regexes
        members = dict(self.members)
        if old is not None:
            members.pop(old.member_id, None)
        if new is not None:
            members[new.member_id] = new
        out: set[str] = set()
        for m in members.values():
            out.update(m.subscribed_topic_names)
            if m.subscribed_topic_regex:
                out.update(resolved.get(m.subscribed_topic_regex, ()))
        return out

    def member_topics(self, m: ConsumerMember) -> set[str]:
        out = set(m.subscribed_topic_names)
        if m.subscribed_topic_regex:
            out.update(self.resolved_regexes.get(m.subscribed_topic_regex, ()))
        return out

    def preferred_assignor(
        self, old: ConsumerMember | None = None, new: ConsumerMember | None = None
    ) -> str | None:
        """The server assignor most members name (Kafka: the max count; ties by name here)."""
        members = dict(self.members)
        if old is not None:
            members.pop(old.member_id, None)
        if new is not None:
            members[new.member_id] = new
        counts = Counter(m.server_assignor for m in members.values() if m.server_assignor)
        if not counts:
            return None
        best = max(counts.values())
        return min(name for name, n in counts.items() if n == best)

    # --- members using the classic protocol (online migration) ------------------------------
    def all_classic_except(self, member_id: str) -> bool:
        """Every member but ``member_id`` uses the classic protocol (Kafka's
        allMembersUseClassicProtocolExcept)."""
        return all(m.uses_classic for mid, m in self.members.items() if mid != member_id)

    def supports_classic_protocols(self, protocol_type: str, names: Iterable[str]) -> bool:
        """A classic member may join if its protocol type is ``consumer`` and, unless the
        group has no member, one of its protocols is supported by every classic member."""
        wanted = list(names)
        if protocol_type != "consumer":
            return False
        if not self.members:
            return bool(wanted)
        classic = [m.classic for m in self.members.values() if m.classic is not None]
        return any(all(any(n == name for n, _ in c.protocols) for c in classic) for name in wanted)

    def waiting_on_unreleased_partition(self, member: ConsumerMember) -> bool:
        """A member waiting for partitions of its target that another member still holds."""
        if member.state is not MemberState.UNRELEASED_PARTITIONS:
            return False
        for topic, parts in self.target.get(member.member_id, {}).items():
            have = member.assigned.get(topic, frozenset())
            for p in parts:
                if p not in have and self.current_partition_epoch(topic, p) != -1:
                    return True
        return False

    def regexes_in_use(self, old: ConsumerMember | None, new: ConsumerMember | None) -> set[str]:
        members = dict(self.members)
        if old is not None:
            members.pop(old.member_id, None)
        if new is not None:
            members[new.member_id] = new
        return {m.subscribed_topic_regex for m in members.values() if m.subscribed_topic_regex}

    # --- replay ---------------------------------------------------------------------------------
    def apply(self, record: ConsumerRecord) -> None:
        """Apply one record of this group (Kafka's replay methods)."""
        if isinstance(record, ConsumerGroupEpochRecord):
            self.group_epoch = record.epoch
        elif isinstance(record, ConsumerGroupPartitionMetadataRecord):
            self.subscription_metadata = record.topics
        elif isinstance(record, ConsumerGroupMemberRecord):
            old = self.members.get(record.member_id) or ConsumerMember(record.member_id)
            self._put_member(
                old,
                replace(
                    old,
                    instance_id=record.instance_id,
                    rack_id=record.rack_id,
                    client_id=record.client_id,
                    client_host=record.client_host,
                    rebalance_timeout_ms=record.rebalance_timeout_ms,
                    subscribed_topic_names=record.subscribed_topic_names,
                    subscribed_topic_regex=record.subscribed_topic_regex,
                    server_assignor=record.server_assignor,
                    classic=record.classic,
                ),
            )
        elif isinstance(record, ConsumerGroupTargetMemberRecord):
            self.target[record.member_id] = from_partitions(record.partitions)
        elif isinstance(record, ConsumerGroupTargetEpochRecord):
            self.assignment_epoch = record.assignment_epoch
        elif isinstance(record, ConsumerGroupCurrentMemberRecord):
            old = self.members.get(record.member_id) or ConsumerMember(record.member_id)
            self._put_member(
                old,
                replace(
                    old,
                    member_epoch=record.member_epoch,
                    previous_member_epoch=record.previous_member_epoch,
                    state=MemberState(record.state),
                    assigned=from_partitions(record.assigned),
                    pending_revocation=from_partitions(record.pending_revocation),
                ),
            )
        elif isinstance(record, ConsumerGroupRegexRecord):
            self.resolved_regexes[record.regex] = record.topics
        elif isinstance(record, ConsumerTombstoneRecord):
            self._apply_tombstone(record)
        else:  # pragma: no cover
            raise TypeError(f"not a consumer group record: {record!r}")

    def _apply_tombstone(self, record: ConsumerTombstoneRecord) -> None:
        kind, mid = record.kind, record.sub_key
        if kind == K_EPOCH:
            self.dead = True  # the shard drops the group
        elif kind == K_METADATA:
            self.subscription_metadata = ()
        elif kind == K_MEMBER:
            old = self.members.get(mid)
            if old is not None:
                self._remove_partition_epochs(old)
                self.assignment_epochs.pop(mid, None)
                del self.members[mid]
                if old.instance_id is not None and self.static_members.get(old.instance_id) == mid:
                    del self.static_members[old.instance_id]
        elif kind == K_TARGET:
            self.target.pop(mid, None)
        elif kind == K_TARGET_EPOCH:
            self.assignment_epoch = -1
        elif kind == K_CURRENT:
            old = self.members.get(mid)
            if old is not None:
                self._put_member(
                    old,
                    replace(
                        old,
                        member_epoch=-1,
                        previous_member_epoch=-1,
                        assigned={},
                        pending_revocation={},
                    ),
                )
        elif kind == K_REGEX:
            self.resolved_regexes.pop(mid, None)

    def _put_member(self, old: ConsumerMember, new: ConsumerMember) -> None:
        known = old.member_id in self.members
        if known:
            self._remove_partition_epochs(old)
        self._update_assignment_epochs(old if known else None, new)
        self.members[new.member_id] = new
        if new.instance_id is not None:
            self.static_members[new.instance_id] = new.member_id
        for a in (new.assigned, new.pending_revocation):
            for t, ps in a.items():
                epochs = self.partition_epochs.setdefault(t, {})
                for p in ps:
                    epochs[p] = new.member_epoch

    def _update_assignment_epochs(self, old: ConsumerMember | None, new: ConsumerMember) -> None:
        if (
            old is not None
            and old.member_id == new.member_id
            and old.assigned is new.assigned
            and old.pending_revocation is new.pending_revocation
            and new.member_id in self.assignment_epochs
        ):
            return  # the usual heartbeat: nothing owned changed
        before = self.assignment_epochs.pop(old.member_id, {}) if old is not None else {}
        given = max(new.member_epoch, 0)
        now: dict[tuple[uuid.UUID, int], int] = {}
        for a in (new.assigned, new.pending_revocation):
            for t, ps in a.items():
                for p in ps:
                    now[(t, p)] = before.get((t, p), given)
        self.assignment_epochs[new.member_id] = now

    def given_epoch(self, member_id: str, topic: uuid.UUID, partition: int) -> int | None:
        """KIP-1251: the epoch at which the member was given the partition, None if it does
        not own it."""
        return self.assignment_epochs.get(member_id, {}).get((topic, partition))

    def _remove_partition_epochs(self, old: ConsumerMember) -> None:
        for a in (old.assigned, old.pending_revocation):
            for t, ps in a.items():
                epochs = self.partition_epochs.get(t)
                if epochs is None:
                    continue
                for p in ps:
                    if epochs.get(p) == old.member_epoch:
                        del epochs[p]
                if not epochs:
                    del self.partition_epochs[t]

    # --- comparison (the replay property) -----------------------------------------------------
    def persisted(self) -> tuple[object, ...]:
        """Everything the records hold, in a comparable form."""
        return (
            self.group_id,
            self.group_epoch,
            self.assignment_epoch,
            {mid: m for mid, m in self.members.items()},
            dict(self.static_members),
            {mid: to_partitions(a) for mid, a in self.target.items()},
            self.subscription_metadata,
            dict(self.resolved_regexes),
            {t: dict(ps) for t, ps in self.partition_epochs.items()},
        )
