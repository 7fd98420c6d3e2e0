"""Costs that grow with the work (issue 26): how long the broker's event loop is held by a
large CreateTopics, a Metadata request for every topic, a ``/metrics`` scrape, and how long a
restart takes, at ``--partitions`` partitions.

    python bench/bench_scale.py [--partitions 100000] [--mode memory,disk] [--kgroupd-rev REV]

One kgroupd per mode (``memory``: default flags; ``disk``: ``--data-dir`` in a temporary
directory). A bystander thread sends ApiVersions one at a time on its own connection the
whole time; each phase reports the bystander's round trips while it runs (max and p99): a
round trip is at least as long as the loop was held. Phases:

- ``create``: after one small request of each API measured (``warm_up``), CreateTopics of
  ``--per-request`` partitions (one topic each) until the broker has ``--partitions``; then
  ``--with-data`` partitions get one small batch each (Produce).
- ``metadata``: Metadata v12 for all topics, ``--repeat`` times (the answer is read whole and
  its partitions counted after the bystander stops).
- ``scrape``: ``GET /metrics``, ``--repeat`` times (one series per partition:
  kgroupd_log_end_offset).
- ``grow``, ``delete``: CreatePartitions adding ``--per-request`` partitions to a new topic,
  then DeleteTopics of it.
- ``retention`` (with ``--retention-check-ms``: the broker runs its retention pass over every
  partition that often): the bystander through ``--retention-passes`` passes, idle otherwise;
  then, with ``--retention-deletes N``, through passes deleting an hour-old segment in each
  of N partitions (a topic made for it) until all are deleted, and through an
  IncrementalAlterConfigs lowering retention.ms of another such topic (applied at once).
- ``topics`` (disk, with ``--seed-topics``: that many topics of ``--seed-partitions`` are in
  the data dir's ``topics.json`` before the start): CreateTopics of one topic of one partition,
  then DeleteTopics of it, ``--repeat`` times each (each rewrites the topic table); then one
  CreateTopics of ``--batch-topics`` topics of one partition, and one DeleteTopics of them.
- ``restart`` (disk): SIGKILL, start again on the same data dir; the time until an ApiVersions
  is answered and until ``/readyz`` says ready; then a Metadata checks every partition is
  back and ListOffsets the produced partitions' ends.

The main thread reads answers as raw bytes while the bystander runs, so decoding them does
not take the bystander's time (one process, the GIL). Figures: BENCHMARKS.md, "Scale".
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _harness as h
from _scale_topics import retention_phase, seed_topics, topics_phase
from _scale_wire import Bystander, raw_call, recv_frame, stall


def warm_up(s: socket.socket) -> None:
    """The first request of an API imports its handler and builds its codecs (start-up
    costs, not the costs measured here): one small request of each, first."""
    topic = {"name": "scale-warm", "num_partitions": 1, "replication_factor": 1}
    body = {"topics": [{**topic, "assignments": [], "configs": []}], "timeout_ms": 60000}
    raw_call(s, 19, 7, {**body, "validate_only": False})
    grow = {"topics": [{"name": "scale-warm", "count": 2, "assignments": None}]}
    raw_call(s, 37, 3, {**grow, "timeout_ms": 60000, "validate_only": False})
    raw_call(s, 3, 12, {**METADATA_ALL, "topics": [{"name": "scale-warm"}]})
    raw_call(s, 20, 6, {"topics": [{"name": "scale-warm"}], "timeout_ms": 60000})


def create_phase(port: int, by: Bystander, args: argparse.Namespace) -> list[str]:
    out = []
    with socket.create_connection(("127.0.0.1", port)) as s:
        warm_up(s)
        n = args.partitions // args.per_request
        if n == 0:
            return out
        took: list[float] = []
        by.mark()
        raws = []
        for i in range(n):
            body = {
                "topics": [
                    {
                        "name": f"scale-{i}",
                        "num_partitions": args.per_request,
                        "replication_factor": 1,
                        "assignments": [],
                        "configs": [],
                    }
                ],
                "timeout_ms": 60000,
                "validate_only": False,
            }
            raw, t = raw_call(s, 19, 7, body)
            raws.append(raw)
            took.append(t)
        samples = by.take()
        for raw in raws:
            for t in h.decode_response(19, 7, raw)["topics"]:
                if t["error_code"] != 0:
                    raise RuntimeError(f"CreateTopics {t['name']}: {t['error_code']}")
        out.append(
            f"create {n} x {args.per_request} partitions: request {max(took) * 1000:.0f} ms max "
            f"(median {statistics.median(took) * 1000:.0f} ms); bystander {stall(samples)}"
        )
        if args.with_data:
            produce(s, args.with_data, args.per_request)
    return out


def produce(s: socket.socket, partitions: int, per_topic: int) -> None:
    from kgroupd.protocol.records import build_batch

    batch = build_batch([(0, b"k", b"v" * 100, int(time.time() * 1000))])
    topics: dict[str, list[dict[str, Any]]] = {}
    for p in range(partitions):
        name = f"scale-{p // per_topic}"
        topics.setdefault(name, []).append({"index": p % per_topic, "records": batch})
    body = {
        "transactional_id": None,
        "acks": 1,
        "timeout_ms": 30000,
        "topic_data": [{"name": n, "partition_data": parts} for n, parts in topics.items()],
    }
    raw, _ = raw_call(s, 0, 9, body)
    for t in h.decode_response(0, 9, raw)["responses"]:
        for p in t["partition_responses"]:
            if p["error_code"]:
                raise RuntimeError(f"produce {t['name']}-{p['index']}: {p['error_code']}")


METADATA_ALL = {
    "topics": None,
    "allow_auto_topic_creation": False,
    "include_topic_authorized_operations": False,
}


def count_partitions(raw: bytes) -> int:
    resp = h.decode_response(3, 12, raw)
    return sum(len(t["partitions"]) for t in resp["topics"] if not t["name"].startswith("__"))


def metadata_phase(port: int, by: Bystander, args: argparse.Namespace) -> list[str]:
    with socket.create_connection(("127.0.0.1", port)) as s:
        took, raws = [], []
        by.mark()
        for _ in range(args.repeat):
            raw, t = raw_call(s, 3, 12, METADATA_ALL)
            took.append(t)
            raws.append(raw)
            time.sleep(0.2)
        samples = by.take()
    counts = {count_partitions(raw) for raw in raws}
    return [
        f"metadata all topics x {args.repeat} ({len(raws[0]) / 1e6:.1f} MB, partitions "
        f"{sorted(counts)}): request {statistics.median(took) * 1000:.0f} ms median "
        f"(first {took[0] * 1000:.0f} ms); bystander {stall(samples)}"
    ]


def scrape_phase(http: int, by: Bystander, args: argparse.Namespace) -> list[str]:
    took, sizes = [], []
    by.mark()
    for _ in range(args.repeat):
        t0 = time.perf_counter()
        with urllib.request.urlopen(f"http://127.0.0.1:{http}/metrics", timeout=60) as resp:
            sizes.append(len(resp.read()))
        took.append(time.perf_counter() - t0)
        time.sleep(0.2)
    samples = by.take()
    return [
        f"scrape /metrics x {args.repeat} ({sizes[0] / 1e6:.1f} MB): request "
        f"{statistics.median(took) * 1000:.0f} ms median; bystander {stall(samples)}"
    ]


def grow_delete_phase(port: int, by: Bystander, args: argparse.Namespace) -> list[str]:
    """CreatePartitions adding ``--per-request`` partitions to a new topic, then DeleteTopics
    of it (the broker has ``--partitions`` more meanwhile)."""
    with socket.create_connection(("127.0.0.1", port)) as s:
        body = {
            "topics": [
                {
                    "name": "scale-extra",
                    "num_partitions": 1,
                    "replication_factor": 1,
                    "assignments": [],
                    "configs": [],
                }
            ],
            "timeout_ms": 60000,
            "validate_only": False,
        }
        raw_call(s, 19, 7, body)
        grow = {
            "topics": [{"name": "scale-extra", "count": args.per_request + 1, "assignments": None}],
            "timeout_ms": 60000,
            "validate_only": False,
        }
        by.mark()
        raw, grew = raw_call(s, 37, 3, grow)
        grow_samples = by.take()
        result = h.decode_response(37, 3, raw)["results"][0]
        if result["error_code"]:
            raise RuntimeError(f"CreatePartitions: {result}")
        by.mark()
        raw, deleted = raw_call(
            s, 20, 6, {"topics": [{"name": "scale-extra"}], "timeout_ms": 60000}
        )
        delete_samples = by.take()
        result = h.decode_response(20, 6, raw)["responses"][0]
        if result["error_code"]:
            raise RuntimeError(f"DeleteTopics: {result}")
    return [
        f"CreatePartitions +{args.per_request}: request {grew * 1000:.0f} ms; bystander "
        f"{stall(grow_samples)}",
        f"DeleteTopics of {args.per_request + 1} partitions: request {deleted * 1000:.0f} ms; "
        f"bystander {stall(delete_samples)}",
    ]


def ready(http: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{http}/readyz", timeout=5) as resp:
            return bool(resp.status == 200)
    except (urllib.error.URLError, OSError):
        return False


def api_versions_ok(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1) as s:
            s.settimeout(30)
            s.sendall(h.request_frame(18, 0, 1, {}))
            recv_frame(s)
            return True
    except OSError:
        return False


def start(port: int, http: int, extra: list[str], log_path: Path) -> subprocess.Popen[bytes]:
    env, cwd = h.kgroupd_env(h.KGROUPD_SRC)
    argv = [*h.kgroupd_command(port)[:-2], "--http-port", str(http), *extra]
    with open(log_path, "ab") as logf:
        return subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=logf, stderr=subprocess.STDOUT, cwd=cwd, env=env
        )


def wait_served(proc: subprocess.Popen[bytes], port: int, http: int) -> tuple[float, float]:
    t0 = time.perf_counter()
    served = readied = 0.0
    while not (served and readied):
        if proc.poll() is not None:
            raise RuntimeError(f"kgroupd exited: {proc.returncode}")
        if not served and api_versions_ok(port):
            served = time.perf_counter() - t0
        if not readied and ready(http):
            readied = time.perf_counter() - t0
        if time.perf_counter() - t0 > 300:
            raise RuntimeError("not ready after 300 s")
        time.sleep(0.01)
    return served, readied


def restart_phase(
    proc: subprocess.Popen[bytes],
    port: int,
    http: int,
    extra: list[str],
    log_path: Path,
    args: argparse.Namespace,
) -> tuple[subprocess.Popen[bytes], list[str]]:
    proc.kill()
    proc.wait()
    proc = start(port, http, extra, log_path)
    served, readied = wait_served(proc, port, http)
    cpu = h.cpu_seconds(proc.pid)
    with socket.create_connection(("127.0.0.1", port)) as s:
        raw, _ = raw_call(s, 3, 12, METADATA_ALL)
        back = count_partitions(raw)
        ends = list_offsets(s, args.with_data, args.per_request)
    return proc, [
        f"restart after SIGKILL: ApiVersions answered after {served:.2f} s, /readyz ready after "
        f"{readied:.2f} s (broker CPU by then {cpu:.2f} s); partitions back {back}, "
        f"produced partitions at end offset 1: {ends}/{args.with_data}"
    ]


def list_offsets(s: socket.socket, partitions: int, per_topic: int) -> int:
    topics: dict[str, list[dict[str, Any]]] = {}
    for p in range(partitions):
        topics.setdefault(f"scale-{p // per_topic}", []).append(
            {"partition_index": p % per_topic, "current_leader_epoch": -1, "timestamp": -1}
        )
    body = {
        "replica_id": -1,
        "isolation_level": 0,
        "topics": [{"name": n, "partitions": parts} for n, parts in topics.items()],
    }
    raw, _ = raw_call(s, 2, 7, body)
    resp = h.decode_response(2, 7, raw)
    return sum(1 for t in resp["topics"] for p in t["partitions"] if p["offset"] == 1)


def run_mode(mode: str, args: argparse.Namespace) -> list[str]:
    port, http = h.free_port(), h.free_port()
    lines = [f"**{mode}**"]
    with tempfile.TemporaryDirectory(prefix="bench-scale-", dir=args.tmp) as tmp:
        seeded = args.seed_topics * args.seed_partitions if mode == "disk" else 0
        limit = args.partitions + seeded + args.per_request + 1000
        extra = ["--max-partitions", str(limit)]
        if args.retention_check_ms:
            extra += ["--log-retention-check-interval-ms", str(args.retention_check_ms)]
        if mode == "disk":
            extra += ["--data-dir", tmp]
            if args.seed_topics:
                seed_topics(Path(tmp), args)
        log_path = Path(tmp).parent / f"bench-scale-{port}.log"
        proc = start(port, http, extra, log_path)
        try:
            wait_served(proc, port, http)
            by = Bystander(port)
            by.start()
            phases = args.phases.split(",")
            try:
                lines += create_phase(port, by, args)
                if "metadata" in phases:
                    lines += metadata_phase(port, by, args)
                if "scrape" in phases:
                    lines += scrape_phase(http, by, args)
                if "grow" in phases:
                    lines += grow_delete_phase(port, by, args)
                if args.retention_check_ms and "retention" in phases:
                    lines += retention_phase(port, by, args)
                if mode == "disk" and args.seed_topics and "topics" in phases:
                    lines += topics_phase(port, by, args)
            finally:
                by.stop()
            if mode == "disk" and "restart" in phases:
                proc, more = restart_phase(proc, port, http, extra, log_path, args)
                lines += more
        finally:
            proc.terminate()
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        print("\n".join(lines), file=sys.stderr)
    return lines


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--partitions", type=int, default=100_000)
    ap.add_argument("--per-request", type=int, default=10_000)
    ap.add_argument("--with-data", type=int, default=1000, help="partitions given a batch")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--mode", default="memory,disk")
    ap.add_argument("--tmp", default=None, help="where the data dir goes (default: $TMPDIR)")
    ap.add_argument("--kgroupd-rev", metavar="REV")
    ap.add_argument(
        "--phases",
        default="metadata,scrape,grow,retention,topics,restart",
        help="which phases run after create (default: all)",
    )
    ap.add_argument(
        "--retention-check-ms",
        type=int,
        default=0,
        help="--log-retention-check-interval-ms for the broker (0: its default), and the "
        "retention phase",
    )
    ap.add_argument("--retention-passes", type=int, default=5)
    ap.add_argument(
        "--retention-deletes",
        type=int,
        default=0,
        help="retention phase: then passes deleting a segment in this many partitions",
    )
    ap.add_argument("--seed-topics", type=int, default=0, help="topics in topics.json (disk)")
    ap.add_argument("--seed-partitions", type=int, default=1)
    ap.add_argument(
        "--batch-topics", type=int, default=100, help="topics phase: one request creating these"
    )
    args = ap.parse_args()
    if args.kgroupd_rev:
        h.use_kgroupd_rev(args.kgroupd_rev)
    load = os.getloadavg()[0]
    revision = h.kgroupd_revision()  # before the runs (the tree may change meanwhile)
    lines = []
    for mode in args.mode.split(","):
        lines += run_mode(mode, args)
    print(f"\n{h.command_line()}")
    machine = h.machine().rsplit(", load avg", 1)[0]
    print(
        f"{h.stamp()} (the end); {machine}; load average {load:.2f} when it began, "
        f"{os.getloadavg()[0]:.2f} at the end; {revision}"
    )
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
