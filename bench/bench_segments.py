"""Topic data beyond memory: produce GiBs in ~1 KiB batches with --data-dir, then fetch it
back cold and warm from the segment files, restart, and watch RSS and start-up time.

    python bench/bench_segments.py [--gib 1 2] [--fsync always|interval|never] [--partitions 1]
                                   [--fetch-bytes 8388608] [--rounds 1] [--stall]

For each size, a fresh data dir and a broker with default settings (--log-cache-bytes 64 MiB,
segment.bytes 1 GiB, --fsync always unless given). One raw connection per partition (uvloop,
``bench_throughput.Pipeline``) produces ProduceRequest v8 frames (acks=1, one batch of one
1,000-byte record, 1,070 bytes a batch) with 256 in flight. The frames are encoded before
the clock starts: 512 copies of one template with the value (an index), the CRC-32C and the
correlation id patched, sent round-robin. The last answer of each connection must be error 0
at the offset of the partition's last batch. RSS (VmRSS) is sampled every 0.5 s; the peak is
VmHWM. Then the whole log is fetched from offset 0 (Fetch v11 of 8 MiB unless
``--fetch-bytes``, as max_bytes and partition_max_bytes; one connection per partition, each
request at the offset after the last batch returned): first cold (``posix_fadvise(DONTNEED)``
on every segment file, so the page cache starts empty), then warm; every fetch must return
every record, at consecutive offsets. ``--rounds N``: N such cold and warm pairs, and the
table shows the median round of each by time (for an even N the slower of the middle two).
Then a start after a kill -9 (right after the fetches; the log is fetched and counted again)
and one after a clean stop, timed from spawn to the ``listening`` line and to the first 200
of ``/readyz``, with the RSS 1 s after and the ``batches_read`` the start-up logged. MB/s
counts record-batch bytes (10**6 bytes/s).

``--stall``: while each timed fetch runs, one more connection (a bystander, as a consumer's
heartbeats or commits) sends ApiVersions back to back, from 0.2 s before the clock starts
until the fetch ends; two more columns give the median / 99th percentile / largest of its
round trips during the cold and the warm fetch (how long reads of the files hold the event
loop). The bystander runs in this process and adds to the load of both sides.

``bench_data.py`` runs the same workload against kgroupd in memory and Tansu as well.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import struct
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _harness as h
import bench_throughput as bt
from crc32c import crc32c

from tests.support.broker_process import BrokerProcess
from tests.support.kafka_wire import (
    WireClient,
    build_batch,
    create_topic,
    encode_request,
    fetch_request,
    produce_request,
)

GiB = 1024**3
MiB = 1024**2
TOPIC = "bench"
WINDOW = 256  # produce requests in flight per connection
FETCH_BYTES = 8 * MiB  # a Fetch's max_bytes and partition_max_bytes
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_BATCH_HEAD = struct.Struct(">qi")  # a batch's base offset and length (after these 12 bytes)


def template(partition: int = 0) -> tuple[bytearray, int, int, int]:
    """A Produce frame (with its size prefix), where its batch starts, where the value's
    index goes, where the correlation id is."""
    marker = b"\xab" * 8
    batch = build_batch([(None, marker + b"v" * 992, [])])
    body = produce_request(TOPIC, partition, batch, acks=1)
    frame = bytearray(encode_request(0, 8, 0x5EED5EED, body))
    start = frame.index(batch)
    return frame, start, frame.index(marker), frame.index(_I32.pack(0x5EED5EED))


BATCH_LEN = len(template()[0]) - template()[1]  # 1,070 bytes


def produce_frames(partition: int, distinct: int) -> list[bytes]:
    """``distinct`` frames for one partition, each with its own value and correlation id."""
    frame, start, at, corr_at = template(partition)
    out = []
    for i in range(distinct):
        frame[at : at + 8] = b"%08d" % i
        struct.pack_into(">I", frame, start + 17, crc32c(bytes(frame[start + 21 :])))
        _I32.pack_into(frame, corr_at, i)
        out.append(bytes(frame))
    return out


def batches_for(gib: float, partitions: int) -> int:
    """Batches per partition so that ``gib`` GiB are produced in all."""
    return max(1, int(gib * GiB) // BATCH_LEN // partitions)


def rss(pid: int, field: str = "VmRSS") -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    return 0


@dataclass(frozen=True)
class Proc:
    """A broker as ``bench_throughput.run_phase`` sees it."""

    port: int
    pid: int


async def produce(target: bt.Target, per: int, partitions: int, window: int = WINDOW) -> bt.Phase:
    """``per`` batches to each of ``partitions`` partitions of a fresh topic, one connection
    each; fails unless each connection's last answer is error 0 at offset ``per - 1``."""
    frames = [produce_frames(p, 2 * window) for p in range(partitions)]
    phase = await bt.run_phase(target, frames, per, window, timeout=None)
    for p, pipe in enumerate(phase.pipes):
        resp = h.decode_response(0, 8, pipe.kept["last"])
        part = resp["responses"][0]["partition_responses"][0]
        if part["error_code"] != 0 or part["base_offset"] != per - 1:
            raise RuntimeError(f"partition {p}: last produce answered {part}, not offset {per - 1}")
    return phase


