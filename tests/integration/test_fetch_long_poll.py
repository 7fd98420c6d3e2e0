"""A waiting Fetch is woken by the first produce after its handler found too little data, even
one handled before the long poll's task first runs (two connections read in the same event
loop turn: the fetch's, then the producer's). Driven in process: two connections fed their
frames in one synchronous step, so the order is certain."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest_asyncio

from kgroupd.broker.config.settings import TopicSpec
from kgroupd.broker.net.connection import KafkaConnection
from kgroupd.broker.net.server import KafkaServer
from kgroupd.broker.testing import running_server
from tests.support.kafka_wire import build_batch, encode_request, fetch_request, produce_request


class Transport:
    """What a connection writes, and nothing else."""

    def __init__(self, protocol: Any) -> None:
        self.protocol = protocol
        self.out = bytearray()
        self.wrote = asyncio.Event()
        self.closed = False

    def write(self, data: bytes) -> None:
        self.out += data
        self.wrote.set()

    def writelines(self, parts: Any) -> None:
        for p in parts:
            self.write(p)

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


@pytest_asyncio.fixture
async def server() -> AsyncIterator[KafkaServer]:
    topics = (TopicSpec("lp", 1),)
    async with running_server(log_level="warning", create_topics=topics) as srv:
        yield srv


def connect(server: KafkaServer) -> tuple[KafkaConnection, Transport]:
    conn = KafkaConnection(server)
    transport = Transport(conn)
    conn.connection_made(transport)  # type: ignore[arg-type]
    return conn, transport


async def test_a_produce_before_the_long_poll_starts_still_wakes_it(server: KafkaServer) -> None:
    fetcher, fetched = connect(server)
    producer, produced = connect(server)
    batch = build_batch([(None, b"v", [])])
    for n in range(5):
        fetched.out.clear()
        fetched.wrote.clear()
        fetch = encode_request(1, 11, 1, fetch_request("lp", 0, n, max_wait_ms=3000))
        produce = encode_request(0, 9, 2, produce_request("lp", 0, batch, acks=1))
        t0 = time.monotonic()
        fetcher.data_received(fetch)  # too little data: the long poll is scheduled
        producer.data_received(produce)  # handled before that task first runs
        await asyncio.wait_for(fetched.wrote.wait(), 10)
        assert time.monotonic() - t0 < 1.0, "the fetch slept its whole max wait"
    fetched.close()
    produced.close()
