from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition


async def test_aiokafka_produce_and_fetch(bootstrap: str) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap)
    await producer.start()
    try:
        for i in range(10):
            await producer.send_and_wait("smoke", key=b"k%d" % i, value=b"v%d" % i)
    finally:
        await producer.stop()
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    await consumer.start()
    try:
        tp = TopicPartition("smoke", 0)
        consumer.assign([tp])
        await consumer.seek_to_beginning(tp)
        got = []
        while len(got) < 10:
            batch = await consumer.getmany(tp, timeout_ms=2000)
            assert batch, "no records within 2 s"
            got.extend(batch[tp])
        assert [(m.offset, m.key, m.value) for m in got] == [
            (i, b"k%d" % i, b"v%d" % i) for i in range(10)
        ]
    finally:
        await consumer.stop()
