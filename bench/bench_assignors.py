"""Assignment time of the pure assignors (issue 5). Run: python bench/bench_assignors.py

Cases (median of --runs runs, target < 1 s each):
* 1,000 members x 10,000 partitions (one topic), sticky and cooperative-sticky: a fresh
  group, and a steady group where member 0 left (every member claims its partitions).
* 100 members x 100 topics x 10 partitions (all subscribed), every algorithm.
* Informational: 1,000 members x 100 topics x 100 partitions, mixed subscriptions
  (the general sticky path).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from kgroupd.assignors import (
    GroupAssignment,
    GroupSpec,
    MemberSpec,
    cooperative_sticky_assign,
    range_assign,
    roundrobin_assign,
    sticky_assign,
)


def timed(fn: Callable[[GroupSpec], GroupAssignment], spec: GroupSpec, runs: int) -> float:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        fn(spec)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def fresh(members: int, topics: dict[str, int]) -> GroupSpec:
    subs = frozenset(topics)
    return GroupSpec(tuple(MemberSpec(f"member-{i:05d}", subs) for i in range(members)), topics)


def steady_minus_one(spec: GroupSpec) -> GroupSpec:
    """Everyone claims its sticky assignment (generation 1); then the first member leaves."""
    result = sticky_assign(spec)
    return GroupSpec(
        tuple(
            MemberSpec(m.member_id, m.topics, tuple(result.partitions(m.member_id)), 1)
            for m in spec.members[1:]
        ),
        spec.topics,
    )


def mixed(members: int, n_topics: int, partitions: int) -> GroupSpec:
    topics = {f"topic-{t:03d}": partitions for t in range(n_topics)}
    names = sorted(topics)
    return GroupSpec(
        tuple(
            MemberSpec(f"member-{i:05d}", frozenset(names[(i * 7) % n_topics :][: 10 + i % 40]))
            for i in range(members)
        ),
        topics,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    runs = args.runs
    rows: list[tuple[str, str, float]] = []

    big = fresh(1000, {"topic": 10_000})
    big_steady = steady_minus_one(big)
    for name, fn in (("sticky", sticky_assign), ("cooperative-sticky", cooperative_sticky_assign)):
        rows.append(("1000 members x 10000 partitions, fresh", name, timed(fn, big, runs)))
        rows.append(("1000 members x 10000 partitions, 1 left", name, timed(fn, big_steady, runs)))

    wide = fresh(100, {f"topic-{t:03d}": 10 for t in range(100)})
    for name, fn in (
        ("range", range_assign),
        ("roundrobin", roundrobin_assign),
        ("sticky", sticky_assign),
        ("cooperative-sticky", cooperative_sticky_assign),
    ):
        rows.append(("100 members x 100 topics x 10 partitions", name, timed(fn, wide, runs)))
    wide_steady = steady_minus_one(wide)
    rows.append(
        (
            "100 members x 100 topics x 10 partitions, 1 left",
            "sticky",
            timed(sticky_assign, wide_steady, runs),
        )
    )

    mix = mixed(1000, 100, 100)
    mix_steady = steady_minus_one(mix)
    label = "1000 members x 100 topics x 100, mixed subs"
    rows.append((label + ", fresh", "sticky", timed(sticky_assign, mix, runs)))
    rows.append((label + ", 1 left", "sticky", timed(sticky_assign, mix_steady, runs)))
    rows.append(
        (
            label + ", 1 left",
            "cooperative-sticky",
            timed(cooperative_sticky_assign, mix_steady, runs),
        )
    )

    print(f"python {sys.version.split()[0]}, median of {runs} runs")
    width = max(len(r[0]) for r in rows)
    for case, name, secs in rows:
        print(f"{case:<{width}}  {name:<19} {secs * 1000:9.1f} ms")


if __name__ == "__main__":
    main()
