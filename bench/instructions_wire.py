"""Machine instructions per request of each hot API, over the whole broker process and real
sockets, counted by valgrind's callgrind.

    python bench/instructions_wire.py [--requests 200] [--kgroupd-rev REV ...] [--apis A,B]
                                      [--tls]

The broker (default flags, in memory, metrics on) runs under ``valgrind --tool=callgrind``
from the working tree and from each ``--kgroupd-rev`` (a ``git archive``, as
``bench/_harness.py`` runs old revisions). For each API a blocking client on one connection
sets up what the API needs (a topic and its data, a group and its member), sends ``--warmup``
requests, then zeroes the broker's counters (``callgrind_control -z``), sends ``--requests``
requests one at a time (each answer read before the next request: one read, one dispatch,
one write per request, as a client waiting on its answer) and reads the counters back
(``callgrind_control -e``, every thread of the process). The broker's idle instructions (its
timers, over the same wall time: measured apart before the first API and after the last) are
taken off; what is left, divided by the requests, is the instructions per request: the
event loop, the socket reads and writes, framing, the header, dispatch, authorization,
metrics, the handler and the response, all of it.

Each API is sent at the highest version every tree compared serves (asked of each tree's
ApiVersions first, capped where a later version names topics by id), so the trees answer
the same bytes. Join+Sync counts one JoinGroup and one SyncGroup (a one-member classic group
rebalancing on each join); the 1 MiB batches get a tenth of ``--requests``. ``--tls`` starts
each broker with an SSL and a SASL_SSL listener beside PLAINTEXT (bench_security's test
certificate, TLS 1.3; on SASL_SSL SCRAM-SHA-512 done before counting) and counts every API on
the three, each with groups of its own: SSL / PLAINTEXT is what TLS alone costs, SASL_SSL /
PLAINTEXT adds what an authenticated SASL connection costs per request. Needs ``valgrind``
(Debian package); about 5 minutes per tree (three times with --tls).
"""

from __future__ import annotations

import argparse
import os
import re
import ssl
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _harness as h
from instructions_apis import APIS, CAPS, PARTITIONS, RUN, TOPIC, Api, Client, Endpoint

# ---------------------------------------------------------------------------------------
# brokers


def served(src: Path | None) -> dict[int, int]:
    """api key -> the highest version the tree serves (a broker started without valgrind)."""
    h.KGROUPD_SRC = src
    with h.BrokerProcess("kgroupd", command=lambda port: broker_command(src, port)) as b:
        answer = Client(b.port).call(18, 0, {})
    return {a["api_key"]: a["max_version"] for a in answer["api_keys"]}


def broker_command(src: Path | None, port: int) -> list[str]:
    command = h.kgroupd_command_for(src, port)
    if not command[0].endswith("python") and not command[0].startswith(sys.executable):
        command = [sys.executable, "-m", "kgroupd.broker", *command[1:]]
    return command


def callgrind_command(src: Path | None, port: int) -> list[str]:
    return [
        "valgrind",
        "--tool=callgrind",
        "--callgrind-out-file=/dev/null",
        "--vgdb=yes",
        *broker_command(src, port),
    ]


_THREAD = re.compile(r"^\s*Th\s+\d+\s+([\d,]+)", re.M)


def counters(pid: int) -> int:
    """The instructions of every thread of ``pid`` since the last zeroing."""
    if DRY:
        return 0
    out = subprocess.run(
        ["callgrind_control", "-e", str(pid)], capture_output=True, text=True, check=True
    ).stdout
    threads = [int(n.replace(",", "")) for n in _THREAD.findall(out)]
    if threads[1:] and sum(threads[1:]) > threads[0] / 100:
        print(f"  (threads: {threads})", file=sys.stderr)
    return sum(threads)


DRY = False  # --dry: no valgrind, nothing counted (to try the clients)


def zero(pid: int) -> None:
    if DRY:
        return
    subprocess.run(["callgrind_control", "-z", str(pid)], capture_output=True, check=True)


