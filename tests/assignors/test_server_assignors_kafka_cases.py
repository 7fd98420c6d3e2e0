"""Fixed cases whose expected outputs come from Kafka's own tests of the KIP-848 server
assignors (group-coordinator/src/test/java/org/apache/kafka/coordinator/group/assignor/:
UniformHomogeneousAssignmentBuilderTest, formerly OptimizedUniformAssignmentBuilderTest;
UniformHeterogeneousAssignmentBuilderTest; RangeAssignorTest), same topic ids and members."""

from __future__ import annotations

import pytest
from server_assignor_helpers import T1, T2, T3, T4, counts, expect, group, mem, plain

from kgroupd.assignors import range_server_assign, uniform_assign
from kgroupd.assignors.server_uniform import uniform_heterogeneous

# UniformHomogeneousAssignmentBuilderTest (Kafka 4.x expectations). Kafka deals out free
# partitions in its HashSet order of topic ids, kgroupd in Kafka's Uuid order; where a case
# depends on that order, what does not depend on it is checked (and kgroupd's answer).


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


# UniformHeterogeneousAssignmentBuilderTest (members in sorted order, as there).


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
    current = {"A": {T1: {0, 1}, T2: {0, 1}, T3: {0, 1}}, "B": {}}
    subs = {"A": frozenset({T1, T2, T3}), "B": frozenset({T1, T2, T3})}
    result = uniform_heterogeneous(["A", "B"], subs, {T1: 2, T2: 2, T3: 2}, current)
    assert plain(result) == expect(A={T2: {0}, T3: {0, 1}}, B={T1: {0, 1}, T2: {1}})


def test_kafka_heterogeneous_one_member_without_subscriptions() -> None:
    result = uniform_assign(group(mem("A", [T1]), mem("B", [])), {T1: 3})
    assert plain(result) == expect(A={T1: {0, 1, 2}}, B={})


# RangeAssignorTest.


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
