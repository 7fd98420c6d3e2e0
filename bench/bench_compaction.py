"""Log compaction: how fast the cleaner cleans, and what it costs produce while it runs.

    python bench/bench_compaction.py [--mib 64] [--keys 10000] [--io-limit 20000000]
                                     [--compression none|gzip|snappy|lz4|zstd]

With --data-dir (``--fsync never``, so the disk's flush is not what is measured): a
compacted topic (segment.bytes 8 MiB) gets ``--mib`` MiB of updates of ``--keys`` keys
(records of a 6-byte key and a 100-byte value, 100 a batch, ~12.5 KiB a batch) with the
cleaner off. Then, into a second, plain topic, one raw connection produces ProduceRequest
v8 frames (acks=1, one such batch each, 64 in flight) for a few seconds: the produce rate
without cleaning. The broker restarts with the cleaner on (``--log-cleaner-backoff-ms`` 100):
its first pass cleans the whole log while the same producer runs, until the ``log_cleaned``
line; the produce rate while cleaning, and the cleaner's MB/s (the bytes of log in the range
cleaned over the pass's seconds, as logged). The last row repeats it with
``--log-cleaner-io-max-bytes-per-second`` ``--io-limit`` (read plus written). In memory, the
same pass is timed in process (``_clean_memory`` on the batches, no broker). MB/s is
10**6 bytes a second.

With ``--compression`` the batches are written by aiokafka's builder with that codec and each
value is 100 hex digits of random bytes (compressing about 2:1) instead of 100 ``v``: the
cleaner decompresses every batch and compresses again those it rewrites. "log cleaned (MB)"
is the log's size as stored (compressed).
"""

from __future__ import annotations

import argparse
import asyncio
import random
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from kgroupd.broker.log.cleaner import _clean_memory  # noqa: E402
from kgroupd.broker.log.compaction import Throttle  # noqa: E402
from kgroupd.broker.log.partition import StoredBatch  # noqa: E402
from kgroupd.protocol.records import build_batch, with_base_offset  # noqa: E402
from tests.support.broker_process import BrokerProcess  # noqa: E402
from tests.support.kafka_wire import (  # noqa: E402
    WireClient,
    create_topic,
    encode_request,
    produce_request,
)
from tests.support.kafka_wire import build_batch as aiokafka_batch  # noqa: E402

MiB = 1024 * 1024
PER_BATCH = 100
VALUE = b"v" * 100


CODECS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}


def batches(keys: int, codec: int = 0) -> list[bytes]:
    """One batch per 100 keys; cycling through them updates every key once a round."""
    now = int(time.time() * 1000)
    if codec:
        rnd = random.Random(1)
        return [
            aiokafka_batch(
                [
                    (b"k%05d" % (start + i), rnd.randbytes(50).hex().encode(), [], now)
                    for i in range(PER_BATCH)
                ],
                compression=codec,
            )
            for start in range(0, keys, PER_BATCH)
        ]
    return [
        build_batch([(i, b"k%05d" % (start + i), VALUE, now) for i in range(PER_BATCH)])
        for start in range(0, keys, PER_BATCH)
    ]


async def produce(
    port: int, topic: str, frames: list[bytes], until: Callable[[int], bool]
) -> float:
    """Produce ``frames`` round and round (64 in flight) until ``until(frames sent)``; MB/s."""
    sent = 0
    window = 64
    start = time.monotonic()
    async with await WireClient.connect(port) as wire:
        i = 0
        while not until(i):
            chunk = [frames[(i + k) % len(frames)] for k in range(window)]
            i += window
            wire.writer.write(b"".join(chunk))
            await wire.writer.drain()
            for _ in chunk:
                await wire.read_frame()
            sent += sum(len(f) for f in chunk)
    return sent / (time.monotonic() - start) / 1e6


def frames_for(topic: str, data: list[bytes]) -> list[bytes]:
    return [
        encode_request(0, 8, i, produce_request(topic, 0, b, acks=1)) for i, b in enumerate(data)
    ]


def after(seconds: float) -> Callable[[int], bool]:
    deadline = time.monotonic() + seconds
    return lambda _sent: time.monotonic() >= deadline


