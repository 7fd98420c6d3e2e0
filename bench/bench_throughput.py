"""Produce and fetch MB/s with pre-encoded batches over loopback, kgroupd against Tansu.

    python bench/bench_throughput.py [--broker kgroupd|tansu|both|null] [--rounds 5]

Records are 1 KiB values (no key); a batch holds as many as fit in 16 KiB or in 1 MiB
(15 records = 15,556 bytes; 1,014 records = 1,048,473 bytes, under Kafka's default
message.max.bytes). Every ProduceRequest v7 (acks=1) is encoded once before the clock starts;
``--connections`` raw asyncio connections (uvloop, ``asyncio.Protocol``) each produce to their
own partition of a fresh topic, keeping ``--window`` requests in flight and sending the next
as each response arrives. The fetch phase then reads that round's data back with pre-encoded
FetchRequest v11s (sessionless, one request per ~1 MiB: 64 batches of 16 KiB or one of 1 MiB),
again pipelined, ``--fetch-passes`` times over (default once). MB/s counts record-batch bytes
(10**6 bytes per second); every round is checked (last produce offsets, high watermarks,
fetched bytes) so a broker that drops or rejects data cannot look fast.

Rounds alternate which broker goes first; the figure is the median of the rounds, and the
ratio is kgroupd / Tansu. ``--broker null`` runs the same client against a trivial Python
server that answers from memory: the client's own ceiling on this machine.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import struct
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _harness as h
from aiokafka.record.default_records import DefaultRecordBatchBuilder

RECORD_VALUE = 1024
TIMESTAMP = 1_700_000_000_000
_SIZE = struct.Struct(">i")
_HDR = struct.Struct(">ihh")  # size, api key, api version (the null server's peek)


@dataclass(frozen=True)
class Workload:
    name: str
    batch_target: int  # the batch holds as many 1 KiB records as fit in this many bytes
    requests: int  # produce requests per connection and round
    fetch_batches: int  # batches per fetch request


def build_batch(target: int) -> tuple[bytes, int]:
    """A magic-2 batch of 1 KiB records no larger than ``target``: (bytes, record count)."""
    value = bytes(range(256)) * (RECORD_VALUE // 256)

    def builder(count: int) -> DefaultRecordBatchBuilder:
        b = DefaultRecordBatchBuilder(2, 0, 0, -1, -1, -1, 2**31 - 1)
        for i in range(count):
            b.append(i, TIMESTAMP, None, value, [])
        return b

    probe = builder(0)
    n = 0
    while True:
        probe.append(n, TIMESTAMP, None, value, [])
        if probe.size() > target:
            break
        n += 1
    batch = bytes(builder(n).build())
    assert len(batch) <= target
    return batch, n


def produce_frames(topic: str, partition: int, batch: bytes, distinct: int) -> list[bytes]:
    """``distinct`` copies with their own correlation ids, sent round-robin."""
    return [
        h.request_frame(
            0,
            7,
            corr,
            {
                "transactional_id": None,
                "acks": 1,
                "timeout_ms": 30000,
                "topic_data": [
                    {"name": topic, "partition_data": [{"index": partition, "records": batch}]}
                ],
            },
        )
        for corr in range(distinct)
    ]


def fetch_frames(
    kind: str, topic: str, partition: int, records_per_batch: int, batch_len: int, wl: Workload
) -> list[bytes]:
    """Fetches of ``wl.fetch_batches`` whole batches each, at offsets known in advance.

    The limits differ per broker so each returns exactly those batches: kgroupd (like Kafka)
    returns whole batches up to the partition max_bytes; Tansu 0.6 ignores the partition
    limit and adds batches while the response is under the request max_bytes.
    """
    frames = []
    step = wl.fetch_batches
    for corr, first in enumerate(range(0, wl.requests, step)):
        batches = min(step, wl.requests - first)
        request_max = (batches - 1) * batch_len + 1 if kind == "tansu" else 52428800
        frames.append(
            h.request_frame(
                1,
                11,
                corr,
                {
                    "replica_id": -1,
                    "max_wait_ms": 500,
                    "min_bytes": 1,
                    "max_bytes": request_max,
                    "isolation_level": 0,
                    "session_id": 0,
                    "session_epoch": -1,
                    "topics": [
                        {
                            "topic": topic,
                            "partitions": [
                                {
                                    "partition": partition,
                                    "current_leader_epoch": -1,
                                    "fetch_offset": first * records_per_batch,
                                    "log_start_offset": -1,
                                    "partition_max_bytes": batches * batch_len,
                                }
                            ],
                        }
                    ],
                    "forgotten_topics_data": [],
                    "rack_id": "",
                },
            )
        )
    return frames


class Pipeline(asyncio.Protocol):
    """Sends ``count`` frames (cycling through ``frames``) with ``window`` in flight.

    Responses are only framed and counted; the first and last are kept for the checks.
    """

    def __init__(self, frames: list[bytes], count: int, window: int) -> None:
        self.frames = frames
        self.count = count
        self.window = window
        self.sent = 0
        self.received = 0
        self.bytes_in = 0
        self.need = -1
        self.size = 0
        self.head = bytearray()
        self.body = bytearray()
        self.keep = False
        self.kept: dict[str, bytes] = {}
        self.transport: asyncio.Transport | None = None
        self.done: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.done.done():
            self.done.set_exception(ConnectionError(f"connection lost: {exc}"))

    def go(self) -> None:
        assert self.transport is not None
        frames = self.frames
        n = len(frames)
        while self.sent < min(self.window, self.count):
            self.transport.write(frames[self.sent % n])
            self.sent += 1

    def data_received(self, data: bytes) -> None:
        pos = 0
        end = len(data)
        frames = self.frames
        n = len(frames)
        write = self.transport.write  # type: ignore[union-attr]
        while pos < end:
            if self.need < 0:
                take = min(4 - len(self.head), end - pos)
                self.head += data[pos : pos + take]
                pos += take
                if len(self.head) == 4:
                    (self.size,) = _SIZE.unpack(self.head)
                    self.need = self.size
                    self.head.clear()
                    self.keep = self.received == 0 or self.received == self.count - 1
                continue
            take = min(self.need, end - pos)
            if self.keep:
                self.body += data[pos : pos + take]
            pos += take
            self.need -= take
            if self.need:
                continue
            self.need = -1
            self.bytes_in += self.size
            if self.keep:
                self.kept["last" if self.received else "first"] = bytes(self.body)
                if self.received == 0 and self.count == 1:
                    self.kept["last"] = self.kept["first"]
                self.body.clear()
            self.received += 1
            if self.sent < self.count:
                write(frames[self.sent % n])
                self.sent += 1
            elif self.received == self.count and not self.done.done():
                self.done.set_result(None)


class Target(Protocol):
    """A broker to drive: its Kafka port and its process id (for its CPU time)."""

    @property
    def port(self) -> int: ...

    @property
    def pid(self) -> int: ...


@dataclass
class Phase:
    elapsed: float
    pipes: list[Pipeline]
    broker_cpu: float  # share of one core the broker used over the phase
    client_cpu: float


async def run_phase(
    broker: Target,
    per_conn: list[list[bytes]],
    count: int,
    window: int,
    timeout: float | None = 120,
) -> Phase:
    port = broker.port
    loop = asyncio.get_running_loop()
    pipes: list[Pipeline] = []
    for frames in per_conn:
        _, pipe = await loop.create_connection(
            lambda frames=frames: Pipeline(frames, count, window), "127.0.0.1", port
        )
        pipes.append(pipe)
    b0 = h.cpu_seconds(broker.pid)
    c0 = time.process_time()
    t0 = time.perf_counter()
    for p in pipes:
        p.go()
    await asyncio.wait_for(asyncio.gather(*(p.done for p in pipes)), timeout)
    elapsed = time.perf_counter() - t0
    client = time.process_time() - c0
    busy = h.cpu_seconds(broker.pid) - b0
    for p in pipes:
        assert p.transport is not None
        p.transport.close()
    return Phase(elapsed, pipes, busy / elapsed, client / elapsed)


@dataclass
class RoundResult:
    produce_mbs: float
    fetch_mbs: float
    produce: Phase
    fetch: Phase


@dataclass
class Results:
    rounds: dict[tuple[str, str], list[RoundResult]] = field(default_factory=dict)
    rss: dict[str, float] = field(default_factory=dict)


def check_produce(kind: str, pipes: list[Pipeline], wl: Workload, rpb: int) -> None:
    if kind == "null":
        return
    for p in pipes:
        resp = h.decode_response(0, 7, p.kept["last"])
        part = resp["responses"][0]["partition_responses"][0]
        code, base = part["error_code"], part["base_offset"]
        want = (wl.requests - 1) * rpb
        if code != 0 or base != want:
            raise RuntimeError(
                f"{kind}: last produce answered error {code} offset {base} != {want}"
            )


def check_fetch(
    kind: str, pipes: list[Pipeline], wl: Workload, rpb: int, batch: int, passes: int = 1
) -> None:
    if kind == "null":
        return
    produced = wl.requests * batch * passes
    for p in pipes:
        resp = h.decode_response(1, 11, p.kept["last"])
        part = resp["responses"][0]["partitions"][0]
        code, hw, records = part["error_code"], part["high_watermark"], part["records"]
        if code != 0 or hw != wl.requests * rpb:
            raise RuntimeError(f"{kind}: fetch error {code}, high watermark {hw}")
        last_batches = wl.requests - (wl.requests - 1) // wl.fetch_batches * wl.fetch_batches
        if len(records) != last_batches * batch:
            raise RuntimeError(
                f"{kind}: last fetch returned {len(records)} bytes, expected {last_batches * batch}"
            )
        # Response framing adds ~100 bytes per request; anything more means re-sent data.
        if not produced <= p.bytes_in <= produced * 1.01 + 200 * p.count:
            raise RuntimeError(f"{kind}: fetched {p.bytes_in} bytes for {produced} produced")


async def one_round(
    broker: h.BrokerProcess, wl: Workload, rnd: int, args: argparse.Namespace
) -> RoundResult:
    batch, rpb = BATCHES[wl.name]
    topic = f"bench-{wl.name}-{rnd}"
    conns = args.connections
    if broker.kind != "null":
        h.create_topic(broker.port, topic, conns)
        h.wait_topic_ready(broker.port, topic, conns)
    distinct = max(args.window * 2, 1)
    produce = [produce_frames(topic, c, batch, distinct) for c in range(conns)]
    prod = await run_phase(broker, produce, wl.requests, args.window)
    check_produce(broker.kind, prod.pipes, wl, rpb)
    produce_mbs = conns * wl.requests * len(batch) / prod.elapsed / h.MB
    fetch = [fetch_frames(broker.kind, topic, c, rpb, len(batch), wl) for c in range(conns)]
    count = len(fetch[0]) * args.fetch_passes
    fet = await run_phase(broker, fetch, count, args.window)
    check_fetch(broker.kind, fet.pipes, wl, rpb, len(batch), args.fetch_passes)
    fetch_mbs = args.fetch_passes * conns * wl.requests * len(batch) / fet.elapsed / h.MB
    if broker.kind != "null":
        h.delete_topic(broker.port, topic)
    prod.pipes = fet.pipes = []
    return RoundResult(produce_mbs, fetch_mbs, prod, fet)


BATCHES: dict[str, tuple[bytes, int]] = {}


async def main_async(args: argparse.Namespace, started: dict[str, h.BrokerProcess]) -> Results:
    res = Results()
    kinds = list(started)
    for wl in workloads(args):
        if wl.name not in BATCHES:
            BATCHES[wl.name] = build_batch(wl.batch_target)
        batch, rpb = BATCHES[wl.name]
        print(
            f"# {wl.name}: batch {len(batch)} bytes ({rpb} x 1 KiB records), "
            f"{args.connections} conns x {wl.requests} requests, window {args.window}",
            file=sys.stderr,
        )
        for rnd in range(args.warmup + args.rounds):
            order = kinds if rnd % 2 == 0 else kinds[::-1]
            for kind in order:
                r = await one_round(started[kind], wl, rnd, args)
                tag = "warm-up" if rnd < args.warmup else f"round {rnd - args.warmup + 1}"
                print(
                    f"  {kind:8} {wl.name:6} {tag:8} produce {r.produce_mbs:7.1f} MB/s"
                    f" (cpu broker {r.produce.broker_cpu:4.0%} client {r.produce.client_cpu:4.0%})"
                    f"  fetch {r.fetch_mbs:7.1f} MB/s"
                    f" (cpu broker {r.fetch.broker_cpu:4.0%} client {r.fetch.client_cpu:4.0%})",
                    file=sys.stderr,
                )
                if rnd >= args.warmup:
                    res.rounds.setdefault((kind, wl.name), []).append(r)
    for kind, b in started.items():
        res.rss[kind] = b.rss_mib()
    return res


def workloads(args: argparse.Namespace) -> list[Workload]:
    total = args.mib_per_round * 1024 * 1024
    per_conn = total // args.connections
    every = [
        Workload("16KiB", 16 * 1024, max(1, per_conn // (16 * 1024)), 64),
        Workload("1MiB", 1024 * 1024, max(1, per_conn // (1024 * 1024)), 1),
    ]
    return [w for w in every if args.workload in ("all", w.name)]


# ---------------------------------------------------------------------------------------
# the null server: the client's ceiling


class NullServer(asyncio.Protocol):
    """Frames requests; answers produce with a canned response and fetch with as many bytes
    as the request's partition max_bytes (the int32 10 bytes before the end of our frames)."""

    produce_reply = _SIZE.pack(50) + bytes(50)
    fetch_replies: dict[int, bytes] = {}

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport: asyncio.Transport = transport  # type: ignore[assignment]
        self.buf = bytearray()

    def data_received(self, data: bytes) -> None:
        buf = self.buf
        buf += data
        pos = 0
        out = []
        while len(buf) - pos >= 8:
            size, api, _ver = _HDR.unpack_from(buf, pos)
            if len(buf) - pos - 4 < size:
                break
            if api == 1:
                (want,) = _SIZE.unpack_from(buf, pos + 4 + size - 10)
                reply = self.fetch_replies.get(want)
                if reply is None:
                    reply = self.fetch_replies[want] = _SIZE.pack(want + 100) + bytes(want + 100)
                out.append(reply)
            else:
                out.append(self.produce_reply)
            pos += 4 + size
        del buf[:pos]
        for reply in out:
            self.transport.write(reply)


