"""KIP-848 server assignors (``assignors.server``): properties, and fixed cases whose expected
outputs come from Kafka's own tests (group-coordinator/src/test/.../group/assignor:
UniformHomogeneousAssignmentBuilderTest (formerly OptimizedUniformAssignmentBuilderTest),
UniformHeterogeneousAssignmentBuilderTest and RangeAssignorTest)."""

from __future__ import annotations

import base64
import time
import uuid
from collections.abc import Iterable, Mapping

import pytest
from hypothesis import given
from hypothesis import strategies as st

from assignors import (
    DEFAULT_SERVER_ASSIGNOR,
    SERVER_ASSIGNORS,
    ServerAssignment,
    ServerMember,
    TopicKey,
    range_server_assign,
    uniform_assign,
)
from assignors.server_uniform import kafka_topic_order

Parts = Mapping[TopicKey, Iterable[int]]


def kafka_uuid(text: str) -> uuid.UUID:
    """A Kafka ``Uuid.fromString`` (URL-safe base64 of the 16 bytes)."""
    return uuid.UUID(bytes=base64.urlsafe_b64decode(text + "=="))


T1 = kafka_uuid("T1-A4s3VTwiI5CTbEp6POw")
T2 = kafka_uuid("T2-B4s3VTwiI5YHbPp6YUe")
T3 = kafka_uuid("T3-CU8fVTLCz5YMkLoDQsa")
T4 = kafka_uuid("T4-Tw9fVTLCz5HbPp6YQsa")


def mem(
    member_id: str,
    topics: Iterable[TopicKey],
    assigned: Parts | None = None,
    instance_id: str | None = None,
) -> ServerMember:
    owned = {t: frozenset(p) for t, p in (assigned or {}).items()}
    return ServerMember(member_id, instance_id, None, frozenset(topics), owned)


def group(*members: ServerMember) -> dict[str, ServerMember]:
    return {m.member_id: m for m in members}


def plain(result: ServerAssignment) -> dict[str, dict[TopicKey, set[int]]]:
    return {m: {t: set(p) for t, p in by_topic.items()} for m, by_topic in result.items()}


def expect(**members: Parts) -> dict[str, dict[TopicKey, set[int]]]:
    return {m: {t: set(p) for t, p in by_topic.items()} for m, by_topic in members.items()}


def feed_back(
    members: Mapping[str, ServerMember], result: ServerAssignment
) -> dict[str, ServerMember]:
    """The next round's members: same subscriptions, the result as current target."""
    return {
        m: ServerMember(s.member_id, s.instance_id, s.rack_id, s.subscribed, result[m])
        for m, s in members.items()
    }


def counts(result: ServerAssignment) -> dict[str, int]:
    return {m: sum(len(p) for p in by_topic.values()) for m, by_topic in result.items()}


def owners(result: ServerAssignment) -> dict[tuple[TopicKey, int], str]:
    return {
        (t, p): m for m, by_topic in result.items() for t, parts in by_topic.items() for p in parts
    }


def check_valid(
    members: Mapping[str, ServerMember],
    partitions: Mapping[TopicKey, int],
    result: ServerAssignment,
) -> None:
    """Every member has an entry; each partition of each subscribed topic is assigned exactly
    once, to a subscriber; nothing else is assigned; no empty topic entries."""
    assert set(result) == set(members)
    seen: set[tuple[TopicKey, int]] = set()
    for member_id, by_topic in result.items():
        for topic, parts in by_topic.items():
            assert parts, f"empty entry for {topic} in {member_id}"
            assert topic in members[member_id].subscribed, f"{topic} to non-subscriber {member_id}"
            for p in parts:
                assert 0 <= p < partitions[topic]
                assert (topic, p) not in seen, f"{(topic, p)} assigned twice"
                seen.add((topic, p))
    wanted = {t for m in members.values() for t in m.subscribed if t in partitions}
    assert seen == {(t, p) for t in wanted for p in range(partitions[t])}