async def on_disk(mib: int, keys: int, io_limit: int | None, codec: int = 0) -> dict[str, float]:
    data = batches(keys, codec)
    root = Path(tempfile.mkdtemp(prefix="bench-compaction-"))
    broker = BrokerProcess(root / "data")
    base = ("--fsync", "never")
    try:
        await broker.start(*base, "--log-cleaner-enable", "false")
        async with await WireClient.connect(broker.port) as wire:
            configs = {"cleanup.policy": "compact", "segment.bytes": str(8 * MiB)}
            await create_topic(wire, "compacted", 1, configs)
            await create_topic(wire, "plain", 1)
        updates = frames_for("compacted", data)
        rounds = max(1, mib * MiB // sum(len(b) for b in data))
        await produce(broker.port, "compacted", updates, lambda sent: sent >= rounds * len(updates))
        plain = frames_for("plain", data)
        idle = await produce(broker.port, "plain", plain, after(3))
        await broker.stop()

        extra = ("--log-cleaner-backoff-ms", "100")
        if io_limit is not None:
            extra += ("--log-cleaner-io-max-bytes-per-second", str(io_limit))
        await broker.start(*base, *extra)
        mark = len(broker.events)

        def cleaned(_sent: int) -> bool:
            return bool(broker.find("log_cleaned", mark))

        busy = await produce(broker.port, "plain", plain, cleaned)
        (event,) = broker.find("log_cleaned", mark)[:1]
        await broker.stop()
        return {
            "log_mb": event["bytes_cleaned"] / 1e6,
            "after_mb": event["log_bytes"] / 1e6,
            "seconds": event["seconds"],
            "cleaner_mbs": event["bytes_cleaned"] / 1e6 / event["seconds"],
            "produce_idle": idle,
            "produce_busy": busy,
        }
    finally:
        await broker.close()
        shutil.rmtree(root, ignore_errors=True)


def in_memory(mib: int, keys: int, codec: int = 0) -> dict[str, float]:
    data = batches(keys, codec)
    rounds = max(1, mib * MiB // sum(len(b) for b in data))
    stored = []
    offset = 0
    for _ in range(rounds):
        for b in data:
            raw = bytes(with_base_offset(b, offset))
            stored.append(StoredBatch(offset, offset + PER_BATCH - 1, 0, 0, raw))
            offset += PER_BATCH
    size = sum(len(s.data) for s in stored)
    start = time.monotonic()
    now = int(time.time() * 1000)
    new, _, _ = _clean_memory(stored, 0, [], now, 86_400_000, Throttle(None))
    seconds = time.monotonic() - start
    return {
        "log_mb": size / 1e6,
        "after_mb": sum(len(s.data) for s in new) / 1e6,
        "seconds": seconds,
        "cleaner_mbs": size / 1e6 / seconds,
    }


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mib", type=int, default=64)
    parser.add_argument("--keys", type=int, default=10_000)
    parser.add_argument("--io-limit", type=int, default=20_000_000)
    parser.add_argument("--compression", choices=list(CODECS), default="none")
    args = parser.parse_args()
    codec = CODECS[args.compression]
    suffix = "" if not codec else f", {args.compression}"
    print(
        "| mode | log cleaned (MB) | after (MB) | pass (s) | cleaner MB/s "
        "| produce MB/s, cleaner idle | produce MB/s, while cleaning |"
    )
    print("|---|---|---|---|---|---|---|")
    for label, limit in (
        ("--data-dir", None),
        (f"--data-dir, io limit {args.io_limit}", args.io_limit),
    ):
        label += suffix
        print(f"{label} ...", file=sys.stderr)
        r = await on_disk(args.mib, args.keys, limit, codec)
        print(
            f"| {label} | {r['log_mb']:.1f} | {r['after_mb']:.1f} | {r['seconds']:.2f} "
            f"| {r['cleaner_mbs']:.1f} | {r['produce_idle']:.1f} | {r['produce_busy']:.1f} |"
        )
    r = in_memory(args.mib, args.keys, codec)
    print(
        f"| in memory (in process, no broker{suffix}) | {r['log_mb']:.1f} | {r['after_mb']:.1f} "
        f"| {r['seconds']:.2f} | {r['cleaner_mbs']:.1f} | — | — |"
    )


if __name__ == "__main__":
    asyncio.run(main())
