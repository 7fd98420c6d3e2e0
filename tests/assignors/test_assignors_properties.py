"""Property tests for every algorithm: validity, balance, stickiness, failover priority."""

from __future__ import annotations

from collections import Counter

from assignor_helpers import (
    TP,
    check_locally_balanced,
    check_valid,
    feed_back,
    group_specs,
    member,
    resolved_owners,
)
from hypothesis import given
from hypothesis import strategies as st

from kgroupd.assignors import (
    GroupSpec,
    MemberSpec,
    cooperative_sticky_assign,
    encode_priority,
    failover_assign,
    minimum_moves,
    range_assign,
    roundrobin_assign,
    sticky_assign,
)
from kgroupd.assignors.codec import INT32_MIN

ALL = [range_assign, roundrobin_assign, sticky_assign, failover_assign]


@given(group_specs())
def test_every_partition_assigned_exactly_once_to_a_subscriber(spec: GroupSpec) -> None:
    for assign in ALL:
        check_valid(spec, assign(spec))


@given(group_specs())
def test_assignors_are_deterministic_and_order_independent(spec: GroupSpec) -> None:
    reversed_spec = GroupSpec(tuple(reversed(spec.members)), spec.topics)
    for assign in [*ALL, cooperative_sticky_assign]:
        assert assign(spec).assignments == assign(reversed_spec).assignments


# --- range -------------------------------------------------------------------------


@given(group_specs())
def test_range_gives_contiguous_balanced_ranges_in_member_order(spec: GroupSpec) -> None:
    result = range_assign(spec)
    for topic in spec.subscribed_topics():
        subscribers = sorted(m.member_id for m in spec.members if topic in m.topics)
        sizes = [len(result.assignments[m].get(topic, ())) for m in subscribers]
        assert sizes == sorted(sizes, reverse=True)
        assert max(sizes) - min(sizes) <= 1
        flat = [p for m in subscribers for p in result.assignments[m].get(topic, ())]
        assert flat == list(range(spec.topics[topic]))


def test_range_co_partitioned_topics_land_together() -> None:
    spec = GroupSpec(
        (member("c1", ["a", "b"]), member("c0", ["a", "b"]), member("c2", ["a", "b"])),
        {"a": 7, "b": 7},
    )
    result = range_assign(spec)
    for m in ("c0", "c1", "c2"):
        assert result.assignments[m]["a"] == result.assignments[m]["b"]
    assert result.assignments["c0"]["a"] == (0, 1, 2)
    assert result.assignments["c2"]["a"] == (5, 6)


def test_range_orders_static_members_by_instance_id_first() -> None:
    spec = GroupSpec((member("a", ["t"]), member("z", ["t"], group_instance_id="i0")), {"t": 2})
    assert range_assign(spec).assignments["z"]["t"] == (0,)


# --- round robin -------------------------------------------------------------------


@given(group_specs(identical=True))
def test_roundrobin_identical_subscriptions_balanced(spec: GroupSpec) -> None:
    counts = roundrobin_assign(spec).counts().values()
    assert max(counts) - min(counts) <= 1


def test_roundrobin_matches_kafka_javadoc_examples() -> None:
    both = GroupSpec((member("C0", ["t0", "t1"]), member("C1", ["t0", "t1"])), {"t0": 3, "t1": 3})
    r = roundrobin_assign(both)
    assert r.partitions("C0") == [TP("t0", 0), TP("t0", 2), TP("t1", 1)]
    assert r.partitions("C1") == [TP("t0", 1), TP("t1", 0), TP("t1", 2)]
    mixed = GroupSpec(
        (member("C0", ["t0"]), member("C1", ["t0", "t1"]), member("C2", ["t0", "t1", "t2"])),
        {"t0": 1, "t1": 2, "t2": 3},
    )
    r = roundrobin_assign(mixed)
    assert r.partitions("C0") == [TP("t0", 0)]
    assert r.partitions("C1") == [TP("t1", 0)]
    assert r.partitions("C2") == [TP("t1", 1), TP("t2", 0), TP("t2", 1), TP("t2", 2)]


# --- sticky ------------------------------------------------------------------------


@given(group_specs(identical=True))
def test_sticky_identical_subscriptions_fully_balanced(spec: GroupSpec) -> None:
    result = sticky_assign(spec)
    check_valid(spec, result)
    counts = result.counts().values()
    assert max(counts) - min(counts) <= 1


@given(group_specs(identical=True))
def test_sticky_identical_subscriptions_make_exactly_the_minimum_moves(spec: GroupSpec) -> None:
    owners = resolved_owners(spec)  # highest generation wins, a tie voids the claim
    result = sticky_assign(spec).owners()
    moves = sum(1 for tp, m in owners.items() if result.get(tp) != m)
    owned_counts = Counter(owners.values())
    expected = minimum_moves(
        (owned_counts[m.member_id] for m in spec.members),
        len(spec.members),
        sum(spec.topics[t] for t in spec.subscribed_topics()),
    )
    assert moves == expected


