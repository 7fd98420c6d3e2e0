"""Fixed cases whose answers come from Kafka's own sticky assignor tests
(clients/.../internals/AbstractStickyAssignorTest.java and StickyAssignorTest.java)."""

from __future__ import annotations

from assignor_helpers import TP, check_locally_balanced, check_valid, feed_back, member

from kgroupd.assignors import GroupSpec, cooperative_sticky_assign, sticky_assign


def parts(result, member_id):  # type: ignore[no-untyped-def]
    return set(result.partitions(member_id))


def tps(*pairs: tuple[str, int]) -> set[TP]:
    return {TP(t, p) for t, p in pairs}


def test_multiple_consumers_mixed_topic_subscriptions() -> None:
    spec = GroupSpec(
        (
            member("consumer1", ["topic1"]),
            member("consumer2", ["topic1", "topic2"]),
            member("consumer3", ["topic1"]),
        ),
        {"topic1": 3, "topic2": 2},
    )
    r = sticky_assign(spec)
    assert parts(r, "consumer1") == tps(("topic1", 0), ("topic1", 2))
    assert parts(r, "consumer2") == tps(("topic2", 0), ("topic2", 1))
    assert parts(r, "consumer3") == tps(("topic1", 1))


def test_two_consumers_two_topics_six_partitions() -> None:
    t = ["topic1", "topic2"]
    r = sticky_assign(
        GroupSpec((member("consumer1", t), member("consumer2", t)), {"topic1": 3, "topic2": 3})
    )
    assert parts(r, "consumer1") == tps(("topic1", 0), ("topic1", 2), ("topic2", 1))
    assert parts(r, "consumer2") == tps(("topic1", 1), ("topic2", 0), ("topic2", 2))


def test_add_remove_two_consumers_two_topics() -> None:
    t = ["topic1", "topic2"]
    topics = {"topic1": 3, "topic2": 4}
    r = sticky_assign(GroupSpec((member("consumer1", t), member("consumer2", t)), topics))
    assert parts(r, "consumer1") == tps(("topic1", 0), ("topic1", 2), ("topic2", 1), ("topic2", 3))
    assert parts(r, "consumer2") == tps(("topic1", 1), ("topic2", 0), ("topic2", 2))
    spec = GroupSpec(
        (
            member("consumer1", t, r.partitions("consumer1"), 1),
            member("consumer2", t, r.partitions("consumer2"), 1),
            member("consumer3", t, (), 1),
            member("consumer4", t, (), 1),
        ),
        topics,
    )
    r = sticky_assign(spec)
    assert parts(r, "consumer1") == tps(("topic1", 0), ("topic2", 1))
    assert parts(r, "consumer2") == tps(("topic2", 0), ("topic1", 1))
    assert parts(r, "consumer3") == tps(("topic1", 2), ("topic2", 3))
    assert parts(r, "consumer4") == tps(("topic2", 2))
    # cooperative: the three moved partitions are revoked first, assigned next round
    c = cooperative_sticky_assign(spec)
    assert parts(c, "consumer3") == set() and parts(c, "consumer4") == set()
    spec = GroupSpec(
        (
            member("consumer3", t, r.partitions("consumer3"), 2),
            member("consumer4", t, r.partitions("consumer4"), 2),
        ),
        topics,
    )
    r = sticky_assign(spec)
    assert parts(r, "consumer3") == tps(("topic1", 2), ("topic2", 3), ("topic1", 0), ("topic2", 1))
    assert parts(r, "consumer4") == tps(("topic2", 2), ("topic1", 1), ("topic2", 0))


def test_consumer_owning_min_quota_expected_max_quota() -> None:
    t = ["topic1", "topic2"]
    spec = GroupSpec(
        (
            member("consumer1", t, [("topic1", 0), ("topic2", 1)], 1),
            member("consumer2", t, [("topic1", 1), ("topic2", 2)], 1),
        ),
        {"topic1": 2, "topic2": 3},
    )
    r = sticky_assign(spec)
    assert parts(r, "consumer1") == tps(("topic1", 0), ("topic2", 1), ("topic2", 0))
    assert parts(r, "consumer2") == tps(("topic1", 1), ("topic2", 2))


