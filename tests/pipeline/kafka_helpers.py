"""Small async Kafka helpers for the Spark tests (they run on the broker's loop through
``BrokerThread.run``)."""

from __future__ import annotations

from collections.abc import Sequence

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewPartitions, NewTopic

from tests.support.broker_process import fetch_committed


async def create_topic(
    bootstrap: str, topic: str, partitions: int, configs: dict[str, str] | None = None
) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(topic, partitions, 1, topic_configs=configs or {})])
    finally:
        await admin.close()


async def add_partitions(bootstrap: str, topic: str, total: int) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_partitions({topic: NewPartitions(total_count=total)})
    finally:
        await admin.close()


async def delete_topic(bootstrap: str, topic: str) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.delete_topics([topic])
    finally:
        await admin.close()


async def produce(
    bootstrap: str,
    topic: str,
    records: Sequence[tuple[int, bytes | None, bytes, list[tuple[str, bytes]]]],
    one_batch_each: bool = False,
    compression: str | None = None,
) -> list[tuple[int, int]]:
    """(partition, key, value, headers) records; returns each one's (partition, offset).
    ``one_batch_each`` waits for each record before sending the next (one batch each);
    ``compression`` is aiokafka's compression_type (gzip, snappy, lz4, zstd)."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, compression_type=compression)
    await producer.start()
    try:
        done = []
        if one_batch_each:
            for partition, key, value, headers in records:
                meta = await producer.send_and_wait(
                    topic, value, key=key, partition=partition, headers=headers
                )
                done.append((meta.partition, meta.offset))
            return done
        futures = [
            await producer.send(topic, value, key=key, partition=partition, headers=headers)
            for partition, key, value, headers in records
        ]
        await producer.flush()
        for future in futures:
            meta = await future
            done.append((meta.partition, meta.offset))
        return done
    finally:
        await producer.stop()


async def end_offsets(bootstrap: str, topic: str, partitions: int) -> dict[int, int]:
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap)
    await consumer.start()
    try:
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        return {tp.partition: off for tp, off in (await consumer.end_offsets(tps)).items()}
    finally:
        await consumer.stop()


async def log_start_offsets(bootstrap: str, topic: str, partitions: int) -> dict[int, int]:
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap)
    await consumer.start()
    try:
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        return {tp.partition: off for tp, off in (await consumer.beginning_offsets(tps)).items()}
    finally:
        await consumer.stop()


async def committed(port: int, group: str, topic: str, partitions: int) -> dict[int, int]:
    """The group's committed offsets (OffsetFetch), ``{partition: offset}``."""
    got = await fetch_committed(port, group, topic, list(range(partitions)))
    return {p: offset for p, (offset, _meta) in got.items()}
