"""Durability (issue 4): commits/s and produce MB/s under ``--data-dir`` with each ``--fsync``
policy beside in-memory kgroupd, and restart time with 1,000,000 committed offsets and
100,000 records on disk.

    python bench/bench_durability.py [--only throughput,restart]

throughput: four kgroupd brokers run side by side: in memory, and ``--data-dir`` with
``--fsync always``, ``interval`` (the default 1000 ms) and ``never``, each on its own fresh
directory under the git-ignored ``.cache/`` (the repository's disk). Per round, each broker
gets (1) OffsetCommit v2 of 8 partitions each, simple commits, ``--commit-connections`` x
``--window`` pipelined for ``--seconds`` (bench_groups.py's client), then (2) ``--produce-mib``
MiB of pre-encoded 16 KiB ProduceRequest v7 batches (acks=1) over ``--produce-connections``
connections, one partition each, 8 in flight (bench_throughput.py's client), to a fresh topic
that is deleted afterwards. Rounds rotate which broker goes first; figures are medians. Under
``always`` an answer waits for its fsync while the connection goes on with the requests behind
it, so one fsync covers every connection's pipeline (group commit); the 20 groups land on
different coordinator shards, as a real deployment's would. Target: ``always`` keeps at least
half the in-memory commit rate.

restart: one broker with ``--data-dir`` (``--fsync always``) gets ``--offsets`` committed
offsets (``--restart-groups`` groups x ``--partitions-per-commit`` partitions per OffsetCommit,
pipelined), is stopped cleanly (SIGTERM: the coordinator state goes into snapshots), started
again, given ``--records`` records of 1 KiB in batches of 100 over 4 partitions, then killed
with SIGKILL. Then, ``--restarts`` times: start it, time until the port accepts and until an
OffsetFetch returns a committed offset (checked), check every offset of a sample of groups and
the log end offsets, SIGKILL again. Target: restart under 3 s.

Figures: BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import shutil
import signal
import struct
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _harness as h
import bench_groups as bg
import bench_throughput as bt
from _disk import fsync_probe
from aiokafka.record.default_records import DefaultRecordBatchBuilder

MODES = ("memory", "always", "interval", "never")
_SIZE = struct.Struct(">i")


def load() -> float:
    return os.getloadavg()[0]


def dir_mib(path: Path) -> float:
    total = 0
    for root, _dirs, files in os.walk(path):
        for f in files:
            with contextlib.suppress(OSError):  # a file deleted meanwhile
                total += os.path.getsize(os.path.join(root, f))
    return total / (1024 * 1024)


def mode_args(mode: str, data_dir: Path) -> list[str]:
    if mode == "memory":
        return []
    return ["--data-dir", str(data_dir), "--fsync", mode]


# ---------------------------------------------------------------------------------------
# throughput


@dataclass
class RoundFigures:
    commits: bg.Rate
    produce_mbs: float
    produce_cpu: float


async def commit_pipes(b: h.BrokerProcess, args: argparse.Namespace) -> list[bg.Pipe]:
    loop = asyncio.get_running_loop()
    topic = "bench-commits"
    h.create_topic(b.port, topic, bg.COMMIT_PARTITIONS)
    pipes = []
    for c in range(args.commit_connections):
        frames = [
            bg.commit_frame(f"bench-commit-{c}", topic, bg.COMMIT_PARTITIONS, k * 1000)
            for k in range(16)
        ]
        _, p = await loop.create_connection(
            lambda frames=frames: bg.Pipe(frames, args.window, bg.check_commit),
            "127.0.0.1",
            b.port,
        )
        pipes.append(p)
    return pipes


async def produce_round(
    b: h.BrokerProcess, rnd: int, args: argparse.Namespace, batch: bytes, rpb: int
) -> tuple[float, float]:
    conns = args.produce_connections
    topic = f"bench-durability-{rnd}"
    h.create_topic(b.port, topic, conns)
    per_conn = max(1, args.produce_mib * 1024 * 1024 // conns // len(batch))
    frames = [bt.produce_frames(topic, c, batch, 16) for c in range(conns)]
    phase = await bt.run_phase(b, frames, per_conn, 8)
    wl = bt.Workload("16KiB", 16 * 1024, per_conn, 64)
    bt.check_produce("kgroupd", phase.pipes, wl, rpb)
    for p in phase.pipes:
        p.kept.clear()
    h.delete_topic(b.port, topic)
    return conns * per_conn * len(batch) / phase.elapsed / h.MB, phase.broker_cpu


async def throughput(args: argparse.Namespace, scratch: Path, lines: list[str]) -> None:
    probe = fsync_probe(scratch)
    batch, rpb = bt.build_batch(16 * 1024)
    brokers: dict[str, h.BrokerProcess] = {}
    results: dict[str, list[RoundFigures]] = {m: [] for m in MODES}
    load0 = load()
    loads = []
    profiles: dict[str, Path] = {}
    if args.py_spy:
        Path(args.py_spy).mkdir(parents=True, exist_ok=True)
        for mode in MODES:
            (Path(args.py_spy) / f"durability-commits-{mode}.txt").unlink(missing_ok=True)
    ok = False
    try:
        for mode in MODES:
            d = scratch / f"data-{mode}"
            extra = mode_args(mode, d)
            brokers[mode] = h.BrokerProcess("kgroupd", extra=extra).start(timeout=30)
        pipes = {m: await commit_pipes(b, args) for m, b in brokers.items()}
        for rnd in range(args.warmup + args.rounds):
            shift = rnd % len(MODES)
            order = MODES[shift:] + MODES[:shift]
            for mode in order:
                b = brokers[mode]
                spy = None
                if args.py_spy:  # the commit window only
                    profiles[mode] = Path(args.py_spy) / f"durability-commits-{mode}.txt"
                    part = profiles[mode].with_suffix(f".{rnd}.part")
                    spy = h.py_spy_start(b.pid, part)
                try:
                    rate = await bg.measure(pipes[mode], b.pid, args.seconds)
                finally:
                    h.py_spy_stop(spy)
                if spy is not None:
                    with open(profiles[mode], "a") as whole:
                        whole.write(part.read_text())
                    part.unlink()
                mbs, cpu = await produce_round(b, rnd, args, batch, rpb)
                loads.append(load())
                tag = "warm-up" if rnd < args.warmup else f"round {rnd - args.warmup + 1}"
                print(
                    f"  {mode:8} {tag:8} commits {rate.per_s:8.0f}/s (cpu {rate.broker_cpu:4.0%})"
                    f"  produce {mbs:6.1f} MB/s (cpu {cpu:4.0%})  load {loads[-1]:.2f}",
                    file=sys.stderr,
                )
                if rnd >= args.warmup:
                    results[mode].append(RoundFigures(rate, mbs, cpu))
        for ps in pipes.values():
            for p in ps:
                p.close()
        ok = True
    finally:
        for b in brokers.values():
            b.stop()
            if ok:
                b.cleanup_log()
    mem_commits = h.median([r.commits.per_s for r in results["memory"]])
    mem_mbs = h.median([r.produce_mbs for r in results["memory"]])
    lines += [
        "",
        f"Commits and produce by fsync policy: {args.rounds} rounds after {args.warmup} warm-up;"
        f" commits: {args.commit_connections} connections x {args.window} in flight,"
        f" {bg.COMMIT_PARTITIONS} partitions each, {args.seconds:g} s per round; produce:"
        f" {args.produce_mib} MiB of 16 KiB batches over {args.produce_connections}"
        f" connections x 8 in flight (load {load0:.2f} at the start, {load():.2f} at the end,"
        f" max {max(loads):.2f}). This disk: write+fsync of 200 bytes {probe[0]:.2f} ms"
        f" median, {probe[1]:.2f} ms p90.",
        "",
        "| kgroupd | OffsetCommit/s median (min-max) | vs in memory | broker CPU"
        " | broker CPU-µs per commit | produce MB/s median (min-max) | vs in memory"
        " | broker CPU | broker CPU-ms per MB |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for mode in MODES:
        rs = results[mode]
        commits = [r.commits.per_s for r in rs]
        speeds = [r.produce_mbs for r in rs]
        label = "in memory" if mode == "memory" else f"`--fsync {mode}`"
        lines.append(
            f"| {label} | **{bg.spread(commits)}** | {h.median(commits) / mem_commits:.2f}"
            f" | {h.median([r.commits.broker_cpu for r in rs]):.0%}"
            f" | {h.median([r.commits.broker_cpu / r.commits.per_s * 1e6 for r in rs]):.0f}"
            f" | **{bg.spread(speeds, '{:.1f}')}** | {h.median(speeds) / mem_mbs:.2f}"
            f" | {h.median([r.produce_cpu for r in rs]):.0%}"
            f" | {h.median([r.produce_cpu / r.produce_mbs * 1e3 for r in rs]):.1f} |"
        )
    always = h.median([r.commits.per_s for r in results["always"]])
    ratio = always / mem_commits
    lines += [
        "",
        f"`--fsync always` / in memory, commits: **{ratio:.2f}** (target >= 0.5:"
        f" {'met' if ratio >= 0.5 else '**missed**'}).",
    ]
    for m, out in profiles.items():
        lines += ["", f"py-spy profile of the {m} broker over the commit rounds ({out}):", ""]
        lines += [f"    {line}" for line in h.py_spy_summary(out, top=25)]


# ---------------------------------------------------------------------------------------
# restart


def expected_offset(g: int, p: int) -> int:
    return g * 1_000_000 + p


class Committer(bg.Conn):
    """Sends its frames with ``window`` in flight; every answer's errors must all be 0."""

    def __init__(self, frames: list[bytes], window: int, partitions: int) -> None:
        super().__init__()
        self.frames = frames
        self.window = window
        self.partitions = partitions
        self.next = 0
        self.answered = 0
        self.done: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def on_lost(self, exc: Exception | None) -> None:
        if not self.done.done():
            self.done.set_exception(ConnectionError(f"connection lost: {exc}"))

    def go(self) -> None:
        while self.next < min(self.window, len(self.frames)):
            self.transport.write(self.frames[self.next])  # type: ignore[union-attr]
            self.next += 1
        if not self.frames:
            self.done.set_result(None)

    def on_frame(self, body: bytes) -> None:
        resp = h.decode_response(8, 2, body)
        codes = [p["error_code"] for t in resp["topics"] for p in t["partitions"]]
        if len(codes) != self.partitions or any(codes):
            if not self.done.done():
                self.done.set_exception(bg.Failure(f"OffsetCommit errors {set(codes)}"))
            return
        self.answered += 1
        if self.next < len(self.frames):
            self.transport.write(self.frames[self.next])  # type: ignore[union-attr]
            self.next += 1
        elif self.answered == len(self.frames) and not self.done.done():
            self.done.set_result(None)