def test_max_quota_consumers_more_than_expected() -> None:
    # Java answers c1 [t1-0], c2 [t1-1, t2-1], c3 [t2-0]: which of the two symmetric
    # max-quota owners keeps both depends on Java's HashMap order; we use member-id order.
    t = ["topic1", "topic2"]
    spec = GroupSpec(
        (
            member("consumer1", t, [("topic1", 0), ("topic2", 0)], 1),
            member("consumer2", t, [("topic1", 1), ("topic2", 1)], 1),
            member("consumer3", t, [], 1),
        ),
        {"topic1": 2, "topic2": 2},
    )
    r = sticky_assign(spec)
    assert parts(r, "consumer1") == tps(("topic1", 0), ("topic2", 0))
    assert parts(r, "consumer2") == tps(("topic1", 1))
    assert parts(r, "consumer3") == tps(("topic2", 1))


def test_all_consumers_under_min_quota() -> None:
    t = ["topic1", "topic2"]
    spec = GroupSpec(
        (
            member("consumer1", t, [("topic1", 0)], 1),
            member("consumer2", t, [("topic1", 1)], 1),
            member("consumer3", t, [], 1),
        ),
        {"topic1": 2, "topic2": 3},
    )
    r = sticky_assign(spec)
    assert parts(r, "consumer1") == tps(("topic1", 0), ("topic2", 1))
    assert parts(r, "consumer2") == tps(("topic1", 1), ("topic2", 2))
    assert parts(r, "consumer3") == tps(("topic2", 0))


def test_all_consumers_reach_expected_quota() -> None:
    spec = GroupSpec(
        (
            member("consumer1", ["topic"], [("topic", 0), ("topic", 1)], 1),
            member("consumer2", ["topic"], [("topic", 2)], 1),
            member("consumer3", ["topic"], [], 1),
        ),
        {"topic": 4},
    )
    r = sticky_assign(spec)
    assert parts(r, "consumer1") == tps(("topic", 0), ("topic", 1))
    assert parts(r, "consumer2") == tps(("topic", 2))
    assert parts(r, "consumer3") == tps(("topic", 3))


def test_partition_claimed_twice_in_same_generation_is_invalidated() -> None:
    for count, c1 in ((3, tps(("topic", 1))), (4, tps(("topic", 1), ("topic", 3)))):
        spec = GroupSpec(
            (
                member("consumer1", ["topic"], [("topic", 0), ("topic", 1)], 1),
                member("consumer2", ["topic"], [("topic", 0), ("topic", 2)], 1),
                member("consumer3", ["topic"], [], 1),
            ),
            {"topic": count},
        )
        r = sticky_assign(spec)
        assert parts(r, "consumer1") == c1
        assert parts(r, "consumer2") == tps(("topic", 2))
        assert parts(r, "consumer3") == tps(("topic", 0))
        # cooperative: topic-0 is still claimed by consumer1/2, so consumer3 waits a round
        assert parts(cooperative_sticky_assign(spec), "consumer3") == set()


def test_stale_and_missing_generations_lose_their_claims() -> None:
    owned = [("topic", 0), ("topic", 2), ("topic2", 1)]
    for stale in (9, -1):
        spec = GroupSpec(
            (
                member("consumer1", ["topic", "topic2"], owned, 10),
                member("consumer2", ["topic", "topic2"], owned, stale),
            ),
            {"topic": 3, "topic2": 3},
        )
        r = sticky_assign(spec)
        assert parts(r, "consumer1") == tps(*owned)
        assert parts(r, "consumer2") == tps(("topic", 1), ("topic2", 0), ("topic2", 2))


def test_partitions_go_to_highest_generation() -> None:
    t = ["topic", "topic2", "topic3"]
    spec = GroupSpec(
        (
            member("consumer1", t, [("topic", 0), ("topic2", 0), ("topic3", 0)], 10),
            member("consumer2", t, [("topic", 1), ("topic2", 1), ("topic3", 1)], 9),
            member("consumer3", t, [("topic2", 1), ("topic3", 0), ("topic3", 2)], 8),
        ),
        {"topic": 3, "topic2": 3, "topic3": 3},
    )
    r = sticky_assign(spec)
    assert parts(r, "consumer1") == tps(("topic", 0), ("topic2", 0), ("topic3", 0))
    assert parts(r, "consumer2") == tps(("topic", 1), ("topic2", 1), ("topic3", 1))
    assert parts(r, "consumer3") == tps(("topic", 2), ("topic2", 2), ("topic3", 2))