class _Responses(asyncio.BufferedProtocol):
    """One connection with one request in flight: the kernel reads each response straight
    into one buffer (no StreamReader copies), where it is checked in place."""

    def __init__(self, max_bytes: int = FETCH_BYTES) -> None:
        self.buf = bytearray(2 * max_bytes + MiB)  # Tansu may pass max_bytes by a batch
        self.have = 0
        self.transport: asyncio.Transport | None = None
        self.waiter: asyncio.Future[None] | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def get_buffer(self, sizehint: int) -> memoryview:
        if self.have == len(self.buf):
            raise RuntimeError(f"a response over {len(self.buf)} bytes")
        return memoryview(self.buf)[self.have :]

    def buffer_updated(self, nbytes: int) -> None:
        self.have += nbytes
        if self.waiter is not None and not self.waiter.done() and self.complete():
            self.waiter.set_result(None)

    def connection_lost(self, exc: Exception | None) -> None:
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_exception(ConnectionError(f"connection lost: {exc}"))

    def complete(self) -> bool:
        return self.have >= 4 and self.have >= 4 + _I32.unpack_from(self.buf, 0)[0]

    async def request(self, frame: bytes) -> int:
        """Send ``frame``, wait for the whole answer: its size (it is ``buf[4:4 + size]``)."""
        assert self.transport is not None
        self.have = 0
        self.transport.write(frame)
        if not self.complete():
            self.waiter = asyncio.get_running_loop().create_future()
            await asyncio.wait_for(self.waiter, 60)
        size: int = _I32.unpack_from(self.buf, 0)[0]
        if self.have != 4 + size:
            raise RuntimeError(f"{self.have - 4 - size} bytes after a response")
        return size


_FETCH_HEAD = struct.Struct(">iihii")  # correlation id, throttle, error, session, topics
_PARTITION_HEAD = struct.Struct(">iihqqqi")  # partitions, index, error, 3 offsets, aborted
_ROWS: dict[int, struct.Struct] = {}


def records_span(buf: bytearray, size: int) -> tuple[int, int]:
    """Where the record batches of a one-partition Fetch v11 response (``buf[4:4 + size]``)
    are; fails on an error code or another layout."""
    _corr, _throttle, error, _session, topics = _FETCH_HEAD.unpack_from(buf, 4)
    if error or topics != 1:
        raise RuntimeError(f"Fetch answered error {error}, {topics} topics")
    pos = 22 + 2 + _I16.unpack_from(buf, 22)[0]
    parts, _index, error, _hw, _lso, _start, aborted = _PARTITION_HEAD.unpack_from(buf, pos)
    if error or parts != 1:
        raise RuntimeError(f"Fetch answered error {error}, {parts} partitions")
    pos += _PARTITION_HEAD.size + 16 * max(aborted, 0) + 4  # preferred_read_replica
    length = max(_I32.unpack_from(buf, pos)[0], 0)
    if pos + 4 + length != 4 + size:
        raise RuntimeError("not the Fetch v11 layout this client reads")
    return pos + 4, pos + 4 + length