async def serve_null(port: int) -> None:
    loop = asyncio.get_running_loop()
    server = await loop.create_server(NullServer, "127.0.0.1", port)
    async with server:
        await server.serve_forever()


def null_command(port: int) -> list[str]:
    return [sys.executable, str(Path(__file__).resolve()), "--serve-null", str(port)]


# ---------------------------------------------------------------------------------------


def report(
    args: argparse.Namespace, res: Results, kinds: list[str], machine: str, load_end: float
) -> None:
    print(f"\n{h.command_line()}")
    print(f"{h.stamp()}; {machine}, {load_end:.2f} at the end; {h.kgroupd_revision()}")
    both = "kgroupd" in kinds and "tansu" in kinds
    head = ["workload", "phase"] + [f"{k} MB/s median (min-max)" for k in kinds]
    if both:
        head.append("kgroupd/tansu")
    head += [f"{k} MB per broker CPU-s" for k in kinds]
    head += [f"{k} broker CPU" for k in kinds]
    head.append("client CPU")
    print("\n| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for wl in workloads(args):
        for phase in ("produce", "fetch"):
            speed, spread, per_cpu, cpu, client = {}, {}, {}, {}, {}
            for k in kinds:
                rounds = res.rounds[(k, wl.name)]
                values = [getattr(r, f"{phase}_mbs") for r in rounds]
                speed[k] = h.median(values)
                spread[k] = f"({min(values):.0f}-{max(values):.0f})"
                shares = [getattr(r, phase).broker_cpu for r in rounds]
                cpu[k] = h.median(shares)
                client[k] = h.median([getattr(r, phase).client_cpu for r in rounds])
                per_cpu[k] = h.median(
                    [
                        getattr(r, f"{phase}_mbs") / max(c, 1e-9)
                        for r, c in zip(rounds, shares, strict=True)
                    ]
                )
            row = [f"{wl.name} batches", phase] + [f"**{speed[k]:.0f}** {spread[k]}" for k in kinds]
            if both:
                row.append(h.ratio(speed["kgroupd"], speed["tansu"]))
            row += [f"{per_cpu[k]:.0f}" for k in kinds]
            row += [f"{cpu[k]:.0%}" for k in kinds]
            row.append(" / ".join(f"{client[k]:.0%}" for k in kinds))
            print("| " + " | ".join(row) + " |")
    rss = ", ".join(f"{k} {v:.0f} MiB" for k, v in res.rss.items())
    print(f"\nRSS at the end (every round's topic deleted): {rss}")
    print(
        "CPU columns: median share of one core over the timed phase (broker from /proc, "
        "client = this process)."
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    h.add_common_args(ap, ("kgroupd", "tansu", "both", "null"))
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=1, help="untimed rounds first")
    ap.add_argument("--connections", type=int, default=4)
    ap.add_argument("--window", type=int, default=8, help="requests in flight per connection")
    ap.add_argument(
        "--mib-per-round", type=int, default=256, help="MiB produced (and fetched) per round"
    )
    ap.add_argument("--workload", choices=["all", "16KiB", "1MiB"], default="all")
    ap.add_argument(
        "--fetch-passes",
        type=int,
        default=1,
        help="the fetch phase reads the round's data this many times over (a longer phase: "
        "more of the broker's CPU clock ticks than a single pass's 0.1-0.5 s)",
    )
    ap.add_argument("--serve-null", type=int, metavar="PORT", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.serve_null is not None:
        h.uvloop_run(serve_null(args.serve_null))
        return 0
    h.apply_common_args(args)
    kinds = ["null"] if args.broker == "null" else h.kinds_for(args.broker)
    machine = h.machine()
    started: dict[str, h.BrokerProcess] = {}
    try:
        for kind in kinds:
            command = null_command if kind == "null" else None
            started[kind] = h.BrokerProcess(kind, command=command).start()
        res = h.uvloop_run(main_async(args, started))
    finally:
        for b in started.values():
            b.stop()
            b.cleanup_log()
    report(args, res, kinds, machine, os.getloadavg()[0])
    return 0


if __name__ == "__main__":
    sys.exit(main())