def idle_rate(pid: int, seconds: float) -> float:
    zero(pid)
    t0 = time.perf_counter()
    time.sleep(seconds)
    n = counters(pid)
    return n / (time.perf_counter() - t0)


def settle(pid: int, seconds: float, quiet: float = 1e6, most: float = 600) -> float:
    """Wait out the work after start-up (a thread importing what the broker loads lazily: tens
    of millions of instructions a second under valgrind, for a minute) until the idle rate
    is below ``quiet`` a second; that rate."""
    deadline = time.monotonic() + most
    while True:
        rate = idle_rate(pid, seconds)
        if rate < quiet or DRY or time.monotonic() > deadline:
            return rate
        print(f"  settling: {rate:,.0f} instructions/s", file=sys.stderr)


def count_tree(
    src: Path | None, versions: dict[int, int], apis: list[Api], args: argparse.Namespace
) -> dict[tuple[str, str], float | None]:
    """Instructions per request of each API, on each listener counted (PLAINTEXT; and SSL
    and SASL_SSL with ``--tls``), of the tree at ``src`` (None: the working tree)."""
    h.KGROUPD_SRC = src
    command = broker_command if args.dry else callgrind_command
    tls: tuple[Path, int, ssl.SSLContext, int] | None = None
    if args.tls:
        from bench_security import PASSWORD, USER, certificates

        certs = certificates()
        users = h.CACHE.parent / "bench-certs" / "users.txt"
        users.write_text(f"{USER}:{PASSWORD}\n")
        context = ssl.create_default_context(cafile=str(certs.ca))
        tls = (users, h.free_port(), context, h.free_port())

        def listeners(port: int) -> list[str]:
            assert tls is not None
            base = command(src, port)
            base = base[: base.index("--host")] + base[base.index("--port") + 2 :]
            return [
                *base,
                "--listeners",
                f"PLAINTEXT://127.0.0.1:{port},SSL://127.0.0.1:{tls[3]},"
                f"SASL_SSL://127.0.0.1:{tls[1]}",
                "--ssl-certfile",
                str(certs.server_cert),
                "--ssl-keyfile",
                str(certs.server_key),
                "--sasl-users",
                str(tls[0]),
            ]

        broker = h.BrokerProcess("kgroupd", command=listeners)
    else:
        broker = h.BrokerProcess("kgroupd", command=lambda port: command(src, port))
    broker.start(timeout=600)
    endpoints = [Endpoint("PLAINTEXT", broker.port)]
    if tls is not None:
        endpoints.append(Endpoint("SSL", tls[3], tls[2]))
        endpoints.append(Endpoint("SASL_SSL", tls[1], tls[2]))
    out: dict[tuple[str, str], float | None] = {}
    try:
        admin = Client(broker.port)
        admin.call(
            19,
            1,
            {
                "topics": [{"name": TOPIC, "num_partitions": PARTITIONS, "replication_factor": 1}],
                "timeout_ms": 30000,
            },
        )
        idle_before = settle(broker.pid, args.idle_seconds)
        runs: list[tuple[tuple[str, str], int, float, int]] = []
        for api in apis:
            for ep in endpoints:
                if any(k not in versions for k in api.keys):
                    out[api.name, ep.name] = None
                    continue
                RUN[0] = "" if ep.name == "PLAINTEXT" else f"-{ep.name}"
                client = Client(ep)
                step = api.setup(client, versions)
                for _ in range(max(2, round(args.warmup * api.share))):
                    step()
                requests = max(5, round(args.requests * api.share))
                zero(broker.pid)
                t0 = time.perf_counter()
                for _ in range(requests):
                    step()
                elapsed = time.perf_counter() - t0
                runs.append(((api.name, ep.name), counters(broker.pid), elapsed, requests))
                client.close()
                print(
                    f"  {api.name} on {ep.name}: {runs[-1][1]:,} instructions in {elapsed:.1f} s",
                    file=sys.stderr,
                )
        idle_after = idle_rate(broker.pid, args.idle_seconds)
        idle = (idle_before + idle_after) / 2
        print(f"  idle: {idle_before:,.0f} / {idle_after:,.0f} instructions/s", file=sys.stderr)
        for key, total, elapsed, requests in runs:
            out[key] = (total - idle * elapsed) / requests
        admin.close()
    finally:
        broker.stop(timeout=60)
        broker.cleanup_log()
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--requests", type=int, default=200, help="counted requests per API")
    ap.add_argument("--warmup", type=int, default=30, help="uncounted requests per API first")
    ap.add_argument("--idle-seconds", type=float, default=5.0)
    ap.add_argument("--kgroupd-rev", action="append", default=[], help="also count REV")
    ap.add_argument("--apis", help="comma-separated prefixes of the APIs to count (default all)")
    ap.add_argument(
        "--tls",
        action="store_true",
        help="also count each API over an SSL and a SASL_SSL listener (TLS 1.3, SCRAM-SHA-512) "
        "of the same broker",
    )
    ap.add_argument("--dry", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    global DRY
    DRY = args.dry
    apis = APIS
    if args.apis:
        wanted = [w.strip().lower() for w in args.apis.split(",")]
        apis = [a for a in APIS if any(a.name.lower().startswith(w) for w in wanted)]
    load0 = os.getloadavg()[0]
    print(f"# {h.command_line()}\n{h.stamp()}; {h.machine()}", flush=True)
    trees: list[tuple[str, Path | None]] = [(h.kgroupd_revision(), None)]
    for rev in args.kgroupd_rev:
        sha, rev_src = h.kgroupd_rev_src(rev)
        trees.append((f"{rev} ({sha})", rev_src))
    tables = [served(src) for _, src in trees]
    # the same version for every tree that serves the API (its own for a tree alone)
    common = {
        key: min([CAPS[key]] + [t[key] for t in tables if key in t])
        for key in CAPS
        if any(key in t for t in tables)
    }
    results = []
    for (label, src), table in zip(trees, tables, strict=True):
        versions = {key: version for key, version in common.items() if key in table}
        print(f"counting {label}", file=sys.stderr)
        results.append(count_tree(src, versions, apis, args))
    listeners = ["PLAINTEXT", "SSL", "SASL_SSL"] if args.tls else ["PLAINTEXT"]
    columns = [(label, name) for label, _ in trees for name in listeners]
    head = ["API (version)"]
    head += [f"{label} {name}" if args.tls else label for label, name in columns]
    if args.tls:
        head += [
            f"{label.split(' ')[0]}: {name} / PLAINTEXT"
            for label, _ in trees
            for name in ("SSL", "SASL_SSL")
        ]
    head += [f"this tree / {label.split(' ')[0]}" for label, _ in trees[1:]]
    print(
        f"\ninstructions per request, {args.requests} requests each after {args.warmup} "
        "(a tenth of both for the 1 MiB batches)"
    )
    print("\n| " + " | ".join(head) + " |\n|" + "---|" * len(head))

    def ratio(a: float | None, b: float | None) -> str:
        return "n/a" if a is None or not b else f"{a / b:.2f}x"

    for api in apis:
        shown = "/".join(f"v{common[k]}" for k in api.keys[: api.shown] if k in common)
        row = [f"{api.name} ({shown})"]
        values = {
            (label, name): result.get((api.name, name))
            for (label, _), result in zip(trees, results, strict=True)
            for name in listeners
        }
        row += ["n/a" if values[c] is None else f"{values[c]:,.0f}" for c in columns]
        if args.tls:
            row += [
                ratio(values[label, name], values[label, "PLAINTEXT"])
                for label, _ in trees
                for name in ("SSL", "SASL_SSL")
            ]
        first = trees[0][0]
        row += [
            ratio(values[first, "PLAINTEXT"], values[label, "PLAINTEXT"]) for label, _ in trees[1:]
        ]
        print("| " + " | ".join(row) + " |")
    print(f"\n{h.stamp()}: load avg {load0:.2f} at start, {os.getloadavg()[0]:.2f} at the end")
    return 0


if __name__ == "__main__":
    sys.exit(main())
