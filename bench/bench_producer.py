"""Records/s with aiokafka's AIOKafkaProducer, kgroupd against Tansu.

    python bench/bench_producer.py [--broker kgroupd|tansu|both] [--rounds 5]

One AIOKafkaProducer (acks=1, linger_ms=5, default 16 KiB batches, no compression) sends
``--records`` records of ``--value-bytes`` bytes (no key) to a fresh topic of ``--partitions``
partitions per round, without awaiting each send: ``await producer.send()`` only queues the
record (it waits only while the accumulator is full), and the delivery futures are gathered at
the end. records/s = records / (first send .. last delivery). Every delivery is checked.
Rounds alternate which broker goes first; medians of the rounds, ratio kgroupd / Tansu.

The client is Python (aiokafka's record builder and accumulator), so it is likely the
bottleneck here: the table shows the client's and the broker's CPU share over the timed part.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _harness as h
from aiokafka import AIOKafkaProducer


async def one_round(
    b: h.BrokerProcess, topic: str, args: argparse.Namespace
) -> tuple[float, float, float]:
    """(records/s, broker CPU share, client CPU share)."""
    h.create_topic(b.port, topic, args.partitions)
    h.wait_topic_ready(b.port, topic, args.partitions)
    producer = AIOKafkaProducer(
        bootstrap_servers=f"127.0.0.1:{b.port}",
        acks=1,
        linger_ms=args.linger_ms,
        max_batch_size=args.batch_bytes,
        enable_idempotence=False,
        request_timeout_ms=60000,
    )
    await producer.start()
    try:
        await producer.send_and_wait(topic, b"warm-up", partition=0)  # metadata, connection
        value = os.urandom(args.value_bytes)
        send = producer.send
        b0 = h.cpu_seconds(b.pid)
        c0 = time.process_time()
        t0 = time.perf_counter()
        futures = [await send(topic, value) for _ in range(args.records)]
        results = await asyncio.wait_for(asyncio.gather(*futures), timeout=120)
        elapsed = time.perf_counter() - t0
        client = time.process_time() - c0
        broker = h.cpu_seconds(b.pid) - b0
    finally:
        await producer.stop()
    per_partition: dict[int, int] = {}
    for md in results:
        per_partition[md.partition] = max(per_partition.get(md.partition, -1), md.offset)
    delivered = sum(per_partition.values()) + len(per_partition)
    if delivered != args.records + 1:  # + the warm-up record
        raise RuntimeError(f"{b.kind}: {delivered} offsets for {args.records + 1} records")
    h.delete_topic(b.port, topic)
    return args.records / elapsed, broker / elapsed, client / elapsed


async def run(args: argparse.Namespace, started: dict[str, h.BrokerProcess]) -> dict:
    kinds = list(started)
    out: dict[str, list[tuple[float, float, float]]] = {k: [] for k in kinds}
    for rnd in range(args.warmup + args.rounds):
        for kind in kinds if rnd % 2 == 0 else kinds[::-1]:
            r = await one_round(started[kind], f"producer-{rnd}", args)
            tag = "warm-up" if rnd < args.warmup else f"round {rnd - args.warmup + 1}"
            print(
                f"  {kind:8} {tag:8} {r[0]:9.0f} records/s"
                f" (cpu broker {r[1]:4.0%} client {r[2]:4.0%})",
                file=sys.stderr,
            )
            if rnd >= args.warmup:
                out[kind].append(r)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    h.add_common_args(ap)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--records", type=int, default=100_000)
    ap.add_argument("--value-bytes", type=int, default=100)
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--linger-ms", type=int, default=5)
    ap.add_argument("--batch-bytes", type=int, default=16384)
    args = ap.parse_args()
    h.apply_common_args(args)
    kinds = h.kinds_for(args.broker)
    machine = h.machine()
    with h.brokers(kinds) as started:
        res = h.uvloop_run(run(args, started))
    print(f"\n{h.command_line()}")
    print(f"{h.stamp()}; {machine}, {os.getloadavg()[0]:.2f} at the end; {h.kgroupd_revision()}")
    print(
        f"{args.records} records of {args.value_bytes} bytes, {args.partitions} partitions, "
        f"acks=1, linger_ms={args.linger_ms}, max_batch_size={args.batch_bytes}"
    )
    print("\n| broker | records/s (median) | MB/s of values | broker CPU | client CPU |")
    print("|---|---|---|---|---|")
    med = {}
    for kind, rounds in res.items():
        med[kind] = h.median([r[0] for r in rounds])
        cpu_b = h.median([r[1] for r in rounds])
        cpu_c = h.median([r[2] for r in rounds])
        mbs = med[kind] * args.value_bytes / h.MB
        print(f"| {kind} | {med[kind]:.0f} | {mbs:.1f} | {cpu_b:.0%} | {cpu_c:.0%} |")
    if len(med) == 2:
        print(f"\nkgroupd/tansu records/s: {h.ratio(med['kgroupd'], med['tansu'])}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
