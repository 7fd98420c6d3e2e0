"""/api/groups, /api/groups/{id}, /api/topics and /api/events against real aiokafka
consumers; a slow /api/events reader is disconnected, not buffered."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import aiohttp
import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

from kgroupd.broker.config.settings import TopicSpec
from kgroupd.broker.http.live import QUEUE_LIMIT
from kgroupd.broker.net.server import KafkaServer
from kgroupd.broker.testing import running_server

TOPIC = "orders"


def member(boot: str, client_id: str, group: str = "g") -> AIOKafkaConsumer:
    return AIOKafkaConsumer(
        TOPIC,
        bootstrap_servers=boot,
        group_id=group,
        client_id=client_id,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        heartbeat_interval_ms=100,
        session_timeout_ms=6000,
    )


async def get(server: KafkaServer, path: str) -> tuple[int, Any]:
    assert server.http is not None
    async with (
        aiohttp.ClientSession() as http,
        http.get(f"http://127.0.0.1:{server.http.port}{path}") as resp,
    ):
        return resp.status, await resp.json(content_type=None)


async def until(check: Callable[[], Any], what: str, timeout: float = 20) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        got = await check()
        if got:
            return got
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.05)


async def produce(boot: str, per_partition: int, partitions: int = 4) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=boot)
    await producer.start()
    try:
        for p in range(partitions):
            for _ in range(per_partition):
                await producer.send(TOPIC, b"x", partition=p)
        await producer.flush()
    finally:
        await producer.stop()


async def read_all(consumer: AIOKafkaConsumer, count: int) -> None:
    seen = 0
    while seen < count:
        got = await consumer.getmany(timeout_ms=2000)
        seen += sum(len(v) for v in got.values())


def server_opts() -> dict[str, Any]:
    return {"initial_rebalance_delay_ms": 0, "create_topics": (TopicSpec(TOPIC, 4),)}


async def test_groups_and_topics_show_members_partitions_offsets_and_lag() -> None:
    async with running_server(**server_opts()) as server:
        boot = f"127.0.0.1:{server.port}"
        await produce(boot, 5)
        status, topics = await get(server, "/api/topics")
        assert status == 200
        (orders,) = [t for t in topics["topics"] if t["topic"] == TOPIC]
        assert orders["internal"] is False
        assert orders["partitions"] == [
            {"partition": p, "log_start": 0, "log_end": 5} for p in range(4)
        ]
        first, second = member(boot, "c1"), member(boot, "c2")
        await first.start()
        await second.start()
        try:

            async def both_stable() -> Any:
                _, body = await get(server, "/api/groups/g")
                ok = body.get("state") == "Stable" and len(body["members"]) == 2
                return ok and all(m["partitions"] for m in body["members"]) and body

            await asyncio.gather(read_all(first, 10), read_all(second, 10))
            group = await until(both_stable, "two members, Stable")
            assert group["type"] == "classic"
            assert group["protocol_type"] == "consumer"
            assert group["protocol"] == "roundrobin"  # aiokafka's default
            assert group["generation"] >= 2
            by_client = {m["client_id"]: m for m in group["members"]}
            assert set(by_client) == {"c1", "c2"}
            for m in group["members"]:
                assert m["host"].endswith("127.0.0.1")
                assert m["instance_id"] is None
                assert m["member_id"].startswith(m["client_id"])
            owned = sorted(
                (p["topic"], p["partition"]) for m in group["members"] for p in m["partitions"]
            )
            assert owned == [(TOPIC, p) for p in range(4)]
            # nothing committed yet: lag unknown, log end known
            assert all(r["committed"] is None and r["log_end"] == 5 for r in group["offsets"])

            await first.commit()
            await second.commit()
            await produce(boot, 2)
            _, group = await get(server, "/api/groups/g")
            rows = {r["partition"]: r for r in group["offsets"]}
            assert sorted(rows) == [0, 1, 2, 3]
            for r in rows.values():
                assert (r["committed"], r["log_end"], r["lag"]) == (5, 7, 2)
                assert r["client_id"] in ("c1", "c2")
            assert group["lag"] == 8

            status, listed = await get(server, "/api/groups")
            assert status == 200
            assert [g["group"] for g in listed["groups"]] == ["g"]
            assert listed["groups"][0]["lag"] == 8
            status, missing = await get(server, "/api/groups/nope")
            assert (status, missing) == (404, {"error": "GROUP_ID_NOT_FOUND"})
        finally:
            await first.stop()
            await second.stop()
        _, group = await get(server, "/api/groups/g")
        assert (group["state"], group["members"]) == ("Empty", [])
        assert group["lag"] == 8  # committed offsets outlive the members


@contextlib.asynccontextmanager
async def event_stream(server: KafkaServer) -> AsyncIterator[list[tuple[str, dict[str, Any]]]]:
    """Server-sent events as they arrive: (event name, data)."""
    assert server.http is not None
    events: list[tuple[str, dict[str, Any]]] = []
    opened = asyncio.Event()

    async def read() -> None:
        async with (
            aiohttp.ClientSession() as http,
            http.get(f"http://127.0.0.1:{server.http.port}/api/events") as resp,
        ):
            assert resp.headers["Content-Type"] == "text/event-stream"
            opened.set()
            name, data = "message", ""
            async for raw in resp.content:
                line = raw.decode().rstrip("\n")
                if line.startswith("event: "):
                    name = line[7:]
                elif line.startswith("data: "):
                    data = line[6:]
                elif not line and data:
                    events.append((name, json.loads(data)))
                    name, data = "message", ""

    task = asyncio.create_task(read())
    await asyncio.wait_for(opened.wait(), 5)
    await until(lambda: asyncio.sleep(0, server.live.subscribers), "the subscription")
    try:
        yield events
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


@pytest.mark.parametrize("metrics", [True, False], ids=["metrics", "no-metrics"])
async def test_events_tell_of_a_join_a_rebalance_and_commits(metrics: bool) -> None:
    # with metrics the coordinator's hook is a tee of the metrics and the live events
    async with running_server(**server_opts(), metrics=metrics) as server:
        boot = f"127.0.0.1:{server.port}"
        await produce(boot, 5)
        async with event_stream(server) as events:

            def ends() -> list[dict[str, Any]]:
                return [d for n, d in events if n == "rebalance" and d["phase"] == "end"]

            first = member(boot, "c1")
            await first.start()
            second = None
            try:
                await read_all(first, 20)
                await until(lambda: asyncio.sleep(0, ends()), "the first rebalance's end")
                states = [d["state"] for n, d in events if n == "group" and d["group"] == "g"]
                assert states[:3] == ["PreparingRebalance", "CompletingRebalance", "Stable"]
                (start,) = [d for n, d in events if n == "rebalance" and d["phase"] == "start"]
                assert start["category"] == "member_joined"
                assert start["member"]["client_id"] == "c1"
                (end,) = ends()
                assert end["generation"] == 1 and end["members"] == 1
                assert end["member"]["client_id"] == "c1"
                assert end["duration_ms"] >= 0
                assert end["partitions_moved"] == 4
                assert {
                    (m["partition"], m["from"], m["to"]["client_id"]) for m in end["moved"]
                } == {(p, None, "c1") for p in range(4)}

                await first.commit()

                def commits() -> list[dict[str, Any]]:
                    return [d for n, d in events if n == "commits"]

                (tick,) = await until(lambda: asyncio.sleep(0, commits()), "a commits event")
                assert tick["groups"] == {"g": 4}
                assert tick["interval_s"] == 1.0

                second = member(boot, "c2")
                await second.start()
                await until(lambda: asyncio.sleep(0, len(ends()) == 2), "the second rebalance")
                last = ends()[-1]
                assert last["generation"] == 2 and last["members"] == 2
                assert last["member"]["client_id"] == "c2"
                assert last["category"] == "member_joined"
                moved = {
                    (m["partition"], m["from"]["client_id"], m["to"]["client_id"])
                    for m in last["moved"]
                }
                # roundrobin: c1 keeps two partitions, two move to c2
                assert last["partitions_moved"] == 2 == len(moved)
                assert all(old == "c1" and new == "c2" for _, old, new in moved)
            finally:
                await first.stop()
                if second is not None:
                    await second.stop()

        # a new subscriber is handed the recent rebalances first
        async with event_stream(server) as replayed:
            await until(
                lambda: asyncio.sleep(0, len([1 for n, _ in replayed if n == "rebalance"]) >= 2),
                "the replayed history",
            )
            gens = [d["generation"] for n, d in replayed if n == "rebalance"]
            assert gens[:2] == [1, 2]


async def test_a_slow_events_reader_is_disconnected_not_buffered() -> None:
    async with running_server(**server_opts()) as server:
        assert server.http is not None
        reader, writer = await asyncio.open_connection("127.0.0.1", server.http.port)
        writer.write(b"GET /api/events HTTP/1.1\r\nHost: x\r\n\r\n")
        await writer.drain()
        await until(lambda: asyncio.sleep(0, server.live.subscribers), "the subscription")
        (sub,) = server.live.subscribers
        # events far faster than a reader that never reads: the socket fills, then the queue
        payload = {"pad": "x" * 20_000}
        for _ in range(QUEUE_LIMIT * 3):
            server.live._send("group", payload)
            assert len(sub.queue) <= QUEUE_LIMIT
            if sub.dropped:
                break
            await asyncio.sleep(0)
        assert sub.dropped
        assert not sub.queue
        await until(lambda: asyncio.sleep(0, not server.live.subscribers), "the unsubscribe")
        # the connection is closed: what was sent, then EOF
        await asyncio.wait_for(reader.read(), 10)
        writer.close()


async def test_a_reader_that_does_not_read_does_not_hold_the_broker_s_stop() -> None:
    async with running_server(**server_opts()) as server:
        assert server.http is not None
        _, writer = await asyncio.open_connection("127.0.0.1", server.http.port)
        writer.write(b"GET /api/events HTTP/1.1\r\nHost: x\r\n\r\n")
        await until(lambda: asyncio.sleep(0, server.live.subscribers), "the subscription")
        (sub,) = server.live.subscribers
        for _ in range(QUEUE_LIMIT // 2):  # ~10 MB: more than the sockets hold
            server.live._send("group", {"pad": "x" * 20_000})
            await asyncio.sleep(0)
        assert sub.queue and not sub.dropped  # the writer waits on the full socket
        stopping = asyncio.create_task(server.stop())
        try:
            # not aiohttp's wait (60 s) for its handlers to finish
            await asyncio.wait_for(asyncio.shield(stopping), 5)
        except TimeoutError:
            writer.transport.abort()  # frees the stuck writer, so the test ends
            await stopping
            pytest.fail("the broker's stop waited on an /api/events reader")
        finally:
            writer.close()


async def test_a_consumer_group_shows_its_epoch_assignor_and_members() -> None:
    """KIP-848 (confluent-kafka, group.protocol=consumer): type consumer, the group epoch as
    its generation, the server assignor as its protocol, the member's partitions by name; its
    epoch bump is a rebalance start event of type consumer."""
    from confluent_kafka import Consumer

    async with (
        running_server(
            create_topics=(TopicSpec(TOPIC, 2),),
            group_consumer_min_heartbeat_interval_ms=100,
            group_consumer_heartbeat_interval_ms=200,
        ) as server,
        event_stream(server) as events,
    ):
        consumer = Consumer(
            {
                "bootstrap.servers": f"127.0.0.1:{server.port}",
                "group.id": "kip848",
                "client.id": "rd1",
                "group.instance.id": "rd-static",
                "group.protocol": "consumer",
                "enable.auto.commit": False,
            }
        )
        try:
            consumer.subscribe([TOPIC])

            async def assigned() -> Any:
                await asyncio.to_thread(consumer.poll, 0.1)
                status, body = await get(server, "/api/groups/kip848")
                return (
                    status == 200 and body["members"] and body["members"][0]["partitions"] and body
                )

            group = await until(assigned, "the member's assignment")
            assert (group["type"], group["protocol_type"]) == ("consumer", "consumer")
            assert group["protocol"] == "uniform"
            assert group["generation"] >= 1
            (m,) = group["members"]
            assert (m["client_id"], m["instance_id"]) == ("rd1", "rd-static")
            assert m["partitions"] == [{"topic": TOPIC, "partition": p} for p in (0, 1)]
            starts = [d for n, d in events if n == "rebalance" and d["group"] == "kip848"]
            assert starts and starts[0]["type"] == "consumer"
            assert starts[0]["phase"] == "start" and starts[0]["category"] == "member_joined"
        finally:
            await asyncio.to_thread(consumer.close)


async def test_the_page_s_files_are_served_and_nothing_beside_them() -> None:
    """``/`` and ``/static/NAME`` serve web/'s files (links in a strict editable install);
    a name that leaves web/ or is hidden is not found."""
    async with running_server() as server:
        assert server.http is not None
        base = f"http://127.0.0.1:{server.http.port}"
        async with aiohttp.ClientSession() as http:
            for path, kind in (("/", "text/html"), ("/static/app.js", "text/javascript")):
                async with http.get(base + path) as resp:
                    assert resp.status == 200, path
                    assert resp.content_type == kind
            for path in (
                "/static/..%2Fapi.py",
                "/static/%2E%2E%2Fapi.py",
                "/static/.hidden.js",
                "/static/api.py",
                "/static/nothing.js",
            ):
                async with http.get(base + path) as resp:
                    assert resp.status == 404, path


async def test_rebalances_with_no_subscriber_are_replayed_to_the_first() -> None:
    """A rebalance that ends while nobody reads /api/events is kept (encoded only when a
    subscriber comes): the first subscriber is handed its end, as it was."""
    async with running_server(**server_opts()) as server:
        boot = f"127.0.0.1:{server.port}"
        await produce(boot, 5)
        assert not server.live.subscribers
        first = member(boot, "c-alone")
        await first.start()
        try:
            await read_all(first, 20)
            await until(lambda: asyncio.sleep(0, server.live.history), "the rebalance's end")
        finally:
            await first.stop()
        async with event_stream(server) as replayed:
            await until(
                lambda: asyncio.sleep(0, [1 for n, _ in replayed if n == "rebalance"]),
                "the replayed history",
            )
            end = next(d for n, d in replayed if n == "rebalance")
        assert end["phase"] == "end" and end["member"]["client_id"] == "c-alone"
        assert end["generation"] == 1 and end["members"] == 1 and end["partitions_moved"] == 4
        assert end["category"] == "member_joined"
