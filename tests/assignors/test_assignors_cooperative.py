"""Multi-round cooperative rebalances: safety, convergence, deferred imbalance (KIP-415)."""

from __future__ import annotations

from assignor_helpers import TP, CooperativeGroup
from hypothesis import given
from hypothesis import strategies as st

from kgroupd.assignors import sticky_assign

TOPICS = {"a": 7, "b": 5, "c": 3}

# an event: ("join", topics), ("leave", index), ("return", index)
events = st.lists(
    st.one_of(
        st.tuples(st.just("join"), st.frozensets(st.sampled_from(sorted(TOPICS)), min_size=1)),
        st.tuples(st.just("leave"), st.integers(0, 20)),
    ),
    min_size=1,
    max_size=8,
)


def assert_converged(group: CooperativeGroup, rounds: int) -> None:
    assert rounds <= 2, f"took {rounds} rounds"
    assert not group.unowned(), f"unassigned after settling: {group.unowned()}"
    # and the settled assignment is the sticky target: a further round changes nothing
    before = group.ownership()
    report = group.rebalance()
    assert not any(report.revoked.values()) and not any(report.added.values())
    assert group.ownership() == before


@given(events, st.booleans())
def test_cooperative_never_double_owns_and_converges_in_two_rounds(
    script: list[tuple[str, object]], identical: bool
) -> None:
    group = CooperativeGroup(TOPICS)
    group.join(TOPICS)
    assert_converged(group, len(group.settle()))
    for kind, arg in script:
        if kind == "join":
            group.join(sorted(TOPICS) if identical else arg)  # type: ignore[arg-type]
        elif group.members:
            ids = sorted(group.members)
            group.leave(ids[int(arg) % len(ids)])  # type: ignore[call-overload]
        if group.members:
            assert_converged(group, len(group.settle()))


def test_new_member_takes_partitions_over_two_rounds() -> None:
    group = CooperativeGroup({"t": 6})
    a = group.join(["t"])
    group.settle()
    b = group.join(["t"])
    first = group.rebalance()
    assert first.revoked[a] == {TP("t", 3), TP("t", 4), TP("t", 5)}
    assert first.added[b] == set()  # nothing while a still owns them
    second = group.rebalance()
    assert second.added[b] == {TP("t", 3), TP("t", 4), TP("t", 5)}
    assert not any(second.revoked.values())


@given(events)
def test_deferred_imbalance_keeps_safety_and_converges_after_the_delay(
    script: list[tuple[str, object]],
) -> None:
    delay = 10_000
    group = CooperativeGroup(TOPICS, delay_ms=delay)
    group.join(TOPICS, instance_id="i0")
    group.settle()
    for n, (kind, arg) in enumerate(script):
        if kind == "join":
            group.join(arg, instance_id=f"i{n + 1}")  # type: ignore[arg-type]
        elif group.members:
            ids = sorted(group.members)
            group.leave(ids[int(arg) % len(ids)])  # type: ignore[call-overload]
        group.now_ms += 1_000
        if group.members:
            group.settle()
    if group.members:
        group.now_ms += delay  # every pending departure has expired
        rounds = len(group.settle())
        assert rounds <= 2
        assert not group.unowned()
        assert group.next_rebalance_ms is None


def _three_static_members(delay: int) -> tuple[CooperativeGroup, dict[str, set[TP]]]:
    group = CooperativeGroup({"t": 9}, delay_ms=delay)
    for name in ("a", "b", "c"):
        group.join(["t"], instance_id=name)
        group.settle()
    owned = {name: group.ownership()[group.by_instance(name)] for name in "abc"}
    assert sorted(len(p) for p in owned.values()) == [3, 3, 3]
    return group, owned


def test_member_back_within_the_delay_gets_its_partitions_without_movement() -> None:
    group, owned = _three_static_members(delay=30_000)
    group.now_ms = 1_000
    group.leave(group.by_instance("c"))
    report = group.settle()[0]
    assert not any(report.revoked.values()) and not any(report.added.values())
    assert group.unowned() == owned["c"]  # held for c
    assert group.next_rebalance_ms == 31_000
    group.now_ms = 20_000  # c restarts: new member id, same group.instance.id
    c = group.join(["t"], instance_id="c")
    report = group.settle()[0]
    assert report.added[c] == owned["c"]
    assert not any(report.revoked.values())
    assert group.next_rebalance_ms is None
    for name in "ab":
        assert group.ownership()[group.by_instance(name)] == owned[name]


def test_partitions_redistributed_after_the_delay() -> None:
    group, owned = _three_static_members(delay=30_000)
    group.now_ms = 1_000
    group.leave(group.by_instance("c"))
    group.settle()
    group.now_ms = 15_000  # a scheduled-or-not rebalance before the deadline holds them
    group.settle()
    assert group.unowned() == owned["c"]
    group.now_ms = 31_000  # the scheduled rebalance
    rounds = group.settle()
    assert len(rounds) == 1  # nobody owned them: no revocation round needed
    assert not group.unowned()
    assert sorted(len(p) for p in group.ownership().values()) == [4, 5]
    for name in "ab":  # only c's partitions moved
        assert owned[name] <= group.ownership()[group.by_instance(name)]
    group.now_ms = 40_000  # c returns too late: an ordinary join
    c = group.join(["t"], instance_id="c")
    rounds = group.settle()
    assert len(rounds) == 2 and len(group.ownership()[c]) == 3


def test_without_deferral_a_departure_is_redistributed_at_once() -> None:
    group, _ = _three_static_members(delay=0)
    group.leave(group.by_instance("c"))
    assert len(group.settle()) == 1
    assert not group.unowned()


def test_cooperative_target_equals_eager_sticky() -> None:
    group = CooperativeGroup({"t": 10, "u": 4})
    for topics in (["t"], ["t", "u"], ["u"], ["t", "u"]):
        group.join(topics)
    group.settle()
    spec = group.spec()
    assert {m: set(sticky_assign(spec).partitions(m)) for m in group.members} == (group.ownership())
