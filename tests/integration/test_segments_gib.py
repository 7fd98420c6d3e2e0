"""A GiB of topic data beyond the cache, with --data-dir and default settings (64 MiB
--log-cache-bytes, 1 GiB segment.bytes): about a million 1 KiB batches produced as pre-encoded
raw Produce frames (a batch to each of 8 partitions a request, 64 requests in flight) while the
broker's VmRSS, sampled, stays under 250 MiB; then every batch is read back from the files by
a raw reader from the start while another reads the tail, an aiokafka consumer reads a slice
at each end, and a clean restart reads no batch back.
"""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

from aiokafka import AIOKafkaConsumer
from aiokafka.structs import TopicPartition

from tests.support.broker_process import BrokerProcess, broker_process
from tests.support.kafka_wire import WireClient, create_topic
from tests.support.segment_data import MiB, RssSampler, produce_many, template, walk

TOPIC = "gib"
PARTITIONS = 8
VALUE = 954  # 1,024-byte batches
GiB = 1024**3
# KGROUPD_TEST_GIB: the data produced, in GiB (1 by default)
SIZE = int(float(os.environ.get("KGROUPD_TEST_GIB", "1")) * GiB)
RSS_BOUND = 250 * MiB
TAIL = 5000  # batches of each partition the tail reader and the consumer read


async def consume(port: int, partition: int, start: int, count: int, value_at: int) -> None:
    """``count`` records of one partition from ``start`` by aiokafka: contiguous offsets,
    each value starting with its offset."""
    consumer = AIOKafkaConsumer(
        bootstrap_servers=f"127.0.0.1:{port}",
        enable_auto_commit=False,
        fetch_max_bytes=8 * MiB,
        max_partition_fetch_bytes=4 * MiB,
    )
    await consumer.start()
    try:
        tp = TopicPartition(TOPIC, partition)
        consumer.assign([tp])
        consumer.seek(tp, start)
        expected = start
        deadline = time.monotonic() + 30
        while expected < start + count:
            assert time.monotonic() < deadline, f"consumed up to {expected} of {partition}"
            for msgs in (await consumer.getmany(timeout_ms=1000)).values():
                for m in msgs:
                    if expected >= start + count:
                        break
                    assert m.offset == expected, (m.offset, expected)
                    assert m.value is not None and m.value[:8] == b"%08d" % m.offset
                    expected += 1
    finally:
        await consumer.stop()


def loaded(broker: BrokerProcess) -> dict[str, int]:
    (event,) = broker.find("topic_data_loaded", since=broker.run_start)
    return event


async def test_a_gib_of_one_kib_batches_beyond_the_cache(tmp_path: Path) -> None:
    batch, value_at = template(VALUE)
    assert len(batch) == 1024
    per_partition = SIZE // len(batch) // PARTITIONS
    tail = min(TAIL, per_partition // 2)
    async with broker_process(tmp_path / "data") as b:
        await b.start()
        assert b.proc is not None
        async with await WireClient.connect(b.port) as wire:
            await create_topic(wire, TOPIC, PARTITIONS, {})
        async with RssSampler(b.proc.pid) as rss:
            t0 = time.monotonic()
            await produce_many(b.port, TOPIC, PARTITIONS, per_partition, VALUE)
            produced_s = time.monotonic() - t0
            data = per_partition * PARTITIONS * len(batch)
            print(f"produced {data / MiB:.0f} MiB in {produced_s:.1f} s")
            assert rss.peak < RSS_BOUND, f"VmRSS reached {rss.peak / MiB:.0f} MiB"

            # a reader from the start walks every batch of every partition (the files) while
            # one reads the tail of each (the cache and the files)
            async def from_start() -> None:
                for p in range(PARTITIONS):
                    assert await walk(b.port, TOPIC, p, 0, per_partition, value_at) == (
                        per_partition
                    )

            async def from_tail() -> None:
                for p in range(PARTITIONS):
                    first = per_partition - tail
                    got = await walk(b.port, TOPIC, p, first, per_partition, value_at, MiB)
                    assert got == tail

            t0 = time.monotonic()
            await asyncio.gather(from_start(), from_tail())
            took = time.monotonic() - t0
            print(f"read back in {took:.1f} s; peak VmRSS {rss.peak / MiB:.0f} MiB")
            await consume(b.port, 0, 0, tail, value_at)
            await consume(b.port, PARTITIONS - 1, per_partition - tail, tail, value_at)
            assert rss.peak < RSS_BOUND, f"VmRSS reached {rss.peak / MiB:.0f} MiB"

        # a clean restart reads the index files only, and serves both ends
        await b.stop()
        await b.start()
        assert loaded(b)["batches_read"] == 0, loaded(b)
        for p in (0, PARTITIONS - 1):
            assert await walk(b.port, TOPIC, p, 0, tail, value_at) == tail
            assert await walk(b.port, TOPIC, p, per_partition - 10, per_partition, value_at) == 10
        await b.stop()
