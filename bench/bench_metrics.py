"""What the metrics cost: heartbeats/s and commits/s with metrics on against ``--no-metrics``.

    python bench/bench_metrics.py [--only heartbeat,commit] [--pipe-rounds 7] [--seconds 2]

Two kgroupd processes at once, one with metrics (the default) and one with ``--no-metrics``,
driven by bench_groups.py's heartbeat and commit clients (raw connections, frames encoded
before the clock starts, every answer checked). Rounds alternate between the two brokers
(on, off, then off, on, ...) so background load falls on both alike; the broker with
metrics is scraped (``GET /metrics``) in the middle of each of its timed windows, as
Prometheus would, so the scrape's cost counts too. Reports the median rate of each and
their ratio (on / off; goal: at least 0.95). Figures: BENCHMARKS.md.

``--in-process RUNS`` instead runs ``bench_groups.py --in-process heartbeat,commit-8`` (the
broker driven in one process without sockets) RUNS times each way, alternating, and
reports the broker's CPU-µs per request: less swayed by other load on the machine.
"""

from __future__ import annotations

import argparse
import asyncio
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _harness as h
import bench_groups as bg

CASES = ("heartbeat", "commit")


def scrape(port: int) -> int:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as resp:
        return len(resp.read())


async def measure_scraped(
    pipes: list[bg.Pipe], pid: int, seconds: float, http: int | None
) -> bg.Rate:
    if http is None:
        return await bg.measure(pipes, pid, seconds)

    async def scrape_midway() -> None:
        await asyncio.sleep(0.5 + seconds / 2)  # measure's warm-up, then half the window
        await asyncio.to_thread(scrape, http)

    task = asyncio.create_task(scrape_midway())
    rate = await bg.measure(pipes, pid, seconds)
    await task
    return rate


async def run_case(
    args: argparse.Namespace, case: str, brokers: dict[str, tuple[h.BrokerProcess, int | None]]
) -> list[str]:
    opened = {k: await bg.open_pipes("kgroupd", b, case, args) for k, (b, _) in brokers.items()}
    kinds = list(brokers)
    rates: dict[str, list[float]] = {k: [] for k in kinds}
    cpu: dict[str, list[float]] = {k: [] for k in kinds}
    for r in range(args.warmup + args.pipe_rounds):
        for kind in kinds if r % 2 == 0 else kinds[::-1]:
            b, http = brokers[kind]
            rate = await measure_scraped(opened[kind][0], b.pid, args.seconds, http)
            tag = "warm-up" if r < args.warmup else f"round {r - args.warmup + 1}"
            print(f"  {kind:10} {case:9} {tag:8} {rate.per_s:9.0f}/s", file=sys.stderr)
            if r >= args.warmup:
                rates[kind].append(rate.per_s)
                cpu[kind].append(rate.broker_cpu / rate.per_s * 1e6)
    for pipes, g in opened.values():
        for p in pipes:
            p.close()
        if g is not None:
            g.close()
    on, off = h.median(rates["metrics"]), h.median(rates["no-metrics"])
    cpu_on, cpu_off = h.median(cpu["metrics"]), h.median(cpu["no-metrics"])
    return [
        f"| {case} | {bg.spread(rates['metrics'])} | {bg.spread(rates['no-metrics'])} | "
        f"**{on / off:.3f}** | {cpu_on:.1f} / {cpu_off:.1f} |"
    ]


async def main_async(
    args: argparse.Namespace, brokers: dict[str, tuple[h.BrokerProcess, int | None]]
) -> list[str]:
    lines = [
        f"{args.pipe_rounds} rounds of {args.seconds:g} s per broker after {args.warmup} "
        f"warm-up, alternating; heartbeat: {args.hb_connections} members, commit: "
        f"{args.commit_connections} connections x {bg.COMMIT_PARTITIONS} partitions; "
        f"{args.window} in flight each; load {bg.load():.2f} at the start",
        "",
        "| case | metrics on, /s median (min-max) | --no-metrics, /s | on / off | "
        "broker CPU-µs per request (on / off) |",
        "|---|---|---|---|---|",
    ]
    for case in args.only.split(","):
        print(f"# {case}", file=sys.stderr)
        lines += await run_case(args, case, brokers)
    return lines