@given(group_specs())
def test_sticky_mixed_subscriptions_locally_balanced(spec: GroupSpec) -> None:
    result = sticky_assign(spec)
    check_valid(spec, result)
    check_locally_balanced(spec, result)


@given(group_specs())
def test_sticky_keeps_winning_claims_when_it_can(spec: GroupSpec) -> None:
    """A partition stays with its resolved owner unless that owner is over its share."""
    owners = resolved_owners(spec)
    result = sticky_assign(spec)
    counts = result.counts()
    for tp, m in owners.items():
        if tp.topic not in spec.member(m).topics:
            continue
        if result.owners().get(tp) != m:
            # moved away: the owner must not be below everyone who could take it
            assert counts[m] >= min(
                counts[o.member_id] for o in spec.members if tp.topic in o.topics
            )


@given(group_specs())
def test_sticky_is_stable_when_fed_its_own_output(spec: GroupSpec) -> None:
    first = sticky_assign(spec)
    second = sticky_assign(feed_back(spec, first, generation=10))
    assert second.assignments == first.assignments


def test_minimum_moves_closed_form() -> None:
    assert minimum_moves([3], 2, 3) == 1  # 3 partitions, a newcomer takes 1
    assert minimum_moves([4, 4, 0], 3, 8) == 2  # quotas 3, 3, 2
    assert minimum_moves([2, 2, 2], 3, 6) == 0
    assert minimum_moves([5, 0, 0, 0], 4, 10) == 2  # keeps max quota 3
    assert minimum_moves([], 0, 0) == 0


# --- cooperative (single round) ------------------------------------------------------


@given(group_specs(), st.booleans())
def test_cooperative_is_the_sticky_target_minus_pending_revocations(
    spec: GroupSpec, deferral: bool
) -> None:
    delay = 30_000 if deferral else 0
    result = cooperative_sticky_assign(spec, scheduled_rebalance_max_delay_ms=delay)
    check_valid(spec, result, complete=False)
    target = sticky_assign(spec).owners()
    claims: dict[TP, set[str]] = {}
    for m in spec.members:
        for tp in m.owned_partitions:
            claims.setdefault(tp, set()).add(m.member_id)
    for m_id, tp in result.iter_all():
        assert target[tp] == m_id  # no state: same target as sticky
        assert claims.get(tp, {m_id}) <= {m_id} or m_id in claims[tp]
    for tp, m_id in target.items():
        if result.owners().get(tp) is None:
            assert claims.get(tp, set()) - {m_id}, f"{tp} withheld without another owner"


# --- failover ----------------------------------------------------------------------


@st.composite
def failover_specs(draw: st.DrawFn) -> GroupSpec:
    n = draw(st.integers(1, 6))
    topics = {"a": draw(st.integers(0, 5)), "b": draw(st.integers(0, 5))}
    members = []
    for i in range(n):
        priority = draw(st.one_of(st.none(), st.integers(-3, 3), st.just(INT32_MIN)))
        subs = draw(st.frozensets(st.sampled_from(["a", "b"]), min_size=1))
        user_data = None if priority is None else encode_priority(priority)
        members.append(MemberSpec(f"m{i}", subs, user_data=user_data))
    return GroupSpec(tuple(members), topics)


@given(failover_specs())
def test_failover_gives_each_topic_to_its_top_priority_subscriber(spec: GroupSpec) -> None:
    result = failover_assign(spec)
    check_valid(spec, result)

    def priority(m: MemberSpec) -> int:
        return int.from_bytes(m.user_data, "big", signed=True) if m.user_data else INT32_MIN

    for topic in spec.subscribed_topics():
        subscribers = [m for m in spec.members if topic in m.topics]
        top = max(priority(m) for m in subscribers)
        winner = min(m.member_id for m in subscribers if priority(m) == top)
        assert result.assignments[winner].get(topic, ()) == tuple(range(spec.topics[topic]))


def test_failover_next_highest_takes_over() -> None:
    members = [
        MemberSpec("a", frozenset({"t"}), user_data=encode_priority(10)),
        MemberSpec("b", frozenset({"t"}), user_data=encode_priority(5)),
        MemberSpec("c", frozenset({"t"}), user_data=encode_priority(1)),
        MemberSpec("d", frozenset({"t"})),  # no user data: INT32_MIN
    ]
    spec = GroupSpec(tuple(members), {"t": 4})
    assert failover_assign(spec).partitions("a") == [TP("t", p) for p in range(4)]
    spec = GroupSpec(tuple(members[1:]), {"t": 4})
    assert failover_assign(spec).partitions("b") == [TP("t", p) for p in range(4)]
    spec = GroupSpec((members[3], MemberSpec("e", frozenset({"t"}), user_data=b"\x80")), {"t": 1})
    assert failover_assign(spec).partitions("d") == [TP("t", 0)]  # tie at INT32_MIN: smallest id
