"""Real clients round-trip 10,000 records through the broker with every compression codec.

aiokafka, kafka-python 3 (its default, idempotent producer) and confluent-kafka each produce
keyed records with headers and explicit timestamps, read them back with manual assignment
(assign + seek to beginning), and must find every record identical and in order, with the
offsets the produce responses gave. ListOffsets (earliest, latest, by timestamp) must agree
with what was produced, and the broker must have stored the batches as the client
compressed them. A LogAppendTime topic hands back the broker's append time instead.

The blocking clients run in a thread: the broker lives on the test's event loop.
"""

from __future__ import annotations

import asyncio
import itertools
import time
import warnings
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka import TopicPartition as AioTP

from kgroupd.broker.net.server import KafkaServer
from kgroupd.protocol.records import COMPRESSION_MASK, TIMESTAMP_TYPE_BIT, parse_header
from tests.support.kafka_wire import WireClient
from tests.support.kafka_wire import create_topic as wire_create_topic

with warnings.catch_warnings():
    # kafka-python 3.0.x loads its message definitions with the deprecated
    # importlib.resources.read_text at import time; pytest runs with filterwarnings=error.
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka import KafkaConsumer, KafkaProducer
    from kafka import TopicPartition as KpTP

N_RECORDS = 10_000
CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]
CODEC_IDS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}
DEADLINE_S = 30.0
CREATE_TIME, LOG_APPEND_TIME = 0, 1

Headers = tuple[tuple[str, bytes | None], ...]


@dataclass(frozen=True)
class Rec:
    partition: int
    key: bytes
    value: bytes | None
    headers: Headers
    timestamp: int


@dataclass(frozen=True)
class Got:
    offset: int
    key: bytes | None
    value: bytes | None
    headers: Headers
    timestamp_type: int
    timestamp: int


@dataclass
class RoundTrip:
    """What one client saw: delivery reports, records read back, ListOffsets answers."""

    delivered: list[tuple[int, int]] = field(default_factory=list)  # (partition, offset)
    consumed: dict[int, list[Got]] = field(default_factory=dict)
    earliest: dict[int, int] = field(default_factory=dict)
    latest: dict[int, int] = field(default_factory=dict)
    # (partition, timestamp) -> (offset, timestamp or None when the client does not say);
    # (-1, None) when no record has a timestamp at or after the one asked for.
    by_time: dict[tuple[int, int], tuple[int, int | None]] = field(default_factory=dict)


Query = tuple[int, int]  # (partition, timestamp)
Client = Callable[[str, str, int, str, Sequence[Rec], Sequence[Query]], Awaitable[RoundTrip]]


def make_records(n: int, partitions: int, codec: str, base_ts: int) -> list[Rec]:
    """Keyed records with headers (repeated names, empty values), a few null values, and a
    timestamp one millisecond apart; spread round-robin over the partitions."""
    out = []
    for i in range(n):
        headers: list[tuple[str, bytes | None]] = [("idx", b"%d" % i), ("codec", codec.encode())]
        if i % 3 == 0:
            headers += [("dup", b"first"), ("dup", b"second")]
        if i % 11 == 0:
            headers.append(("empty", b""))
        value = None if i % 997 == 5 else b"value-%d|" % i + b"payload " * (i % 9)
        out.append(Rec(i % partitions, b"key-%05d" % i, value, tuple(headers), base_ts + i))
    return out


