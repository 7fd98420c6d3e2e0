"""Fetch: the broker's CPU per MB of this tree against an old revision, both running at once,
phases alternated, CPU time to the nanosecond.

    python bench/bench_fetch_ab.py [--kgroupd-rev c966aaf] [--pairs 12] [--passes 4]

``bench_throughput.py``'s fetch phases last 0.1-0.5 s and its broker CPU comes from
/proc/PID/stat in clock ticks (10 ms), and one revision runs after the other while the
machine's load moves. Here both brokers (the working tree and ``git archive`` of
``--kgroupd-rev``, default flags, in memory) start together and get the same data
(``bench_throughput``'s workloads: 16 KiB batches fetched 64 a request, 1 MiB batches one a
request; ``--connections`` partitions, ``--mib`` MiB each); then ``--pairs`` times, in
alternating order, each broker serves a fetch phase (``bench_throughput``'s pipelined clients:
every batch read ``--passes`` times, every answer framed and the last one checked), and its
CPU time over the phase is read from /proc/PID/task/*/schedstat (nanoseconds on the CPU, every
thread) and from /proc/PID/stat (user and system, clock ticks). Figures: each broker's median
nanoseconds per MB, the median of the pairs' ratios (a pair runs back to back, so the load
drifts little within it) and the share of system time (the kernel's socket work).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _harness as h
import bench_throughput as bt


def on_cpu_ns(pid: int) -> int:
    """Nanoseconds every thread of ``pid`` has run (the scheduler's own account)."""
    total = 0
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{task}/schedstat") as f:
                total += int(f.read().split()[0])
        except FileNotFoundError:  # a thread that ended meanwhile
            continue
    return total


def user_system(pid: int) -> tuple[float, float]:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    tick = os.sysconf("SC_CLK_TCK")
    return int(fields[11]) / tick, int(fields[12]) / tick


async def fetch_phase(
    broker: h.BrokerProcess, frames: list[list[bytes]], count: int, window: int
) -> tuple[float, float, float, float, list[bt.Pipeline]]:
    """(elapsed s, on-CPU ns, user s, system s, the clients) of one fetch phase."""
    ns0 = on_cpu_ns(broker.pid)
    u0, s0 = user_system(broker.pid)
    phase = await bt.run_phase(broker, frames, count, window, timeout=600)
    ns = on_cpu_ns(broker.pid) - ns0
    u1, s1 = user_system(broker.pid)
    return phase.elapsed, ns, u1 - u0, s1 - s0, phase.pipes


async def run(args: argparse.Namespace, brokers: dict[str, h.BrokerProcess]) -> list[str]:
    lines = []
    total = args.mib * 1024 * 1024
    for wl_name, target, per_fetch in (("16KiB", 16384, 64), ("1MiB", 1048576, 1)):
        batch, rpb = bt.build_batch(target)
        bt.BATCHES[wl_name] = (batch, rpb)
        requests = max(1, total // len(batch))
        wl = bt.Workload(wl_name, target, requests, per_fetch)
        conns = args.connections
        fetches: dict[str, list[list[bytes]]] = {}
        for name, broker in brokers.items():
            topic = f"ab-{wl_name}"
            h.create_topic(broker.port, topic, conns)
            h.wait_topic_ready(broker.port, topic, conns)
            produce = [bt.produce_frames(topic, c, batch, 16) for c in range(conns)]
            await bt.run_phase(broker, produce, requests, args.window, timeout=600)
            fetches[name] = [
                bt.fetch_frames("kgroupd", topic, c, rpb, len(batch), wl) for c in range(conns)
            ]
        count = len(next(iter(fetches.values()))[0]) * args.passes
        mb = args.passes * conns * requests * len(batch) / h.MB
        per_mb: dict[str, list[float]] = {name: [] for name in brokers}
        system: dict[str, list[float]] = {name: [] for name in brokers}
        ratios = []
        names = list(brokers)
        for i in range(args.pairs + 1):  # the first pair warms up, uncounted
            order = names if i % 2 == 0 else names[::-1]
            got = {}
            for name in order:
                elapsed, ns, user, sys_s, pipes = await fetch_phase(
                    brokers[name], fetches[name], count, args.window
                )
                bt.check_fetch("kgroupd", pipes, wl, rpb, len(batch), args.passes)
                got[name] = ns / mb
                if i:
                    per_mb[name].append(ns / mb)
                    system[name].append(sys_s / max(user + sys_s, 1e-9))
                print(
                    f"  {wl_name} pair {i} {name}: {mb / elapsed:,.0f} MB/s, "
                    f"{ns / mb:,.0f} ns/MB on CPU, user {user:.2f} s system {sys_s:.2f} s",
                    file=sys.stderr,
                )
            if i:
                ratios.append(got[names[1]] / got[names[0]])
        a, b = names
        lines.append(
            f"| fetch, {wl_name} batches ({per_fetch} a request) | "
            f"{h.median(per_mb[a]):,.0f} | {h.median(per_mb[b]):,.0f} | "
            f"**{h.median(ratios):.2f}x** ({min(ratios):.2f}-{max(ratios):.2f}) | "
            f"{1e9 / h.median(per_mb[a]):,.0f} / {1e9 / h.median(per_mb[b]):,.0f} | "
            f"{h.median(system[a]):.0%} / {h.median(system[b]):.0%} |"
        )
    return lines


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--kgroupd-rev", default="c966aaf", help="the revision compared")
    ap.add_argument("--pairs", type=int, default=12, help="counted phases of each broker")
    ap.add_argument("--passes", type=int, default=4, help="times each batch is read a phase")
    ap.add_argument("--mib", type=int, default=64, help="MiB per workload on each broker")
    ap.add_argument("--connections", type=int, default=4)
    ap.add_argument("--window", type=int, default=8, help="requests in flight per connection")
    args = ap.parse_args()
    load0 = os.getloadavg()[0]
    print(f"# {h.command_line()}\n{h.stamp()}; {h.machine()}", flush=True)
    sha, src = h.kgroupd_rev_src(args.kgroupd_rev)
    head = h.kgroupd_revision()
    brokers: dict[str, h.BrokerProcess] = {}
    try:
        h.KGROUPD_SRC = None
        brokers["HEAD"] = h.BrokerProcess("kgroupd").start(timeout=60)
        h.KGROUPD_SRC = src
        brokers[args.kgroupd_rev] = h.BrokerProcess("kgroupd").start(timeout=60)
        h.KGROUPD_SRC = None
        t0 = time.perf_counter()
        lines = h.uvloop_run(run(args, brokers))
        took = time.perf_counter() - t0
    finally:
        for b in brokers.values():
            b.stop()
            b.cleanup_log()
    print(
        f"\nbroker CPU per MB fetched (median of {args.pairs} phases each, alternated), "
        f"{head} against {args.kgroupd_rev} ({sha}), {took:.0f} s\n"
    )
    print(
        f"| workload | HEAD ns/MB | {args.kgroupd_rev} ns/MB | HEAD / {args.kgroupd_rev}, MB per "
        "CPU-s (median of the pairs, range) | MB per broker CPU-s, HEAD / "
        f"{args.kgroupd_rev} | system time share |"
    )
    print("|---|---|---|---|---|---|")
    for line in lines:
        print(line)
    print(f"\n{h.stamp()}: load avg {load0:.2f} at start, {os.getloadavg()[0]:.2f} at the end")
    return 0


if __name__ == "__main__":
    sys.exit(main())
