"""Bad input closes (or answers) that one connection; everyone else keeps being served."""

from __future__ import annotations

import asyncio
import struct
from collections.abc import AsyncIterator

import pytest
import pytest_asyncio
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from kgroupd.broker.net.server import KafkaServer
from kgroupd.protocol.messages import lookup
from tests.support.kafka_wire import WireClient, create_topic, fetch_request


def request(api_key: int, version: int, corr: int, body: bytes, client: bytes = b"t") -> bytes:
    header = struct.pack(">hhih", api_key, version, corr, len(client)) + client
    if lookup(api_key, version) is not None and lookup(api_key, version).flexible:  # type: ignore[union-attr]
        header += b"\x00"
    payload = header + body
    return struct.pack(">i", len(payload)) + payload


async def read_response(reader: asyncio.StreamReader) -> tuple[int, bytes]:
    size = struct.unpack(">i", await asyncio.wait_for(reader.readexactly(4), 10))[0]
    data = await asyncio.wait_for(reader.readexactly(size), 10)
    return struct.unpack(">i", data[:4])[0], data[4:]


async def assert_closed_by_broker(reader: asyncio.StreamReader) -> None:
    assert await asyncio.wait_for(reader.read(), 10) == b"", "broker did not close"


class Bystander:
    """A second client that produces and fetches while the bad input arrives."""

    def __init__(self, bootstrap: str) -> None:
        self.bootstrap = bootstrap
        self.sent = 0

    async def __aenter__(self) -> Bystander:
        self.producer = AIOKafkaProducer(bootstrap_servers=self.bootstrap)
        self.consumer = AIOKafkaConsumer(bootstrap_servers=self.bootstrap)
        await self.producer.start()
        await self.consumer.start()
        self.tp = TopicPartition("bystander", 0)
        await self.round()
        self.consumer.assign([self.tp])
        await self.consumer.seek_to_beginning(self.tp)
        return self

    async def round(self) -> None:
        await self.producer.send_and_wait("bystander", b"%d" % self.sent)
        self.sent += 1

    async def check(self) -> None:
        """Produce once more and read everything so far back, in order."""
        await self.round()
        got: list[bytes] = []
        self.consumer.seek(self.tp, 0)
        while len(got) < self.sent:
            batch = await self.consumer.getmany(self.tp, timeout_ms=5000)
            assert batch, "bystander fetched nothing within 5 s"
            got += [m.value for m in batch[self.tp] if m.value is not None]
        assert got == [b"%d" % i for i in range(self.sent)]

    async def __aexit__(self, *exc: object) -> None:
        await self.producer.stop()
        await self.consumer.stop()


@pytest_asyncio.fixture
async def bystander(bootstrap: str) -> AsyncIterator[Bystander]:
    async with Bystander(bootstrap) as b:
        yield b


async def connect(server: KafkaServer) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    return await asyncio.open_connection("127.0.0.1", server.port)


@pytest.mark.parametrize(
    "payload",
    [
        pytest.param(b"\xde\xad\xbe\xef" + bytes(range(60)), id="garbage-negative-size"),
        pytest.param(struct.pack(">i", -1), id="negative-size"),
        pytest.param(struct.pack(">i", 200 * 1024 * 1024) + b"x" * 100, id="over-size-limit"),
        pytest.param(struct.pack(">i", 3) + b"abc", id="frame-shorter-than-header"),
        pytest.param(request(999, 0, 1, b""), id="unknown-api-key"),
        pytest.param(request(3, 99, 1, b""), id="unsupported-version"),
        pytest.param(request(-1, 0, 1, b""), id="negative-api-key"),
        # Metadata v1 announcing 5 topic names and carrying none: a truncated body.
        pytest.param(request(3, 1, 1, struct.pack(">i", 5)), id="truncated-body"),
        pytest.param(
            struct.pack(">i", 12) + struct.pack(">hhih", 3, 1, 1, 40) + b"ab",
            id="client-id-overruns-frame",
        ),
    ],
)
async def test_bad_frame_closes_only_that_connection(
    server: KafkaServer, bystander: Bystander, payload: bytes
) -> None:
    reader, writer = await connect(server)
    # A good request first, pipelined with the bad one: it must still be answered.
    writer.write(request(18, 0, 7, b"") + payload)
    corr, _ = await read_response(reader)
    assert corr == 7
    await assert_closed_by_broker(reader)
    writer.close()
    await bystander.check()


