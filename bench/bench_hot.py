"""The group coordinator's hot requests against older revisions, in one run (issue 26).

    python bench/bench_hot.py [--only heartbeat,commit,cghb] [--rev c966aaf]
        [--cghb-rev c37879a] [--rounds 5] [--seconds 2] [--no-acl]
    python bench/bench_hot.py --instructions [--only ...] [--requests 20000]

Several kgroupd processes at once, each on its own port, default flags (metrics on, in
memory) plus ``--initial-rebalance-delay-ms 0``: the working tree ("HEAD"), ``--rev`` (a
``git archive`` of it, as ``--kgroupd-rev`` runs one), ``--cghb-rev`` for
ConsumerGroupHeartbeat (the older revision may not serve it), and the working tree with
``--authorizer acl --allow-everyone-if-no-acl-found true`` ("acl": no ACL exists, so every
decision is computed once, then cached). The clients are bench_groups.py's raw pipelined
connections (frames encoded before the clock starts, every answer checked):

* heartbeat: Heartbeat v1 of a Stable classic group of ``--hb-connections`` members, one
  connection each, ``--window`` in flight.
* commit: OffsetCommit v2 of 8 partitions of a simple group (no members), one group per
  connection, ``--commit-connections`` x ``--window`` in flight.
* cghb: ConsumerGroupHeartbeat v1 of a stable KIP-848 group of ``--hb-connections``
  members (each reconciled: the steady heartbeat of a member with nothing to change).

Rounds alternate the brokers' order (A B C, then C B A, ...) so background load falls on all
alike; medians of ``--rounds`` after one warm-up. ``--instructions`` instead runs each broker
under valgrind's callgrind (the whole process: event loop, sockets, parsing, handlers,
answers) and counts the machine instructions it executes while ``--requests`` requests are
answered (counters zeroed before, dumped after, with ``callgrind_control``): per request, an
instruction count moves by well under 1% from run to run on this shared machine, where rates
move by 20%. Figures: BENCHMARKS.md, "Hot path (issue 26)".
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _harness as h
import bench_consumer_groups as cg
import bench_groups as bg
from groups_members import GroupRun
from groups_pipes import Pipe, check_heartbeat
from groups_wire import heartbeat_frame

CASES = ("heartbeat", "commit", "cghb")
LABELS = {
    "heartbeat": "Heartbeat v1",
    "commit": "OffsetCommit v2 (8 partitions)",
    "cghb": "ConsumerGroupHeartbeat v1",
}
ACL = ["--authorizer", "acl", "--allow-everyone-if-no-acl-found", "true"]
CG_FLAGS = [  # as bench_consumer_groups.py runs its broker
    "--group-consumer-min-heartbeat-interval-ms",
    "500",
    "--group-consumer-heartbeat-interval-ms",
    "500",
    "--group-consumer-min-session-timeout-ms",
    "10000",
    "--group-consumer-session-timeout-ms",
    "30000",
]


@dataclass
class Target:
    name: str  # HEAD, a revision, or acl
    src: Path | None  # None: the working tree
    extra: list[str]


def start(t: Target, valgrind: Path | None, profile: Path | None = None) -> h.BrokerProcess:
    # as _harness runs kgroupd: bytecode cached (as installed), a revision from its archive
    env = ["env", "-u", "PYTHONDONTWRITEBYTECODE"]
    if t.src is not None:
        env += ["-C", str(t.src), f"PYTHONPATH={t.src}"]
    env.append(f"PYTHONPYCACHEPREFIX={h.PYCACHE}")

    def command(port: int) -> list[str]:
        argv = h.kgroupd_command_for(t.src, port)
        if (valgrind is not None or profile is not None) and t.src is None:
            # the interpreter itself, not the console script
            argv = [sys.executable, "-m", "kgroupd.broker", *argv[1:]]
        if profile is not None:  # cProfile, written when the broker exits (SIGTERM)
            argv = [argv[0], "-m", "cProfile", "-o", f"{profile}/{t.name}.prof", *argv[1:]]
        if valgrind is not None:
            argv = [
                "valgrind",
                "--tool=callgrind",
                f"--callgrind-out-file={valgrind}/{t.name}.%p",
                "--dump-instr=no",
                "--compress-strings=no",
                *argv,
            ]
        return [*env, *argv]

    b = h.BrokerProcess(
        f"hot-{t.name}",
        extra=["--initial-rebalance-delay-ms", "0", *t.extra],
        command=command,
    )
    return b.start(timeout=120 if valgrind is not None else 15)


async def open_case(case: str, b: h.BrokerProcess, args: argparse.Namespace) -> list[Pipe]:
    """Connections pipelining ``case``'s steady request, the broker set up for it."""
    loop = asyncio.get_running_loop()
    if case == "commit":
        pipes, _ = await bg.open_pipes("kgroupd", b, "commit", args)
        return pipes
    if case == "heartbeat":
        g = GroupRun("bench-heartbeat", args.hb_connections, args.session_ms)
        await g.setup(b.port, 0.1, timeout=600)
        frames = [heartbeat_frame(g.name, g.generation, m.member_id) for m in g.members]
        check = check_heartbeat
    else:
        topic = "bench-cg-hb"
        n = args.hb_connections
        h.create_topic(b.port, topic, 2 * n)
        clients = await cg.connect(b.port, n)
        stop = asyncio.Event()
        members = [cg.ConsumerMember(c, "bench-cg-hb-c", topic, 0.05) for c in clients]
        tasks = [asyncio.create_task(m.run(stop)) for m in members]
        await cg._until(lambda: cg._consumer_stable(members, 2 * n), members, 600)
        stop.set()
        await asyncio.gather(*tasks)
        frames = [
            cg.frame(
                68, 1, 7, {"group_id": m.group, "member_id": m.member_id, "member_epoch": m.epoch}
            )
            for m in members
        ]
        check = cg._error_at(4 + 1 + 4)
    pipes = []
    for f in frames:
        _, p = await loop.create_connection(
            lambda f=f: Pipe([f], args.window, check), "127.0.0.1", b.port
        )
        pipes.append(p)
    return pipes


