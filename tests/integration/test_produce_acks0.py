"""acks=0: a Produce is never answered, but if any of its partitions failed the broker closes
the connection once the partitions that succeeded are appended, as Kafka's
KafkaApis.handleProduceRequest does (so that the producer notices and refreshes its
metadata). An acks=0 Produce that failed nowhere leaves the connection open.

Raw Produce frames (tests/support/kafka_wire.py): a real client checks its metadata before it
names a partition, so it cannot be made to send most of these. A confluent-kafka producer
or kafka-python producer whose batch the topic refuses (too large) is closed and goes on
delivering.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from structlog.testing import capture_logs

from kgroupd.broker.config.settings import TopicSpec
from kgroupd.broker.net.server import KafkaServer
from kgroupd.broker.testing import running_server
from kgroupd.protocol.errors import ErrorCode
from tests.support.kafka_wire import (
    WireClient,
    build_batch,
    create_topic,
    fetch_request,
    iter_records,
    list_offsets_request,
    only_partition,
)

TOPIC, PARTITIONS = "acks0", 2
PRODUCE, FETCH, LIST_OFFSETS, API_VERSIONS = 0, 1, 2, 18
SOFTWARE = {"client_software_name": "t", "client_software_version": "1"}


@pytest.fixture
def logs() -> Iterator[list[dict[str, Any]]]:
    with capture_logs() as captured:  # before the broker starts, so its loggers use it
        yield captured


def closings(logs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The errors of each acks=0 Produce that closed its connection, as logged."""
    return [e["errors"] for e in logs if e["event"] == "produce_acks0_failed_closing"]


@pytest_asyncio.fixture
async def server() -> AsyncIterator[KafkaServer]:
    async with running_server(
        log_level="warning", create_topics=(TopicSpec(TOPIC, PARTITIONS),)
    ) as srv:
        yield srv


def produce_body(
    parts: dict[tuple[str, int], bytes], acks: int = 0, txn: str | None = None
) -> dict[str, Any]:
    """One Produce: each (topic, partition) with its batch."""
    topics: dict[str, list[dict[str, Any]]] = {}
    for (name, index), batch in parts.items():
        topics.setdefault(name, []).append({"index": index, "records": batch})
    return {
        "transactional_id": txn,
        "acks": acks,
        "timeout_ms": 10_000,
        "topic_data": [{"name": n, "partition_data": p} for n, p in topics.items()],
    }


def one(value: bytes) -> bytes:
    return build_batch([(None, value, [])])


async def values(port: int, topic: str, partition: int) -> list[bytes]:
    """Every record value of the partition, read over a fresh connection."""
    async with await WireClient.connect(port) as c:
        answer = await c.request(FETCH, 11, fetch_request(topic, partition, 0))
    part = only_partition(answer)
    assert part["error_code"] == 0
    return [r.value for r in iter_records(part["records"] or b"")]


async def end_offset(port: int, topic: str, partition: int) -> int:
    async with await WireClient.connect(port) as c:
        answer = await c.request(LIST_OFFSETS, 7, list_offsets_request(topic, [partition], -1))
    (entry,) = answer["topics"][0]["partitions"]
    assert entry["error_code"] == 0
    return int(entry["offset"])


async def closed_unanswered(c: WireClient) -> None:
    """The broker closes the connection without answering anything."""
    with pytest.raises((asyncio.IncompleteReadError, ConnectionResetError)):
        await c.read_frame()


async def still_open(c: WireClient) -> None:
    """Nothing was answered before, and the connection serves the next request."""
    corr = await c.send(API_VERSIONS, 3, SOFTWARE)
    assert (await c.receive(API_VERSIONS, 3, corr))["error_code"] == 0


@pytest.mark.parametrize("version", [3, 9, 12])
async def test_a_bad_partition_closes_the_connection_and_the_good_one_is_kept(
    server: KafkaServer, version: int
) -> None:
    body = produce_body({(TOPIC, 0): one(b"kept"), (TOPIC, PARTITIONS): one(b"nowhere")})
    async with (
        await WireClient.connect(server.port) as c,
        await WireClient.connect(server.port) as bystander,
    ):
        await c.send(PRODUCE, version, body)
        await closed_unanswered(c)
        await still_open(bystander)  # everyone else is served
    assert await values(server.port, TOPIC, 0) == [b"kept"]


