"""Topic data beyond memory: produce GiBs in ~1 KiB batches with --data-dir, then fetch it
back cold and warm from the segment files, restart, and watch RSS and start-up time.

    python bench/bench_segments.py [--gib 1 2] [--fsync always|interval|never]

For each size, a fresh data dir and a broker with default settings (--log-cache-bytes 64 MiB,
segment.bytes 1 GiB, --fsync always unless given): one raw connection produces ProduceRequest
v8 frames (acks=1, one batch of one 1,000-byte record, 1,069 bytes a batch) with 256 in
flight; each frame is made from one encoded template by patching the value (the record's
index), the CRC-32C and the correlation id, so the client does little per batch. RSS
(VmRSS) is sampled every 0.5 s; the peak is VmHWM. Then the whole log is fetched from offset
0 (Fetch v11, 8 MiB a request unless ``--fetch-bytes``, one connection): first cold
(``posix_fadvise(DONTNEED)`` on every segment file, so the page cache starts empty), then
warm; ``--rounds N``: N cold and warm pairs, the median of each shown. Then a start after a kill -9
(right after the fetches) and one after a clean stop, timed from spawn to the ``listening``
line, with the RSS 1 s after and the ``batches_read`` the start-up logged. MB/s counts
record-batch bytes (10**6 bytes/s).

``--stall``: while each fetch runs, a second connection (a bystander, as a consumer's
heartbeats or commits) sends ApiVersions back to back; the table gets its answers' median,
99th percentile and largest round trip during the cold and the warm fetch (how long a read
of the files holds the event loop).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import struct
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from crc32c import crc32c  # noqa: E402

from tests.support.broker_process import BrokerProcess  # noqa: E402
from tests.support.kafka_wire import (  # noqa: E402
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
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")


def template() -> tuple[bytearray, int, int, int]:
    """A Produce frame (with its size prefix), where its batch starts, where the value's
    index goes, where the correlation id is."""
    marker = b"\xab" * 8
    batch = build_batch([(None, marker + b"v" * 992, [])])
    frame = bytearray(encode_request(0, 8, 0x5EED5EED, produce_request(TOPIC, 0, batch, acks=1)))
    start = frame.index(batch)
    return frame, start, frame.index(marker), frame.index(_I32.pack(0x5EED5EED))


def rss(pid: int, field: str = "VmRSS") -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    return 0


async def produce(port: int, n: int, window: int = 256) -> int:
    frame, start, at, corr_at = template()
    batch_len = len(frame) - start
    async with await WireClient.connect(port) as wire:
        sent = 0
        pending = 0
        while sent < n or pending:
            burst = []
            while sent < n and pending < window:
                frame[at : at + 8] = b"%08d" % (sent % 10**8)
                struct.pack_into(">I", frame, start + 17, crc32c(bytes(frame[start + 21 :])))
                _I32.pack_into(frame, corr_at, sent)
                burst.append(bytes(frame))
                sent += 1
                pending += 1
            if burst:
                wire.writer.write(b"".join(burst))
            for _ in range(min(pending, window // 2) if sent < n else pending):
                await wire.read_frame()
                pending -= 1
    return batch_len


async def bystander(port: int, stop: asyncio.Event) -> list[float]:
    """ApiVersions round trips (seconds), back to back until ``stop``."""
    out = []
    async with await WireClient.connect(port) as wire:
        while not stop.is_set():
            t0 = time.perf_counter()
            await wire.request(18, 0, {})
            out.append(time.perf_counter() - t0)
    return out


FETCH_BYTES = 8 * MiB  # a fetch's max bytes and partition max bytes (--fetch-bytes)


async def fetch_watched(port: int, end: int, watch: bool) -> tuple[int, float, list[float]]:
    """``fetch_all`` (bytes, seconds), with the bystander's round trips if ``watch``."""
    stop = asyncio.Event()
    pinger = asyncio.create_task(bystander(port, stop)) if watch else None
    if pinger is not None:
        await asyncio.sleep(0.2)  # connected and answering before the fetch starts
    t0 = time.perf_counter()
    got = await fetch_all(port, end)
    took = time.perf_counter() - t0
    stop.set()
    rtts = await pinger if pinger is not None else []
    return got, took, rtts