def valid_owned(
    members: Mapping[str, ServerMember], partitions: Mapping[TopicKey, int]
) -> dict[str, int]:
    """How many current partitions each member can keep: subscribed, existing, and not
    already claimed by a member earlier in member-id order."""
    taken: set[tuple[TopicKey, int]] = set()
    out: dict[str, int] = {}
    for member_id in sorted(members):
        member = members[member_id]
        n = 0
        for topic, parts in member.assigned.items():
            if topic not in member.subscribed or topic not in partitions:
                continue
            for p in parts:
                if 0 <= p < partitions[topic] and (topic, p) not in taken:
                    taken.add((topic, p))
                    n += 1
        out[member_id] = n
    return out


def moved(before: Mapping[str, ServerMember], result: ServerAssignment) -> int:
    """Partitions a member held (validly) before and does not hold after."""
    n = 0
    for member_id, member in before.items():
        for topic, parts in member.assigned.items():
            n += len(set(parts) - result.get(member_id, {}).get(topic, frozenset()))
    return n


# --- strategies ---------------------------------------------------------------------


TOPICS = [uuid.UUID(int=i * 0x0123456789ABCDEF0123456789ABCDEF % (1 << 128)) for i in range(1, 6)]
GONE = uuid.UUID(int=0xDEAD)  # a topic that no longer exists


@st.composite
def groups(
    draw: st.DrawFn, homogeneous: bool | None = None, max_members: int = 7
) -> tuple[dict[str, ServerMember], dict[TopicKey, int]]:
    """A group with arbitrary current assignments, including stale ones: partitions beyond
    a topic's count, a deleted topic, unsubscribed topics, partitions claimed twice."""
    topics = draw(st.lists(st.sampled_from(TOPICS), min_size=1, max_size=4, unique=True))
    partitions = {t: draw(st.integers(0, 9)) for t in topics}
    n = draw(st.integers(1, max_members))
    ids = [f"m{i}" for i in draw(st.permutations(range(n)))]
    if homogeneous is None:
        homogeneous = draw(st.booleans())
    common = frozenset(draw(st.lists(st.sampled_from(topics), unique=True)))
    members = {}
    for member_id in ids:
        subs = (
            common
            if homogeneous
            else frozenset(draw(st.lists(st.sampled_from(topics), unique=True)))
        )
        assigned = {}
        for topic in [*topics, GONE]:
            if draw(st.integers(0, 2)) == 0:
                assigned[topic] = frozenset(draw(st.lists(st.integers(0, 11), max_size=6)))
        instance = draw(st.one_of(st.none(), st.sampled_from(["i1", "i2", "i3", "i4"])))
        members[member_id] = mem(member_id, subs, assigned, instance)
    return members, partitions


@st.composite
def stable_groups(
    draw: st.DrawFn, homogeneous: bool | None = None
) -> tuple[dict[str, ServerMember], dict[TopicKey, int]]:
    """A group whose current assignments are the assignor's own previous output."""
    members, partitions = draw(groups(homogeneous))
    return feed_back(members, uniform_assign(members, partitions)), partitions


ASSIGN = [uniform_assign, range_server_assign]


# --- the registry -------------------------------------------------------------------


def test_registry_names_and_default() -> None:
    assert DEFAULT_SERVER_ASSIGNOR == "uniform"
    assert set(SERVER_ASSIGNORS) == {"uniform", "range"}
    for name, assignor in SERVER_ASSIGNORS.items():
        assert assignor.name == name
    members = group(mem("a", [T1]), mem("b", [T1]))
    assert SERVER_ASSIGNORS["uniform"].assign(members, {T1: 4}) == uniform_assign(members, {T1: 4})
    assert SERVER_ASSIGNORS["range"].assign(members, {T1: 4}) == range_server_assign(
        members, {T1: 4}
    )


def test_kafka_topic_order_is_signed() -> None:
    """Kafka's Uuid.compareTo compares the halves as signed longs: high bit set sorts first."""
    high = uuid.UUID(int=1 << 127)
    low = uuid.UUID(int=1)
    assert sorted([low, high], key=kafka_topic_order) == [high, low]


