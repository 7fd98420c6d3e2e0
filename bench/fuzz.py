"""A longer fuzz run than the suite's (``tests/integration/test_fuzz_requests.py``), over real
sockets against a broker subprocess.

    python bench/fuzz.py --seconds 60 --connections 8

Round after round until ``--seconds`` pass, every API/version of the handler registry gets
``--examples`` hypothesis-generated requests (nulls and extreme values included) and as many
mutated valid frames (bytes flipped, cut, appended), sent by ``--connections`` concurrent
clients; Produce also gets as many valid record batches with bytes flipped, cut or appended
(their CRC made right), and what the log took of them a consumer reads to the end. A
connection the broker closes (its answer to a malformed frame) is opened again; one that
stays silent for 0.3 s (a JoinGroup waiting for its group, a long poll) is dropped. Fails
(exit 1) on any answer carrying UNKNOWN_SERVER_ERROR, any error line or traceback in the
broker's log, the broker exiting, a bystander producer and consumer group that no longer
work, or a batch the log took that the consumer cannot read. Prints a Markdown table:
frames, answers, closes, internal errors, requests/s, RSS before and after.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import struct
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from hypothesis import HealthCheck, given, settings

from bench._harness import BrokerProcess, create_topic, machine, stamp
from kgroupd.protocol.messages import lookup
from tests.support.fuzz import (
    BATCH_MUTATIONS,
    MUTATIONS,
    RECORDS_TOPIC,
    BatchMutation,
    cases,
    check_answers,
    default_frame,
    mutate,
    mutated_batch,
    produce_frame,
    struct_strategy,
)
from tests.support.kafka_wire import encode_request

SILENCE_S = 0.3
_SIZE = struct.Struct(">i")


def frames_for(api_key: int, version: int, examples: int) -> list[bytes]:
    """``examples`` generated requests and ``examples`` mutated frames of one API/version."""
    spec = lookup(api_key, version)
    assert spec is not None
    out: list[bytes] = []
    quiet = {"deadline": None, "database": None, "suppress_health_check": list(HealthCheck)}

    @settings(max_examples=examples, **quiet)  # type: ignore[arg-type]
    @given(struct_strategy(spec.request.message.fields, version))
    def generated(body: dict[str, Any]) -> None:
        # some are not encodable (a string too long for its length prefix...)
        with contextlib.suppress(ValueError, OverflowError, struct.error, UnicodeEncodeError):
            out.append(encode_request(api_key, version, 7, body))

    base, header = default_frame(api_key, version)

    @settings(max_examples=examples, **quiet)  # type: ignore[arg-type]
    @given(MUTATIONS)
    def mutated(how: tuple[list[tuple[int, int]], int, bytes]) -> None:
        out.append(mutate(base, header, *how))

    @settings(max_examples=examples, **quiet)  # type: ignore[arg-type]
    @given(BATCH_MUTATIONS)
    def batches(how: BatchMutation) -> None:
        out.append(produce_frame(version, mutated_batch(how)))

    generated()
    mutated()
    if api_key == 0 and version >= 3:  # Produce: record batches that lie, CRC right
        batches()
    return out


class Stats:
    def __init__(self) -> None:
        self.sent = self.answers = self.closes = self.silent = 0
        self.internal: list[str] = []


async def client(port: int, work: asyncio.Queue[tuple[int, int, bytes]], stats: Stats) -> None:
    conn: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None
    while True:
        api_key, version, frame = await work.get()
        try:
            if conn is None:
                conn = await asyncio.open_connection("127.0.0.1", port)
            reader, writer = conn
            writer.write(frame)
            stats.sent += 1
            try:
                (size,) = _SIZE.unpack(await asyncio.wait_for(reader.readexactly(4), SILENCE_S))
                payload = await asyncio.wait_for(reader.readexactly(size), 5)
            except TimeoutError:
                stats.silent += 1
                writer.transport.abort()
                conn = None
                continue
            except (asyncio.IncompleteReadError, ConnectionError):
                stats.closes += 1
                writer.transport.abort()
                conn = None
                continue
            stats.answers += 1
            try:
                check_answers(api_key, version, _SIZE.pack(size) + payload, frame.hex())
            except AssertionError as exc:
                stats.internal.append(str(exc)[:300])
        finally:
            work.task_done()


async def bystander(port: int) -> None:
    """A producer and a consumer group still work, and what the log took of the mutated
    batches a consumer reads to the end."""
    bootstrap = f"127.0.0.1:{port}"
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap)
    await producer.start()
    try:
        await producer.send_and_wait("bystander", b"still here", partition=0)
    finally:
        await producer.stop()
    consumer = AIOKafkaConsumer(
        "bystander", bootstrap_servers=bootstrap, group_id="bystander", auto_offset_reset="earliest"
    )
    await consumer.start()
    try:
        record = await asyncio.wait_for(consumer.getone(), 30)
        assert record.value == b"still here"
        await consumer.commit()
    finally:
        await consumer.stop()
    consumer = AIOKafkaConsumer(
        RECORDS_TOPIC, bootstrap_servers=bootstrap, auto_offset_reset="earliest"
    )
    await consumer.start()
    try:
        (part,) = consumer.assignment()
        end = (await consumer.end_offsets([part]))[part]
        while await consumer.position(part) < end:
            await asyncio.wait_for(consumer.getmany(part, timeout_ms=1000), 30)
    finally:
        await consumer.stop()


async def run(port: int, seconds: float, examples: int, connections: int) -> tuple[Stats, float]:
    stats = Stats()
    work: asyncio.Queue[tuple[int, int, bytes]] = asyncio.Queue(maxsize=4 * connections)
    workers = [asyncio.create_task(client(port, work, stats)) for _ in range(connections)]
    t0 = time.monotonic()
    deadline = t0 + seconds
    try:
        for api_key, version in itertools.cycle(cases()):
            if time.monotonic() > deadline:
                break
            for frame in frames_for(api_key, version, examples):
                await work.put((api_key, version, frame))
        await work.join()
    finally:
        for w in workers:
            w.cancel()
    return stats, time.monotonic() - t0


def log_problems(path: Path | None) -> list[str]:
    if path is None or not path.exists():
        return []
    bad = []
    for line in path.read_text(errors="replace").splitlines():
        try:
            event = json.loads(line)
        except ValueError:
            if line.strip():
                bad.append(line)  # anything not a JSON log line: a traceback, a crash
            continue
        if event.get("level") in ("error", "critical", "exception"):
            bad.append(line)
    return bad


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--seconds", type=float, default=60.0, help="how long to fuzz (60)")
    ap.add_argument("--examples", type=int, default=20, help="per API/version per round (20)")
    ap.add_argument("--connections", type=int, default=8, help="concurrent clients (8)")
    args = ap.parse_args()
    broker = BrokerProcess(
        "kgroupd", extra=["--log-format", "json", "--initial-rebalance-delay-ms", "0"]
    )
    broker.start()
    try:
        for name, partitions in (("t", 2), ("fuzz", 1), ("bystander", 1), (RECORDS_TOPIC, 1)):
            create_topic(broker.port, name, partitions)
        rss_before = broker.rss_mib()
        stats, elapsed = asyncio.run(
            run(broker.port, args.seconds, args.examples, args.connections)
        )
        alive = broker.proc is not None and broker.proc.poll() is None
        rss_after = broker.rss_mib() if alive else float("nan")
        bystander_ok = True
        try:
            asyncio.run(bystander(broker.port))
        except Exception as exc:  # reported below
            bystander_ok = False
            print(f"bystander failed: {exc!r}", file=sys.stderr)
    finally:
        broker.stop()
    problems = log_problems(broker.log_path)
    print(f"# bench/fuzz.py, {stamp()}, {machine()}\n")
    print(
        "| frames | answered | closed by the broker | silent (held) | internal errors "
        "| log errors | requests/s | RSS before / after | bystander |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    print(
        f"| {stats.sent:,} | {stats.answers:,} | {stats.closes:,} | {stats.silent:,} "
        f"| {len(stats.internal)} | {len(problems)} | {stats.sent / elapsed:,.0f} "
        f"| {rss_before:.0f} / {rss_after:.0f} MiB | {'ok' if bystander_ok else 'FAILED'} |"
    )
    for line in stats.internal[:10] + problems[:10]:
        print(f"\n    {line}")
    ok = alive and bystander_ok and not stats.internal and not problems
    if broker.log_path is not None and ok:
        broker.cleanup_log()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