async def test_bytes_after_a_request_body_are_ignored_as_kafka_does(
    server: KafkaServer, bystander: Bystander
) -> None:
    """Kafka parses a request's fields and ignores what follows (librdkafka's Metadata v13
    carries three such bytes): answered, and the connection stays open."""
    reader, writer = await connect(server)
    writer.write(request(18, 0, 7, b"extra"))
    assert (await read_response(reader))[0] == 7
    # librdkafka 2.x's all-topics Metadata v13, as it sends it (header v2, client "rdkafka")
    writer.write(bytes.fromhex("000000190003000d00000008000772646b61666b610000000000000000"))
    corr, body = await read_response(reader)
    assert corr == 8
    answer = lookup(3, 13).decode_response(body, 1)  # type: ignore[union-attr]
    assert answer["brokers"] and answer["error_code"] == 0
    writer.close()
    await bystander.check()


async def test_truncated_frame_then_hangup(server: KafkaServer, bystander: Bystander) -> None:
    _, writer = await connect(server)
    writer.write(struct.pack(">i", 100) + b"only ten b")
    await writer.drain()
    await bystander.check()
    writer.close()
    await writer.wait_closed()
    await bystander.check()
    assert server.connections  # the bystander's own connections are still there


async def test_unsupported_api_versions_version_is_answered_and_stays_open(
    server: KafkaServer, bystander: Bystander
) -> None:
    reader, writer = await connect(server)
    writer.write(request(18, 99, 5, b"\x00\x00\x00"))
    corr, body = await read_response(reader)
    assert corr == 5
    resp = lookup(18, 0).decode_response(body)  # type: ignore[union-attr]
    assert resp["error_code"] == 35
    ranges = {k["api_key"]: (k["min_version"], k["max_version"]) for k in resp["api_keys"]}
    assert ranges[18] == (0, 4)
    assert ranges[12][0] == 0
    # The connection is still usable.
    writer.write(request(18, 3, 6, b"\x01\x01\x00"))
    corr, body = await read_response(reader)
    assert corr == 6
    writer.close()
    await bystander.check()


async def test_many_bad_clients_at_once(server: KafkaServer, bystander: Bystander) -> None:
    async def bad(i: int) -> None:
        reader, writer = await connect(server)
        writer.write(struct.pack(">i", -i - 1))
        await assert_closed_by_broker(reader)
        writer.close()

    await asyncio.gather(*(bad(i) for i in range(50)))
    await bystander.check()


async def test_hangup_during_a_long_poll_is_noticed_at_once(server: KafkaServer) -> None:
    wire = await WireClient.connect(server.port)
    await create_topic(wire, "idle")
    before = len(server.connections)
    await wire.send(1, 11, fetch_request("idle", 0, 0, max_wait_ms=30_000))
    await wire.close()
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 5
    # Polling an observable count: the broker offers no event for a connection going away.
    while len(server.connections) >= before and loop.time() < deadline:
        await asyncio.sleep(0.01)
    assert len(server.connections) < before, "the parked Fetch kept the dead connection"
    assert all(not log.waiters for log in server.broker.topics.topics["idle"].partitions)


async def test_old_produce_versions_are_advertised_but_refused(server: KafkaServer) -> None:
    wire = await WireClient.connect(server.port)
    try:
        await create_topic(wire, "old")
        body = {
            "acks": 1,
            "timeout_ms": 1000,
            "topic_data": [{"name": "old", "partition_data": [{"index": 0, "records": b"x" * 40}]}],
        }
        for version in (0, 1, 2):
            resp = await wire.request(0, version, body)
            (part,) = resp["responses"][0]["partition_responses"]
            assert part["error_code"] == 35  # UNSUPPORTED_VERSION
        assert server.broker.topics.topics["old"].partitions[0].high_watermark == 0
    finally:
        await wire.close()