# --- properties common to both ------------------------------------------------------


@pytest.mark.parametrize("assign", ASSIGN)
@given(groups())
def test_valid_complete_and_only_to_subscribers(assign, case) -> None:  # type: ignore[no-untyped-def]
    members, partitions = case
    check_valid(members, partitions, assign(members, partitions))


@pytest.mark.parametrize("assign", ASSIGN)
@given(groups(), st.randoms(use_true_random=False))
def test_deterministic_whatever_the_input_order(assign, case, rnd) -> None:  # type: ignore[no-untyped-def]
    members, partitions = case
    first = assign(members, partitions)
    keys = list(members)
    rnd.shuffle(keys)
    topics = list(partitions)
    rnd.shuffle(topics)
    again = assign({k: members[k] for k in keys}, {t: partitions[t] for t in topics})
    assert again == first


@pytest.mark.parametrize("assign", ASSIGN)
def test_members_without_subscription_get_nothing(assign) -> None:  # type: ignore[no-untyped-def]
    members = group(mem("a", [], {T1: {0}}), mem("b", [T1]), mem("c", [T2], {T1: {1}}))
    result = assign(members, {T1: 3, T2: 0})
    assert result["a"] == {}
    assert result["c"] == {}
    assert plain(result)["b"] == {T1: {0, 1, 2}}
    assert assign(group(mem("a", []), mem("b", [])), {T1: 3}) == {"a": {}, "b": {}}
    assert assign({}, {T1: 3}) == {}


@pytest.mark.parametrize("assign", ASSIGN)
def test_removed_topics_and_partitions_are_dropped(assign) -> None:  # type: ignore[no-untyped-def]
    # T2 was deleted (no longer in partitions, no longer subscribed); T1 shrank from 6 to 3.
    members = group(
        mem("a", [T1], {T1: {0, 4}, T2: {0, 1}}),
        mem("b", [T1], {T1: {1, 5}, T2: {2}}),
    )
    result = assign(members, {T1: 3})
    check_valid(members, {T1: 3}, result)
    assert {t for by_topic in result.values() for t in by_topic} == {T1}
    # A subscription to a topic missing from the metadata is ignored, not an error.
    members = group(mem("a", [T1, T2], {T2: {0}}), mem("b", [T1]))
    result = assign(members, {T1: 2})
    assert plain(result) == expect(a={T1: {0}}, b={T1: {1}})


@pytest.mark.parametrize("assign", ASSIGN)
@given(groups())
def test_feeding_the_output_back_changes_nothing(assign, case) -> None:  # type: ignore[no-untyped-def]
    members, partitions = case
    first = assign(members, partitions)
    assert assign(feed_back(members, first), partitions) == first


# --- uniform, homogeneous -----------------------------------------------------------


@given(groups(homogeneous=True))
def test_uniform_homogeneous_balanced_and_minimal_moves(case) -> None:  # type: ignore[no-untyped-def]
    members, partitions = case
    result = uniform_assign(members, partitions)
    subscribed = next(iter(members.values())).subscribed
    total = sum(partitions[t] for t in subscribed)
    quota, extra = divmod(total, len(members))
    sizes = sorted(counts(result).values())
    assert sizes == [quota] * (len(members) - extra) + [quota + 1] * extra
    # Stickiness: the number of kept partitions is the most any balanced assignment keeps.
    owned = valid_owned(members, partitions)
    best_kept = sum(min(n, quota) for n in owned.values()) + min(
        extra, sum(1 for n in owned.values() if n > quota)
    )
    kept = sum(owned.values()) - moved_valid(members, partitions, result)
    assert kept == best_kept


def moved_valid(
    members: Mapping[str, ServerMember],
    partitions: Mapping[TopicKey, int],
    result: ServerAssignment,
) -> int:
    """Valid (kept-able) current partitions that the member no longer holds."""
    taken: set[tuple[TopicKey, int]] = set()
    n = 0
    for member_id in sorted(members):
        member = members[member_id]
        for topic, parts in member.assigned.items():
            if topic not in member.subscribed or topic not in partitions:
                continue
            for p in parts:
                if 0 <= p < partitions[topic] and (topic, p) not in taken:
                    taken.add((topic, p))
                    n += p not in result[member_id].get(topic, frozenset())
    return n


