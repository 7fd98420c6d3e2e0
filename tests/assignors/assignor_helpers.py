"""Shared strategies, checks and the multi-round rebalance simulator for the assignor tests."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from hypothesis import strategies as st

from kgroupd.assignors import GroupAssignment, GroupSpec, MemberSpec, TopicPartition
from kgroupd.assignors.sticky import cooperative_sticky_assign

TP = TopicPartition


def member(
    member_id: str,
    topics: Iterable[str],
    owned: Iterable[tuple[str, int]] = (),
    generation: int = -1,
    **kw: object,
) -> MemberSpec:
    return MemberSpec(
        member_id,
        frozenset(topics),
        tuple(TP(t, p) for t, p in owned),
        generation,
        **kw,  # type: ignore[arg-type]
    )


def all_partitions(spec: GroupSpec) -> set[TopicPartition]:
    return {TP(t, p) for t in spec.subscribed_topics() for p in range(spec.topics[t])}


def check_valid(spec: GroupSpec, result: GroupAssignment, complete: bool = True) -> None:
    """Every member has an entry; no partition twice; only subscribed, existing partitions;
    with ``complete`` every partition of every subscribed topic is assigned."""
    assert set(result.assignments) == {m.member_id for m in spec.members}
    seen: set[TopicPartition] = set()
    for member_id, tp in result.iter_all():
        assert tp not in seen, f"{tp} assigned twice"
        seen.add(tp)
        assert tp.topic in spec.member(member_id).topics, f"{tp} to unsubscribed {member_id}"
        assert 0 <= tp.partition < spec.topics[tp.topic]
    for by_topic in result.assignments.values():
        for parts in by_topic.values():
            assert list(parts) == sorted(parts)
    if complete:
        assert seen == all_partitions(spec)


def check_locally_balanced(spec: GroupSpec, result: GroupAssignment) -> None:
    """No partition can move to a subscribed member holding two or more fewer partitions."""
    counts = result.counts()
    for m in spec.members:
        for other in spec.members:
            if counts[m.member_id] >= counts[other.member_id] + 2:
                movable = [tp for tp in result.partitions(m.member_id) if tp.topic in other.topics]
                assert not movable, f"{movable} could move {m.member_id} -> {other.member_id}"


def resolved_owners(spec: GroupSpec) -> dict[TopicPartition, str]:
    """Reference ownership: the highest-generation claim wins, a tie at the top voids it."""
    claims: dict[TopicPartition, list[tuple[int, str]]] = {}
    live = set(spec.subscribed_topics())
    for m in spec.members:
        for tp in set(m.owned_partitions):
            if tp.topic in live and 0 <= tp.partition < spec.topics[tp.topic]:
                claims.setdefault(tp, []).append((m.generation, m.member_id))
    owners = {}
    for tp, cl in claims.items():
        top = max(g for g, _ in cl)
        winners = [mid for g, mid in cl if g == top]
        if len(winners) == 1:
            owners[tp] = winners[0]
    return owners


@st.composite
def group_specs(
    draw: st.DrawFn,
    identical: bool = False,
    conflicts: bool = True,
    max_members: int = 6,
    max_topics: int = 4,
    max_partitions: int = 8,
) -> GroupSpec:
    n_topics = draw(st.integers(1, max_topics))
    topics = {f"t{i}": draw(st.integers(0, max_partitions)) for i in range(n_topics)}
    names = sorted(topics)
    n_members = draw(st.integers(1, max_members))
    ids = [f"m{i:02d}" for i in range(n_members)]
    if identical:
        common = draw(st.frozensets(st.sampled_from([*names, "missing"]), min_size=1))
        subs = {mid: common for mid in ids}
    else:
        subs = {
            mid: draw(st.frozensets(st.sampled_from([*names, "missing"]), max_size=n_topics + 1))
            for mid in ids
        }
    universe = [TP(t, p) for t in names for p in range(topics[t])] + [TP("t0", 99), TP("gone", 0)]
    owned: dict[str, list[TopicPartition]] = {mid: [] for mid in ids}
    if conflicts:
        for mid in ids:
            owned[mid] = draw(st.lists(st.sampled_from(universe), unique=True, max_size=12))
    else:
        for tp in universe:
            holder = draw(st.sampled_from([None, *ids]))
            if holder is not None:
                owned[holder].append(tp)
    generations = {mid: draw(st.integers(-1, 3)) for mid in ids} if conflicts else {}
    members = tuple(
        MemberSpec(mid, subs[mid], tuple(owned[mid]), generations.get(mid, 1)) for mid in ids
    )
    return GroupSpec(members, topics)


def feed_back(spec: GroupSpec, result: GroupAssignment, generation: int) -> GroupSpec:
    """The next round's spec: every member claims what it was just assigned."""
    members = tuple(
        MemberSpec(
            m.member_id,
            m.topics,
            tuple(result.partitions(m.member_id)),
            generation,
            m.rack,
            m.user_data,
            m.group_instance_id,
        )
        for m in spec.members
    )
    return GroupSpec(members, spec.topics, spec.now_ms, result.assignor_state)