def targets(args: argparse.Namespace, case: str) -> list[Target]:
    rev = args.cghb_rev if case == "cghb" else args.rev
    flags = CG_FLAGS if case == "cghb" else []
    head = h.kgroupd_rev_src(args.head)[1] if args.head else None
    out = [Target("HEAD", head, flags)]
    if rev:
        out.append(Target(rev, h.kgroupd_rev_src(rev)[1], flags))
    if args.acl:
        out.append(Target("acl", head, [*flags, *ACL]))
    return out


async def rates_case(args: argparse.Namespace, case: str) -> list[str]:
    ts = targets(args, case)
    brokers = {t.name: start(t, None) for t in ts}
    try:
        opened = {name: await open_case(case, b, args) for name, b in brokers.items()}
        names = list(brokers)
        rates: dict[str, list[float]] = {n: [] for n in names}
        cpu: dict[str, list[float]] = {n: [] for n in names}
        for r in range(args.warmup + args.rounds):
            for name in names if r % 2 == 0 else names[::-1]:
                rate = await bg.measure(opened[name], brokers[name].pid, args.seconds)
                tag = "warm-up" if r < args.warmup else f"round {r - args.warmup + 1}"
                print(
                    f"  {name:8} {case:9} {tag:8} {rate.per_s:9.0f}/s load {bg.load():.2f}",
                    file=sys.stderr,
                )
                if r >= args.warmup:
                    rates[name].append(rate.per_s)
                    cpu[name].append(rate.broker_cpu / rate.per_s * 1e6)
        for pipes in opened.values():
            for p in pipes:
                p.close()
    finally:
        for b in brokers.values():
            b.stop()
            b.cleanup_log()
    head = h.median(rates["HEAD"])
    rows = []
    for name in names:
        med = h.median(rates[name])
        rows.append(
            f"| {LABELS[case]} | {name} | {bg.spread(rates[name])} | {h.median(cpu[name]):.1f} |"
            f" {'—' if name == 'HEAD' else f'**{head / med:.2f}x**'} |"
        )
    return rows


def _callgrind(pid: int, *flags: str) -> None:
    subprocess.run(["callgrind_control", *flags, str(pid)], check=True, capture_output=True)


async def instructions_case(args: argparse.Namespace, case: str, out: Path) -> list[str]:
    rows = []
    for t in targets(args, case):
        b = start(t, out)
        try:
            await _quiet(b.pid, out)  # start-up's imports, slow under valgrind
            for attempt in range(3):  # a cold first request may outlast a set-up call's 30 s
                try:
                    pipes = await open_case(case, b, args)
                    break
                except (TimeoutError, OSError):
                    if attempt == 2:
                        raise
                    await _quiet(b.pid, out)
            # warm (first requests build caches), then wait for the process to go quiet
            # (imports after start-up run in the background, slowly under valgrind)
            await bg.measure(pipes, b.pid, 2.0, warmup=0.0)
            idle = await _quiet(b.pid, out)
            await asyncio.to_thread(_callgrind, b.pid, "--zero")
            r0 = sum(p.received for p in pipes)
            for p in pipes:
                p.go()
            while sum(p.received for p in pipes) - r0 < args.requests:
                await asyncio.sleep(0.2)
            for p in pipes:
                p.running = False
            await asyncio.wait_for(asyncio.gather(*(p.drained for p in pipes)), timeout=120)
            answered = sum(p.received for p in pipes) - r0
            total = await _dump(b.pid, out)
            for p in pipes:
                p.close()
        finally:
            b.stop(timeout=60)
            b.cleanup_log()
        per = total / answered
        rows.append((t.name, per, answered))
        print(
            f"  {t.name:8} {case:9} {per:12,.0f} instructions/request (idle {idle:,.0f}/s)",
            file=sys.stderr,
        )
    base = rows[0][1]
    return [
        f"| {LABELS[case]} | {name} | {per:,.0f} | {n:,} |"
        f" {'—' if name == 'HEAD' else f'{per / base:.2f}x'} |"
        for name, per, n in rows
    ]


