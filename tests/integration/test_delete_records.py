"""DeleteRecords (API 21): the log start offset moves as Kafka moves it, ListOffsets and Fetch
follow it, real admin clients get Kafka's answers, and --data-dir keeps it across a restart."""

from __future__ import annotations

import asyncio
import warnings
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, RecordsToDelete
from confluent_kafka import KafkaException
from confluent_kafka import TopicPartition as CTopicPartition
from confluent_kafka.admin import AdminClient

from kgroupd.broker.net.server import KafkaServer
from kgroupd.broker.testing import ThreadedBroker, running_server
from kgroupd.protocol.errors import ErrorCode
from tests.support.kafka_wire import (
    WireClient,
    build_batch,
    create_topic,
    fetch_request,
    list_offsets_request,
    only_partition,
    produce_request,
)

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)  # kafka-python 3.0's JSON loading
    from kafka import KafkaAdminClient, KafkaConsumer
    from kafka import TopicPartition as KTopicPartition
    from kafka.errors import OffsetOutOfRangeError


def delete_request(topic: str, offsets: dict[int, int]) -> dict[str, Any]:
    return {
        "topics": [
            {
                "name": topic,
                "partitions": [{"partition_index": p, "offset": o} for p, o in offsets.items()],
            }
        ],
        "timeout_ms": 10_000,
    }


async def produce(wire: WireClient, topic: str, partition: int, count: int, per_batch: int) -> None:
    for i in range(0, count, per_batch):
        batch = build_batch([(None, b"v%d" % (i + j), []) for j in range(per_batch)])
        resp = await wire.request(0, 8, produce_request(topic, partition, batch))
        assert only_partition(resp)["error_code"] == 0


async def earliest(wire: WireClient, topic: str, partition: int = 0) -> int:
    resp = await wire.request(2, 5, list_offsets_request(topic, [partition], -2))
    return int(only_partition(resp)["offset"])