async def test_an_unknown_topic_closes_the_connection(
    logs: list[dict[str, Any]], server: KafkaServer
) -> None:
    body = produce_body({("no-such-topic", 0): one(b"x"), (TOPIC, 1): one(b"kept")})
    async with await WireClient.connect(server.port) as c:
        await c.send(PRODUCE, 9, body)
        await closed_unanswered(c)
    assert await values(server.port, TOPIC, 1) == [b"kept"]
    (line,) = [e for e in logs if e["event"] == "produce_acks0_failed_closing"]
    assert line["log_level"] == "info"
    assert line["errors"] == {"no-such-topic-0": "UNKNOWN_TOPIC_OR_PARTITION"}
    assert server.stats is not None  # the metrics count the request's error
    assert server.stats.errors == {(PRODUCE, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION): 1}


async def test_all_good_is_unanswered_and_the_connection_stays_open(server: KafkaServer) -> None:
    body = produce_body({(TOPIC, 0): one(b"a"), (TOPIC, 1): one(b"b")})
    async with await WireClient.connect(server.port) as c:
        await c.send(PRODUCE, 9, body)
        await c.send(PRODUCE, 9, body)
        await still_open(c)  # the first answer read is the ApiVersions one
    assert await values(server.port, TOPIC, 0) == [b"a", b"a"]


async def test_a_batch_refused_by_validation_closes_the_connection(server: KafkaServer) -> None:
    corrupt = bytearray(one(b"bad"))
    corrupt[-1] ^= 0xFF  # the CRC no longer matches: CORRUPT_MESSAGE
    body = produce_body({(TOPIC, 0): bytes(corrupt), (TOPIC, 1): one(b"kept")})
    async with await WireClient.connect(server.port) as c:
        await c.send(PRODUCE, 9, body)
        await closed_unanswered(c)
        # with acks=1 the same request is answered: what closed the connection was its error
    async with await WireClient.connect(server.port) as c:
        answer = await c.request(PRODUCE, 9, produce_body({(TOPIC, 0): bytes(corrupt)}, acks=1))
        assert only_partition(answer)["error_code"] == ErrorCode.CORRUPT_MESSAGE
    assert await values(server.port, TOPIC, 0) == []
    assert await values(server.port, TOPIC, 1) == [b"kept"]


async def test_a_too_large_batch_closes_the_connection(server: KafkaServer) -> None:
    batch = one(b"x" * 200)
    async with await WireClient.connect(server.port) as c:
        await create_topic(c, "small", configs={"max.message.bytes": str(len(batch) - 1)})
        await c.send(PRODUCE, 9, produce_body({("small", 0): batch, (TOPIC, 0): one(b"kept")}))
        await closed_unanswered(c)
    assert await end_offset(server.port, "small", 0) == 0
    assert await values(server.port, TOPIC, 0) == [b"kept"]


async def test_an_off_loop_batch_is_appended_before_the_close(server: KafkaServer) -> None:
    """A compressed batch expanding past 1 MiB is validated on a worker thread: the request
    waits for it, then the connection closes (the bad partition's error)."""
    big = build_batch([(None, bytes(2 << 20), [])], compression=1)  # gzip
    body = produce_body({(TOPIC, 0): big, (TOPIC, PARTITIONS): one(b"nowhere")})
    async with await WireClient.connect(server.port) as c:
        await c.send(PRODUCE, 9, body)
        await closed_unanswered(c)
    assert await end_offset(server.port, TOPIC, 0) == 1
    assert server.stats is not None  # counted with its error, not as an internal one
    assert server.stats.errors == {(PRODUCE, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION): 1}
    good = {(TOPIC, 0): big}
    async with await WireClient.connect(server.port) as c:  # all good, off the loop: open
        await c.send(PRODUCE, 9, produce_body(good))
        await still_open(c)
    assert await end_offset(server.port, TOPIC, 0) == 2


async def test_requests_pipelined_behind_it_are_dropped(server: KafkaServer) -> None:
    """As Kafka: the connection closes at the failed request; what came before is answered,
    nothing after it."""
    async with await WireClient.connect(server.port) as c:
        corrs = await c.send_many(
            [
                (API_VERSIONS, 3, SOFTWARE),
                (PRODUCE, 9, produce_body({(TOPIC, PARTITIONS): one(b"nowhere")})),
                (PRODUCE, 9, produce_body({(TOPIC, 1): one(b"after")})),
                (API_VERSIONS, 3, SOFTWARE),
            ]
        )
        await c.receive(API_VERSIONS, 3, corrs[0])
        await closed_unanswered(c)
    assert await end_offset(server.port, TOPIC, 1) == 0


