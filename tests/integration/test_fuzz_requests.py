"""Every API at every version kgroupd serves (taken from the handler registry, so new versions
are fuzzed as they arrive) gets hypothesis-generated requests that its schema allows: nulls
where a version allows them, empty and odd strings, extreme integers, random bytes for record
batches. No answer may carry UNKNOWN_SERVER_ERROR (an internal error is a bug: Kafka answers
these with INVALID_REQUEST, INVALID_GROUP_ID, ... or by closing the connection), and afterwards
a bystander producer and consumer group still work. Valid frames with bytes of their body
flipped, cut or appended are answered the same way, or their connection closed.

Driven in process: one ``KafkaConnection`` per example fed the frame directly (no sockets), so
thousands of requests take seconds. Requests a broker legitimately holds (a JoinGroup waiting
for its group, a long-polling Fetch) are not waited for. More examples:
``KGROUPD_FUZZ_EXAMPLES=500 pytest tests/integration/test_fuzz_requests.py``; a longer run over
real sockets against a broker subprocess: ``python bench/fuzz.py --seconds 600``.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from hypothesis import HealthCheck, given, settings

from kgroupd.broker.config.settings import TopicSpec
from kgroupd.broker.net.connection import KafkaConnection
from kgroupd.broker.net.server import KafkaServer
from kgroupd.broker.testing import running_server
from tests.support.fuzz import (
    BATCH_MUTATIONS,
    MUTATIONS,
    RECORDS_TOPIC,
    BatchMutation,
    cases,
    check_answers,
    default_frame,
    generated_frames,
    mutate,
    mutated_batch,
    produce_frame,
    readable,
)
from tests.support.kafka_wire import WireClient, decode_response, fetch_request, only_partition

EXAMPLES = int(os.environ.get("KGROUPD_FUZZ_EXAMPLES", "12"))
BATCH_EXAMPLES = int(os.environ.get("KGROUPD_FUZZ_BATCHES", "300"))


class Transport:
    def __init__(self, protocol: Any) -> None:
        self.protocol = protocol
        self.out = bytearray()
        self.closed = False

    def write(self, data: bytes) -> None:
        self.out += data

    def writelines(self, parts: Any) -> None:
        for p in parts:
            self.out += p

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return ("127.0.0.1", 1) if name == "peername" else default

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.protocol.connection_lost(None)

    abort = close

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        pass

    def get_write_buffer_size(self) -> int:
        return 0


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def server() -> AsyncIterator[KafkaServer]:
    topics = (
        TopicSpec("t", 2),
        TopicSpec("fuzz", 1),
        TopicSpec("bystander", 1),
        TopicSpec(RECORDS_TOPIC, 1),
    )
    async with running_server(
        log_level="critical", create_topics=topics, initial_rebalance_delay_ms=0
    ) as srv:
        yield srv


async def ask(server: KafkaServer, frame: bytes) -> tuple[bytes, bool]:
    """Feed one frame to a fresh connection; what it wrote within a short while, and whether
    it closed the connection."""
    conn = KafkaConnection(server)
    transport = Transport(conn)
    conn.connection_made(transport)  # type: ignore[arg-type]
    conn.data_received(frame)
    for _ in range(20):  # held answers (a long poll, a join) come within their short waits
        if transport.out or transport.closed:
            break
        await asyncio.sleep(0.005)
    closed = transport.closed
    transport.close()
    return bytes(transport.out), closed


@pytest.mark.parametrize(("api_key", "version"), cases())
@pytest.mark.asyncio(loop_scope="module")
async def test_generated_requests_get_no_internal_error(
    server: KafkaServer, api_key: int, version: int
) -> None:
    for frame, body in generated_frames(api_key, version, EXAMPLES):
        out, _closed = await ask(server, frame)
        check_answers(api_key, version, out, body)


@pytest.mark.parametrize(("api_key", "version"), cases())
@pytest.mark.asyncio(loop_scope="module")
async def test_mutated_frames_are_answered_or_closed(
    server: KafkaServer, api_key: int, version: int
) -> None:
    """A valid frame (every field at its default) with bytes of its body flipped, cut or
    appended: answered without an internal error, or the connection closed."""
    base, header = default_frame(api_key, version)
    mutations: list[bytes] = []

    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(MUTATIONS)
    def collect(how: tuple[list[tuple[int, int]], int, bytes]) -> None:
        mutations.append(mutate(base, header, *how))

    collect()
    for frame in mutations:
        out, _closed = await ask(server, frame)
        check_answers(api_key, version, out, frame.hex())


@pytest.mark.asyncio(loop_scope="module")
async def test_mutated_batches_are_refused_or_readable(server: KafkaServer) -> None:
    """Valid batches (each codec) with bytes flipped, cut or appended, their CRC right: a
    Produce answers each without an internal error, and whatever the log takes, two clients'
    record parsers and a consumer read whole (a batch that lies is refused, not stored)."""
    hows: list[BatchMutation] = []

    @settings(
        max_examples=BATCH_EXAMPLES,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(BATCH_MUTATIONS)
    def collect(how: BatchMutation) -> None:
        hows.append(how)

    collect()
    taken = 0
    for how in hows:
        out, closed = await ask(server, produce_frame(8, mutated_batch(how)))
        assert out and not closed, how
        check_answers(0, 8, out, how)
        _corr, answer = decode_response(0, 8, out[4:])
        part = only_partition(answer)
        if part["error_code"] == 0:
            taken += 1
        else:
            assert part["base_offset"] == -1 and part["error_message"], (how, part)
    async with await WireClient.connect(server.port) as wire:
        records = b""
        offset = 0
        while True:
            got = only_partition(await wire.request(1, 11, fetch_request(RECORDS_TOPIC, 0, offset)))
            assert got["error_code"] == 0, got
            if not got["records"]:
                break
            records += got["records"]
            offset = got["high_watermark"]
    count = readable(records)
    assert count == offset and taken <= count
    consumer = AIOKafkaConsumer(
        RECORDS_TOPIC, bootstrap_servers=f"127.0.0.1:{server.port}", auto_offset_reset="earliest"
    )
    await consumer.start()
    try:
        seen = 0
        while seen < count:
            batches = await consumer.getmany(timeout_ms=5000)
            assert batches, f"the consumer stalled after {seen} of {count} records"
            seen += sum(len(r) for r in batches.values())
    finally:
        await consumer.stop()


@pytest.mark.asyncio(loop_scope="module")
async def test_a_bystander_still_works_after_the_fuzzing(server: KafkaServer) -> None:
    bootstrap = f"127.0.0.1:{server.port}"
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap)
    await producer.start()
    try:
        await producer.send_and_wait("bystander", b"still here", partition=0)
    finally:
        await producer.stop()
    consumer = AIOKafkaConsumer(
        "bystander", bootstrap_servers=bootstrap, group_id="bystander", auto_offset_reset="earliest"
    )
    await consumer.start()
    try:
        record = await asyncio.wait_for(consumer.getone(), 20)
        assert record.value == b"still here"
        await consumer.commit()
    finally:
        await consumer.stop()