def walk_batches(buf: bytearray, start: int, stop: int, offset: int) -> tuple[int, int, int]:
    """The whole batches in ``buf[start:stop]`` (a broker may cut the last one), which must
    follow each other from ``offset``: (next offset, their bytes, their records). Batches
    of the first one's size are read by ``struct.iter_unpack``; the rest one by one."""
    pos, records = start, 0
    if stop - start >= 61:
        length = _BATCH_HEAD.unpack_from(buf, start)[1]
        size = length + 12
        rows = _ROWS.get(size) if size >= 61 else None
        if rows is None and size >= 61:
            rows = _ROWS[size] = struct.Struct(f">qi45xi{size - 61}x")
        if rows is not None:
            whole = (stop - start) // size
            for base, got, count in rows.iter_unpack(memoryview(buf)[start : start + whole * size]):
                if got != length or base != offset:
                    break  # read one by one from here
                offset += count
                records += count
                pos += size
    while pos + 61 <= stop:
        base, length = _BATCH_HEAD.unpack_from(buf, pos)
        if pos + length + 12 > stop:
            break
        if base != offset:
            raise RuntimeError(f"a batch at offset {base}, expected {offset}")
        count = _I32.unpack_from(buf, pos + 57)[0]
        offset = base + count
        records += count
        pos += length + 12
    return offset, pos - start, records


async def fetch_one(
    conn: _Responses, partition: int, offset: int, max_bytes: int = FETCH_BYTES
) -> tuple[int, int]:
    """One Fetch v11 (max_wait_ms 500, min_bytes 1: the data is there, so no broker waits;
    Tansu answers max_wait_ms 0 with no topics at all): where its records are in
    ``conn.buf``."""
    body = fetch_request(
        TOPIC,
        partition,
        offset,
        max_wait_ms=500,
        max_bytes=max_bytes,
        partition_max_bytes=max_bytes,
    )
    size = await conn.request(encode_request(1, 11, offset, body))
    try:
        return records_span(conn.buf, size)
    except RuntimeError as exc:
        answer = h.decode_response(1, 11, bytes(conn.buf[4 : 4 + size]))
        raise RuntimeError(f"partition {partition} at {offset}: {exc}: {answer}") from None


async def check_layout(conn: _Responses, partition: int) -> None:
    """``records_span`` finds the same records as the protocol module's decoder."""
    start, stop = await fetch_one(conn, partition, 0, 64 * 1024)
    size = _I32.unpack_from(conn.buf, 0)[0]
    answer = h.decode_response(1, 11, bytes(conn.buf[4 : 4 + size]))
    want = answer["responses"][0]["partitions"][0]["records"] or b""
    if not want or conn.buf[start:stop] != want:
        raise RuntimeError(f"records_span read another layout: {answer}")


EMPTY_RETRIES = 20  # answers in a row with no whole batch before a fetch fails


async def fetch_all(
    conn: _Responses, end: int, partition: int = 0, max_bytes: int = FETCH_BYTES
) -> tuple[int, int]:
    """Fetch one partition from offset 0 to ``end`` over ``conn``: (record-batch bytes,
    records). Fails unless the batches come at consecutive offsets with ``end`` records in
    all."""
    offset = got = records = empty = 0
    while offset < end:
        start, stop = await fetch_one(conn, partition, offset, max_bytes)
        offset, batch_bytes, count = walk_batches(conn.buf, start, stop, offset)
        if not batch_bytes:
            # Tansu sometimes answers a long partition's fetch with no whole batch (after
            # max_wait_ms): a client fetches again, as a real consumer does
            empty += 1
            if empty > EMPTY_RETRIES:
                raise RuntimeError(f"partition {partition}: no whole batch at offset {offset}")
            continue
        empty = 0
        got += batch_bytes
        records += count
    if records != end:
        raise RuntimeError(f"partition {partition}: fetched {records} records, produced {end}")
    return got, records