async def test_under_fsync_always_the_answers_before_are_sent_then_it_closes(
    tmp_path: Path,
) -> None:
    """An acks=1 Produce's answer waits for its fsync; the failed acks=0 one behind it closes
    the connection only once that answer is sent. An acks=0 Produce that failed nowhere is
    still unanswered."""
    async with running_server(
        log_level="warning",
        data_dir=tmp_path,
        fsync="always",
        create_topics=(TopicSpec(TOPIC, PARTITIONS),),
    ) as srv:
        async with await WireClient.connect(srv.port) as c:
            await c.send(PRODUCE, 9, produce_body({(TOPIC, 0): one(b"a")}))
            await still_open(c)
            corrs = await c.send_many(
                [
                    (PRODUCE, 9, produce_body({(TOPIC, 0): one(b"b")}, acks=1)),
                    (PRODUCE, 9, produce_body({(TOPIC, PARTITIONS): one(b"x")})),
                ]
            )
            answer = await c.receive(PRODUCE, 9, corrs[0])
            assert only_partition(answer)["error_code"] == 0
            await closed_unanswered(c)
        assert await values(srv.port, TOPIC, 0) == [b"a", b"b"]


async def test_a_topic_the_principal_may_not_write_closes_the_connection() -> None:
    async with running_server(
        log_level="warning", authorizer="acl", create_topics=(TopicSpec(TOPIC, 1),)
    ) as srv:
        async with await WireClient.connect(srv.port) as c:
            await c.send(PRODUCE, 9, produce_body({(TOPIC, 0): one(b"x")}))
            await closed_unanswered(c)
        async with await WireClient.connect(srv.port) as c:  # acks=1: the error it was
            answer = await c.request(PRODUCE, 9, produce_body({(TOPIC, 0): one(b"x")}, acks=1))
            assert only_partition(answer)["error_code"] == ErrorCode.TOPIC_AUTHORIZATION_FAILED


async def test_a_confluent_producer_is_closed_and_goes_on_delivering(
    logs: list[dict[str, Any]], server: KafkaServer
) -> None:
    """librdkafka with acks=0: a batch the topic refuses (over its max.message.bytes) closes
    the producer's connection; it reconnects and delivers what it produces next."""
    from confluent_kafka import Producer

    async with await WireClient.connect(server.port) as c:
        await create_topic(c, "capped", configs={"max.message.bytes": "2000"})
    producer = Producer(
        {
            "bootstrap.servers": f"127.0.0.1:{server.port}",
            "acks": 0,
            "linger.ms": 0,
            "compression.type": "none",
        }
    )

    def send(value: bytes) -> None:
        producer.produce("capped", value, partition=0)
        assert producer.flush(30) == 0

    await asyncio.to_thread(send, b"before")
    await wait_for(lambda: end_offset(server.port, "capped", 0), 1)
    assert closings(logs) == []
    await asyncio.to_thread(send, b"x" * 10_000)  # refused: MESSAGE_TOO_LARGE

    async def closed() -> list[dict[str, Any]]:
        return closings(logs)

    await wait_for(closed, [{"capped-0": "MESSAGE_TOO_LARGE"}])
    await asyncio.to_thread(send, b"after")
    await wait_for(lambda: end_offset(server.port, "capped", 0), 2)
    assert await values(server.port, "capped", 0) == [b"before", b"after"]


@pytest.mark.filterwarnings("ignore:(read_text|open_text) is deprecated:DeprecationWarning")
async def test_a_kafka_python_producer_is_closed_and_goes_on_delivering(
    logs: list[dict[str, Any]], server: KafkaServer
) -> None:
    from kafka import KafkaProducer

    async with await WireClient.connect(server.port) as c:
        await create_topic(c, "capped", configs={"max.message.bytes": "2000"})
    address = f"127.0.0.1:{server.port}"  # it bootstraps in its constructor: not on the loop
    producer = await asyncio.to_thread(KafkaProducer, bootstrap_servers=address, acks=0)

    def send(value: bytes) -> None:
        producer.send("capped", value, partition=0)
        producer.flush(30)

    try:
        await asyncio.to_thread(send, b"before")
        await wait_for(lambda: end_offset(server.port, "capped", 0), 1)
        await asyncio.to_thread(send, b"x" * 10_000)  # refused: MESSAGE_TOO_LARGE

        async def closed() -> list[dict[str, Any]]:
            return closings(logs)

        await wait_for(closed, [{"capped-0": "MESSAGE_TOO_LARGE"}])
        await asyncio.to_thread(send, b"after")
        await wait_for(lambda: end_offset(server.port, "capped", 0), 2)
    finally:
        await asyncio.to_thread(producer.close, 5)
    assert await values(server.port, "capped", 0) == [b"before", b"after"]


async def wait_for(probe: Any, want: object, within: float = 30.0) -> None:
    """Poll ``probe()`` (a coroutine function) until it returns ``want``."""
    deadline = time.monotonic() + within
    while (got := await probe()) != want:
        assert time.monotonic() < deadline, f"still {got!r}, waiting for {want!r}"
        await asyncio.sleep(0.05)