async def _dump(pid: int, out: Path) -> int:
    """The instructions counted since the last zero (a dump zeroes them too)."""
    before = set(out.iterdir())
    await asyncio.to_thread(_callgrind, pid, "--dump")
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        await asyncio.sleep(0.2)
        for path in set(out.iterdir()) - before:
            try:
                return _totals(path)
            except (SystemExit, OSError):
                pass  # still being written
    raise SystemExit(f"no callgrind dump from {pid}")


async def _quiet(pid: int, out: Path, most: float = 2e6, timeout: float = 300) -> float:
    """Wait until the idle process executes under ``most`` instructions a second."""
    deadline = time.monotonic() + timeout
    while True:
        await _dump(pid, out)
        t0 = time.monotonic()
        await asyncio.sleep(2.0)
        rate = await _dump(pid, out) / (time.monotonic() - t0)
        if rate < most or time.monotonic() > deadline:
            return rate
        print(f"  waiting: idle broker at {rate:,.0f} instructions/s", file=sys.stderr)


def _totals(path: Path) -> int:
    text = path.read_text(errors="replace")
    found = re.search(r"^(?:totals|summary): (\d+)", text, re.M)
    if found is None:
        raise SystemExit(f"no totals in {path}")
    return int(found.group(1))


async def main_async(args: argparse.Namespace) -> list[str]:
    lines: list[str] = []
    if args.cprofile:
        for case in args.only.split(","):
            b = start(Target("HEAD", None, CG_FLAGS if case == "cghb" else []), None, args.cprofile)
            try:
                pipes = await open_case(case, b, args)
                rate = await bg.measure(pipes, b.pid, args.seconds)
                for p in pipes:
                    p.close()
            finally:
                b.stop(timeout=60)
            os.replace(args.cprofile / "HEAD.prof", args.cprofile / f"{case}.prof")
            lines.append(f"{case}: {rate.per_s:,.0f}/s under cProfile: {args.cprofile}/{case}.prof")
        return lines
    if args.instructions:
        lines += [
            "| request | broker | instructions per request (whole process) | requests counted |"
            " vs HEAD |",
            "|---|---|---|---|---|",
        ]
        if args.keep is not None:  # the dumps, for callgrind_annotate
            args.keep.mkdir(parents=True, exist_ok=True)
            for case in args.only.split(","):
                lines += await instructions_case(args, case, args.keep)
            return lines
        with tempfile.TemporaryDirectory(prefix="kgroupd-callgrind-") as tmp:
            for case in args.only.split(","):
                lines += await instructions_case(args, case, Path(tmp))
        return lines
    lines += [
        f"{args.rounds} rounds of {args.seconds:g} s per broker after {args.warmup} warm-up,"
        f" alternating; {args.hb_connections} members / {args.commit_connections} commit"
        f" connections x {args.window} in flight; load {bg.load():.2f} at the start",
        "",
        "| request | broker | per second, median (min-max) | broker CPU-µs per request |"
        " HEAD / this |",
        "|---|---|---|---|---|",
    ]
    for case in args.only.split(","):
        print(f"# {case}", file=sys.stderr)
        lines += await rates_case(args, case)
    lines.append(f"load {bg.load():.2f} at the end")
    return lines


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--only", default=",".join(CASES))
    ap.add_argument("--rev", default="c966aaf", help="the revision Heartbeat/OffsetCommit face")
    ap.add_argument("--cghb-rev", default="c37879a", help="the one ConsumerGroupHeartbeat faces")
    ap.add_argument("--no-acl", dest="acl", action="store_false")
    ap.add_argument("--head", help="run HEAD (and acl) from this revision's archive instead")
    ap.add_argument("--hb-connections", type=int, default=10)
    ap.add_argument("--commit-connections", type=int, default=10)
    ap.add_argument("--window", type=int, default=16)
    ap.add_argument("--seconds", type=float, default=2.0)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--session-ms", type=int, default=30000)
    ap.add_argument("--instructions", action="store_true", help="count instructions instead")
    ap.add_argument("--requests", type=int, default=20000, help="--instructions: per broker")
    ap.add_argument("--keep", type=Path, help="--instructions: keep the dumps in DIR")
    ap.add_argument("--cprofile", type=Path, help="instead: cProfile HEAD's broker into DIR")
    args = ap.parse_args()
    for case in args.only.split(","):
        if case not in CASES:
            ap.error(f"unknown case {case!r}; choose from {', '.join(CASES)}")
    machine = h.machine()
    lines = h.uvloop_run(main_async(args))
    print(f"\n{h.command_line()}")
    print(f"{h.stamp()}; {machine}, load {os.getloadavg()[0]:.2f} at the end")
    print(f"HEAD: {args.head or h.kgroupd_revision()}")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