async def commit_many(port: int, args: argparse.Namespace) -> float:
    """Commit groups x partitions offsets (one group per OffsetCommit); seconds taken."""
    # the topic must exist: commits for unknown topics are refused, as Kafka refuses them
    h.create_topic(port, RESTART_TOPIC, args.partitions_per_commit)
    conns = args.commit_connections
    frames: list[list[bytes]] = [[] for _ in range(conns)]
    for g in range(args.restart_groups):
        frames[g % conns].append(
            bg.commit_frame(
                restart_group(g), RESTART_TOPIC, args.partitions_per_commit, expected_offset(g, 0)
            )
        )
    committers = await bg.connect_all(
        port, [lambda f=f: Committer(f, 4, args.partitions_per_commit) for f in frames]
    )
    t0 = time.perf_counter()
    for c in committers:
        c.go()
    await asyncio.wait_for(asyncio.gather(*(c.done for c in committers)), timeout=600)
    elapsed = time.perf_counter() - t0
    for c in committers:
        c.close()
    return elapsed


RESTART_TOPIC = "bench-restart-offsets"
LOG_TOPIC = "bench-restart-log"
LOG_PARTITIONS = 4
RECORDS_PER_BATCH = 100


def restart_group(g: int) -> str:
    return f"bench-restart-{g:05d}"


