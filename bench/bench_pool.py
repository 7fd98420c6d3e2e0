"""A bystander's round trips while a few connections hold the request pool
(``--queued-max-request-bytes``, issue 27).

    python bench/bench_pool.py [--seconds 30] [--slow 20] [--slow-rate-mb 4]
                               [--timeout 10] [--kgroupd-rev REV]

One kgroupd subprocess with its defaults (a 256 MiB pool, --max-request-bytes 100 MiB,
--incomplete-request-timeout-ms 30000; but --max-memory-bytes 64 MiB, so the bystander's
records do not fill the RSS), or ``--kgroupd-rev``'s code, and for ``--seconds``:

- **holders**: 3 connections that each send a size prefix and nothing more, announcing 100,
  100 and 56 MiB (the whole pool); one the broker closes connects again at once;
- **slow senders**: ``--slow`` connections (20) that each send a 100,000,000-byte Produce
  frame (one batch of zeros: the broker answers MESSAGE_TOO_LARGE or CORRUPT_MESSAGE, and
  stores nothing) at ``--slow-rate-mb`` MB/s each, then the next one; a sender whose
  connection is closed connects again;
- **a bystander**, in a process of its own (so the load's own Python does not delay it): on
  one connection, back to back, an ApiVersions and a 512 KiB Produce (acks=1, one batch of
  one record), from 3 s after the load started until the end. A request not answered within
  ``--timeout`` s counts as timed out and the bystander connects again.

Before that, the bystander runs 5 s alone (the idle row). The table gives, per kind of
request, the round trips' median / p99 / max in ms, how many were answered and how many timed
out; then the slow frames answered, the connections the broker closed (holders and slow
senders) and the broker's peak RSS; last, in a process of its own with the same code, how
long a 100 MB frame's last read takes through the frame decoder and its decoding (best of 5).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import multiprocessing
import os
import struct
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import _harness as h

from tests.support.kafka_wire import build_batch, encode_request, produce_request

MIB = 1024 * 1024
HOLDS = (100 * MIB, 100 * MIB, 56 * MIB)
SLOW_FRAME = 100_000_000  # the records' bytes
CHUNK = 64 * 1024


# the bystander (a process of its own) ----------------------------------------------------


async def _bystander(port: int, seconds: float, timeout: float) -> dict[str, Any]:
    batch = build_batch([(None, bytes(512 * 1024), [])])
    kinds = {"ApiVersions": (18, 3, {}), "Produce 512 KiB": (0, 9, None)}
    rtts: dict[str, list[float]] = {k: [] for k in kinds}
    timeouts = dict.fromkeys(kinds, 0)
    deadline = time.monotonic() + seconds
    corr = 0
    while time.monotonic() < deadline:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            while time.monotonic() < deadline:
                for kind, (api, version, body) in kinds.items():
                    corr += 1
                    if body is None:
                        body = produce_request("bystander", 0, batch, acks=1)
                    frame = encode_request(api, version, corr, body, "bystander")
                    t0 = time.perf_counter()
                    writer.write(frame)
                    try:
                        size = await asyncio.wait_for(reader.readexactly(4), timeout)
                        await asyncio.wait_for(reader.readexactly(struct.unpack(">i", size)[0]), 5)
                    except TimeoutError:
                        timeouts[kind] += 1
                        raise
                    rtts[kind].append(time.perf_counter() - t0)
        except (TimeoutError, ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.transport.abort()
    return {"rtts": rtts, "timeouts": timeouts}


def bystander_main(port: int, seconds: float, timeout: float, out: Any) -> None:
    out.put(h.uvloop_run(_bystander(port, seconds, timeout)))


def run_bystander(port: int, seconds: float, timeout: float) -> multiprocessing.Process:
    ctx = multiprocessing.get_context("spawn")
    queue = ctx.Queue()
    proc = ctx.Process(target=bystander_main, args=(port, seconds, timeout, queue))
    proc.start()
    proc.result_queue = queue  # type: ignore[attr-defined]
    return proc


async def bystander_result(proc: multiprocessing.Process) -> dict[str, Any]:
    queue = proc.result_queue  # type: ignore[attr-defined]
    result = await asyncio.get_running_loop().run_in_executor(None, queue.get)
    proc.join()
    return result  # type: ignore[no-any-return]


# the load -----------------------------------------------------------------------------------


class Counts:
    def __init__(self) -> None:
        self.answered = 0
        self.holders_closed = 0
        self.slow_closed = 0
        self.errors: dict[int, int] = {}


async def holder(port: int, size: int, counts: Counts) -> None:
    while True:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            writer.write(struct.pack(">i", size))
            while await reader.read(65536):
                pass
            counts.holders_closed += 1
        except ConnectionError:
            counts.holders_closed += 1
        finally:
            writer.transport.abort()


async def slow_sender(port: int, frame: memoryview, rate: float, counts: Counts) -> None:
    loop = asyncio.get_running_loop()
    while True:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            while True:
                t0 = loop.time()
                for sent in range(0, len(frame), CHUNK):
                    writer.write(frame[sent : sent + CHUNK])
                    await writer.drain()
                    delay = t0 + (sent + CHUNK) / rate - loop.time()
                    if delay > 0:
                        await asyncio.sleep(delay)
                (size,) = struct.unpack(">i", await reader.readexactly(4))
                answer = await reader.readexactly(size)
                # Produce v9's answer: ... "slow", partitions (1 byte), index (4), error
                error = struct.unpack_from(">h", answer, answer.index(b"slow") + 9)[0]
                counts.errors[error] = counts.errors.get(error, 0) + 1
                counts.answered += 1
        except (ConnectionError, asyncio.IncompleteReadError):
            counts.slow_closed += 1
        finally:
            writer.transport.abort()


async def rss_peak(pid: int, stop: asyncio.Event) -> float:
    peak = 0.0
    while not stop.is_set():
        with contextlib.suppress(OSError):
            peak = max(peak, h.rss_mib(pid))
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), 0.25)
    return peak


def row(name: str, result: dict[str, Any]) -> list[str]:
    out = []
    for kind, rtts in result["rtts"].items():
        cells = "-"
        if rtts:
            ordered = sorted(rtts)
            p50, p99 = ordered[len(ordered) // 2], ordered[len(ordered) * 99 // 100]
            cells = f"{p50 * 1e3:.1f} / {p99 * 1e3:.1f} / {ordered[-1] * 1e3:.0f}"
        out.append(f"| {name} | {kind} | {cells} | {len(rtts)} | {result['timeouts'][kind]} |")
    return out


async def bench(port: int, pid: int, args: argparse.Namespace) -> list[str]:
    idle = await bystander_result(run_bystander(port, 5, args.timeout))
    counts = Counts()
    view = memoryview(
        encode_request(0, 9, 1, produce_request("slow", 0, bytes(SLOW_FRAME)), "slow")
    )
    stop = asyncio.Event()
    tasks = [asyncio.create_task(holder(port, size, counts)) for size in HOLDS]
    rate = args.slow_rate_mb * h.MB
    for i in range(args.slow):
        await asyncio.sleep(0.05 if i else 0)
        tasks.append(asyncio.create_task(slow_sender(port, view, rate, counts)))
    peak = asyncio.create_task(rss_peak(pid, stop))
    await asyncio.sleep(3)
    loaded = await bystander_result(run_bystander(port, args.seconds - 3, args.timeout))
    stop.set()
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    lines = [
        "| load | request | round trip median / p99 / max (ms) | answered | timed out |",
        "|---|---|---|---|---|",
        *row("alone", idle),
        *row(f"3 holders + {args.slow} slow senders", loaded),
        "",
        f"Slow frames answered: {counts.answered} (error codes {counts.errors}); closed by the"
        f" broker: {counts.holders_closed} holder and {counts.slow_closed} slow-sender"
        f" connections; broker RSS peak {await peak:.0f} MiB.",
    ]
    return lines


def completion_costs() -> str:
    """In this process, with the code under test: how long the last read of a 100 MB
    Produce frame takes to come out of the frame decoder, and the request codec to decode
    it (best of 5, ms): what holds a broker's event loop when such a frame completes."""
    from kgroupd.protocol.framing import FrameDecoder, parse_request_header
    from kgroupd.protocol.messages import lookup

    frame = encode_request(0, 9, 1, produce_request("slow", 0, bytes(SLOW_FRAME)), "slow")
    spec = lookup(0, 9)
    assert spec is not None
    cut, decode = [], []
    for _ in range(5):
        decoder = FrameDecoder(len(frame))
        split = len(frame) - CHUNK
        for at in range(0, split, CHUNK):
            decoder.feed(frame[at : min(at + CHUNK, split)])
        last = frame[split:]
        t0 = time.perf_counter()
        (body,) = decoder.feed(last)
        cut.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        spec.decode_request(body, parse_request_header(body, True).body_offset)
        decode.append(time.perf_counter() - t0)
        del body
    return (
        f"A 100 MB Produce frame's last read through FrameDecoder: {min(cut) * 1e3:.0f} ms;"
        f" decoding the request: {min(decode) * 1e3:.0f} ms (in process, best of 5)."
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seconds", type=float, default=30.0)
    ap.add_argument("--slow", type=int, default=20)
    ap.add_argument("--slow-rate-mb", type=float, default=4.0)
    ap.add_argument("--timeout", type=float, default=10.0)
    ap.add_argument("--kgroupd-rev", metavar="REV")
    ap.add_argument("--completion-costs", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.completion_costs:
        print(completion_costs())
        return
    code = "working tree"
    if args.kgroupd_rev:
        code = h.use_kgroupd_rev(args.kgroupd_rev)
    print(f"{h.stamp()}, {h.machine()}, kgroupd {code}\n\n    {h.command_line()}\n")
    # topic data in memory bounded, so the RSS is mostly the requests read
    broker = h.BrokerProcess("kgroupd", extra=["--max-memory-bytes", str(64 * MIB)]).start()
    try:
        h.create_topic(broker.port, "bystander", 1)
        h.create_topic(broker.port, "slow", 1)
        lines = h.uvloop_run(bench(broker.port, broker.pid, args))
    finally:
        broker.stop()
    print("\n".join(lines))
    # in a process of its own, with the code under test (--kgroupd-rev's too)
    env = dict(os.environ)
    if h.KGROUPD_SRC is not None:
        env[h.SRC_ENV] = str(h.KGROUPD_SRC)
    costs = subprocess.run(
        [sys.executable, __file__, "--completion-costs"],
        env=env,
        check=True,
        capture_output=True,
        text=True,
    )
    print(f"\n{costs.stdout.strip()}")
    print(f"\nload avg {os.getloadavg()[0]:.2f} at the end")


if __name__ == "__main__":
    main()
