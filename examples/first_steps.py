"""Produce three records to greetings, read them back as the group first-steps, commit."""

import asyncio
import sys

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

BOOTSTRAP = sys.argv[1] if len(sys.argv) > 1 else "127.0.0.1:9092"


async def main() -> None:
    producer = AIOKafkaProducer(bootstrap_servers=BOOTSTRAP)
    await producer.start()
    try:
        for n in range(3):
            meta = await producer.send_and_wait("greetings", f"hello {n}".encode(), key=b"me")
            print(f"produced hello {n}: partition {meta.partition}, offset {meta.offset}")
    finally:
        await producer.stop()

    consumer = AIOKafkaConsumer(
        "greetings",
        bootstrap_servers=BOOTSTRAP,
        group_id="first-steps",
        auto_offset_reset="earliest",
    )
    await consumer.start()
    try:
        for _ in range(3):
            msg = await consumer.getone()
            print(f"consumed {msg.value.decode()}: partition {msg.partition}, offset {msg.offset}")
        await consumer.commit()
    finally:
        await consumer.stop()


asyncio.run(main())
