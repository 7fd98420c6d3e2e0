"""Kafka's simple share-group assignor: each partition to ceil(members / partitions) members,
even counts per member, sticky to the previous target, topic by topic."""

from __future__ import annotations

import uuid

from kgroupd.broker.coordinator.share.assignor import assign

T1, T2 = uuid.UUID(int=1), uuid.UUID(int=2)


def counts(result: dict[str, tuple[tuple[uuid.UUID, tuple[int, ...]], ...]]) -> dict[str, int]:
    return {m: sum(len(ps) for _t, ps in parts) for m, parts in result.items()}


def holders(result: dict[str, tuple[tuple[uuid.UUID, tuple[int, ...]], ...]]) -> dict:
    out: dict[tuple[uuid.UUID, int], list[str]] = {}
    for m, parts in result.items():
        for t, ps in parts:
            for p in ps:
                out.setdefault((t, p), []).append(m)
    return out


def test_one_partition_is_shared_by_every_member() -> None:
    members = ["a", "b", "c", "d"]
    got = assign(members, dict.fromkeys(members, ("t",)), {"t": (T1, 1)}, {})
    assert got == dict.fromkeys(members, ((T1, (0,)),))


def test_partitions_spread_one_member_each_while_members_are_fewer() -> None:
    members = ["a", "b"]
    got = assign(members, dict.fromkeys(members, ("t",)), {"t": (T1, 5)}, {})
    assert counts(got) == {"a": 3, "b": 2}
    assert all(len(ms) == 1 for ms in holders(got).values())
    assert len(holders(got)) == 5


def test_more_members_than_partitions_share_each_partition_evenly() -> None:
    members = ["a", "b", "c", "d", "e"]
    got = assign(members, dict.fromkeys(members, ("t",)), {"t": (T1, 2)}, {})
    # sharing ceil(5/2) = 3 per partition, 6 assignments over 5 members
    assert sorted(len(ms) for ms in holders(got).values()) == [3, 3]
    assert sorted(counts(got).values()) == [1, 1, 1, 1, 2]


def test_sticky_to_the_previous_target() -> None:
    members = ["a", "b"]
    subs = dict.fromkeys(members, ("t",))
    first = assign(members, subs, {"t": (T1, 4)}, {})
    # a third member joins: a and b keep what they can, the newcomer takes the rest
    second = assign([*members, "c"], {**subs, "c": ("t",)}, {"t": (T1, 4)}, first)
    for m in members:
        kept = set(second[m][0][1]) if second[m] else set()
        assert kept <= set(first[m][0][1])
    assert sorted(counts(second).values()) == [1, 1, 2]
    assert len(holders(second)) == 4
    # nothing changes: the same target again
    assert assign([*members, "c"], {**subs, "c": ("t",)}, {"t": (T1, 4)}, second) == second


def test_topics_balance_over_their_own_subscribers() -> None:
    members = ["a", "b", "c"]
    subs = {"a": ("t1",), "b": ("t2",), "c": ("t1", "t2", "missing")}
    got = assign(members, subs, {"t1": (T1, 2), "t2": (T2, 2)}, {})
    h = holders(got)
    assert len(h) == 4 and all(len(ms) == 1 for ms in h.values())
    assert {t for t, _ps in got["a"]} == {T1} and {t for t, _ps in got["b"]} == {T2}
    assert counts(got) == {"a": 1, "b": 1, "c": 2}
