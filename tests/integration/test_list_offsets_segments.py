"""ListOffsets by timestamp answered from the segment files' time indexes (--data-dir with a
tiny --log-cache-bytes, small segment.bytes and index.interval.bytes: several segments, an
index entry every batch or two), as Kafka answers it (``LogSegment.findOffsetByTimestamp``):
the first offset whose record timestamp is at least the target, with that record's timestamp;
-1/-1 past the end; -2 the log start, -1 the end, -3 the first record with the largest
timestamp. Checked on the raw wire, with aiokafka's and confluent-kafka's ``offsets_for_times``,
for producer timestamps (CreateTime) out of order within and across batches and for
LogAppendTime, then again after a clean restart (index files read back, no batch read) and
after a kill -9 (the tail after the last index file read back) and with the index files
deleted (rebuilt from the segments).
"""

from __future__ import annotations

import asyncio
import itertools
import random
import time
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaConsumer
from aiokafka.structs import TopicPartition as AioTP
from confluent_kafka import Consumer
from confluent_kafka import TopicPartition as CkTP

from tests.support.broker_process import BrokerProcess, broker_process
from tests.support.kafka_wire import (
    WireClient,
    build_batch,
    create_topic,
    fetch_request,
    iter_records,
    list_offsets_request,
    only_partition,
    produce_request,
)

CREATE, APPEND = "created", "appended"
EARLIEST, LATEST, MAX_TIMESTAMP = -2, -1, -3
Answer = tuple[int, int]  # (offset, timestamp); (-1, -1): none


def first_at_least(records: list[tuple[int, int]], target: int) -> Answer:
    """Kafka's answer: the first record (in offset order) whose timestamp reaches ``target``."""
    return next(((o, ts) for o, ts in records if ts >= target), (-1, -1))


def max_timestamp(records: list[tuple[int, int]]) -> Answer:
    best = max(ts for _, ts in records)
    return next((o, ts) for o, ts in records if ts == best)


def targets(records: list[tuple[int, int]]) -> list[int]:
    stamps = sorted({ts for _, ts in records})
    near = {t + d for t in stamps for d in (-1, 0, 1)}
    return sorted(near | {stamps[0] - 10_000, stamps[-1] + 1, stamps[-1] + 10_000})


async def produce_created(port: int, rng: random.Random, batches: int) -> list[tuple[int, int]]:
    """Batches of 1-6 records whose timestamps go back and forth within and across batches
    (an hour ago, drifting up); returns every (offset, timestamp)."""
    base = int(time.time() * 1000) - 3_600_000
    out: list[tuple[int, int]] = []
    async with await WireClient.connect(port) as wire:
        for i in range(batches):
            around = base + 40 * i + rng.randint(-150, 150)
            stamps = [around + rng.randint(-60, 60) for _ in range(rng.randint(1, 6))]
            if i % 7 == 3:
                stamps[-1] = stamps[0]  # a tie within a batch
            batch = build_batch([(None, b"c%05d" % i + b"." * 300, [], ts) for ts in stamps])
            resp = await wire.request(0, 8, produce_request(CREATE, 0, batch))
            part = only_partition(resp)
            assert part["error_code"] == 0, part
            out += [(part["base_offset"] + k, ts) for k, ts in enumerate(stamps)]
    return out


async def produce_appended(port: int, batches: int) -> None:
    """Batches to the LogAppendTime topic, each in a later millisecond than the last (their
    producer timestamps, far in the past, are replaced by the broker's clock)."""
    async with await WireClient.connect(port) as wire:
        last = 0
        for i in range(batches):
            while int(time.time() * 1000) <= last:  # past the last batch's append time
                await asyncio.sleep(0.001)
            recs = [(None, b"a%05d" % i + b"." * 300, [], 1000 + k) for k in range(1 + i % 3)]
            resp = await wire.request(0, 8, produce_request(APPEND, 0, build_batch(recs)))
            assert only_partition(resp)["error_code"] == 0
            last = int(time.time() * 1000)


async def stored_times(port: int, topic: str) -> list[tuple[int, int]]:
    """(offset, timestamp) of every record as Fetch returns it (LogAppendTime: the batch's)."""
    out: list[tuple[int, int]] = []
    offset = 0
    async with await WireClient.connect(port) as wire:
        while True:
            resp = await wire.request(1, 11, fetch_request(topic, 0, offset))
            part = resp["responses"][0]["partitions"][0]
            assert part["error_code"] == 0, part
            got = list(iter_records(part["records"] or b""))
            out += [(r.offset, r.timestamp) for r in got if r.offset >= offset]
            if got:
                offset = got[-1].offset + 1
            if offset >= part["high_watermark"]:
                return out
            assert got, offset


async def wire_answers(port: int, topic: str, wanted: list[int]) -> dict[int, Answer]:
    out = {}
    async with await WireClient.connect(port) as wire:
        for target in wanted:
            resp = await wire.request(2, 7, list_offsets_request(topic, [0], target))
            part = only_partition(resp)
            assert part["error_code"] == 0, part
            out[target] = (part["offset"], part["timestamp"])
    return out


async def aiokafka_answers(port: int, topic: str, wanted: list[int]) -> dict[int, Answer]:
    consumer = AIOKafkaConsumer(bootstrap_servers=f"127.0.0.1:{port}", enable_auto_commit=False)
    await consumer.start()
    try:
        tp = AioTP(topic, 0)
        out = {}
        for target in wanted:
            found = (await consumer.offsets_for_times({tp: target}))[tp]
            out[target] = (-1, -1) if found is None else (found.offset, found.timestamp)
        return out
    finally:
        await consumer.stop()


