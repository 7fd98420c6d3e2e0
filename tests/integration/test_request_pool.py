"""``--queued-max-request-bytes`` (Kafka's queued.max.request.bytes) cannot be held by a few
connections: a frame claims pool memory as its bytes arrive, so size prefixes alone hold
nothing, and a frame whose prefix arrived is incomplete from then on, closed after
``--incomplete-request-timeout-ms``. Frames that fill the pool between them all finish (one
is admitted past the limit to finish), a request near the pool's size is served, and the
pool's accounting returns to zero once everyone has gone."""

from __future__ import annotations

import asyncio
import contextlib
import struct
from collections.abc import Callable

from aiokafka import AIOKafkaProducer
from structlog.testing import capture_logs

from kgroupd.broker.net.server import KafkaServer
from kgroupd.broker.testing import running_server
from tests.support.kafka_wire import (
    WireClient,
    build_batch,
    create_topic,
    encode_request,
    produce_request,
)

MIB = 1024 * 1024
PRODUCE = 0
API_VERSIONS = 18


async def until(check: Callable[[], bool], what: str) -> None:
    for _ in range(2000):
        if check():
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"never: {what}")


async def prefixes(port: int, sizes: list[int]) -> list[asyncio.StreamWriter]:
    """Connections that each send a size prefix and nothing more."""
    writers = []
    for size in sizes:
        _r, w = await asyncio.open_connection("127.0.0.1", port)
        w.write(struct.pack(">i", size))
        await w.drain()
        writers.append(w)
    return writers


def announced(server: KafkaServer) -> int:
    """The bytes of frames announced and not yet read, over every connection."""
    return sum(c.reader.decoder.pending - c.reader.decoder.buffered for c in server.connections)


async def all_gone(server: KafkaServer, writers: list[asyncio.StreamWriter]) -> None:
    for w in writers:
        w.close()
        with contextlib.suppress(OSError):
            await w.wait_closed()
    await until(lambda: not server.connections, "every connection closed")
    assert (server.pool.used, server.pool.promised, server.pool.waiting) == (0, 0, {})


async def new_topic(server: KafkaServer, name: str) -> None:
    configs = {"max.message.bytes": str(server.config.message_max_bytes)}
    async with await WireClient.connect(server.port) as wire:
        await create_topic(wire, name, 1, configs)


def produce_frame(topic: str, corr: int, value_bytes: int) -> bytes:
    batch = build_batch([(None, bytes(value_bytes), [])])
    return encode_request(PRODUCE, 9, corr, produce_request(topic, 0, batch))


async def test_size_prefixes_for_the_whole_pool_do_not_stop_a_bystander() -> None:
    """Three connections announce 100, 100 and 56 MiB (the whole default pool of 256 MiB)
    and send nothing more; they hold no memory, and a bystander's 512 KiB produces (aiokafka
    and raw) are answered while they stay connected."""
    async with running_server(log_level="warning", incomplete_request_timeout_ms=600_000) as server:
        assert server.pool.limit == 256 * MIB
        await new_topic(server, "bystander")
        holders = await prefixes(server.port, [100 * MIB, 100 * MIB, 56 * MIB])
        try:
            await until(lambda: announced(server) == 256 * MIB, "the prefixes read")
            assert server.pool.used == 0
            producer = AIOKafkaProducer(
                bootstrap_servers=f"127.0.0.1:{server.port}", request_timeout_ms=20_000
            )
            await producer.start()
            try:
                for i in range(3):
                    meta = await producer.send_and_wait("bystander", bytes(512 * 1024))
                    assert meta.offset == i
            finally:
                await producer.stop()
            async with await WireClient.connect(server.port) as raw:
                raw.writer.write(produce_frame("bystander", 7, 512 * 1024))
                await raw.writer.drain()
                reply = await raw.receive(PRODUCE, 9, 7)
                part = reply["responses"][0]["partition_responses"][0]
                assert (part["error_code"], part["base_offset"]) == (0, 3)
            assert announced(server) == 256 * MIB  # the holders are still there
        finally:
            await all_gone(server, holders)


async def test_a_bare_prefix_is_closed_after_the_incomplete_request_timeout() -> None:
    """A frame is incomplete from its size prefix on: the connection is closed after
    --incomplete-request-timeout-ms with one warning naming the frame, and the rest are
    served."""
    async with running_server(log_level="warning", incomplete_request_timeout_ms=500) as server:
        with capture_logs() as logs:
            reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
            writer.write(struct.pack(">i", 5 * MIB))
            await writer.drain()
            async with await WireClient.connect(server.port) as bystander:
                assert (await bystander.request(API_VERSIONS, 3, {}))["error_code"] == 0
                assert await asyncio.wait_for(reader.read(), 60) == b"", "not closed"
                assert (await bystander.request(API_VERSIONS, 3, {}))["error_code"] == 0
            writer.close()
        closing = [e for e in logs if e["event"] == "connection_closing"]
        assert len(closing) == 1, logs
        assert closing[0]["log_level"] == "warning"
        assert "incomplete" in closing[0]["reason"]
        assert (closing[0]["frame_bytes"], closing[0]["received_bytes"]) == (5 * MIB, 0)
        await all_gone(server, [])


async def test_a_request_near_the_pool_size_is_served() -> None:
    """An 8 MiB produce through a 10 MiB pool, with prefixes announcing all of it held open
    meanwhile."""
    async with running_server(
        log_level="warning",
        queued_max_request_bytes=10 * MIB,
        message_max_bytes=9 * MIB,
        incomplete_request_timeout_ms=600_000,
    ) as server:
        await new_topic(server, "large")
        holders = await prefixes(server.port, [5 * MIB, 5 * MIB])
        try:
            await until(lambda: announced(server) == 10 * MIB, "the prefixes read")
            producer = AIOKafkaProducer(
                bootstrap_servers=f"127.0.0.1:{server.port}",
                max_request_size=9 * MIB,
                request_timeout_ms=20_000,
            )
            await producer.start()
            try:
                for i in range(2):
                    meta = await producer.send_and_wait("large", bytes(8 * MIB))
                    assert meta.offset == i
            finally:
                await producer.stop()
        finally:
            await all_gone(server, holders)


async def test_frames_filling_the_pool_between_them_all_finish() -> None:
    """Eight connections each send half of a 3 MiB produce into a 6 MiB pool: it fills, one
    request's worth (--max-request-bytes 4 MiB) is admitted past it, the others wait. When
    the rest of every frame comes, every one is answered: none is left holding part of a
    frame that can never finish."""
    async with running_server(
        log_level="warning",
        queued_max_request_bytes=6 * MIB,
        max_request_bytes=4 * MIB,
        message_max_bytes=4 * MIB,
    ) as server:
        await new_topic(server, "fill")
        clients = [await WireClient.connect(server.port) for _ in range(8)]
        frames = [produce_frame("fill", 100 + i, 3 * MIB) for i in range(8)]
        try:
            for client, frame in zip(clients, frames, strict=True):
                client.writer.write(frame[: len(frame) // 2])
            await until(lambda: bool(server.pool.waiting), "a connection waits for the pool")
            assert server.pool.used + server.pool.promised <= 10 * MIB
            for client, frame in zip(clients, frames, strict=True):
                client.writer.write(frame[len(frame) // 2 :])
            offsets = []
            for i, client in enumerate(clients):
                reply = await client.receive(PRODUCE, 9, 100 + i)
                part = reply["responses"][0]["partition_responses"][0]
                assert part["error_code"] == 0
                offsets.append(part["base_offset"])
            assert sorted(offsets) == list(range(8))
        finally:
            await all_gone(server, [c.writer for c in clients])
