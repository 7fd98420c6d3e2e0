"""One client may not hold the broker's resources forever: a connection that sends nothing for
``--connections-max-idle-ms`` (Kafka's connections.max.idle.ms) is closed, so is one whose
request frame stays incomplete for ``--incomplete-request-timeout-ms`` (a client trickling
bytes), ``--max-connections-per-ip`` (Kafka's max.connections.per.ip) closes new
connections over it at once, ``--max-connections`` (Kafka's max.connections) stops
accepting at the limit, and ``--queued-max-request-bytes`` bounds what partial and queued
frames may take. Everyone else is served throughout."""

from __future__ import annotations

import asyncio
import contextlib
import struct
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio

from kgroupd.broker.net.server import KafkaServer
from kgroupd.broker.testing import running_server
from tests.support.broker_process import broker_process
from tests.support.kafka_wire import WireClient, encode_request

API_VERSIONS = 18


@pytest_asyncio.fixture
async def server() -> AsyncIterator[KafkaServer]:
    async with running_server(
        log_level="warning",
        connections_max_idle_ms=400,
        incomplete_request_timeout_ms=400,
        max_connections_per_ip=3,
    ) as srv:
        yield srv


async def closed_within(reader: asyncio.StreamReader, seconds: float) -> float | None:
    """Seconds until the broker closed the connection, None if it did not within ``seconds``
    (anything the broker sends first is read and ignored)."""
    t0 = time.monotonic()
    try:
        while await asyncio.wait_for(reader.read(65536), seconds - (time.monotonic() - t0)):
            pass
    except TimeoutError:
        return None
    except ConnectionResetError:
        pass  # closed with bytes of ours unread: the kernel answers them with a reset
    return time.monotonic() - t0


async def shut(writer: asyncio.StreamWriter) -> None:
    writer.close()
    with contextlib.suppress(OSError):
        await writer.wait_closed()


async def answered(wire: WireClient) -> bool:
    return (await wire.request(API_VERSIONS, 3, {}))["error_code"] == 0


async def test_idle_and_incomplete_connections_are_closed(server: KafkaServer) -> None:
    async with await WireClient.connect(server.port) as busy:
        idle_r, idle_w = await asyncio.open_connection("127.0.0.1", server.port)
        trickle_r, trickle_w = await asyncio.open_connection("127.0.0.1", server.port)
        try:
            idle_w.write(encode_request(API_VERSIONS, 3, 1, {}))  # one request, then silence
            frame = encode_request(API_VERSIONS, 3, 1, {})
            idle_task = asyncio.create_task(closed_within(idle_r, 5))
            trickle_task = asyncio.create_task(closed_within(trickle_r, 5))
            # the trickling client sends a byte every 100 ms: never idle, never a whole frame
            for b in frame[:-1]:
                if trickle_task.done():
                    break
                trickle_w.write(bytes([b]))
                assert await answered(busy)  # the busy client is served, and stays open
                await asyncio.sleep(0.1)
            idle_after, trickle_after = await idle_task, await trickle_task
            assert idle_after is not None and 0.3 < idle_after < 2.0, idle_after
            assert trickle_after is not None and trickle_after < 2.0, trickle_after
            assert await answered(busy)
        finally:
            for w in (idle_w, trickle_w):
                await shut(w)


async def test_connections_over_the_per_ip_limit_are_closed(server: KafkaServer) -> None:
    clients = [await WireClient.connect(server.port) for _ in range(3)]
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        try:
            assert await closed_within(reader, 2) is not None  # a fourth from 127.0.0.1
        finally:
            await shut(writer)
        # another address is not counted against 127.0.0.1
        other_r, other_w = await asyncio.open_connection(
            "127.0.0.1", server.port, local_addr=("127.0.0.2", 0)
        )
        try:
            other_w.write(encode_request(API_VERSIONS, 3, 5, {}))
            (size,) = struct.unpack(">i", await asyncio.wait_for(other_r.readexactly(4), 5))
            assert size > 0
        finally:
            await shut(other_w)
        assert all([await answered(c) for c in clients])
    finally:
        for c in clients:
            await c.close()
    # slots freed (once the broker has seen the closes): 127.0.0.1 may connect again
    for _ in range(100):
        if not server.connections:
            break
        await asyncio.sleep(0.02)
    async with await WireClient.connect(server.port) as again:
        assert await answered(again)


async def test_max_connections_stops_accepting_until_a_slot_frees() -> None:
    """At --max-connections the broker accepts no more (the connection waits in the kernel's
    backlog, unanswered) until one closes; then it is served."""
    async with running_server(log_level="warning", max_connections=3) as srv:
        clients = [await WireClient.connect(srv.port) for _ in range(3)]
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", srv.port)
            try:
                writer.write(encode_request(API_VERSIONS, 3, 9, {}))
                with pytest.raises(TimeoutError):
                    await asyncio.wait_for(reader.readexactly(4), 0.5)
                assert all([await answered(c) for c in clients])  # the others are served
                await clients.pop().close()
                (size,) = struct.unpack(">i", await asyncio.wait_for(reader.readexactly(4), 5))
                assert size > 0  # accepted once a slot freed, and answered
            finally:
                await shut(writer)
        finally:
            for c in clients:
                await c.close()


def rss_bytes(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


MIB = 1024 * 1024


@pytest.mark.parametrize("pool_mib", [48, -1])
async def test_partial_frames_cannot_pass_the_request_pool(tmp_path: Path, pool_mib: int) -> None:
    """Ten connections each send 90% of a 20 MiB frame. With --queued-max-request-bytes
    48 MiB the broker reads until the pool is full (claiming bytes as they arrive), then
    admits one connection past it to finish its frame (one request's overdraft, as Kafka's
    pool lets through the request crossing its limit) and stops reading the others: its RSS
    grows by less than the pool plus one request. Unbounded (-1, Kafka's default), it reads
    all 180 MiB. A bystander is served throughout."""
    frame_bytes = 20 * MIB
    args = ("--max-request-bytes", str(frame_bytes), "--queued-max-request-bytes")
    args += (str(pool_mib * MIB) if pool_mib > 0 else "-1",)
    async with broker_process(tmp_path / "data", args=args) as proc:
        await proc.start()
        assert proc.proc is not None
        pid = proc.proc.pid
        async with await WireClient.connect(proc.port) as bystander:
            assert await answered(bystander)
            before = rss_bytes(pid)
            writers = []
            try:
                chunk = struct.pack(">i", frame_bytes) + bytes(frame_bytes * 9 // 10)
                for _ in range(10):
                    _r, w = await asyncio.open_connection("127.0.0.1", proc.port)
                    w.write(chunk)
                    writers.append(w)
                await asyncio.sleep(1.5)  # the broker reads what it will
                grown = rss_bytes(pid) - before
                assert await answered(bystander)
            finally:
                for w in writers:
                    w.transport.abort()
        if pool_mib > 0:
            assert grown < pool_mib * MIB + frame_bytes, grown / MIB
        else:
            assert grown > 150 * MIB, grown / MIB  # the test would see a missing bound
        async with await WireClient.connect(proc.port) as later:
            assert await answered(later)  # the pool freed with the connections