def queries_for(records: Sequence[Rec], partitions: int) -> list[Query]:
    """Timestamps to look up per partition: before everything, first, middle, last, a
    record's predecessor's (which lies in another partition when there are several), and
    after everything."""
    out: list[Query] = []
    for p in range(partitions):
        mine = [r for r in records if r.partition == p]
        for ts in (
            mine[0].timestamp - 1000,
            mine[0].timestamp,
            mine[len(mine) // 2].timestamp,
            mine[len(mine) // 2].timestamp - 1,
            mine[-1].timestamp,
            mine[-1].timestamp + 1,
        ):
            out.append((p, ts))
    return out


def expected_by_partition(records: Sequence[Rec], partitions: int) -> dict[int, list[Rec]]:
    out: dict[int, list[Rec]] = {p: [] for p in range(partitions)}
    for r in records:
        out[r.partition].append(r)
    return out


def _deadline_passed(start: float, what: str) -> None:
    if time.monotonic() - start > DEADLINE_S:
        raise AssertionError(f"{what} did not finish within {DEADLINE_S} s")


# aiokafka ---------------------------------------------------------------------------------


async def aiokafka_roundtrip(
    bootstrap: str,
    topic: str,
    partitions: int,
    codec: str,
    records: Sequence[Rec],
    queries: Sequence[Query],
) -> RoundTrip:
    out = RoundTrip()
    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap,
        compression_type=None if codec == "none" else codec,
        linger_ms=5,
        max_batch_size=64 * 1024,
    )
    await producer.start()
    try:
        futures = [
            await producer.send(
                topic,
                r.value,
                key=r.key,
                partition=r.partition,
                timestamp_ms=r.timestamp,
                headers=list(r.headers),
            )
            for r in records
        ]
        metas = await asyncio.gather(*futures)
    finally:
        await producer.stop()
    out.delivered = [(m.partition, m.offset) for m in metas]

    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    await consumer.start()
    try:
        tps = [AioTP(topic, p) for p in range(partitions)]
        # ListOffsets first: once partitions are assigned, every request on the connection
        # queues behind the fetcher's long poll (the broker answers in order, like Kafka).
        out.earliest = {
            tp.partition: o for tp, o in (await consumer.beginning_offsets(tps)).items()
        }
        out.latest = {tp.partition: o for tp, o in (await consumer.end_offsets(tps)).items()}
        for p, ts in queries:
            tp = AioTP(topic, p)
            found = (await consumer.offsets_for_times({tp: ts}))[tp]
            out.by_time[(p, ts)] = (-1, None) if found is None else (found.offset, found.timestamp)
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        want = {p: sum(1 for r in records if r.partition == p) for p in range(partitions)}
        got: dict[int, list[Got]] = {p: [] for p in range(partitions)}
        start = time.monotonic()
        while any(len(got[p]) < want[p] for p in got):
            _deadline_passed(start, "aiokafka consume")
            for tp, msgs in (await consumer.getmany(timeout_ms=1000)).items():
                got[tp.partition] += [
                    Got(
                        m.offset,
                        m.key,
                        m.value,
                        tuple(m.headers),
                        m.timestamp_type,
                        m.timestamp,
                    )
                    for m in msgs
                ]
        out.consumed = got
    finally:
        await consumer.stop()
    return out


# kafka-python -----------------------------------------------------------------------------


def _kafka_python_roundtrip(
    bootstrap: str,
    topic: str,
    partitions: int,
    codec: str,
    records: Sequence[Rec],
    queries: Sequence[Query],
) -> RoundTrip:
    out = RoundTrip()
    # The default producer: idempotent (acks=all), as kafka-python 3 ships it.
    producer = KafkaProducer(
        bootstrap_servers=bootstrap,
        compression_type=None if codec == "none" else codec,
        linger_ms=5,
        batch_size=64 * 1024,
    )
    try:
        futures = [
            producer.send(
                topic,
                value=r.value,
                key=r.key,
                partition=r.partition,
                timestamp_ms=r.timestamp,
                headers=list(r.headers),
            )
            for r in records
        ]
        producer.flush(timeout=DEADLINE_S)
        metas = [f.get(timeout=DEADLINE_S) for f in futures]
    finally:
        producer.close(timeout=10)
    out.delivered = [(m.partition, m.offset) for m in metas]

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False)
    try:
        tps = [KpTP(topic, p) for p in range(partitions)]
        out.earliest = {tp.partition: o for tp, o in consumer.beginning_offsets(tps).items()}
        out.latest = {tp.partition: o for tp, o in consumer.end_offsets(tps).items()}
        for p, ts in queries:
            tp = KpTP(topic, p)
            found = consumer.offsets_for_times({tp: ts}, timeout_ms=10_000)[tp]
            out.by_time[(p, ts)] = (-1, None) if found is None else (found.offset, found.timestamp)
        consumer.assign(tps)
        consumer.seek_to_beginning(*tps)
        want = {p: sum(1 for r in records if r.partition == p) for p in range(partitions)}
        got: dict[int, list[Got]] = {p: [] for p in range(partitions)}
        start = time.monotonic()
        while any(len(got[p]) < want[p] for p in got):
            _deadline_passed(start, "kafka-python consume")
            for tp, msgs in consumer.poll(timeout_ms=1000, max_records=N_RECORDS).items():
                got[tp.partition] += [
                    Got(
                        m.offset,
                        m.key,
                        m.value,
                        tuple(m.headers),
                        m.timestamp_type,
                        m.timestamp,
                    )
                    for m in msgs
                ]
        out.consumed = got
    finally:
        consumer.close(autocommit=False)
    return out


async def kafka_python_roundtrip(*args: Any) -> RoundTrip:
    return await asyncio.to_thread(_kafka_python_roundtrip, *args)


# confluent-kafka --------------------------------------------------------------------------


