"""kgroupd's produce and fetch request path in-process, without sockets: µs per request.

    python bench/profile_hotpath.py [produce-16KiB|produce-1MiB|fetch-16KiB|fetch-1MiB|all]
                                    [--py-spy OUT.txt]

A real ``KafkaServer`` is started (port 0) and one ``KafkaConnection`` is driven directly
through its ``asyncio.Protocol`` callbacks with a fake transport that only counts bytes, fed
the same pre-encoded frames as ``bench_throughput.py`` in 256 KiB reads (what uvloop hands
``data_received``). What is left is the broker's own CPU per request: framing, decode,
handler, encode. Fetch reads back what the produce part stored, 64 x 16 KiB or 1 x 1 MiB per
request, as in the throughput benchmark.

``--py-spy OUT.txt`` (``pip install py-spy``) samples only the timed part and prints the
share of each stage of the request path (grouped by the functions on the stack) and the
hottest lines. Figures and findings: BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _harness as h
import bench_throughput as bt

READ = 256 * 1024

# (label, a function name on the stack); the first match wins, so handler details come
# before the handler itself.
STAGES = [
    ("frame split (FrameDecoder.feed)", "FrameDecoder.feed"),
    ("request header", "parse_request_header"),
    ("request decode (generic struct codec)", "MessageSpec.decode_request"),
    ("response encode (generic struct codec)", "MessageSpec.encode_response"),
    ("response framing (framing.encode_response)", "encode_response (protocol/framing"),
    ("produce: batch header checks", "split_batches"),
    ("produce: CRC-32C", "check_crc"),
    ("produce: log append", "PartitionLog.append"),
    ("produce handler, the rest", "handle_produce"),
    ("fetch: log read", "PartitionLog.read"),
    ("fetch handler, the rest", "handle_fetch"),
    ("transport write", "FakeTransport.write"),
]


class FakeTransport:
    def __init__(self, protocol: Any) -> None:
        self.protocol = protocol
        self.bytes_out = 0
        self.closed = False

    def write(self, data: bytes) -> None:
        self.bytes_out += len(data)

    def writelines(self, parts: Any) -> None:
        for p in parts:
            self.bytes_out += len(p)

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return ("127.0.0.1", 1) if name == "peername" else default

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.protocol.connection_lost(None)

    abort = close

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        pass

    def get_write_buffer_size(self) -> int:
        return 0


def feed(conn: Any, frames: list[bytes], count: int) -> None:
    n = len(frames)
    for i in range(count):
        frame = frames[i % n]
        for pos in range(0, len(frame), READ):
            conn.data_received(frame[pos : pos + READ])


async def case(name: str, requests: int, spy: str | None) -> None:
    from kgroupd.broker.config.settings import BrokerConfig
    from kgroupd.broker.net.connection import KafkaConnection
    from kgroupd.broker.net.server import KafkaServer

    phase, size = name.split("-")
    target = 16 * 1024 if size == "16KiB" else 1024 * 1024
    batch, rpb = bt.build_batch(target)
    config = dataclasses.replace(BrokerConfig(), host="127.0.0.1", port=0, log_level="warning")
    server = KafkaServer(config)
    await server.start()
    try:
        conn = KafkaConnection(server)
        transport = FakeTransport(conn)
        conn.connection_made(transport)  # type: ignore[arg-type]
        topic = f"hot-{name}"
        create = h.request_frame(
            19,
            1,
            1,
            {
                "topics": [{"name": topic, "num_partitions": 1, "replication_factor": 1}],
                "timeout_ms": 1000,
            },
        )
        conn.data_received(create)
        produce = bt.produce_frames(topic, 0, batch, 16)
        if phase == "fetch":
            feed(conn, produce, requests)
            wl = bt.Workload(size, target, requests, 64 if size == "16KiB" else 1)
            frames = bt.fetch_frames("kgroupd", topic, 0, rpb, len(batch), wl)
            count = len(frames)
        else:
            feed(conn, produce, min(requests, 50))  # warm-up
            frames, count = produce, requests
        profiler = start_py_spy(spy)
        out0 = transport.bytes_out
        t0 = time.perf_counter()
        feed(conn, frames, count)
        elapsed = time.perf_counter() - t0
        stop_py_spy(profiler)
        moved = count * len(frames[0]) if phase == "produce" else transport.bytes_out - out0
        print(
            f"{name:14} {elapsed / count * 1e6:9.1f} µs/request  "
            f"{moved / elapsed / h.MB:7.0f} MB/s on one core  ({count} requests)"
        )
        if spy:
            summarize(spy)
    finally:
        await server.stop()


def start_py_spy(out: str | None) -> subprocess.Popen[bytes] | None:
    if out is None:
        return None
    exe = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    proc = subprocess.Popen(
        [exe, "record", "-p", str(os.getpid()), "-r", "400", "-f", "raw", "-o", out],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    time.sleep(1.0)  # py-spy attaches
    return proc


def stop_py_spy(proc: subprocess.Popen[bytes] | None) -> None:
    if proc is not None:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=30)


def summarize(path: str) -> None:
    """Share of each stage among samples inside data_received, then the hottest lines."""
    stages: collections.Counter[str] = collections.Counter()
    lines: collections.Counter[str] = collections.Counter()
    total = 0
    with open(path) as f:
        for raw in f:
            stack, _, n = raw.rstrip().rpartition(" ")
            if "data_received" not in stack or not n.isdigit():
                continue
            frames = stack.split(";")
            total += int(n)
            for label, marker in STAGES:
                if any(marker in fr for fr in frames):
                    stages[label] += int(n)
                    break
            else:
                stages["connection bookkeeping, the rest"] += int(n)
            lines[frames[-1]] += int(n)
    if not total:
        print("  (no samples)")
        return
    for label, n in stages.most_common():
        print(f"  {n / total:6.1%}  {label}")
    print("  hottest lines (self):")
    for line, n in lines.most_common(8):
        print(f"  {n / total:6.1%}  {line}")


async def main_async(args: argparse.Namespace) -> None:
    cases = ["produce-16KiB", "produce-1MiB", "fetch-16KiB", "fetch-1MiB"]
    for name in cases if args.case == "all" else [args.case]:
        requests = args.requests or (20000 if name.endswith("16KiB") else 400)
        await case(name, requests, args.py_spy)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument(
        "case",
        nargs="?",
        default="all",
        choices=["all", "produce-16KiB", "produce-1MiB", "fetch-16KiB", "fetch-1MiB"],
    )
    ap.add_argument("--requests", type=int, default=0, help="produce requests per case")
    ap.add_argument("--py-spy", metavar="OUT.txt", help="profile the timed part with py-spy")
    ap.add_argument("--kgroupd-rev", metavar="REV", help="profile this git revision's code")
    args = ap.parse_args()
    if args.kgroupd_rev and not os.environ.get(h.SRC_ENV):
        h.use_kgroupd_rev(args.kgroupd_rev)
        env = {**os.environ, h.SRC_ENV: str(h.KGROUPD_SRC)}
        os.execve(sys.executable, [sys.executable, *sys.argv], env)
    from kgroupd.broker.config.logging import configure_logging

    configure_logging("json", "warning")  # no connection open/close lines
    print(f"# {h.kgroupd_revision()}; load avg {os.getloadavg()[0]:.2f}")
    h.uvloop_run(main_async(args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
