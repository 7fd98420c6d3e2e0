"""Fetch answers the same whether the batches come from the cache or from the segment files
(read on the event loop when small and in the page cache, else on a reader thread): two
brokers are given the same data, one with --log-cache-bytes 0 (every read from the files), one
with the default cache (every read from memory), and asked the same multi-partition Fetches,
both isolation levels: the same batches per partition (offsets, records, sizes), the same
max_bytes cut across partitions, the same high watermark, last stable offset, log start and
aborted transactions."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaProducer

from tests.support.broker_process import BrokerProcess, broker_process
from tests.support.kafka_wire import WireClient, create_topic, iter_records
from tests.support.segment_data import BATCH, MiB, produce_many

TOPIC = "same"
PARTITIONS = 3
BATCHES = 1500  # ~1 KiB batches per partition (1.5 MiB), then transactions


class _Abort(Exception):
    pass


async def write(port: int) -> None:
    async with await WireClient.connect(port) as wire:
        # one segment: a read of the files, as Kafka's, ends at its segment's end
        await create_topic(wire, TOPIC, PARTITIONS, {})
    await produce_many(port, TOPIC, PARTITIONS, BATCHES)
    producer = AIOKafkaProducer(bootstrap_servers=f"127.0.0.1:{port}", transactional_id="same-txn")
    await producer.start()
    try:
        for n in range(9):  # one record a partition a transaction; every third aborted
            try:
                async with producer.transaction():
                    for p in range(PARTITIONS):
                        await (await producer.send(TOPIC, b"t%d-%d" % (n, p), partition=p))
                    if n % 3 == 2:
                        raise _Abort
            except _Abort:
                pass
    finally:
        await producer.stop()


def fetch(offsets: list[int], max_bytes: int, part_max: int, committed: bool) -> dict[str, Any]:
    return {
        "replica_id": -1,
        "max_wait_ms": 0,
        "min_bytes": 1,
        "max_bytes": max_bytes,
        "isolation_level": int(committed),
        "session_id": 0,
        "session_epoch": -1,
        "topics": [
            {
                "topic": TOPIC,
                "partitions": [
                    {
                        "partition": p,
                        "current_leader_epoch": -1,
                        "fetch_offset": o,
                        "log_start_offset": -1,
                        "partition_max_bytes": part_max,
                    }
                    for p, o in enumerate(offsets)
                ],
            }
        ],
        "forgotten_topics_data": [],
        "rack_id": "",
    }


def shape(resp: dict[str, Any]) -> list[Any]:
    """What must be the same: per partition, every field but the records, and the records as
    (offset, value) with the batches' sizes (their timestamps differ between the brokers)."""
    out = []
    for part in resp["responses"][0]["partitions"]:
        data = part["records"] or b""
        records = [(r.offset, r.value) for r in iter_records(data)]
        fields = {k: v for k, v in part.items() if k != "records"}
        out.append((fields, len(data), records))
    return out


REQUESTS = [
    ([0, 0, 0], 50 * MiB, MiB),  # each partition its 1 MiB (reader threads)
    ([0, 100, 200], 3 * MiB // 2, MiB),  # the second cut by max_bytes, the third nothing
    ([590, 300, 5], 100 * 1024, 64 * 1024),  # small reads (on the loop)
    ([0, 0, 0], 1000, MiB),  # one batch, larger than max_bytes, to the first only
    ([BATCHES - 3] * 3, 4 * MiB, 4 * MiB),  # through the transactions
    ([BATCHES + 4] * 3, 4 * MiB, 2 * 1024),
]


async def answers(broker: BrokerProcess) -> list[Any]:
    out = []
    async with await WireClient.connect(broker.port) as wire:
        for offsets, max_bytes, part_max in REQUESTS:
            for committed in (False, True):
                resp = await wire.request(1, 11, fetch(offsets, max_bytes, part_max, committed))
                out.append(((offsets, max_bytes, part_max, committed), shape(resp)))
    return out


async def test_the_files_answer_as_the_cache(tmp_path: Path) -> None:
    got = []
    for name, args in (("files", ("--log-cache-bytes", "0")), ("cache", ())):
        async with broker_process(tmp_path / name, args=args) as b:
            await b.start()
            await write(b.port)
            got.append(await answers(b))
            await b.stop()
    files, cache = got
    for (request, from_files), (_, from_cache) in zip(files, cache, strict=True):
        assert from_files == from_cache, request
    # the requests read what they were meant to: 1 MiB a partition, a cut, aborted ones
    sizes = [[size for _, size, _ in parts] for _, parts in cache]  # two per request
    assert min(sizes[0]) > MiB - 2 * BATCH and sizes[2][2] == 0 and 0 < sizes[2][1] < MiB
    assert sizes[6] == [BATCH, 0, 0]
    assert cache[9][1][0][0]["aborted_transactions"]  # read_committed through an abort