def test_no_reassignment_on_current_members() -> None:
    t = ["topic", "topic1", "topic2", "topic3"]
    spec = GroupSpec(
        (
            member("consumer1", t, [], -1),
            member("consumer2", t, [("topic", 0), ("topic2", 0), ("topic1", 0)], 9),
            member("consumer3", t, [("topic3", 2), ("topic2", 2), ("topic1", 1)], 8),
            member("consumer4", t, [("topic3", 1), ("topic", 1), ("topic", 2)], 7),
        ),
        dict.fromkeys(t, 3),
    )
    r = sticky_assign(spec)
    assert parts(r, "consumer1") == tps(("topic1", 2), ("topic2", 1), ("topic3", 0))


def test_owned_partitions_invalidated_for_multiple_generations() -> None:
    t = ["topic", "topic2"]
    spec = GroupSpec(
        (
            member("consumer1", t, [("topic", 0), ("topic2", 1), ("topic", 1)], 10),
            member("consumer2", t, [("topic", 0), ("topic2", 1), ("topic2", 2)], 8),
        ),
        {"topic": 3, "topic2": 3},
    )
    r = sticky_assign(spec)
    assert parts(r, "consumer1") == tps(("topic", 0), ("topic2", 1), ("topic", 1))
    assert parts(r, "consumer2") == tps(("topic", 2), ("topic2", 2), ("topic2", 0))


def test_assignment_with_conflicting_previous_generations_mixed() -> None:
    """StickyAssignorTest.testAssignmentWithConflictingPreviousGenerations (both variants)."""
    allt = ["topic", "topic2", "topic3"]
    p = {n: [(n, i) for i in range(4)] for n in allt}
    for equal in (True, False):
        c1_topics = allt if equal else ["topic"]
        c2_topics = allt if equal else ["topic", "topic2"]
        c1 = (
            [("topic", 0), ("topic", 1), ("topic", 2), ("topic2", 2), ("topic2", 3), ("topic3", 0)]
            if equal
            else p["topic"]
        )
        c2 = [("topic", 0), ("topic", 1), *p["topic2"]]
        c3 = [("topic", 2), ("topic", 3), *p["topic3"]]
        spec = GroupSpec(
            (
                member("consumer1", c1_topics, c1, 1),
                member("consumer2", c2_topics, c2, 2),
                member("consumer3", allt, c3, 2),
            ),
            dict.fromkeys(allt, 4),
        )
        r = sticky_assign(spec)
        check_valid(spec, r)
        assert all(n == 4 for n in r.counts().values())
        assert parts(r, "consumer2") <= tps(*c2)
        assert parts(r, "consumer3") <= tps(*c3)


def test_poor_round_robin_scenario_is_balanced() -> None:
    topics = {f"topic{i}": (i % 2) + 1 for i in range(1, 6)}
    every, odd = list(topics), ["topic1", "topic3", "topic5"]
    spec = GroupSpec(
        (
            member("consumer1", every),
            member("consumer2", odd),
            member("consumer3", odd),
            member("consumer4", every),
        ),
        topics,
    )
    r = sticky_assign(spec)
    check_valid(spec, r)
    assert sorted(r.counts().values()) == [2, 2, 2, 2]


def test_reassignment_after_one_consumer_leaves_is_sticky() -> None:
    """AbstractStickyAssignorTest.testReassignmentAfterOneConsumerLeaves: consumer i
    subscribes to topics 1..i (topic i has i partitions); consumer10 leaves."""
    topics = {f"topic{i:02d}": i for i in range(1, 20)}
    names = sorted(topics)
    spec = GroupSpec(tuple(member(f"consumer{i:02d}", names[:i]) for i in range(1, 20)), topics)
    first = sticky_assign(spec)
    check_locally_balanced(spec, first)
    after = feed_back(spec, first, 1)
    after = GroupSpec(tuple(m for m in after.members if m.member_id != "consumer10"), topics)
    second = sticky_assign(after)
    check_valid(after, second)
    check_locally_balanced(after, second)
    # Kafka's isSticky: no partition movement cycles, i.e. no member both gives away and
    # receives partitions of the same topic
    for m in after.members:
        lost = parts(first, m.member_id) - parts(second, m.member_id)
        gained = parts(second, m.member_id) - parts(first, m.member_id)
        assert not {tp.topic for tp in lost} & {tp.topic for tp in gained}, m.member_id


def test_only_subscribed_topic_deleted() -> None:
    spec = GroupSpec((member("c", ["topic"], [("topic", 0)], 1),), {})
    assert sticky_assign(spec).partitions("c") == []
