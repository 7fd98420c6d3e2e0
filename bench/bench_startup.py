"""Start-up time to the first accepted connection against a bare asyncio server, the time of
``kgroupd --version`` and ``--help`` against the bare interpreter, and idle RSS before and
after a produce run.

    python bench/bench_startup.py [--broker kgroupd|tansu|both] [--runs 20]
                                  [--kgroupd-rev REV] [--compare-rev c966aaf] [--no-rss]

Start-up: spawn a server on a free loopback port and poll-connect every millisecond until the
connection is accepted (the clock starts just before the spawn); then send one ApiVersions
v0 and time its answer too. Median (and min/max) of ``--runs`` spawns of each, interleaved
(the order reversed every other round), after one untimed spawn of each. The servers:

- ``asyncio server``: ``bench/_bare_server.py``, a bare ``asyncio.start_server`` script (the
  interpreter, asyncio and one listener), spawned as kgroupd is (same interpreter,
  environment and bytecode cache). Target (issue 24): kgroupd within 2x of it.
- ``kgroupd``: the working tree as users start it, the ``kgroupd`` console script (or
  ``--kgroupd-rev``'s tree), with default flags but the address (``--host 127.0.0.1 --port
  P``): in memory, logging at info, HTTP on 8080 (or a free port when 8080 is taken).
- ``kgroupd, no bytecode cache``: the same compiling ``broker/`` and ``protocol/`` at every
  start (``PYTHONDONTWRITEBYTECODE=1``), as this repository's dev setup starts it.
- ``kgroupd @ REV`` for each ``--compare-rev``: a ``git archive`` of that commit, started
  as it was then (``python -m broker`` before the one import name), same flags.
- ``tansu`` (``--broker tansu|both``): its static binary.

Commands: ``kgroupd --version`` and ``kgroupd --help`` (the console script), spawn to exit,
against ``python -c pass`` with the same interpreter and environment; ``--runs`` of each,
interleaved. Target (issue 24): under 1.5x ``python -c pass``.

RSS (VmRSS from /proc/<pid>/status; skipped with ``--no-rss``): one more broker of each kind,
1 s after start-up (idle); then after producing ``--produce-mib`` MiB of 16 KiB batches over
4 connections (the data stays in memory: both brokers use memory storage) and 1 s of idle;
then after deleting the topic.
"""

from __future__ import annotations

import argparse
import os
import socket
import struct
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _harness as h
import bench_throughput as bt

_SIZE = struct.Struct(">i")
BARE = "asyncio server"
KGROUPD = "kgroupd"
NO_CACHE = "kgroupd, no bytecode cache"
BARE_SCRIPT = Path(__file__).resolve().parent / "_bare_server.py"


@dataclass
class Server:
    """One kind of server to start: its argv for a port, and its environment."""

    label: str
    argv: Callable[[int], list[str]]
    env: dict[str, str] | None
    cwd: Path


def servers(kinds: list[str], compare: list[str]) -> list[Server]:
    env, cwd = h.kgroupd_env(None)
    found = [Server(BARE, lambda port: [sys.executable, str(BARE_SCRIPT), str(port)], env, cwd)]
    if "kgroupd" in kinds:

        def default_flags(src: Path | None) -> Callable[[int], list[str]]:
            return lambda port: h.kgroupd_command_for(src, port, quiet=False, free_http_port=False)

        src = h.KGROUPD_SRC  # the working tree, or --kgroupd-rev's
        found.append(Server(KGROUPD, default_flags(src), *h.kgroupd_env(src)))
        found.append(Server(NO_CACHE, default_flags(src), *h.kgroupd_env(src, bytecode=False)))
        for rev in compare:
            sha, rev_src = h.kgroupd_rev_src(rev)
            label = f"kgroupd @ {sha[:7]}"
            found.append(Server(label, default_flags(rev_src), *h.kgroupd_env(rev_src)))
    if "tansu" in kinds:
        found.append(Server("tansu", h.tansu_command, None, h.ROOT))
    return found


def cpu_seconds(pid: int) -> float:
    """CPU time of every thread of ``pid`` so far, in ns precision (Linux schedstat): unlike
    wall time, hardly moved by the other processes of a loaded machine."""
    total = 0
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{task}/schedstat") as f:
                total += int(f.read().split()[0])
        except OSError:
            pass  # a thread that just ended
    return total / 1e9


def time_start(server: Server) -> tuple[float, float, float]:
    """Seconds from spawn to the first accepted connection, to the first answer, and the
    server's CPU seconds at the first accepted connection."""
    port = h.free_port()
    b = h.BrokerProcess(server.label, port=port)
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        server.argv(port),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        cwd=server.cwd,
        env=server.env,
    )
    b.proc = proc
    try:
        deadline = t0 + 20
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"{server.label} exited with {proc.returncode} at start-up")
            if time.perf_counter() > deadline:
                raise RuntimeError(f"{server.label} did not accept within 20 s")
            try:
                sock = socket.create_connection(("127.0.0.1", port), timeout=5)
            except OSError:
                time.sleep(0.001)
                continue
            accepted = time.perf_counter() - t0
            cpu = cpu_seconds(proc.pid)
            break
        with sock:
            sock.sendall(h.request_frame(18, 0, 1, {}))
            (size,) = _SIZE.unpack(_recv(sock, 4))
            _recv(sock, size)
            answered = time.perf_counter() - t0
        return accepted, answered, cpu
    finally:
        b.stop()