async def test_delete_records_rules_on_the_wire(server: KafkaServer) -> None:
    async with await WireClient.connect(server.port) as wire:
        await create_topic(wire, "dr", 2)
        await create_topic(wire, "compacted", 1, {"cleanup.policy": "compact"})
        await produce(wire, "dr", 0, 10, per_batch=2)  # batches at 0, 2, 4, 6, 8
        for version in (0, 1, 2):
            assert (await wire.request(21, version, delete_request("dr", {1: 0})))["topics"] == [
                {
                    "name": "dr",
                    "partitions": [{"partition_index": 1, "low_watermark": 0, "error_code": 0}],
                }
            ]
        # Inside a batch: the start is exactly the offset asked for, the batch stays.
        resp = await wire.request(21, 2, delete_request("dr", {0: 5}))
        assert only_partition(resp) == {"partition_index": 0, "low_watermark": 5, "error_code": 0}
        assert await earliest(wire, "dr") == 5
        log = server.broker.topics.partition("dr", 0)
        assert log is not None and log.batches[0].base_offset == 4
        # Lower than the start: nothing moves, the answer is the current start.
        resp = await wire.request(21, 2, delete_request("dr", {0: 2}))
        assert only_partition(resp)["low_watermark"] == 5
        # A fetch below the start is out of range; at it, the batch holding it comes back.
        fetched = only_partition(await wire.request(1, 12, fetch_request("dr", 0, 4)))
        assert fetched["error_code"] == ErrorCode.OFFSET_OUT_OF_RANGE
        fetched = only_partition(await wire.request(1, 12, fetch_request("dr", 0, 5)))
        assert (fetched["error_code"], fetched["log_start_offset"]) == (0, 5)
        assert fetched["records"]
        # Beyond the high watermark, below -1, unknown topic or partition, compacted topic.
        cases = [
            ("dr", 0, 11, ErrorCode.OFFSET_OUT_OF_RANGE),
            ("dr", 0, -2, ErrorCode.OFFSET_OUT_OF_RANGE),
            ("dr", 7, 0, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
            ("nope", 0, 0, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
            ("compacted", 0, 0, ErrorCode.POLICY_VIOLATION),
            ("__consumer_offsets", 0, 0, ErrorCode.INVALID_TOPIC_EXCEPTION),
        ]
        for topic, partition, offset, code in cases:
            resp = await wire.request(21, 1, delete_request(topic, {partition: offset}))
            assert only_partition(resp) == {
                "partition_index": partition,
                "low_watermark": -1,
                "error_code": code,
            }, (topic, partition, offset)
        assert await earliest(wire, "dr") == 5
        # -1: the high watermark; everything is gone, producing goes on after it.
        resp = await wire.request(21, 2, delete_request("dr", {0: -1}))
        assert only_partition(resp)["low_watermark"] == 10
        assert await earliest(wire, "dr") == 10
        fetched = only_partition(await wire.request(1, 12, fetch_request("dr", 0, 10)))
        assert (fetched["error_code"], fetched["records"] or b"") == (0, b"")
        await produce(wire, "dr", 0, 1, per_batch=1)
        fetched = only_partition(await wire.request(1, 12, fetch_request("dr", 0, 10)))
        assert fetched["error_code"] == 0 and fetched["high_watermark"] == 11


def test_kafka_python_delete_records_then_consumes_from_the_new_start() -> None:
    with ThreadedBroker(create_topics=["kp-dr:1"]) as broker:
        _produce_sync(broker, "kp-dr", 20)
        admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
        try:
            tp = KTopicPartition("kp-dr", 0)
            result = admin.delete_records({tp: 12})
            assert result[tp]["low_watermark"] == 12
            with pytest.raises(OffsetOutOfRangeError):
                admin.delete_records({tp: 21})
        finally:
            admin.close()
        consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap, auto_offset_reset="earliest")
        try:
            consumer.assign([tp])
            consumer.seek_to_beginning(tp)
            assert consumer.position(tp) == 12  # ListOffsets earliest
            got: list[int] = []
            while len(got) < 8:
                for records in consumer.poll(timeout_ms=2000).values():
                    got += [r.offset for r in records]
            assert got == list(range(12, 20))
        finally:
            consumer.close()


def test_confluent_delete_records() -> None:
    with ThreadedBroker(create_topics=["ck-dr:2"]) as broker:
        _produce_sync(broker, "ck-dr", 10)
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        futures = admin.delete_records(
            [CTopicPartition("ck-dr", 0, 7), CTopicPartition("ck-dr", 1, -1)],
            request_timeout=10,
        )
        low = {tp.partition: fut.result(10).low_watermark for tp, fut in futures.items()}
        assert low == {0: 7, 1: 0}
        (fut,) = admin.delete_records([CTopicPartition("ck-dr", 0, 11)]).values()
        with pytest.raises(KafkaException) as info:
            fut.result(10)
        assert info.value.args[0].name() == "OFFSET_OUT_OF_RANGE"
        (fut,) = admin.delete_records([CTopicPartition("ck-dr", 0, 3)]).values()
        assert fut.result(10).low_watermark == 7  # below the start: unchanged


async def test_aiokafka_delete_records() -> None:
    async with running_server(log_level="warning", create_topics=_specs("aio-dr:1")) as server:
        bootstrap = f"127.0.0.1:{server.port}"
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap)
        await producer.start()
        try:
            for i in range(6):
                await producer.send_and_wait("aio-dr", b"%d" % i)
        finally:
            await producer.stop()
        admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
        await admin.start()
        try:
            tp = TopicPartition("aio-dr", 0)
            result = await admin.delete_records({tp: RecordsToDelete(4)}, timeout_ms=5000)
            assert result[tp] == 4  # aiokafka answers the low watermark itself
        finally:
            await admin.close()


def test_the_new_log_start_survives_a_restart(tmp_path: Path) -> None:
    with ThreadedBroker(create_topics=["keep:1"], data_dir=tmp_path) as broker:
        _produce_sync(broker, "keep", 10)
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        (fut,) = admin.delete_records([CTopicPartition("keep", 0, 6)]).values()
        assert fut.result(10).low_watermark == 6
        broker.restart()
        assert broker.server is not None
        log = broker.server.broker.topics.partition("keep", 0)
        assert log is not None
        assert (log.log_start_offset, log.high_watermark) == (6, 10)
        consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap)
        try:
            tp = KTopicPartition("keep", 0)
            consumer.assign([tp])
            consumer.seek_to_beginning(tp)
            assert consumer.position(tp) == 6
        finally:
            consumer.close()


def _specs(*names: str) -> tuple[Any, ...]:
    from kgroupd.broker.config.settings import TopicSpec

    return tuple(TopicSpec(n.split(":")[0], int(n.split(":")[1])) for n in names)


def _produce_sync(broker: ThreadedBroker, topic: str, count: int) -> None:
    """``count`` single-record batches to partition 0, over the wire from this thread."""

    async def run() -> None:
        port = int(broker.bootstrap.rsplit(":", 1)[1])
        async with await WireClient.connect(port) as wire:
            await produce(wire, topic, 0, count, per_batch=1)

    asyncio.run(run())
