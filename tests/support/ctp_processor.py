"""A consume-transform-produce processor for the exactly-once tests, run as a subprocess so a
test can SIGKILL it in the middle.

    python -m tests.support.ctp_processor CLIENT BOOTSTRAP INPUT OUTPUT GROUP TXN_ID PARTITIONS

CLIENT is ``confluent`` or ``aiokafka``. It reads INPUT's partitions (assigned; the positions
come from GROUP's committed offsets) with read_committed, and for each poll of up to 100
records writes ``out-<value>`` to the same partition of OUTPUT and commits the consumed
offsets inside the same transaction (``send_offsets_to_transaction``). Prints
``processed N`` after every committed transaction, and exits 0 once 4 seconds pass with
nothing new to read.
"""

from __future__ import annotations

import asyncio
import sys
import time

IDLE_S = 4.0


def confluent(bootstrap: str, inp: str, out: str, group: str, txn: str, parts: int) -> None:
    from confluent_kafka import Consumer, Producer, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
    )
    consumer.assign([TopicPartition(inp, p) for p in range(parts)])
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": txn})
    producer.init_transactions(30)
    done = 0
    idle = time.monotonic()
    while time.monotonic() - idle < IDLE_S:
        msgs = [m for m in consumer.consume(100, 0.5) if not m.error()]
        if not msgs:
            continue
        idle = time.monotonic()
        producer.begin_transaction()
        for m in msgs:
            producer.produce(out, b"out-" + m.value(), partition=m.partition())
        positions = consumer.position(consumer.assignment())
        producer.send_offsets_to_transaction(positions, consumer.consumer_group_metadata(), 30)
        producer.commit_transaction(30)
        done += len(msgs)
        print(f"processed {done}", flush=True)
    consumer.close()


async def aiokafka(bootstrap: str, inp: str, out: str, group: str, txn: str, parts: int) -> None:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap,
        group_id=group,
        isolation_level="read_committed",
        enable_auto_commit=False,
        auto_offset_reset="earliest",
    )
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, transactional_id=txn)
    await consumer.start()
    await producer.start()
    consumer.assign([TopicPartition(inp, p) for p in range(parts)])
    done = 0
    idle = time.monotonic()
    while time.monotonic() - idle < IDLE_S:
        batches = await consumer.getmany(timeout_ms=500, max_records=100)
        if not any(batches.values()):
            continue
        idle = time.monotonic()
        async with producer.transaction():
            offsets = {}
            for tp, records in batches.items():
                for r in records:
                    await producer.send(out, b"out-" + r.value, partition=tp.partition)
                offsets[tp] = records[-1].offset + 1
                done += len(records)
            await producer.send_offsets_to_transaction(offsets, group)
        print(f"processed {done}", flush=True)
    await producer.stop()
    await consumer.stop()


def main() -> None:
    client, bootstrap, inp, out, group, txn, parts = sys.argv[1:8]
    if client == "confluent":
        confluent(bootstrap, inp, out, group, txn, int(parts))
    else:
        asyncio.run(aiokafka(bootstrap, inp, out, group, txn, int(parts)))


if __name__ == "__main__":
    main()