def confluent_offsets(port: int, topic: str, wanted: list[int]) -> dict[int, int]:
    consumer = Consumer({"bootstrap.servers": f"127.0.0.1:{port}", "group.id": "by-time"})
    try:
        out = {}
        for target in wanted:
            (found,) = consumer.offsets_for_times([CkTP(topic, 0, target)], timeout=10)
            assert found.error is None, found.error
            out[target] = found.offset
        return out
    finally:
        consumer.close()


async def check(port: int, topic: str, records: list[tuple[int, int]], stage: str) -> None:
    wanted = targets(records)
    expected = {t: first_at_least(records, t) for t in wanted}
    assert expected[wanted[-1]] == (-1, -1)  # past the end
    got = await wire_answers(port, topic, wanted)
    wrong = {t: (got[t], expected[t]) for t in wanted if got[t] != expected[t]}
    assert not wrong, f"{stage} {topic}: (answered, expected) {dict(list(wrong.items())[:8])}"

    end = records[-1][0] + 1
    specs = await wire_answers(port, topic, [EARLIEST, LATEST, MAX_TIMESTAMP])
    assert specs[EARLIEST] == (0, -1) and specs[LATEST] == (end, -1), (stage, specs)
    assert specs[MAX_TIMESTAMP] == max_timestamp(records), (stage, topic)

    sample = [*wanted[:: max(1, len(wanted) // 40)], wanted[-1]]
    by_aio = await aiokafka_answers(port, topic, sample)
    assert by_aio == {t: expected[t] for t in sample}, f"{stage} {topic}: aiokafka"
    by_ck = await asyncio.to_thread(confluent_offsets, port, topic, sample)
    assert by_ck == {t: expected[t][0] for t in sample}, f"{stage} {topic}: confluent"


def loaded(broker: BrokerProcess) -> dict[str, Any]:
    (event,) = broker.find("topic_data_loaded", since=broker.run_start)
    return event


async def test_offsets_for_times_from_the_time_index_of_the_files(tmp_path: Path) -> None:
    rng = random.Random(1729)
    data = tmp_path / "data"
    small = {"segment.bytes": "6000", "index.interval.bytes": "700"}
    async with broker_process(data, args=("--log-cache-bytes", "1024")) as b:
        await b.start()
        async with await WireClient.connect(b.port) as wire:
            await create_topic(wire, CREATE, 1, small)
            await create_topic(
                wire, APPEND, 1, {**small, "message.timestamp.type": "LogAppendTime"}
            )
        created = await produce_created(b.port, rng, 90)
        await produce_appended(b.port, 40)
        appended = await stored_times(b.port, APPEND)
        assert len({ts for _, ts in appended}) == 40  # one broker time a batch
        assert all(ts > 10**12 for _, ts in appended)  # the broker's, not the producer's
        for topic in (CREATE, APPEND):
            assert len(list((data / "topics" / f"{topic}-0").glob("*.log"))) >= 4
        # out of order: both within a batch and across batches
        assert any(a[1] > b_[1] for a, b_ in itertools.pairwise(created))
        await check(b.port, CREATE, created, "written")
        await check(b.port, APPEND, appended, "written")

        # a clean stop: the index files are read back, no batch
        await b.stop()
        await b.start()
        assert loaded(b)["batches_read"] == 0
        await check(b.port, CREATE, created, "restarted")
        await check(b.port, APPEND, appended, "restarted")

        # kill -9 after more batches: the tail after the last index file is read back
        created += await produce_created(b.port, rng, 30)
        await produce_appended(b.port, 10)
        appended = await stored_times(b.port, APPEND)
        await b.kill()
        await b.start()
        assert loaded(b)["batches_read"] > 0
        await check(b.port, CREATE, created, "killed")
        await check(b.port, APPEND, appended, "killed")

        # the index files deleted: rebuilt from the segments
        await b.stop()
        for idx in (data / "topics").glob("*/*.idx"):
            idx.unlink()
        await b.start()
        assert loaded(b)["batches_read"] == 90 + 30 + 40 + 10
        await check(b.port, CREATE, created, "rebuilt")
        await check(b.port, APPEND, appended, "rebuilt")
        await b.stop()


async def test_a_log_start_inside_a_batch_finds_the_next_record_that_qualifies(
    tmp_path: Path,
) -> None:
    """Kafka's search goes on past a batch whose only records reaching the target are below
    the log start (moved inside it by DeleteRecords): never an offset below the start."""
    base = int(time.time() * 1000) - 60_000
    async with broker_process(tmp_path / "data", args=("--log-cache-bytes", "0")) as b:
        await b.start()
        async with await WireClient.connect(b.port) as wire:
            await create_topic(wire, CREATE, 1, {})
            for stamps in ([base + 100, base + 50, base + 50], [base + 60], [base + 200]):
                batch = build_batch([(None, b"v", [], ts) for ts in stamps])
                resp = await wire.request(0, 8, produce_request(CREATE, 0, batch))
                assert only_partition(resp)["error_code"] == 0
            delete = {
                "topics": [{"name": CREATE, "partitions": [{"partition_index": 0, "offset": 1}]}],
                "timeout_ms": 10_000,
            }
            resp = await wire.request(21, 2, delete)
            assert resp["topics"][0]["partitions"][0]["error_code"] == 0
        # offsets 1, 2 (50), 3 (60), 4 (200) are left
        answers = await wire_answers(b.port, CREATE, [base + 55, base + 100, base + 50, base])
        assert answers == {
            base + 55: (3, base + 60),
            base + 100: (4, base + 200),
            base + 50: (1, base + 50),
            base: (1, base + 50),
        }
        await b.stop()
