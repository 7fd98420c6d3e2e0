"""KIP-848 server assignors (``kgroupd.assignors.server``): the registry, properties of ``uniform``
(homogeneous and heterogeneous builders) and ``range``, and the 1,000-member timing.
Fixed cases from Kafka's own tests are in test_server_assignors_kafka_cases.py."""

from __future__ import annotations

import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st
from server_assignor_helpers import (
    T1,
    T2,
    TOPICS,
    check_valid,
    complete_assignments,
    counts,
    expect,
    feed_back,
    group,
    groups,
    locally_balanced,
    mem,
    moved,
    moved_valid,
    plain,
    stable_groups,
    valid_owned,
)

from kgroupd.assignors import (
    DEFAULT_SERVER_ASSIGNOR,
    SERVER_ASSIGNORS,
    ServerMember,
    TopicKey,
    range_server_assign,
    uniform_assign,
)
from kgroupd.assignors.server_uniform import kafka_topic_order

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


# --- uniform, heterogeneous ---------------------------------------------------------


@given(groups(homogeneous=False))
def test_uniform_heterogeneous_no_partition_can_go_to_a_lighter_subscriber(case) -> None:  # type: ignore[no-untyped-def]
    members, partitions = case
    assert locally_balanced(members, uniform_assign(members, partitions))


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
def test_thousand_members_two_thousand_partitions_are_valid_and_sticky(
    name: str, heterogeneous: bool
) -> None:
    members, partitions = _big_group(heterogeneous)
    assignor = SERVER_ASSIGNORS[name]
    # (Its speed is measured by bench/bench_assignors.py, not asserted here.)
    result = assignor.assign(members, partitions)
    members = feed_back(members, result)
    members["member-new"] = mem("member-new", partitions)
    again = assignor.assign(members, partitions)
    check_valid(members, partitions, again)