def batch_of(count: int, value_size: int) -> bytes:
    value = bytes(range(256)) * (value_size // 256) + bytes(value_size % 256)
    b = DefaultRecordBatchBuilder(2, 0, 0, -1, -1, -1, 2**31 - 1)
    for i in range(count):
        b.append(i, bt.TIMESTAMP, None, value, [])
    return bytes(b.build())


def fetch_offsets(port: int, group: str, partitions: list[int]) -> list:
    return h.call(
        port,
        9,
        1,
        {"group_id": group, "topics": [{"name": RESTART_TOPIC, "partition_indexes": partitions}]},
    )["topics"]


def log_end_offsets(port: int) -> list[int]:
    resp = h.call(
        port,
        2,
        1,
        {
            "replica_id": -1,
            "topics": [
                {
                    "name": LOG_TOPIC,
                    "partitions": [
                        {"partition_index": p, "timestamp": -1} for p in range(LOG_PARTITIONS)
                    ],
                }
            ],
        },
    )
    out = [-1] * LOG_PARTITIONS
    for t in resp["topics"]:
        for part in t["partitions"]:
            if part["error_code"]:
                raise bg.Failure(
                    f"ListOffsets error {part['error_code']} for {part['partition_index']}"
                )
            out[part["partition_index"]] = part["offset"]
    return out


def check_offsets(port: int, args: argparse.Namespace, sample: int = 20) -> None:
    parts = list(range(args.partitions_per_commit))
    step = max(1, args.restart_groups // sample)
    for g in [*range(0, args.restart_groups, step), args.restart_groups - 1]:
        got = {
            p["partition_index"]: (p["committed_offset"], p["error_code"])
            for t in fetch_offsets(port, restart_group(g), parts)
            for p in t["partitions"]
        }
        for p in parts:
            if got.get(p) != (expected_offset(g, p), 0):
                raise bg.Failure(f"group {g} partition {p}: {got.get(p)} after restart")


def first_offset_readable(port: int, deadline: float) -> None:
    """Until OffsetFetch for the first group's partition 0 returns its committed offset."""
    while True:
        try:
            (part,) = fetch_offsets(port, restart_group(0), [0])[0]["partitions"]
            off, code = part["committed_offset"], part["error_code"]
            if code == 0 and off == expected_offset(0, 0):
                return
            raise bg.Failure(f"first group's offset after restart: {off} (error {code})")
        except (OSError, ConnectionError):
            if time.perf_counter() > deadline:
                raise
            time.sleep(0.002)


# Every log file of the restart broker (each start gets a new port, hence a new log file).
RESTART_LOGS: list[Path] = []


def timed_start(b: h.BrokerProcess) -> tuple[float, float]:
    """Start ``b``; seconds from spawn to the first accept and to the first offset read."""
    b.start(timeout=120)
    if b.log_path is not None:
        RESTART_LOGS.append(b.log_path)
    first = b.spawned_at
    accept = b.started_in
    first_offset_readable(b.port, time.perf_counter() + 60)
    return accept, time.perf_counter() - first


def profiled_restart(b: h.BrokerProcess, out: Path, lines: list[str]) -> None:
    """One more restart, under py-spy from the first instruction to the first offset read."""
    out.parent.mkdir(parents=True, exist_ok=True)
    base = h.kgroupd_command
    extra = b.extra
    b.command = lambda port: h.py_spy_command(out, [*base(port), *extra])
    b.extra = []
    try:
        accept, first = timed_start(b)
        assert b.proc is not None
        for child in h.child_pids(b.proc.pid):  # the broker: SIGKILL, so py-spy writes
            os.kill(child, signal.SIGKILL)
        b.proc.wait(timeout=120)
        b.proc = None
    finally:
        b.command, b.extra = None, extra
    lines += [
        "",
        f"py-spy profile of one more restart, spawn to first offset read ({first:.2f} s"
        f" under py-spy; accepts at {accept:.2f} s), then SIGKILL ({out}):",
        "",
    ]
    lines += [f"    {line}" for line in h.py_spy_summary(out, top=25)]


async def restart(args: argparse.Namespace, scratch: Path, lines: list[str]) -> None:
    data = scratch / "data-restart"
    extra = ["--data-dir", str(data), "--fsync", "always"]
    b = h.BrokerProcess("kgroupd", extra=extra)
    load0 = load()
    ok = False
    try:
        b.start(timeout=30)
        if b.log_path is not None:
            RESTART_LOGS.append(b.log_path)
        h.create_topic(b.port, LOG_TOPIC, LOG_PARTITIONS)
        total = args.restart_groups * args.partitions_per_commit
        print(f"  committing {total:,} offsets", file=sys.stderr)
        commit_s = await commit_many(b.port, args)
        rss_full = b.rss_mib()
        print(f"  committed in {commit_s:.1f} s; RSS {rss_full:.0f} MiB", file=sys.stderr)
        t0 = time.perf_counter()
        b.stop(timeout=300)
        stop_s = time.perf_counter() - t0
        coord_mib = dir_mib(data / "coordinator")
        print(f"  clean stop {stop_s:.1f} s; coordinator dir {coord_mib:.1f} MiB", file=sys.stderr)
        snap_accept, snap_first = timed_start(b)
        check_offsets(b.port, args)
        print(
            f"  restart from snapshots: accepts {snap_accept:.2f} s,"
            f" first offset {snap_first:.2f} s",
            file=sys.stderr,
        )
        batch = batch_of(RECORDS_PER_BATCH, args.value_bytes)
        batches = args.records // RECORDS_PER_BATCH
        per_conn = batches // LOG_PARTITIONS
        frames = [bt.produce_frames(LOG_TOPIC, p, batch, 1) for p in range(LOG_PARTITIONS)]
        phase = await bt.run_phase(b, frames, per_conn, 8)
        produced = per_conn * LOG_PARTITIONS * RECORDS_PER_BATCH
        ends = log_end_offsets(b.port)
        if sum(ends) != produced:
            raise bg.Failure(f"log end offsets {ends} after producing {produced}")
        print(
            f"  produced {produced:,} records ({per_conn * LOG_PARTITIONS * len(batch) / h.MB:.0f}"
            f" MB) in {phase.elapsed:.1f} s; SIGKILL",
            file=sys.stderr,
        )
        b.kill()
        data_mib = dir_mib(data)
        accepts, firsts, rss = [], [], []
        for i in range(args.restarts):
            accept, first = timed_start(b)
            rss.append(b.rss_mib())
            check_offsets(b.port, args)
            ends_now = log_end_offsets(b.port)
            if ends_now != ends:
                raise bg.Failure(f"log end offsets {ends_now} after restart, not {ends}")
            accepts.append(accept)
            firsts.append(first)
            print(
                f"  restart {i + 1} after SIGKILL: accepts {accept:.2f} s, first offset"
                f" {first:.2f} s, RSS {rss[-1]:.0f} MiB (load {load():.2f})",
                file=sys.stderr,
            )
            b.kill()
        if args.py_spy:
            profiled_restart(b, Path(args.py_spy) / "durability-restart.txt", lines)
        ok = True
    finally:
        b.stop()
        if ok:
            for path in RESTART_LOGS:
                path.unlink(missing_ok=True)
    med = h.median(firsts)
    lines += [
        "",
        f"Restart with {total:,} committed offsets ({args.restart_groups:,} groups x"
        f" {args.partitions_per_commit} partitions) and {produced:,} records of"
        f" {args.value_bytes} bytes in batches of {RECORDS_PER_BATCH} ({LOG_PARTITIONS}"
        f" partitions); `--fsync always`; load {load0:.2f} at the start, {load():.2f} at the end:",
        "",
        "| step | figure |",
        "|---|---|",
        f"| committing the offsets ({args.commit_connections} connections x 4 in flight)"
        f" | {commit_s:.1f} s ({total / commit_s:,.0f} offsets/s); RSS then {rss_full:.0f} MiB |",
        f"| clean stop (SIGTERM; snapshots written) | {stop_s:.1f} s; coordinator directory"
        f" {coord_mib:.1f} MiB |",
        f"| start from the snapshots only: port accepts / first offset read | {snap_accept:.2f} s"
        f" / {snap_first:.2f} s |",
        f"| data directory after producing the records, at the SIGKILL | {data_mib:.0f} MiB |",
        f"| **restart after SIGKILL** ({args.restarts} runs): port accepts, median (min-max)"
        f" | **{bg.spread(accepts, '{:.2f}')} s** |",
        f"| **restart after SIGKILL: first committed offset read**, median (min-max)"
        f" | **{bg.spread(firsts, '{:.2f}')} s** |",
        f"| RSS after restart | {h.median(rss):.0f} MiB |",
        "",
        f"Target: restart under 3 s: {'met' if med < 3 else '**missed**'} ({med:.2f} s to the"
        " first committed offset; every restart also checked a sample of 21 groups' offsets and"
        " the log end offsets).",
    ]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--only", default="throughput,restart")
    ap.add_argument(
        "--kgroupd-rev", metavar="REV", help="run kgroupd from this git revision (git archive)"
    )
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--commit-connections", type=int, default=20)
    ap.add_argument("--window", type=int, default=8)
    ap.add_argument("--produce-connections", type=int, default=8)
    ap.add_argument("--produce-mib", type=int, default=64)
    ap.add_argument(
        "--offsets", type=int, default=1_000_000, help="committed offsets to restart with"
    )
    ap.add_argument("--partitions-per-commit", type=int, default=1000)
    ap.add_argument("--records", type=int, default=100_000)
    ap.add_argument("--value-bytes", type=int, default=1024)
    ap.add_argument("--restarts", type=int, default=3)
    ap.add_argument(
        "--py-spy",
        metavar="DIR",
        help="profile the brokers with py-spy (raw stacks in DIR; figures are then slower)",
    )
    args = ap.parse_args()
    args.restart_groups = max(1, args.offsets // args.partitions_per_commit)
    if args.kgroupd_rev:
        h.use_kgroupd_rev(args.kgroupd_rev)
    machine = h.machine()
    (h.ROOT / ".cache").mkdir(exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix="bench-durability-", dir=h.ROOT / ".cache"))
    lines: list[str] = []
    try:
        for part in args.only.split(","):
            print(f"# {part}", file=sys.stderr)
            if part == "throughput":
                h.uvloop_run(throughput(args, scratch, lines))
            elif part == "restart":
                h.uvloop_run(restart(args, scratch, lines))
            else:
                ap.error(f"unknown part {part!r}")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    print(f"\n{h.command_line()}")
    print(f"{h.stamp()}; {machine}, {load():.2f} at the end; {h.kgroupd_revision()}")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