@given(stable_groups(homogeneous=True), st.sampled_from(["a-new", "m3x", "zz"]))
def test_uniform_homogeneous_new_member_moves_only_what_it_receives(case, new_id) -> None:  # type: ignore[no-untyped-def]
    members, partitions = case
    subscribed = next(iter(members.values())).subscribed
    members = {**members, new_id: mem(new_id, subscribed)}
    result = uniform_assign(members, partitions)
    received = sum(len(p) for p in result[new_id].values())
    assert moved(members, result) == received
    total = sum(partitions[t] for t in subscribed)
    assert received in (total // len(members), -(-total // len(members)))


def test_uniform_homogeneous_large_quota_goes_to_members_that_fill_it() -> None:
    # 7 partitions over 3 members: quotas 3, 2, 2. "a" holds 2, "c" holds 3: "c" keeps its 3
    # (giving "a" the larger quota would move a partition from "c" to "a" for nothing).
    members = group(
        mem("a", [T1], {T1: {0, 1}}),
        mem("b", [T1], {T1: {2}}),
        mem("c", [T1], {T1: {3, 4, 5}}),
    )
    result = uniform_assign(members, {T1: 7})
    assert plain(result) == expect(a={T1: {0, 1}}, b={T1: {2, 6}}, c={T1: {3, 4, 5}})


# Kafka's UniformHomogeneousAssignmentBuilderTest. Kafka deals out free partitions in its
# HashSet order of topic ids, kgroupd in Kafka's Uuid order; the cases below either do not
# depend on that order or are checked for what does not.


def test_kafka_homogeneous_one_member_no_topic_subscription() -> None:
    assert uniform_assign(group(mem("A", [])), {T1: 3}) == {"A": {}}


def test_kafka_homogeneous_num_members_greater_than_total_partitions() -> None:
    # Kafka 4.x: the first member gives up the larger quota it cannot fill from its own
    # partitions; the last members must take the remaining larger quotas.
    members = group(mem("A", [T3]), mem("B", [T3]), mem("C", [T3]))
    assert plain(uniform_assign(members, {T3: 2})) == expect(A={}, B={T3: {0}}, C={T3: {1}})


def test_kafka_homogeneous_first_assignment_two_members_two_topics() -> None:
    # Kafka expects A: T3 0-1, B: T1 0-2 - A two partitions, B three.
    result = uniform_assign(group(mem("A", [T1, T3]), mem("B", [T1, T3])), {T1: 3, T3: 2})
    assert counts(result) == {"A": 2, "B": 3}
    assert plain(result) == expect(A={T1: {0, 1}}, B={T1: {2}, T3: {0, 1}})


def test_kafka_homogeneous_unbalanced_previous_assignment() -> None:
    members = group(
        mem("A", [T1, T2], {T1: {0, 1}, T2: {0, 1}}),
        mem("B", [T1, T2], {T1: {2}, T2: {2}}),
    )
    result = uniform_assign(members, {T1: 3, T2: 3})
    assert plain(result) == expect(A={T1: {0, 1}, T2: {0}}, B={T1: {2}, T2: {1, 2}})


def test_kafka_homogeneous_one_member_added() -> None:
    members = group(
        mem("A", [T1, T2], {T1: {0, 2}, T2: {0}}),
        mem("B", [T1, T2], {T1: {1}, T2: {1, 2}}),
        mem("C", [T1, T2]),
    )
    result = uniform_assign(members, {T1: 3, T2: 3})
    assert plain(result) == expect(A={T1: {0, 2}}, B={T1: {1}, T2: {1}}, C={T2: {0, 2}})


def test_kafka_homogeneous_one_subscription_removed() -> None:
    members = group(
        mem("A", [T2], {T1: {0}, T2: {0}}),
        mem("B", [T2], {T1: {1}, T2: {1}}),
    )
    result = uniform_assign(members, {T1: 2, T2: 2})
    assert plain(result) == expect(A={T2: {0}}, B={T2: {1}})


def test_kafka_homogeneous_partitions_added() -> None:
    # T1 3 -> 6 and T2 3 -> 5 partitions: 11 over 2, the last member takes the extra one.
    members = group(
        mem("A", [T1, T2], {T1: {0, 2}, T2: {0}}),
        mem("B", [T1, T2], {T1: {1}, T2: {1, 2}}),
    )
    result = uniform_assign(members, {T1: 6, T2: 5})
    assert counts(result) == {"A": 5, "B": 6}
    assert plain(result) == expect(A={T1: {0, 2, 3, 4}, T2: {0}}, B={T1: {1, 5}, T2: {1, 2, 3, 4}})


def test_kafka_homogeneous_one_member_removed() -> None:
    # C (T1 2, T2 2) left: A and B keep theirs and get one of C's partitions each.
    members = group(
        mem("A", [T1, T2], {T1: {0}, T2: {0}}),
        mem("B", [T1, T2], {T1: {1}, T2: {1}}),
    )
    result = uniform_assign(members, {T1: 3, T2: 3})
    assert plain(result) == expect(A={T1: {0, 2}, T2: {0}}, B={T1: {1}, T2: {1, 2}})


# --- uniform, heterogeneous ---------------------------------------------------------


@given(groups(homogeneous=False))
def test_uniform_heterogeneous_no_partition_can_go_to_a_lighter_subscriber(case) -> None:  # type: ignore[no-untyped-def]
    members, partitions = case
    assert locally_balanced(members, uniform_assign(members, partitions))


def locally_balanced(members: Mapping[str, ServerMember], result: ServerAssignment) -> bool:
    """No member holds a partition that a subscriber with two or more fewer could take."""
    sizes = counts(result)
    return all(
        sizes[holder] - sizes[other] <= 1
        for holder, by_topic in result.items()
        for topic in by_topic
        for other, member in members.items()
        if topic in member.subscribed
    )


@st.composite
def complete_assignments(draw: st.DrawFn) -> tuple[dict[str, ServerMember], dict[TopicKey, int]]:
    """A group whose current assignment gives each partition to a random subscriber."""
    members, partitions = draw(groups(homogeneous=False))
    held: dict[str, dict[TopicKey, set[int]]] = {m: {} for m in members}
    for topic, n in partitions.items():
        subscribers = sorted(m for m in members if topic in members[m].subscribed)
        for p in range(n if subscribers else 0):
            held[draw(st.sampled_from(subscribers))].setdefault(topic, set()).add(p)
    current = {m: {t: frozenset(p) for t, p in by_topic.items()} for m, by_topic in held.items()}
    return feed_back(members, current), partitions


@given(complete_assignments())
def test_uniform_heterogeneous_moves_nothing_when_nothing_needs_moving(case) -> None:  # type: ignore[no-untyped-def]
    """Stickiness: a complete current assignment in which no partition could go to a
    subscriber holding two or more fewer is kept exactly, whatever its layout."""
    members, partitions = case
    current = {m: dict(s.assigned) for m, s in members.items()}
    result = uniform_assign(members, partitions)
    if len({s.subscribed for s in members.values()}) == 1:
        return  # identical subscriptions take the homogeneous builder (tested above)
    if locally_balanced(members, current):
        assert result == current
    else:
        assert moved(members, result) > 0


@given(stable_groups(homogeneous=False), st.lists(st.sampled_from(TOPICS), min_size=1, unique=True))
def test_uniform_heterogeneous_new_member_no_existing_member_gains(case, topics) -> None:  # type: ignore[no-untyped-def]
    """A newcomer to a balanced group only relieves others: no existing member ends with more
    partitions than it had (balancing may pass partitions along a chain of members)."""
    members, partitions = case
    before = counts({m: dict(s.assigned) for m, s in members.items()})
    members = {**members, "new": mem("new", [t for t in topics if t in partitions])}
    result = uniform_assign(members, partitions)
    check_valid(members, partitions, result)
    after = counts(result)
    assert all(after[m] <= before[m] for m in before)
    assert moved(members, result) >= sum(before.values()) - sum(after[m] for m in before)


# Kafka's UniformHeterogeneousAssignmentBuilderTest (members in sorted order, as there).


def test_kafka_heterogeneous_two_members_no_subscription() -> None:
    assert uniform_assign(group(mem("A", []), mem("B", [])), {T1: 3}) == {"A": {}, "B": {}}


def test_kafka_heterogeneous_first_assignment_two_members_two_topics() -> None:
    result = uniform_assign(group(mem("A", [T1, T3]), mem("B", [T3])), {T1: 3, T3: 6})
    assert plain(result) == expect(A={T1: {0, 1, 2}, T3: {4}}, B={T3: {0, 1, 2, 3, 5}})


def test_kafka_heterogeneous_more_members_than_partitions() -> None:
    members = group(mem("A", [T3]), mem("B", [T3]), mem("C", [T1]))
    result = uniform_assign(members, {T3: 1, T1: 2})
    assert plain(result) == expect(A={T3: {0}}, B={}, C={T1: {0, 1}})


def test_kafka_heterogeneous_unbalanced_previous_assignment() -> None:
    members = group(
        mem("A", [T1], {T1: {0, 1, 2}}),
        mem("B", [T1, T2], {T1: {3}, T2: {0}}),
        mem("C", [T1, T2, T3], {T1: {4, 5}, T2: {1, 2, 3}, T3: {0, 1, 2, 3}}),
    )
    result = uniform_assign(members, {T1: 6, T2: 4, T3: 4})
    assert plain(result) == expect(
        A={T1: {0, 1, 2, 5}},
        B={T1: {3}, T2: {0, 1, 2, 3}},
        C={T1: {4}, T3: {0, 1, 2, 3}},
    )


def test_kafka_heterogeneous_partitions_added() -> None:
    members = group(
        mem("A", [T1, T3], {T1: {0, 1, 2, 3}, T3: {0, 1}}),
        mem("B", [T1, T2, T3, T4], {T2: {0, 1, 2}, T4: {0, 1, 2}}),
    )
    result = uniform_assign(members, {T1: 6, T2: 5, T3: 3, T4: 3})
    assert plain(result) == expect(
        A={T1: {0, 1, 2, 3, 4, 5}, T3: {0, 1, 2}},
        B={T2: {0, 1, 2, 3, 4}, T4: {0, 1, 2}},
    )


def test_kafka_heterogeneous_member_and_partitions_added() -> None:
    members = group(
        mem("A", [T1], {T1: {0, 2}, T2: {0}}),
        mem("B", [T1, T2], {T1: {1}, T2: {1, 2}}),
        mem("C", [T1, T2]),
    )
    result = uniform_assign(members, {T1: 6, T2: 7})
    assert plain(result) == expect(
        A={T1: {0, 2, 3, 4, 5}},
        B={T1: {1}, T2: {1, 2, 6}},
        C={T2: {0, 3, 4, 5}},
    )


def test_kafka_heterogeneous_member_removed() -> None:
    members = group(
        mem("A", [T1, T3], {T1: {0, 1, 2}, T3: {0, 1}}),
        mem("B", [T2], {T2: {3, 4, 5, 6}}),
    )
    result = uniform_assign(members, {T1: 3, T2: 8, T3: 3})
    assert plain(result) == expect(
        A={T1: {0, 1, 2}, T3: {0, 1, 2}}, B={T2: {0, 1, 2, 3, 4, 5, 6, 7}}
    )


def test_kafka_heterogeneous_subscription_removed() -> None:
    members = group(
        mem("A", [T1], {T1: {0, 2}, T2: {1, 3}}),
        mem("B", [T1, T2], {T1: {1}, T2: {0, 2, 4}}),
    )
    result = uniform_assign(members, {T1: 3, T2: 5})
    assert plain(result) == expect(A={T1: {0, 1, 2}}, B={T2: {0, 1, 2, 3, 4}})


def test_kafka_heterogeneous_topic_partitions_run_out() -> None:
    # Kafka's test runs the heterogeneous builder on identical subscriptions, for which
    # uniform_assign would choose the homogeneous one: call the builder directly.
    from assignors.server_uniform import uniform_heterogeneous

    current = {"A": {T1: {0, 1}, T2: {0, 1}, T3: {0, 1}}, "B": {}}
    subs = {"A": frozenset({T1, T2, T3}), "B": frozenset({T1, T2, T3})}
    result = uniform_heterogeneous(["A", "B"], subs, {T1: 2, T2: 2, T3: 2}, current)
    assert plain(result) == expect(A={T2: {0}, T3: {0, 1}}, B={T1: {0, 1}, T2: {1}})


def test_kafka_heterogeneous_one_member_without_subscriptions() -> None:
    result = uniform_assign(group(mem("A", [T1]), mem("B", [])), {T1: 3})
    assert plain(result) == expect(A={T1: {0, 1, 2}}, B={})


# --- range --------------------------------------------------------------------------


@given(groups())
def test_range_contiguous_ranges_in_member_order(case) -> None:  # type: ignore[no-untyped-def]
    members, partitions = case
    result = range_server_assign(members, partitions)
    order = sorted(
        members,
        key=lambda m: (0, members[m].instance_id, m) if members[m].instance_id else (1, m, ""),
    )
    for topic, n in partitions.items():
        subscribers = [m for m in order if topic in members[m].subscribed]
        if not subscribers:
            continue
        q, r = divmod(n, len(subscribers))
        start = 0
        for i, member_id in enumerate(subscribers):
            size = q + (i < r)
            got = result[member_id].get(topic, frozenset())
            assert got == frozenset(range(start, start + size))
            start += size


@given(groups(homogeneous=True))
def test_range_co_partitions_topics_of_equal_size(case) -> None:  # type: ignore[no-untyped-def]
    members, partitions = case
    result = range_server_assign(members, partitions)
    for by_topic in result.values():
        for a in by_topic:
            for b in by_topic:
                if partitions[a] == partitions[b]:
                    assert by_topic[a] == by_topic[b]


def test_range_recomputes_instead_of_keeping_the_current_assignment() -> None:
    # Kafka 4.x's server range assignor is not sticky (KAFKA-16944): the target is the range
    # layout whatever the members currently hold.
    members = group(mem("a", [T1], {T1: {2, 3}}), mem("b", [T1], {T1: {0, 1}}))
    assert plain(range_server_assign(members, {T1: 4})) == expect(a={T1: {0, 1}}, b={T1: {2, 3}})


def test_range_static_members_first_by_instance_id() -> None:
    members = group(
        mem("a", [T1]), mem("b", [T1], instance_id="i2"), mem("c", [T1], instance_id="i1")
    )
    result = range_server_assign(members, {T1: 3})
    assert plain(result) == expect(c={T1: {0}}, b={T1: {1}}, a={T1: {2}})


# Kafka's RangeAssignorTest.


def test_kafka_range_two_members_two_topics_same_subscriptions() -> None:
    result = range_server_assign(group(mem("A", [T1, T3]), mem("B", [T1, T3])), {T1: 3, T3: 2})
    assert plain(result) == expect(A={T1: {0, 1}, T3: {0}}, B={T1: {2}, T3: {1}})


def test_kafka_range_three_members_different_subscriptions() -> None:
    members = group(mem("A", [T1, T2]), mem("B", [T3]), mem("C", [T2, T3]))
    result = range_server_assign(members, {T1: 3, T2: 3, T3: 2})
    assert plain(result) == expect(A={T1: {0, 1, 2}, T2: {0, 1}}, B={T3: {0}}, C={T2: {2}, T3: {1}})


def test_kafka_range_more_members_than_partitions() -> None:
    members = group(mem("A", [T1, T3]), mem("B", [T1, T3]), mem("C", [T1, T3]))
    result = range_server_assign(members, {T1: 3, T3: 2})
    assert plain(result) == expect(A={T1: {0}, T3: {0}}, B={T1: {1}, T3: {1}}, C={T1: {2}})


def test_kafka_range_more_members_than_partitions_when_one_added() -> None:
    members = group(
        mem("A", [T1, T2], {T1: {0}, T2: {0}}),
        mem("B", [T1, T2], {T1: {1}, T2: {1}}),
        mem("C", [T1, T2]),
    )
    result = range_server_assign(members, {T1: 2, T2: 2})
    assert plain(result) == expect(A={T1: {0}, T2: {0}}, B={T1: {1}, T2: {1}}, C={})


def test_kafka_range_member_and_partition_added() -> None:
    members = group(
        mem("A", [T1, T2], {T1: {0, 1}, T2: {0, 1}}),
        mem("B", [T1, T2], {T1: {2}, T2: {2}}),
        mem("C", [T1]),
    )
    result = range_server_assign(members, {T1: 4, T2: 3})
    assert plain(result) == expect(A={T1: {0, 1}, T2: {0, 1}}, B={T1: {2}, T2: {2}}, C={T1: {3}})


def test_kafka_range_multiple_subscriptions_removed() -> None:
    members = group(
        mem("A", [T1], {T1: {0, 1, 2}, T2: {0}}),
        mem("B", [T1, T2, T3], {T2: {1}}),
        mem("C", [T2], {T2: {2}, T3: {0, 1}}),
    )
    result = range_server_assign(members, {T1: 3, T2: 3, T3: 2})
    assert plain(result) == expect(A={T1: {0, 1}}, B={T1: {2}, T2: {0, 1}, T3: {0, 1}}, C={T2: {2}})


@pytest.mark.parametrize("n_partitions", [3, 5])
def test_kafka_range_static_member_rejoins_with_a_new_member_id(n_partitions: int) -> None:
    # testStaticMembership (3 partitions, A and B static) and testMixedStaticMembership
    # (5 partitions, A and C static, B dynamic): the instance keeps its partitions.
    members = group(mem("A", [T1], instance_id="instanceA"), mem("B", [T1]))
    if n_partitions == 5:
        members["C"] = mem("C", [T1], instance_id="instanceC")
    else:
        members["B"] = mem("B", [T1], instance_id="instanceB")
    first = range_server_assign(members, {T1: n_partitions})
    rejoined = {k: v for k, v in members.items() if k != "A"}
    rejoined["A1"] = mem("A1", [T1], instance_id="instanceA")
    second = range_server_assign(rejoined, {T1: n_partitions})
    assert second["A1"] == first["A"]
    assert all(second[m] == first[m] for m in rejoined if m != "A1")


# --- performance --------------------------------------------------------------------


def _big_group(heterogeneous: bool) -> tuple[dict[str, ServerMember], dict[TopicKey, int]]:
    topics = [
        uuid.UUID(int=(i + 1) * 0x9E3779B97F4A7C15F39CC0605CEDC834 % (1 << 128)) for i in range(20)
    ]
    partitions = {t: 100 for t in topics}  # 2,000 partitions
    members = {}
    for i in range(1000):
        subs = topics[i % 7 : i % 7 + 10] if heterogeneous else topics
        members[f"member-{i:04d}"] = mem(f"member-{i:04d}", subs)
    return members, partitions


@pytest.mark.parametrize("name", ["uniform", "range"])
@pytest.mark.parametrize("heterogeneous", [False, True])
def test_thousand_members_two_thousand_partitions_well_under_a_second(
    name: str, heterogeneous: bool
) -> None:
    members, partitions = _big_group(heterogeneous)
    assignor = SERVER_ASSIGNORS[name]
    start = time.perf_counter()
    result = assignor.assign(members, partitions)
    first = time.perf_counter() - start
    members = feed_back(members, result)
    members["member-new"] = mem("member-new", partitions)
    start = time.perf_counter()
    again = assignor.assign(members, partitions)
    second = time.perf_counter() - start
    check_valid(members, partitions, again)
    assert first < 0.5 and second < 0.5, (first, second)
