"""Machine instructions per OffsetCommit in process, counted by valgrind's callgrind.

    python bench/instructions.py [--partitions 8] [--requests 16000] [--kgroupd-rev REV ...]
                                 [--nodes N]

Wall and CPU time on this shared 2-core VM vary by 20-30% from run to run, which hides the
few percent a change to the hot path makes; an instruction count does not vary. A real
``KafkaServer`` (port 0, in memory) is driven through one ``KafkaConnection`` with
bench_groups' fake transport (as ``bench_groups.py --in-process``): pipelined OffsetCommit
v2 frames of one topic's ``--partitions`` partitions of a simple group, 16 to a read. Only
the timed loop is counted: it runs inside ``functools.reduce``, and callgrind collects only
while that C function is on the stack (``--toggle-collect=functools_reduce``). Each
``--kgroupd-rev`` counts a ``git archive`` of that revision too (its broker and its own
bench_groups.py, which must have ``commit_frame`` and ``_transport_class``: 2026-11-22 on).
``--nodes N`` (N > 1) serves simulated nodes and drives a ``NodeConnection`` of the group's
coordinator node instead (the working tree only): what routing costs a request that passes.
Needs ``valgrind`` (Debian package); a run takes about 1.5 minutes per tree.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import functools
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def child(tree: str, partitions: int, requests: int, nodes: int = 1) -> None:
    """In the measured process: import the broker of ``tree`` and run the loop."""
    sys.path[:0] = [tree, str(Path(tree) / "bench")]
    import bench_groups as bg

    from kgroupd.broker.config.logging import configure_logging
    from kgroupd.broker.config.settings import BrokerConfig, TopicSpec
    from kgroupd.broker.net.connection import KafkaConnection
    from kgroupd.broker.net.server import KafkaServer

    async def run() -> None:
        configure_logging("json", "warning")
        config = dataclasses.replace(
            BrokerConfig(),
            host="127.0.0.1",
            port=0,
            log_level="warning",
            create_topics=(TopicSpec("bench-commits", 64),),
        )
        if nodes > 1:
            config = dataclasses.replace(config, nodes=nodes)
        server = KafkaServer(config)
        await server.start()
        conn = KafkaConnection(server)
        placed = server.broker.nodes if nodes > 1 else None
        if placed is not None:  # the coordinator node's connection: the commits pass
            from kgroupd.broker.net.nodes import NodeConnection

            node = placed.coordinator(0, "inproc")
            advertised = placed.endpoints["PLAINTEXT"][placed.ids.index(node)]
            conn = NodeConnection(server, advertised, "PLAINTEXT", node, placed)
        transport = bg._transport_class()(conn)
        conn.connection_made(transport)
        frames = [bg.commit_frame("inproc", "bench-commits", partitions, k) for k in range(16)]
        blob = b"".join(frames)
        conn.data_received(blob)
        answers = transport.answers()
        if len(answers) != 16:
            raise SystemExit(f"expected 16 answers, got {len(answers)}")
        transport.keep = False
        for _ in range(100):  # warm: the first commits create the group and its dicts
            conn.data_received(blob)
        functools.reduce(lambda _acc, _i: conn.data_received(blob), range(requests // 16), None)

    asyncio.run(run())


def count(tree: Path, partitions: int, requests: int, nodes: int = 1) -> float:
    cmd = [
        "valgrind",
        "--tool=callgrind",
        "--callgrind-out-file=/dev/null",
        "--collect-atstart=no",
        "--toggle-collect=functools_reduce",
        sys.executable,
        __file__,
        "--child",
        str(tree),
        "--partitions",
        str(partitions),
        "--requests",
        str(requests),
        *(["--nodes", str(nodes)] if nodes > 1 else []),
    ]
    out = subprocess.run(cmd, capture_output=True, text=True, check=False, cwd=tree)
    found = re.search(r"Collected : ([\d,]+)", out.stderr)
    if out.returncode != 0 or found is None:
        raise SystemExit(f"callgrind run failed for {tree}:\n{out.stderr[-2000:]}")
    return int(found.group(1).replace(",", "")) / (requests // 16 * 16)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--partitions", type=int, default=8)
    ap.add_argument("--requests", type=int, default=16000)
    ap.add_argument("--kgroupd-rev", action="append", default=[], help="also count REV")
    ap.add_argument("--nodes", type=int, default=1, help="simulated nodes (working tree)")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args.child, args.partitions, args.requests, args.nodes)
        return
    if shutil.which("valgrind") is None:
        raise SystemExit("valgrind is not installed (Debian: apt-get install valgrind)")
    head = subprocess.run(
        ["git", "rev-parse", "--short=12", "HEAD"], capture_output=True, text=True, cwd=ROOT
    ).stdout.strip()
    dirty = subprocess.run(
        ["git", "status", "--porcelain"], capture_output=True, text=True, cwd=ROOT
    )
    print(f"# OffsetCommit v2, {args.partitions} partitions, {args.requests} requests in process")
    if args.nodes > 1:
        label = f"working tree, --nodes {args.nodes} (its coordinator's NodeConnection)"
        print(f"| {label} | {count(ROOT, args.partitions, args.requests, args.nodes):,.0f} |")
    print("| tree | instructions per request |\n|---|---|")
    label = f"working tree at {head}" + (" (+ uncommitted edits)" if dirty.stdout.strip() else "")
    print(f"| {label} | {count(ROOT, args.partitions, args.requests):,.0f} |", flush=True)
    for rev in args.kgroupd_rev:
        with tempfile.TemporaryDirectory(prefix="kgroupd-rev-") as tmp:
            archive = subprocess.run(
                ["git", "archive", rev], capture_output=True, check=True, cwd=ROOT
            ).stdout
            subprocess.run(["tar", "-x", "-C", tmp], input=archive, check=True)
            # the installed names, as links into the archive: the child puts the archive first
            # on sys.path, so ``kgroupd.broker`` is the revision's (not the installed tree's)
            (Path(tmp) / "kgroupd").mkdir()
            for name in ("broker", "protocol", "assignors"):
                (Path(tmp) / "kgroupd" / name).symlink_to(Path("..") / name)
            per = count(Path(tmp), args.partitions, args.requests)
            print(f"| {rev} | {per:,.0f} |", flush=True)


if __name__ == "__main__":
    main()