def _recv(sock: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("closed")
        buf += chunk
    return bytes(buf)


def commands() -> list[tuple[str, list[str]]]:
    script = Path(sys.executable).parent / "kgroupd"
    kgroupd = [str(script)] if script.exists() else [sys.executable, "-m", "kgroupd.broker"]
    return [
        ("python -c pass", [sys.executable, "-c", "pass"]),
        ("kgroupd --version", [*kgroupd, "--version"]),
        ("kgroupd --help", [*kgroupd, "--help"]),
    ]


def time_command(argv: list[str]) -> float:
    env, cwd = h.kgroupd_env(None)
    t0 = time.perf_counter()
    subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, cwd=cwd)
    return time.perf_counter() - t0


async def produce(b: h.BrokerProcess, topic: str, mib: int) -> float:
    batch, _rpb = bt.build_batch(16 * 1024)
    conns = 4
    per_conn = max(1, mib * 1024 * 1024 // conns // len(batch))
    frames = [bt.produce_frames(topic, c, batch, 16) for c in range(conns)]
    await bt.run_phase(b, frames, per_conn, 8)
    return conns * per_conn * len(batch) / 1024 / 1024


def rss_run(kind: str, mib: int) -> tuple[float, float, float, float]:
    with h.BrokerProcess(kind) as b:
        time.sleep(1.0)
        idle = b.rss_mib()
        h.create_topic(b.port, "rss", 4)
        h.wait_topic_ready(b.port, "rss", 4)
        stored = h.uvloop_run(produce(b, "rss", mib))
        time.sleep(1.0)
        after = b.rss_mib()
        h.delete_topic(b.port, "rss")
        time.sleep(1.0)
        deleted = b.rss_mib()
    return idle, stored, after, deleted


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.0f} ms"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    h.add_common_args(ap)
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument(
        "--compare-rev",
        metavar="REV",
        action="append",
        default=[],
        help="also start kgroupd from this git revision in the same rounds (repeatable)",
    )
    ap.add_argument("--produce-mib", type=int, default=256)
    ap.add_argument("--no-rss", dest="rss", action="store_false", help="skip the RSS part")
    args = ap.parse_args()
    h.apply_common_args(args)
    kinds = h.kinds_for(args.broker)
    machine = h.machine()
    variants = servers(kinds, args.compare_rev)
    cli = commands()
    for server in variants:  # fills the caches: download, bytecode, pages
        time_start(server)
    for _label, argv in cli:
        time_command(argv)
    starts: dict[str, list[tuple[float, float, float]]] = {v.label: [] for v in variants}
    runs: dict[str, list[float]] = {label: [] for label, _ in cli}
    for i in range(args.runs):
        for server in variants if i % 2 == 0 else variants[::-1]:
            acc, ans, cpu = time_start(server)
            starts[server.label].append((acc, ans, cpu))
            print(
                f"  {server.label:28} accept {ms(acc)} (CPU {ms(cpu)}), answer {ms(ans)}",
                file=sys.stderr,
            )
        for label, argv in cli if i % 2 == 0 else cli[::-1]:
            runs[label].append(time_command(argv))
    rss = {k: rss_run(k, args.produce_mib) for k in kinds} if args.rss else {}

    print(f"\n{h.command_line()}")
    print(f"{h.stamp()}; {machine}, {os.getloadavg()[0]:.2f} at the end; {h.kgroupd_revision()}")
    print(f"\n{args.runs} starts of each, interleaved")
    print(
        "\n| server | first accept: median (min-max) | x asyncio server | first answer: "
        "median | its CPU at the first accept: median | x asyncio server |"
    )
    print("|---|---|---|---|---|---|")
    accept = {label: h.median([a for a, _, _ in v]) for label, v in starts.items()}
    answer = {label: h.median([b for _, b, _ in v]) for label, v in starts.items()}
    cpu = {label: h.median([c for _, _, c in v]) for label, v in starts.items()}
    for label, got in starts.items():
        acc = [a for a, _, _ in got]
        print(
            f"| {label} | {ms(accept[label])} ({ms(min(acc))}-{ms(max(acc))}) | "
            f"{h.ratio(accept[label], accept[BARE])} | {ms(answer[label])} | {ms(cpu[label])} | "
            f"{h.ratio(cpu[label], cpu[BARE])} |"
        )
    print("\n| command | median (min-max) | x python -c pass |")
    print("|---|---|---|")
    base = h.median(runs["python -c pass"])
    for label, times in runs.items():
        med = h.median(times)
        print(
            f"| `{label}` | {ms(med)} ({ms(min(times))}-{ms(max(times))}) | {h.ratio(med, base)} |"
        )
    if rss:
        print(
            "\n| broker | RSS idle after start-up | RSS after produce (MiB stored) | after delete |"
        )
        print("|---|---|---|---|")
        for kind, (idle, stored, after, deleted) in rss.items():
            print(
                f"| {kind} | {idle:.1f} MiB | {after:.1f} MiB ({stored:.0f} MiB) | "
                f"{deleted:.1f} MiB |"
            )
    if KGROUPD in accept:
        k = accept[KGROUPD]
        print(
            f"\nkgroupd start-up {ms(k)}: {h.ratio(k, accept[BARE])}x the asyncio server "
            f"(target 2x: {'met' if k <= 2 * accept[BARE] else 'MISSED'}); first answer "
            f"{h.ratio(answer[KGROUPD], answer[BARE])}x; CPU to the first accept "
            f"{h.ratio(cpu[KGROUPD], cpu[BARE])}x"
        )
        for label in accept:
            if label.startswith("kgroupd @"):
                rev = label.removeprefix("kgroupd @ ")
                print(f"{label}: {ms(accept[label])}; kgroupd/{rev} {h.ratio(k, accept[label])}")
    for label in ("kgroupd --version", "kgroupd --help"):
        med = h.median(runs[label])
        verdict = "met" if med <= 1.5 * base else "MISSED"
        print(f"{label}: {h.ratio(med, base)}x python -c pass (target 1.5x: {verdict})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
