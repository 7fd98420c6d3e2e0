"""Log compaction of compressed batches, with real clients: confluent-kafka (librdkafka) and
aiokafka producers write many updates of a few keys, and tombstones, with each codec to a
compacted topic under --data-dir; after the cleaner's passes (the second merges the cleaned
segments) a consumer from the start reads exactly the latest value of each key at its
original offset, and every batch fetched still carries the producer's codec, its base offset,
last offset delta and producer id, epoch and base sequence."""

from __future__ import annotations

import asyncio
import random
import time
from pathlib import Path
from typing import Any

import pytest

from kgroupd.broker.log.cleaner import LogCleaner
from kgroupd.broker.log.partition import now_ms
from kgroupd.broker.testing import running_server
from kgroupd.protocol.records import COMPRESSION_MASK, CONTROL_BIT, BatchHeader, parse_header
from tests.support.kafka_wire import WireClient, create_topic, fetch_request, only_partition

TOPIC = "compressed"
CODECS = {"gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}
KEYS = 40
UPDATES = 1000
DEAD = 5  # keys 0..4 end with a tombstone
ROLL = 20_000  # the last record: more than segment.bytes, alone in the active segment
CONFIGS = {
    "cleanup.policy": "compact",
    "segment.bytes": "4096",
    "min.cleanable.dirty.ratio": "0.01",
}

Message = tuple[bytes, bytes | None]


def messages() -> list[Message]:
    rnd = random.Random(7)
    out: list[Message] = []
    for n in range(UPDATES):
        key = b"k%02d" % (n % KEYS)
        out.append((key, key + b"=%04d:" % (n // KEYS) + rnd.randbytes(30).hex().encode()))
    out.extend((b"k%02d" % i, None) for i in range(DEAD))
    return out


def expected() -> dict[bytes, tuple[int, bytes | None]]:
    """key -> (offset, value) of its last message: the n-th message is at offset n."""
    return {k: (n, v) for n, (k, v) in enumerate(messages())}


def produce_confluent(bootstrap: str, codec: str) -> None:
    from confluent_kafka import Producer

    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "compression.type": codec,
            "enable.idempotence": True,
            "linger.ms": 20,
            "batch.size": 4000,
        }
    )
    for key, value in messages():
        producer.produce(TOPIC, key=key, value=value, partition=0)
    assert producer.flush(30) == 0
    producer.produce(TOPIC, key=b"~roll", value=random.randbytes(ROLL), partition=0)
    assert producer.flush(30) == 0


async def produce_aiokafka(bootstrap: str, codec: str) -> None:
    from aiokafka import AIOKafkaProducer

    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap,
        compression_type=codec,
        enable_idempotence=True,
        linger_ms=20,
        max_batch_size=4000,
    )
    await producer.start()
    try:
        sent = [
            await producer.send(TOPIC, value, key=key, partition=0) for key, value in messages()
        ]
        await asyncio.gather(*sent)
        await producer.send_and_wait(TOPIC, random.randbytes(ROLL), key=b"~roll", partition=0)
    finally:
        await producer.stop()


def consume_confluent(bootstrap: str, end: int) -> list[tuple[int, bytes, bytes | None]]:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "check", "enable.auto.commit": False}
    )
    out: list[tuple[int, bytes, bytes | None]] = []
    try:
        consumer.assign([TopicPartition(TOPIC, 0, 0)])
        deadline = time.monotonic() + 20
        while not out or out[-1][0] < end:
            assert time.monotonic() < deadline, "timed out"
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            assert msg.error() is None, msg.error()
            out.append((msg.offset(), msg.key(), msg.value()))
    finally:
        consumer.close()
    return out


async def consume_aiokafka(bootstrap: str, end: int) -> list[tuple[int, bytes, bytes | None]]:
    from aiokafka import AIOKafkaConsumer, TopicPartition

    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    tp = TopicPartition(TOPIC, 0)
    out: list[tuple[int, bytes, bytes | None]] = []
    await consumer.start()
    try:
        consumer.assign([tp])
        consumer.seek(tp, 0)
        deadline = time.monotonic() + 20
        while not out or out[-1][0] < end:
            assert time.monotonic() < deadline, "timed out"
            for msgs in (await consumer.getmany(timeout_ms=500)).values():
                out.extend((m.offset, m.key, m.value) for m in msgs)
    finally:
        await consumer.stop()
    return out