def stall(rtts: list[float]) -> str:
    if not rtts:
        return "-"
    ordered = sorted(rtts)
    median, p99 = ordered[len(ordered) // 2], ordered[len(ordered) * 99 // 100]
    return f"{median * 1e3:.2f} / {p99 * 1e3:.1f} / {ordered[-1] * 1e3:.1f}"


async def fetch_all(port: int, end: int) -> int:
    offset = 0
    got = 0
    async with await WireClient.connect(port) as wire:
        while offset < end:
            req = fetch_request(
                TOPIC, 0, offset, max_bytes=FETCH_BYTES, partition_max_bytes=FETCH_BYTES
            )
            resp = await wire.request(1, 11, req)
            ((part,),) = [t["partitions"] for t in resp["responses"]]
            assert part["error_code"] == 0, part
            data = part["records"] or b""
            assert data, offset
            pos = 0
            while pos < len(data):
                base = _I64.unpack_from(data, pos)[0]
                pos += _I32.unpack_from(data, pos + 8)[0] + 12
                offset = base + 1
            got += len(data)
    return got


def drop_cache(directory: Path) -> None:
    for path in directory.rglob("*.log"):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


async def timed_start(broker: BrokerProcess) -> tuple[float, int, int]:
    t0 = time.perf_counter()
    await broker.start()
    took = time.perf_counter() - t0
    (event,) = broker.find("topic_data_loaded", since=broker.run_start)
    await asyncio.sleep(1)
    assert broker.proc is not None
    return took, rss(broker.proc.pid), int(event["batches_read"])


Round = tuple[float, list[float]]


async def fetches(
    port: int, n: int, data_dir: Path, watch: bool, rounds: int
) -> tuple[int, Round, Round]:
    """Cold then warm fetches of the whole log, ``rounds`` times: the median round of each
    by time, as (seconds, bystander round trips)."""
    cold: list[Round] = []
    warm: list[Round] = []
    got = 0
    for _ in range(rounds):
        drop_cache(data_dir)
        got, took, rtts = await fetch_watched(port, n, watch)
        cold.append((took, rtts))
        got2, took2, rtts2 = await fetch_watched(port, n, watch)
        warm.append((took2, rtts2))
        assert got == got2
    cold.sort(key=lambda r: r[0])
    warm.sort(key=lambda r: r[0])
    return got, cold[len(cold) // 2], warm[len(warm) // 2]


async def one_size(
    gib: float, fsync: str | None, watch: bool = False, rounds: int = 1
) -> list[str]:
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-seg-") as tmp:
        args = ("--fsync", fsync) if fsync else ()
        broker = BrokerProcess(Path(tmp) / "data", args=args, env={"PYTHONOPTIMIZE": ""})
        try:
            await broker.start()
            assert broker.proc is not None
            pid = broker.proc.pid
            async with await WireClient.connect(broker.port) as wire:
                await create_topic(wire, TOPIC, 1, {})
            batch_len = len(template()[0]) - template()[1]
            n = int(gib * GiB) // batch_len
            samples: list[int] = []
            stop = asyncio.Event()

            async def sample() -> None:
                while not stop.is_set():
                    samples.append(rss(pid))
                    await asyncio.sleep(0.5)

            sampler = asyncio.create_task(sample())
            print(f"{gib} GiB: producing {n:,} batches", file=sys.stderr)
            t0 = time.perf_counter()
            await produce(broker.port, n)
            produce_s = time.perf_counter() - t0
            stop.set()
            await sampler
            data = n * batch_len
            peak = rss(pid, "VmHWM")
            after = rss(pid)
            topics = Path(tmp) / "data" / "topics"
            got, (cold_s, cold_rtts), (warm_s, warm_rtts) = await fetches(
                broker.port, n, topics, watch, rounds
            )
            assert got == data
            fetch_peak = rss(pid, "VmHWM")
            await broker.kill()
            crashed = await timed_start(broker)
            assert await fetch_all(broker.port, n) == data
            await broker.stop()
            clean = await timed_start(broker)
            await broker.stop()
        finally:
            await broker.close()
        rows.append(
            f"| {gib:g} GiB ({n:,} batches) | {data / produce_s / 1e6:.1f} | "
            f"{data / cold_s / 1e6:.0f} | {data / warm_s / 1e6:.0f} | "
            f"{max(samples) / MiB:.0f} / {peak / MiB:.0f} / {after / MiB:.0f} | "
            f"{fetch_peak / MiB:.0f} | {clean[0]:.2f} s, {clean[1] / MiB:.0f} MiB, "
            f"{clean[2]} | {crashed[0]:.2f} s, {crashed[1] / MiB:.0f} MiB, {crashed[2]} |"
            + (f" {stall(cold_rtts)} | {stall(warm_rtts)} |" if watch else "")
        )
        print(rows[-1], file=sys.stderr)
    return rows


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gib", type=float, nargs="+", default=[1.0, 2.0])
    ap.add_argument("--fsync", choices=("always", "interval", "never"), default=None)
    ap.add_argument(
        "--stall",
        action="store_true",
        help="a bystander connection's ApiVersions round trips during the fetches",
    )
    ap.add_argument(
        "--fetch-bytes", type=int, default=8 * MiB, help="a fetch's (partition) max bytes"
    )
    ap.add_argument(
        "--rounds", type=int, default=1, help="cold and warm fetches, each the median of N"
    )
    args = ap.parse_args()
    global FETCH_BYTES
    FETCH_BYTES = args.fetch_bytes
    extra = (
        " bystander ApiVersions during cold fetch: median / p99 / max (ms) | during warm fetch |"
        if args.stall
        else ""
    )
    print(
        "| data | produce MB/s | fetch cold MB/s | fetch warm MB/s | RSS while producing: "
        "max sampled / VmHWM / after (MiB) | VmHWM after fetches (MiB) | clean restart: "
        "time, RSS, batches read | kill -9 restart: time, RSS, batches read |" + extra
    )
    print("|---|---|---|---|---|---|---|---|" + ("---|---|" if args.stall else ""))
    for gib in args.gib:
        for row in await one_size(gib, args.fsync, args.stall, args.rounds):
            print(row)


if __name__ == "__main__":
    asyncio.run(main())
