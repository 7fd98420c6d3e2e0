"""Two named listeners on two loopback addresses: each is reached by its own name, and
Metadata and FindCoordinator answer with the advertised address of the listener the request
came in on, as Kafka does; real clients produce and consume through each."""

from __future__ import annotations

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

from kgroupd.broker.testing import running_server
from tests.support.kafka_wire import WireClient, create_topic


async def test_each_listener_advertises_its_own_address() -> None:
    async with running_server(
        log_level="warning",
        listeners="INTERNAL://127.0.0.1:0,EXTERNAL://127.0.0.2:0",
        listener_security_protocol_map="INTERNAL:PLAINTEXT,EXTERNAL:PLAINTEXT",
        advertised_listeners="EXTERNAL://127.0.0.2:0",
    ) as srv:
        (internal, p1, a1), (external, p2, a2) = srv.bound
        assert (internal.name, external.name) == ("INTERNAL", "EXTERNAL")
        assert (a1, a2) == (("127.0.0.1", p1), ("127.0.0.2", p2))
        seen = {}
        for host, port in (a1, a2):
            async with await WireClient.connect(port, host=host) as wire:
                meta = await wire.request(
                    3, 12, {"topics": None, "allow_auto_topic_creation": True}
                )
                (broker,) = meta["brokers"]
                found = await wire.request(10, 4, {"key_type": 0, "coordinator_keys": ["g"]})
                (coord,) = found["coordinators"]
                seen[host] = ((broker["host"], broker["port"]), (coord["host"], coord["port"]))
                if host == "127.0.0.1":
                    await create_topic(wire, "l", 1)
        assert seen == {"127.0.0.1": (a1, a1), "127.0.0.2": (a2, a2)}
        # a real client through each listener
        for host, port in (a1, a2):
            bootstrap = f"{host}:{port}"
            producer = AIOKafkaProducer(bootstrap_servers=bootstrap)
            await producer.start()
            try:
                await producer.send_and_wait("l", host.encode(), partition=0)
            finally:
                await producer.stop()
        consumer = AIOKafkaConsumer(
            "l", bootstrap_servers=f"127.0.0.2:{p2}", auto_offset_reset="earliest", group_id="lg"
        )
        await consumer.start()
        try:
            got = await consumer.getmany(timeout_ms=5000)
            values = sorted(r.value for recs in got.values() for r in recs)
        finally:
            await consumer.stop()
        assert values == [b"127.0.0.1", b"127.0.0.2"]