async def fetched_batches(port: int) -> list[BatchHeader]:
    """The header of every batch from offset 0 to the end, fetched as a consumer does."""
    out: list[BatchHeader] = []
    offset = 0
    async with await WireClient.connect(port) as wire:
        while True:
            body = fetch_request(TOPIC, 0, offset, max_bytes=1 << 22, partition_max_bytes=1 << 22)
            part = only_partition(await wire.request(1, 11, body))
            assert part["error_code"] == 0, part
            data = part["records"] or b""
            pos = 0
            while pos < len(data):
                header = parse_header(data, pos)
                out.append(header)
                offset = header.base_offset + header.last_offset_delta + 1
                pos += header.length
            if offset >= part["high_watermark"]:
                return out


def fields(h: BatchHeader) -> tuple[int, ...]:
    return (h.last_offset_delta, h.producer_id, h.producer_epoch, h.base_sequence)


@pytest.mark.parametrize("client", ["confluent", "aiokafka"])
@pytest.mark.parametrize("codec", list(CODECS))
async def test_compressed_batches_are_compacted_and_keep_their_codec(
    tmp_path: Path, codec: str, client: str
) -> None:
    settings: dict[str, Any] = {"data_dir": tmp_path, "log_cleaner_enable": False}
    async with running_server(**settings, log_level="warning") as server:
        bootstrap = f"127.0.0.1:{server.port}"
        async with await WireClient.connect(server.port) as wire:
            await create_topic(wire, TOPIC, 1, CONFIGS)
        if client == "confluent":
            await asyncio.to_thread(produce_confluent, bootstrap, codec)
        else:
            await produce_aiokafka(bootstrap, codec)
        end = UPDATES + DEAD  # the roll record's offset
        plog = server.broker.topics.partition(TOPIC, 0)
        assert plog is not None and plog.store is not None and plog.high_watermark == end + 1
        before = {h.base_offset: h for h in await fetched_batches(server.port)}
        data = [h for h in before.values() if h.base_offset < end]
        assert len(data) > 10 and {h.attributes & COMPRESSION_MASK for h in data} == {CODECS[codec]}
        segments_before = len(plog.store.segments)  # type: ignore[attr-defined]
        assert segments_before > 5

        cleaner = LogCleaner(server.broker.topics, 50, None)
        try:
            assert await cleaner.clean_once(now_ms())
            assert plog.cleaned_to == end
            await check(server.port, bootstrap, client, before, end)
            # a second pass, segment.bytes raised: the cleaned segments are merged into one
            server.broker.topics.set_configs(TOPIC, CONFIGS | {"segment.bytes": str(1 << 20)})
            plog.cleaned_to = 0
            assert await cleaner.clean_once(now_ms())
            assert len(plog.store.segments) == 2  # type: ignore[attr-defined]
            assert not cleaner.candidates(now_ms())
        finally:
            cleaner.close()
        await check(server.port, bootstrap, client, before, end)


async def check(
    port: int, bootstrap: str, client: str, before: dict[int, BatchHeader], end: int
) -> None:
    after = [h for h in await fetched_batches(port) if h.base_offset < end]
    assert len(after) < len([b for b in before if b < end])  # emptied batches went
    rewritten = 0
    for h in after:
        assert not h.attributes & CONTROL_BIT
        old = before[h.base_offset]
        assert h.attributes & COMPRESSION_MASK == old.attributes & COMPRESSION_MASK
        assert fields(h) == fields(old)
        assert old.producer_id >= 0  # idempotent producers: their fields were kept
        rewritten += h.record_count < old.record_count
    assert rewritten > 0
    if client == "confluent":
        got = await asyncio.to_thread(consume_confluent, bootstrap, end)
    else:
        got = await consume_aiokafka(bootstrap, end)
    assert got[-1][0] == end and got[-1][1] == b"~roll"
    assert [r[0] for r in got] == sorted({r[0] for r in got})  # each once, in offset order
    assert {k: (o, v) for o, k, v in got[:-1]} == expected()
    assert len(got) == KEYS + 1
