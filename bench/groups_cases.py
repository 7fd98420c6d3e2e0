"""bench_groups.py's cases over broker processes (rebalance, heartbeat, commit, groups) and
the report they write."""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import _harness as h
from groups_members import GroupRun, ManyGroups, ManyRun
from groups_pipes import COMMIT_PARTITIONS, Pipe, Rate, check_commit, check_heartbeat, measure
from groups_wire import Failure, commit_frame, connect_all, heartbeat_frame

# ---------------------------------------------------------------------------------------
# the cases


def load() -> float:
    return os.getloadavg()[0]


def kgroupd_args() -> list[str]:
    return ["--initial-rebalance-delay-ms", "0"]


@dataclass
class Report:
    lines: list[str] = field(default_factory=list)

    def add(self, *lines: str) -> None:
        self.lines.extend(lines)
        for line in lines:
            print(line, file=sys.stderr)

    def table(self, title: str, head: Sequence[str]) -> None:
        """A blank line, ``title``, a blank line and a Markdown table's head."""
        self.add("", title, "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head))


def spread(values: Sequence[float], fmt: str = "{:.0f}") -> str:
    return f"{fmt.format(h.median(values))} ({fmt.format(min(values))}-{fmt.format(max(values))})"


async def case_rebalance(
    args: argparse.Namespace, started: dict[str, h.BrokerProcess], rep: Report
) -> None:
    sizes = [int(s) for s in args.members.split(",")]
    results: dict[tuple[str, int], list[float]] = {}
    load0 = load()
    for size in sizes:
        for kind, b in started.items():
            if kind == "tansu" and size > args.tansu_max_members:
                continue
            tansu = kind == "tansu"
            rounds = args.tansu_rounds if tansu else args.rounds
            warmup = 0 if tansu else 1
            g = GroupRun(f"bench-rebalance-{size}", size, args.session_ms)
            t0 = time.perf_counter()
            await g.setup(b.port, 1.0 if tansu else 0.1, timeout=180 if tansu else 60)
            print(
                f"  {kind} {size} members: Stable at generation {g.generation} after"
                f" {time.perf_counter() - t0:.1f} s",
                file=sys.stderr,
            )
            times = []
            for r in range(warmup + rounds):
                secs = await g.round(timeout=120 if tansu else 30)
                tag = "warm-up" if r < warmup else f"round {r - warmup + 1}"
                print(
                    f"  {kind:8} {size:5} members {tag:8} {secs * 1000:9.1f} ms"
                    f" (generation {g.generation}, load {load():.2f})",
                    file=sys.stderr,
                )
                if r >= warmup:
                    times.append(secs * 1000)
            results[(kind, size)] = times
            g.close()
    targets = {100: 50.0, 1000: 500.0}
    kinds = list(started)
    head = ["members"] + [f"{k} ms, median (min-max)" for k in kinds]
    both = len(kinds) == 2
    if both:
        head.append("kgroupd/tansu time")
    head += ["target", "met?"]
    rep.table(
        f"Rebalance round (load {load0:.2f} at the start, {load():.2f} at the end; kgroupd "
        f"{args.rounds} rounds after 1 warm-up, Tansu {args.tansu_rounds} rounds):",
        head,
    )
    for size in sizes:
        row = [str(size)]
        for k in kinds:
            vals = results.get((k, size))
            row.append(spread(vals, "{:.1f}") if vals else "not run")
        if both:
            kv, tv = results.get(("kgroupd", size)), results.get(("tansu", size))
            row.append(f"{h.median(kv) / h.median(tv):.4f}" if kv and tv else "—")
        target = targets.get(size)
        row.append(f"< {target:.0f} ms" if target else "—")
        kv = results.get(("kgroupd", size))
        row.append(("**yes**" if h.median(kv) < target else "**no**") if target and kv else "—")
        rep.add("| " + " | ".join(row) + " |")


async def case_heartbeat(
    args: argparse.Namespace, started: dict[str, h.BrokerProcess], rep: Report
) -> None:
    await pipelined_case(
        args,
        started,
        rep,
        "heartbeat",
        f"Heartbeats/s, {args.hb_connections} members x {args.window} in flight",
        30_000,
    )


async def case_commit(
    args: argparse.Namespace, started: dict[str, h.BrokerProcess], rep: Report
) -> None:
    await pipelined_case(
        args,
        started,
        rep,
        "commit",
        f"OffsetCommit/s ({COMMIT_PARTITIONS} partitions each), {args.commit_connections}"
        f" connections x {args.window} in flight",
        20_000,
    )


async def open_pipes(
    kind: str, b: h.BrokerProcess, case: str, args: argparse.Namespace
) -> tuple[list[Pipe], GroupRun | None]:
    loop = asyncio.get_running_loop()
    pipes: list[Pipe] = []
    if case == "heartbeat":
        g = GroupRun("bench-heartbeat", args.hb_connections, args.session_ms)
        await g.setup(b.port, 1.0 if kind == "tansu" else 0.1, timeout=180)
        for m in g.members:
            frame = heartbeat_frame(g.name, g.generation, m.member_id)
            _, p = await loop.create_connection(
                lambda frame=frame: Pipe([frame], args.window, check_heartbeat),
                "127.0.0.1",
                b.port,
            )
            pipes.append(p)
        return pipes, g
    topic = "bench-commits"
    h.create_topic(b.port, topic, COMMIT_PARTITIONS)
    h.wait_topic_ready(b.port, topic, COMMIT_PARTITIONS)
    for c in range(args.commit_connections):
        frames = [
            commit_frame(f"bench-commit-{c}", topic, COMMIT_PARTITIONS, k * 1000) for k in range(16)
        ]
        _, p = await loop.create_connection(
            lambda frames=frames: Pipe(frames, args.window, check_commit), "127.0.0.1", b.port
        )
        pipes.append(p)
    return pipes, None


async def pipelined_case(
    args: argparse.Namespace,
    started: dict[str, h.BrokerProcess],
    rep: Report,
    case: str,
    title: str,
    target: float,
) -> None:
    opened = {kind: await open_pipes(kind, b, case, args) for kind, b in started.items()}
    kinds = list(started)
    rates: dict[str, list[Rate]] = {k: [] for k in kinds}
    load0 = load()
    loads = []
    for r in range(args.warmup + args.pipe_rounds):
        order = kinds if r % 2 == 0 else kinds[::-1]
        for kind in order:
            rate = await measure(opened[kind][0], started[kind].pid, args.seconds)
            tag = "warm-up" if r < args.warmup else f"round {r - args.warmup + 1}"
            loads.append(load())
            print(
                f"  {kind:8} {case:9} {tag:8} {rate.per_s:9.0f}/s (cpu broker"
                f" {rate.broker_cpu:4.0%} client {rate.client_cpu:4.0%}, load {loads[-1]:.2f})",
                file=sys.stderr,
            )
            if r >= args.warmup:
                rates[kind].append(rate)
    for pipes, g in opened.values():
        for p in pipes:
            p.close()
        if g is not None:
            g.close()
    head = [
        "broker",
        "per second, median (min-max)",
        "broker CPU",
        "broker CPU-µs per request",
        "client CPU",
    ]
    rep.table(
        f"{title}, {args.pipe_rounds} rounds of {args.seconds:g} s after {args.warmup} warm-up"
        f" (load {load0:.2f} at the start, {load():.2f} at the end, max {max(loads):.2f}):",
        head,
    )
    for k in kinds:
        vals = [x.per_s for x in rates[k]]
        per_request = h.median([x.broker_cpu / x.per_s * 1e6 for x in rates[k]])
        rep.add(
            f"| {k} | **{spread(vals)}** | {h.median([x.broker_cpu for x in rates[k]]):.0%}"
            f" | {per_request:.0f} | {h.median([x.client_cpu for x in rates[k]]):.0%} |"
        )
    kv = h.median([x.per_s for x in rates["kgroupd"]]) if "kgroupd" in rates else None
    line = []
    if "tansu" in rates and kv is not None:
        tv = h.median([x.per_s for x in rates["tansu"]])
        line.append(f"kgroupd/tansu: **{h.ratio(kv, tv)}**.")
    if kv is not None:
        met = "met" if kv >= target else "**missed**"
        line.append(f"Target >= {target:,.0f}/s: {met}.")
    rep.add("", " ".join(line))


async def case_groups(
    args: argparse.Namespace, started: dict[str, h.BrokerProcess], rep: Report
) -> None:
    b = started.get("kgroupd")
    if b is None:
        return
    load0 = load()
    rss0 = b.rss_mib()
    run = ManyRun(args.groups, args.session_ms)
    conns = args.groups_connections
    per = [range(c, args.groups, conns) for c in range(conns)]
    pipes = await connect_all(
        b.port, [lambda idx=idx: ManyGroups(run, idx, args.groups_window) for idx in per]
    )
    b0 = h.cpu_seconds(b.pid)
    c0 = time.process_time()
    t0 = time.perf_counter()
    for p in pipes:
        p.go()
    t1 = await asyncio.wait_for(run.finished, timeout=args.groups_timeout)
    elapsed = t1 - t0
    broker_cpu = (h.cpu_seconds(b.pid) - b0) / elapsed
    client_cpu = (time.process_time() - c0) / elapsed
    rss_done = b.rss_mib()
    await asyncio.sleep(1.0)
    rss_idle = b.rss_mib()
    listed = await asyncio.to_thread(h.call, b.port, 16, 0, {})
    ours = sum(1 for g in listed["groups"] if g["group_id"].startswith(run.prefix))
    if listed["error_code"] or ours != args.groups:
        raise Failure(f"ListGroups: error {listed['error_code']}, {ours} of {args.groups} groups")
    for p in pipes:
        p.close()
    rate = args.groups / elapsed
    rep.add(
        "",
        f"Many groups: {args.groups:,} single-member groups joined and synced over {conns}"
        f" connections x {args.groups_window} in flight (load {load0:.2f} at the start,"
        f" {load():.2f} at the end); ListGroups lists all {ours:,}:",
        "",
        "| broker | groups/s | time | broker CPU | client CPU | RSS before | RSS after (1 s idle)"
        " | per group | target RSS < 1 GiB |",
        "|---|---|---|---|---|---|---|---|---|",
        f"| kgroupd | **{rate:,.0f}** | {elapsed:.1f} s | {broker_cpu:.0%} | {client_cpu:.0%}"
        f" | {rss0:.0f} MiB | **{rss_idle:.0f} MiB** ({rss_done:.0f} at the last answer)"
        f" | {(rss_idle - rss0) * 1024 * 1024 / args.groups:,.0f} bytes"
        f" | {'met' if rss_idle < 1024 else '**missed**'} |",
    )


CASE_FUNCS = {
    "rebalance": case_rebalance,
    "heartbeat": case_heartbeat,
    "commit": case_commit,
    "groups": case_groups,
}
