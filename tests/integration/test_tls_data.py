"""Data over a TLS listener (issue 26: the TLS layer reads a record's size at a time and hands
on what is decrypted after each network read): a 1 MiB batch, many TLS records in one
request, arrives whole and is fetched back byte for byte; many requests written at once are
each answered, in order; a client's close_notify closes its connection and the broker goes
on serving; answers larger than the socket's buffer wait for it to drain. On uvloop (the
broker's default: reads handed over as bytes) and on asyncio's own event loop (reads into the
protocol's buffer)."""

from __future__ import annotations

import asyncio
import ssl
from pathlib import Path

import pytest

from kgroupd.broker.testing import running_server
from tests.support.certs import Certs, make_certs
from tests.support.kafka_wire import (
    WireClient,
    build_batch,
    create_topics_request,
    fetch_request,
    produce_request,
)


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    return make_certs(tmp_path_factory.mktemp("certs"))


async def tls_client(port: int, certs: Certs) -> WireClient:
    context = ssl.create_default_context(cafile=str(certs.ca))
    reader, writer = await asyncio.open_connection(
        "127.0.0.1", port, ssl=context, server_hostname="localhost"
    )
    return WireClient(reader, writer)


async def test_big_and_pipelined_requests_over_tls(certs: Certs, tmp_path: Path) -> None:
    async with running_server(
        log_level="warning",
        listeners="SSL://127.0.0.1:0",
        ssl_certfile=str(certs.server_cert),
        ssl_keyfile=str(certs.server_key),
    ) as server:
        client = await tls_client(server.port, certs)
        created = await client.request(19, 4, create_topics_request("tls-data", 2))
        assert created["topics"][0]["error_code"] == 0
        # one batch of about 1 MiB: some 64 TLS records in one request, and in its answer
        big = build_batch([(None, bytes([i % 251]) * 1024, ()) for i in range(1000)])
        assert len(big) > 1_000_000
        answer = await client.request(0, 9, produce_request("tls-data", 0, big))
        assert answer["responses"][0]["partition_responses"][0]["error_code"] == 0
        fetched = await client.request(
            1, 12, fetch_request("tls-data", 0, 0, max_bytes=4 << 20, partition_max_bytes=4 << 20)
        )
        records = fetched["responses"][0]["partitions"][0]["records"]
        assert records[:12] == big[:12] and records[16:] == big[16:]  # the leader epoch set
        # 200 small produces written at once: each answered, in order, offsets 0..199
        small = build_batch([(b"k", b"v", ())])
        corrs = await client.send_many([(0, 9, produce_request("tls-data", 1, small))] * 200)
        for i, corr in enumerate(corrs):
            got = await client.receive(0, 9, corr)
            part = got["responses"][0]["partition_responses"][0]
            assert (part["error_code"], part["base_offset"]) == (0, i)
        # 16 fetches of the 1 MiB batch written at once and read only after a pause: the
        # socket's buffer fills, the TLS layer holds the rest until it drains
        fetch = fetch_request("tls-data", 0, 0, max_bytes=4 << 20, partition_max_bytes=4 << 20)
        corrs = await client.send_many([(1, 12, fetch)] * 16)
        await asyncio.sleep(0.2)
        for corr in corrs:
            got = await client.receive(1, 12, corr)
            assert got["responses"][0]["partitions"][0]["records"][16:] == big[16:]
        await client.close()  # close_notify
        # the broker goes on serving
        again = await tls_client(server.port, certs)
        fetched = await again.request(1, 12, fetch_request("tls-data", 1, 199))
        assert fetched["responses"][0]["partitions"][0]["high_watermark"] == 200
        await again.close()


def test_the_same_on_asyncios_own_loop(certs: Certs, tmp_path: Path) -> None:
    """The tests run on uvloop, which hands the TLS layer its reads as bytes; asyncio's own
    event loop reads into the layer's buffer instead (``buffer_updated``)."""
    with asyncio.Runner(loop_factory=asyncio.SelectorEventLoop) as runner:
        runner.run(test_big_and_pipelined_requests_over_tls(certs, tmp_path))