# --- multi-round cooperative rebalance simulator ---------------------------------------


@dataclass
class SimMember:
    member_id: str
    topics: frozenset[str]
    instance_id: str | None = None
    owned: set[TopicPartition] = field(default_factory=set)
    generation: int = -1


@dataclass
class RoundReport:
    assignment: GroupAssignment
    revoked: dict[str, set[TopicPartition]]
    added: dict[str, set[TopicPartition]]


class CooperativeGroup:
    """A consumer group running the cooperative protocol against an assign function.

    Each ``rebalance`` is one JoinGroup/SyncGroup round: members report what they
    own, the leader assigns, each member revokes what it lost and adds what it got.
    It asserts the KIP-429 safety rule: a partition added to a member was owned
    by no other member of the group when the round started.
    """

    def __init__(
        self,
        topics: dict[str, int],
        delay_ms: int = 0,
        assign: Callable[..., GroupAssignment] = cooperative_sticky_assign,
    ) -> None:
        self.topics = dict(topics)
        self.delay_ms = delay_ms
        self.assign = assign
        self.members: dict[str, SimMember] = {}
        self.state: bytes | None = None
        self.generation = 0
        self.now_ms = 0
        self.next_rebalance_ms: int | None = None
        self._ids = 0

    def join(self, topics: Iterable[str], instance_id: str | None = None) -> str:
        self._ids += 1
        member_id = f"member-{self._ids:04d}"
        self.members[member_id] = SimMember(member_id, frozenset(topics), instance_id)
        return member_id

    def leave(self, member_id: str) -> None:
        del self.members[member_id]  # a departing consumer gives up what it owned

    def by_instance(self, instance_id: str) -> str:
        return next(m.member_id for m in self.members.values() if m.instance_id == instance_id)

    def spec(self) -> GroupSpec:
        return GroupSpec(
            tuple(
                MemberSpec(
                    m.member_id,
                    m.topics,
                    tuple(sorted(m.owned)),
                    m.generation,
                    group_instance_id=m.instance_id,
                )
                for m in self.members.values()
            ),
            self.topics,
            self.now_ms,
            self.state,
        )

    def rebalance(self) -> RoundReport:
        spec = self.spec()
        result = self.assign(spec, scheduled_rebalance_max_delay_ms=self.delay_ms)
        check_valid(spec, result, complete=False)
        self.generation += 1
        before = {mid: set(m.owned) for mid, m in self.members.items()}
        revoked: dict[str, set[TopicPartition]] = {}
        added: dict[str, set[TopicPartition]] = {}
        for mid, m in self.members.items():
            new = set(result.partitions(mid))
            revoked[mid] = before[mid] - new
            added[mid] = new - before[mid]
            for tp in added[mid]:
                others = [o for o, owned in before.items() if o != mid and tp in owned]
                assert not others, f"{tp} given to {mid} while still owned by {others}"
            m.owned = new
            m.generation = self.generation
        self.state = result.assignor_state
        self.next_rebalance_ms = result.next_rebalance_ms
        # no partition owned twice after the round either
        owners: dict[TopicPartition, str] = {}
        for mid, m in self.members.items():
            for tp in m.owned:
                assert tp not in owners, f"{tp} owned by {owners[tp]} and {mid}"
                owners[tp] = mid
        return RoundReport(result, revoked, added)

    def settle(self, max_rounds: int = 10) -> list[RoundReport]:
        """Rebalance until a round revokes nothing (the cooperative follow-up stops)."""
        reports = []
        for _ in range(max_rounds):
            report = self.rebalance()
            reports.append(report)
            if not any(report.revoked.values()):
                return reports
        raise AssertionError(f"no convergence in {max_rounds} rounds")

    def ownership(self) -> dict[str, set[TopicPartition]]:
        return {mid: set(m.owned) for mid, m in self.members.items()}

    def unowned(self) -> set[TopicPartition]:
        everything = {
            TP(t, p)
            for t, n in self.topics.items()
            if any(t in m.topics for m in self.members.values())
            for p in range(n)
        }
        return everything - {tp for m in self.members.values() for tp in m.owned}