def in_process(runs: int) -> int:
    """Broker CPU per request without sockets or a client, metrics on against off, each
    run a fresh process, alternating."""
    costs: dict[tuple[str, str], list[float]] = {}
    script = str(Path(__file__).resolve().parent / "bench_groups.py")
    for r in range(runs):
        for mode in ("on", "off") if r % 2 == 0 else ("off", "on"):
            cmd = [sys.executable, script, "--in-process", "heartbeat,commit-8"]
            cmd += ["--in-process-requests", "50000"]
            out = subprocess.run(
                [*cmd, *(["--no-metrics"] if mode == "off" else [])],
                capture_output=True,
                text=True,
                check=True,
            ).stdout
            for line in out.splitlines():
                cells = [c.strip() for c in line.strip("|").split("|")]
                if len(cells) == 2 and "CPU-µs/request" in cells[1]:
                    costs.setdefault((cells[0], mode), []).append(float(cells[1].split()[0]))
            print(f"  run {r + 1} {mode}: {out.strip().splitlines()[-2:]}", file=sys.stderr)
    print(f"\n{h.command_line()}")
    print(f"{h.stamp()}; {h.machine()}; {h.kgroupd_revision()}")
    print(f"{runs} runs each, alternating\n")
    print("| request | CPU-µs/request, metrics on (min-max) | --no-metrics | on / off |")
    print("|---|---|---|---|")
    for label in dict.fromkeys(label for label, _ in costs):
        on, off = costs[(label, "on")], costs[(label, "off")]
        ratio = h.median(on) / h.median(off)
        print(
            f"| {label} | {bg.spread(on, '{:.2f}')} | {bg.spread(off, '{:.2f}')} | "
            f"**{ratio:.3f}** |"
        )
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--only", default=",".join(CASES))
    ap.add_argument("--hb-connections", type=int, default=10)
    ap.add_argument("--commit-connections", type=int, default=10)
    ap.add_argument("--window", type=int, default=16)
    ap.add_argument("--seconds", type=float, default=2.0)
    ap.add_argument("--pipe-rounds", type=int, default=7)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--session-ms", type=int, default=30000)
    ap.add_argument(
        "--in-process",
        type=int,
        metavar="RUNS",
        help="instead: RUNS alternating pairs of `bench_groups.py --in-process heartbeat,"
        "commit-8` with and without --no-metrics (broker CPU-µs per request, no sockets)",
    )
    args = ap.parse_args()
    if args.in_process:
        return in_process(args.in_process)
    for case in args.only.split(","):
        if case not in CASES:
            ap.error(f"unknown case {case!r}; choose from {', '.join(CASES)}")
    brokers: dict[str, tuple[h.BrokerProcess, int | None]] = {}
    try:
        http = h.free_port()
        extra = bg.kgroupd_args()
        on = h.BrokerProcess("kgroupd", extra=[*extra, "--http-port", str(http)]).start()
        brokers["metrics"] = (on, http)
        off = h.BrokerProcess("kgroupd", extra=[*extra, "--no-metrics"]).start()
        brokers["no-metrics"] = (off, None)
        scrape(http)  # it serves
        t0 = time.perf_counter()
        lines = h.uvloop_run(main_async(args, brokers))
        took = time.perf_counter() - t0
    finally:
        for b, _ in brokers.values():
            b.stop()
    print(f"\n{h.command_line()}")
    print(
        f"{h.stamp()}; {h.machine()}, {bg.load():.2f} at the end ({took:.0f} s); "
        f"{h.kgroupd_revision()}"
    )
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