def _confluent_roundtrip(
    bootstrap: str,
    topic: str,
    partitions: int,
    codec: str,
    records: Sequence[Rec],
    queries: Sequence[Query],
) -> RoundTrip:
    from confluent_kafka import (
        OFFSET_BEGINNING,
        TIMESTAMP_CREATE_TIME,
        TIMESTAMP_LOG_APPEND_TIME,
        Consumer,
        Producer,
    )
    from confluent_kafka import TopicPartition as CkTP

    ts_types = {TIMESTAMP_CREATE_TIME: CREATE_TIME, TIMESTAMP_LOG_APPEND_TIME: LOG_APPEND_TIME}
    out = RoundTrip()
    errors: list[str] = []
    delivered: dict[int, tuple[int, int]] = {}

    def on_delivery(index: int) -> Callable[[Any, Any], None]:
        def report(err: Any, msg: Any) -> None:
            if err is not None:
                errors.append(f"record {index}: {err}")
            else:
                delivered[index] = (msg.partition(), msg.offset())

        return report

    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "compression.type": codec,
            "enable.idempotence": True,
            "linger.ms": 5,
            "batch.size": 64 * 1024,
        }
    )
    try:
        for i, r in enumerate(records):
            producer.produce(
                topic,
                value=r.value,
                key=r.key,
                partition=r.partition,
                timestamp=r.timestamp,
                headers=list(r.headers),
                on_delivery=on_delivery(i),
            )
            producer.poll(0)
        assert producer.flush(DEADLINE_S) == 0, "confluent producer did not deliver everything"
    finally:
        producer.close()
    assert not errors, errors[:5]
    out.delivered = [delivered[i] for i in range(len(records))]

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            # librdkafka wants a group id for a Consumer; nothing here uses the group.
            "group.id": "kgroupd-clients-test",
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
        }
    )
    try:
        for p in range(partitions):
            low, high = consumer.get_watermark_offsets(CkTP(topic, p), timeout=10, cached=False)
            out.earliest[p], out.latest[p] = low, high
        for p, ts in queries:
            (found,) = consumer.offsets_for_times([CkTP(topic, p, ts)], timeout=10)
            assert found.error is None, found.error
            out.by_time[(p, ts)] = (found.offset, None)
        consumer.assign([CkTP(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
        want = {p: sum(1 for r in records if r.partition == p) for p in range(partitions)}
        got: dict[int, list[Got]] = {p: [] for p in range(partitions)}
        start = time.monotonic()
        while any(len(got[p]) < want[p] for p in got):
            _deadline_passed(start, "confluent consume")
            # consume() waits until it has num_messages or the timeout: ask for what is left.
            left = sum(want.values()) - sum(len(g) for g in got.values())
            for m in consumer.consume(num_messages=left, timeout=1.0):
                if m.error() is not None:
                    raise AssertionError(f"confluent consumer error: {m.error()}")
                ts_type, ts = m.timestamp()
                got[m.partition()].append(
                    Got(
                        m.offset(),
                        m.key(),
                        m.value(),
                        tuple(m.headers() or ()),
                        ts_types.get(ts_type, -1),
                        ts,
                    )
                )
        out.consumed = got
    finally:
        consumer.close()
    return out


async def confluent_roundtrip(*args: Any) -> RoundTrip:
    return await asyncio.to_thread(_confluent_roundtrip, *args)


# name -> (round trip, partitions, producer is idempotent)
CLIENTS: dict[str, tuple[Client, int, bool]] = {
    "aiokafka": (aiokafka_roundtrip, 1, False),
    "kafka-python": (kafka_python_roundtrip, 3, True),
    "confluent": (confluent_roundtrip, 2, True),
}


async def create_topic(
    server: KafkaServer, name: str, partitions: int, configs: dict[str, str] | None = None
) -> None:
    async with await WireClient.connect(server.port) as wire:
        await wire_create_topic(wire, name, partitions, configs)


def stored_headers(server: KafkaServer, topic: str) -> dict[int, list[Any]]:
    logs = server.broker.topics.get(topic)
    assert logs is not None
    return {log.partition: [parse_header(b.data) for b in log.batches] for log in logs.partitions}


def now_ms() -> int:
    return int(time.time() * 1000)


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("client", list(CLIENTS))
async def test_roundtrip_every_codec(server: KafkaServer, client: str, codec: str) -> None:
    roundtrip, partitions, idempotent = CLIENTS[client]
    topic = f"rt-{client}-{codec}"
    await create_topic(server, topic, partitions)
    base_ts = now_ms() - 3_600_000
    records = make_records(N_RECORDS, partitions, codec, base_ts)
    queries = queries_for(records, partitions)
    expected = expected_by_partition(records, partitions)

    seen = await roundtrip(f"127.0.0.1:{server.port}", topic, partitions, codec, records, queries)

    # The produce responses gave every record its place in its partition, in order.
    position = {p: 0 for p in range(partitions)}
    want_delivered = []
    for r in records:
        want_delivered.append((r.partition, position[r.partition]))
        position[r.partition] += 1
    assert seen.delivered == want_delivered

    # Every record comes back identical, in order, at consecutive offsets from 0.
    for p in range(partitions):
        want = [
            Got(o, r.key, r.value, r.headers, CREATE_TIME, r.timestamp)
            for o, r in enumerate(expected[p])
        ]
        got = seen.consumed[p]
        assert len(got) == len(want), f"partition {p}: {len(got)} records, want {len(want)}"
        for g, w in zip(got, want, strict=True):
            assert g == w

    # ListOffsets: earliest, latest (one past the last record), and by timestamp.
    assert seen.earliest == {p: 0 for p in range(partitions)}
    assert seen.latest == {p: len(expected[p]) for p in range(partitions)}
    for (p, ts), (offset, found_ts) in seen.by_time.items():
        first = next(((o, r) for o, r in enumerate(expected[p]) if r.timestamp >= ts), None)
        if first is None:
            assert offset == -1, f"partition {p} at {ts}: {offset}, want none"
        else:
            assert offset == first[0], f"partition {p} at {ts}: offset {offset}, want {first[0]}"
            if found_ts is not None:
                assert found_ts == first[1].timestamp

    # The broker stored the batches as the client compressed them, and an idempotent
    # producer's batches carry its producer id and gap-free sequences from 0.
    for p, headers in stored_headers(server, topic).items():
        assert headers, f"partition {p} is empty"
        codecs = [h.attributes & COMPRESSION_MASK for h in headers]
        # A client may send a batch that compression did not shrink uncompressed.
        assert set(codecs) <= {0, CODEC_IDS[codec]}, codecs
        total = sum(h.record_count for h in headers)
        compressed = sum(
            h.record_count for h, c in zip(headers, codecs, strict=True) if c == CODEC_IDS[codec]
        )
        assert compressed >= 0.9 * total, codecs
        assert all(not h.attributes & TIMESTAMP_TYPE_BIT for h in headers)
        if idempotent:
            assert {h.producer_id for h in headers} != {-1}
            assert len({h.producer_id for h in headers}) == 1
            sequences = [(h.base_sequence, h.last_sequence) for h in headers]
            assert sequences[0][0] == 0
            for (_, last), (first, _) in itertools.pairwise(sequences):
                assert first == last + 1, f"partition {p}: sequence gap in {sequences}"
        else:
            assert {h.producer_id for h in headers} == {-1}


@pytest.mark.parametrize("client", list(CLIENTS))
async def test_log_append_time_topic(server: KafkaServer, client: str) -> None:
    """Timestamps come back as the broker's append time, typed LogAppendTime, whatever the
    producer set; ListOffsets by timestamp searches those append times."""
    roundtrip, partitions, _ = CLIENTS[client]
    topic = f"lat-{client}"
    await create_topic(server, topic, partitions, {"message.timestamp.type": "LogAppendTime"})
    create_ts = now_ms() - 86_400_000  # a day ago: never a plausible append time
    records = make_records(500, partitions, "lz4", create_ts)
    before = now_ms()
    queries = [(p, ts) for p in range(partitions) for ts in (create_ts, before)]

    seen = await roundtrip(f"127.0.0.1:{server.port}", topic, partitions, "lz4", records, queries)
    after = now_ms()

    expected = expected_by_partition(records, partitions)
    stored = stored_headers(server, topic)
    for p in range(partitions):
        got = seen.consumed[p]
        assert [(g.offset, g.key, g.value, g.headers) for g in got] == [
            (o, r.key, r.value, r.headers) for o, r in enumerate(expected[p])
        ]
        assert {g.timestamp_type for g in got} == {LOG_APPEND_TIME}
        assert all(before <= g.timestamp <= after for g in got), (before, after, got[0])
        # Each batch is stamped once: its records share the batch's append time.
        append_times = [h.max_timestamp for h in stored[p]]
        assert all(h.attributes & TIMESTAMP_TYPE_BIT for h in stored[p])
        assert sorted({g.timestamp for g in got}) == sorted(set(append_times))
        # Both lookups land on the first record: every append time is after both.
        for ts in (create_ts, before):
            offset, found_ts = seen.by_time[(p, ts)]
            assert offset == 0
            if found_ts is not None:
                assert found_ts == got[0].timestamp