async def bystander(port: int, stop: asyncio.Event) -> list[float]:
    """ApiVersions round trips (seconds), back to back until ``stop``."""
    out = []
    async with await WireClient.connect(port) as wire:
        while not stop.is_set():
            t0 = time.perf_counter()
            await wire.request(18, 0, {})
            out.append(time.perf_counter() - t0)
    return out


def stall(rtts: list[float] | None) -> str:
    """Median / 99th percentile / largest round trip, in ms."""
    if not rtts:
        return "-"
    ordered = sorted(rtts)
    median, p99 = ordered[len(ordered) // 2], ordered[len(ordered) * 99 // 100]
    return f"{median * 1e3:.2f} / {p99 * 1e3:.1f} / {ordered[-1] * 1e3:.1f}"


@dataclass
class Fetched:
    seconds: float
    bytes: int  # record-batch bytes
    records: int
    broker_cpu: float  # share of one core over ``seconds`` (0 without a pid)
    client_cpu: float  # the same for this process
    rtts: list[float] | None = None  # the bystander's round trips (``watch``), in seconds


async def fetch_partitions(
    port: int,
    per: int,
    partitions: int,
    pid: int = 0,
    max_bytes: int = FETCH_BYTES,
    watch: bool = False,
) -> Fetched:
    """Every partition at once, one connection each (opened, and ``check_layout`` run on
    each, before the clock starts); ``pid``: the broker's, for its CPU time; ``watch``: a
    ``bystander`` connection pings from 0.2 s before the clock until the fetch ends."""
    loop = asyncio.get_running_loop()
    conns: list[tuple[asyncio.BaseTransport, _Responses]] = []
    stop = asyncio.Event()
    pinger: asyncio.Task[list[float]] | None = None
    try:
        for p in range(partitions):
            conns.append(
                await loop.create_connection(lambda: _Responses(max_bytes), "127.0.0.1", port)
            )
            await check_layout(conns[-1][1], p)
        if watch:
            pinger = asyncio.create_task(bystander(port, stop))
            await asyncio.sleep(0.2)  # connected and answering before the fetch starts
        broker0 = h.cpu_seconds(pid) if pid else 0.0
        client0 = time.process_time()
        t0 = time.perf_counter()
        done = await asyncio.gather(
            *(fetch_all(c, per, p, max_bytes) for p, (_, c) in enumerate(conns))
        )
        took = time.perf_counter() - t0
        client = time.process_time() - client0
        broker = h.cpu_seconds(pid) - broker0 if pid else 0.0
        stop.set()
        rtts = await pinger if pinger is not None else None
    finally:
        stop.set()
        if pinger is not None and not pinger.done():
            pinger.cancel()
        for transport, _ in conns:
            transport.close()
    return Fetched(
        took, sum(d[0] for d in done), sum(d[1] for d in done), broker / took, client / took, rtts
    )


async def fetches(
    port: int, per: int, partitions: int, topics: Path, max_bytes: int, watch: bool, rounds: int
) -> tuple[Fetched, Fetched]:
    """``rounds`` pairs of a cold (``drop_cache`` on ``topics`` first) and a warm
    ``fetch_partitions``: the median of the cold ones and of the warm ones, by time (for an
    even count the slower of the middle two)."""
    cold: list[Fetched] = []
    warm: list[Fetched] = []
    for _ in range(rounds):
        drop_cache(topics)
        cold.append(await fetch_partitions(port, per, partitions, 0, max_bytes, watch))
        warm.append(await fetch_partitions(port, per, partitions, 0, max_bytes, watch))
    cold.sort(key=lambda f: f.seconds)
    warm.sort(key=lambda f: f.seconds)
    return cold[len(cold) // 2], warm[len(warm) // 2]


def drop_cache(directory: Path) -> None:
    for path in directory.rglob("*.log"):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


@dataclass
class Start:
    listening_s: float  # spawn to the "listening" log line
    ready_s: float  # spawn to the first 200 of /readyz
    rss: int  # VmRSS 1 s after
    batches_read: int  # what the start-up read back from segment files (topic_data_loaded)

    def cell(self) -> str:
        return (
            f"{self.listening_s:.2f} / {self.ready_s:.2f} s, {self.rss / MiB:.0f} MiB, "
            f"{self.batches_read:,}"
        )


async def _ready_after(broker: BrokerProcess, since: int, t0: float) -> float:
    """Seconds from ``t0`` to the first 200 of ``/readyz`` (on the port ``http_listening``
    logs), polling every 5 ms."""
    while True:
        found = broker.find("http_listening", since)
        if found:
            try:
                reader, writer = await asyncio.open_connection("127.0.0.1", found[0]["port"])
                writer.write(b"GET /readyz HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")
                status = await reader.readline()
                writer.close()
                if status.split()[1:2] == [b"200"]:
                    return time.perf_counter() - t0
            except (OSError, IndexError):
                pass
        await asyncio.sleep(0.005)


async def timed_start(broker: BrokerProcess) -> Start:
    since = len(broker.events)
    t0 = time.perf_counter()
    ready = asyncio.create_task(_ready_after(broker, since, t0))
    try:
        await broker.start()
        listening = time.perf_counter() - t0
        ready_s = await asyncio.wait_for(ready, 20)
    finally:
        ready.cancel()
    (event,) = broker.find("topic_data_loaded", since=broker.run_start)
    await asyncio.sleep(1)
    assert broker.proc is not None
    return Start(listening, ready_s, rss(broker.proc.pid), int(event["batches_read"]))


def kgroupd_env() -> dict[str, str]:
    """As the other benches run kgroupd (its bytecode cached in .cache/pycache, as an
    install compiles it); an empty PYTHONDONTWRITEBYTECODE is unset to Python."""
    env, _cwd = h.process_env("kgroupd")
    assert env is not None
    return {**env, "PYTHONDONTWRITEBYTECODE": "", "PYTHONOPTIMIZE": ""}


@dataclass
class SizeResult:
    gib: float
    partitions: int
    per: int  # batches per partition
    produce: bt.Phase
    samples: list[int]  # VmRSS every 0.5 s while producing
    peak: int  # VmHWM after producing
    after: int  # VmRSS after producing
    cold: Fetched  # the median cold fetch (``fetches``)
    warm: Fetched  # the median warm fetch
    fetch_peak: int  # VmHWM after the fetches
    crashed: Start
    clean: Start

    @property
    def data(self) -> int:
        return self.per * self.partitions * BATCH_LEN

    def row(self) -> str:
        n = self.per * self.partitions
        mbs = self.data / 1e6
        return (
            f"| {self.gib:g} GiB ({n:,} batches, {self.partitions} partition"
            f"{'s' if self.partitions > 1 else ''}) | {mbs / self.produce.elapsed:.1f} "
            f"({self.produce.broker_cpu:.0%}) | {mbs / self.cold.seconds:.0f} | "
            f"{mbs / self.warm.seconds:.0f} | {max(self.samples) / MiB:.0f} / "
            f"{self.peak / MiB:.0f} / {self.after / MiB:.0f} | {self.fetch_peak / MiB:.0f} | "
            f"{self.clean.cell()} | {self.crashed.cell()} |"
            + (
                f" {stall(self.cold.rtts)} | {stall(self.warm.rtts)} |"
                if self.cold.rtts is not None
                else ""
            )
        )


SIZE_HEADER = (
    "| data | produce MB/s (broker CPU) | fetch cold MB/s | fetch warm MB/s | RSS while "
    "producing: max sampled / VmHWM / after (MiB) | VmHWM after fetches (MiB) | clean "
    "restart: to listening / to /readyz, RSS 1 s after, batches read | kill -9 restart: "
    "the same |\n|---|---|---|---|---|---|---|---|"
)
STALL_HEADER = (  # SIZE_HEADER's two more columns with --stall
    " bystander ApiVersions during cold fetch: median / p99 / max (ms) | during warm fetch |",
    "---|---|",
)


def size_header(watch: bool = False) -> str:
    if not watch:
        return SIZE_HEADER
    names, rule = SIZE_HEADER.split("\n")
    return f"{names}{STALL_HEADER[0]}\n{rule}{STALL_HEADER[1]}"


async def one_size(
    gib: float,
    fsync: str | None,
    partitions: int = 1,
    fetch_bytes: int = FETCH_BYTES,
    watch: bool = False,
    rounds: int = 1,
) -> SizeResult:
    with tempfile.TemporaryDirectory(prefix="bench-seg-") as tmp:
        data_dir = Path(tmp) / "data"
        args = ("--fsync", fsync) if fsync else ()
        broker = BrokerProcess(data_dir, args=args, env=kgroupd_env())
        try:
            await broker.start()
            assert broker.proc is not None
            target = Proc(broker.port, broker.proc.pid)
            async with await WireClient.connect(broker.port) as wire:
                await create_topic(wire, TOPIC, partitions, {})
            per = batches_for(gib, partitions)
            samples: list[int] = []
            stop = asyncio.Event()

            async def sample() -> None:
                while not stop.is_set():
                    samples.append(rss(target.pid))
                    await asyncio.sleep(0.5)

            sampler = asyncio.create_task(sample())
            print(f"{gib:g} GiB: producing {per * partitions:,} batches", file=sys.stderr)
            try:
                phase = await produce(target, per, partitions)
            finally:
                stop.set()
                await sampler
            peak, after = rss(target.pid, "VmHWM"), rss(target.pid)
            print(f"  produced in {phase.elapsed:.1f} s; fetching", file=sys.stderr)
            cold, warm = await fetches(
                target.port, per, partitions, data_dir / "topics", fetch_bytes, watch, rounds
            )
            fetch_peak = rss(target.pid, "VmHWM")
            await broker.kill()
            crashed = await timed_start(broker)
            await fetch_partitions(broker.port, per, partitions, 0, fetch_bytes)
            await broker.stop()
            clean = await timed_start(broker)
            await broker.stop()
        finally:
            await broker.close()
    phase.pipes = []
    result = SizeResult(
        gib,
        partitions,
        per,
        phase,
        samples,
        peak,
        after,
        cold,
        warm,
        fetch_peak,
        crashed,
        clean,
    )
    print(result.row(), file=sys.stderr)
    return result


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gib", type=float, nargs="+", default=[1.0, 2.0])
    ap.add_argument("--fsync", choices=("always", "interval", "never"), default=None)
    ap.add_argument("--partitions", type=int, default=1)
    ap.add_argument(
        "--fetch-bytes", type=int, default=FETCH_BYTES, help="a fetch's (partition) max bytes"
    )
    ap.add_argument(
        "--rounds", type=int, default=1, help="cold and warm fetches, each the median of N"
    )
    ap.add_argument(
        "--stall",
        action="store_true",
        help="a bystander connection's ApiVersions round trips during the fetches",
    )
    args = ap.parse_args()
    print(f"    {h.command_line()}\n\n{size_header(args.stall)}")
    for gib in args.gib:
        result = await one_size(
            gib, args.fsync, args.partitions, args.fetch_bytes, args.stall, args.rounds
        )
        print(result.row())


if __name__ == "__main__":
    h.uvloop_run(main())
