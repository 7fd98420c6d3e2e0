"""The HTTP listener: /metrics moves with what clients do, /healthz and /readyz around a
slow data-dir load, and the flags (--http-port 0, a taken port, --no-http, --version)."""

from __future__ import annotations

import asyncio
import shutil
import socket
import time
from pathlib import Path

import aiohttp
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from prometheus_client.parser import text_string_to_metric_families

from kgroupd.broker.config.settings import TopicSpec
from kgroupd.broker.coordinator import OffsetCommit, OffsetCommitTopic
from kgroupd.broker.net.server import KafkaServer
from kgroupd.broker.testing import ThreadedBroker, running_server
from tests.integration.test_cli import run_to_end, start, wait_for_event

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


async def scrape(port: int) -> Samples:
    async with (
        aiohttp.ClientSession() as http,
        http.get(f"http://127.0.0.1:{port}/metrics") as resp,
    ):
        assert resp.status == 200
        assert resp.headers["Content-Type"].startswith("text/plain")
        text = await resp.text()
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, frozenset(labels.items())), 0.0)


def http_port(server: KafkaServer) -> int:
    assert server.http is not None
    return server.http.port


async def test_every_metric_moves_as_clients_act(tmp_path: Path) -> None:
    async with running_server(
        data_dir=str(tmp_path), initial_rebalance_delay_ms=0, create_topics=()
    ) as server:
        port, boot = http_port(server), f"127.0.0.1:{server.port}"
        before = await scrape(port)
        assert value(before, "kgroupd_connections") == 0
        producer = AIOKafkaProducer(bootstrap_servers=boot)
        await producer.start()
        try:
            for _ in range(5):
                await producer.send_and_wait("events", b"x" * 100, partition=0)
            after_produce = await scrape(port)
            assert value(after_produce, "kgroupd_connections") >= 1
            assert (
                value(after_produce, "kgroupd_log_end_offset", topic="events", partition="0") == 5
            )
            assert value(after_produce, "kgroupd_produce_bytes_total", topic="events") >= 500
            produces = [
                v
                for (name, labels), v in after_produce.items()
                if name == "kgroupd_requests_total" and ("api", "Produce") in labels
            ]
            assert sum(produces) == 5
            assert (
                value(after_produce, "kgroupd_request_duration_seconds_count", api="Produce") == 5
            )
            # --fsync always (the default with a data dir): each produce waited for an fsync
            assert value(after_produce, "kgroupd_fsync_duration_seconds_count") >= 1

            first = consumer(boot)
            await first.start()
            got = await first.getmany(timeout_ms=5000)
            while sum(len(v) for v in got.values()) < 5:
                more = await first.getmany(timeout_ms=5000)
                assert more, "the consumer read nothing"
                for tp, msgs in more.items():
                    got.setdefault(tp, []).extend(msgs)
            await first.commit()
            joined = await scrape(port)
            assert value(joined, "kgroupd_groups", state="Stable", type="classic") == 1
            assert value(joined, "kgroupd_group_members", group="g") == 1
            assert value(joined, "kgroupd_group_generation", group="g") == 1
            assert value(joined, "kgroupd_rebalances_total", group="g", reason="member_joined") == 1
            assert value(joined, "kgroupd_rebalance_duration_seconds_count") == 1
            assert value(joined, "kgroupd_offset_commits_total") == 1
            assert value(joined, "kgroupd_fetch_bytes_total", topic="events") >= 500
            assert value(joined, "kgroupd_coordinator_log_bytes") > value(
                before, "kgroupd_coordinator_log_bytes"
            )
            assert (
                value(joined, "kgroupd_consumergroup_lag", group="g", topic="events", partition="0")
                == 0
            )
            # lag: three more records, nothing committed
            for _ in range(3):
                await producer.send_and_wait("events", b"y", partition=0)
            lagging = await scrape(port)
            assert (
                value(
                    lagging, "kgroupd_consumergroup_lag", group="g", topic="events", partition="0"
                )
                == 3
            )
            assert value(lagging, "kgroupd_consumergroup_lag_sum", group="g") == 3

            # a second member: a rebalance; the first learns of it from REBALANCE_IN_PROGRESS
            second = consumer(boot)
            await second.start()
            try:
                deadline = time.monotonic() + 20
                while True:
                    now = await scrape(port)
                    if value(now, "kgroupd_group_generation", group="g") == 2 and value(
                        now, "kgroupd_groups", state="Stable", type="classic"
                    ):
                        break
                    assert time.monotonic() < deadline, "no second generation"
                    await asyncio.sleep(0.1)
                assert value(now, "kgroupd_group_members", group="g") == 2
                assert (
                    value(now, "kgroupd_rebalances_total", group="g", reason="member_joined") == 2
                )
                assert value(now, "kgroupd_rebalance_duration_seconds_count") == 2
                assert (
                    value(
                        now,
                        "kgroupd_request_errors_total",
                        api="Heartbeat",
                        error="REBALANCE_IN_PROGRESS",
                    )
                    + value(
                        now,
                        "kgroupd_request_errors_total",
                        api="JoinGroup",
                        error="REBALANCE_IN_PROGRESS",
                    )
                    + value(
                        now,
                        "kgroupd_request_errors_total",
                        api="SyncGroup",
                        error="REBALANCE_IN_PROGRESS",
                    )
                    >= 1
                )
            finally:
                await second.stop()
            await first.stop()
            left = await scrape(port)
            assert value(left, "kgroupd_rebalances_total", group="g", reason="member_left") >= 1
            assert value(left, "kgroupd_group_members", group="g") == 0
            assert value(left, "kgroupd_groups", state="Empty", type="classic") == 1
        finally:
            await producer.stop()


def consumer(boot: str) -> AIOKafkaConsumer:
    return AIOKafkaConsumer(
        "events",
        bootstrap_servers=boot,
        group_id="g",
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        heartbeat_interval_ms=100,
        session_timeout_ms=6000,
    )


async def test_groups_and_topics_past_the_limit_are_summed_as_other() -> None:
    async with running_server(metrics_max_groups=1) as server:
        boot = f"127.0.0.1:{server.port}"
        producer = AIOKafkaProducer(bootstrap_servers=boot)
        await producer.start()
        try:
            for topic in ("a", "b", "c"):
                await producer.send_and_wait(topic, b"x")
        finally:
            await producer.stop()
        for group in ("g1", "g2", "g3"):
            c = AIOKafkaConsumer(bootstrap_servers=boot, group_id=group)
            await c.start()
            try:
                c.assign([TopicPartition("a", 0)])
                await c.commit({TopicPartition("a", 0): 0})  # lag 1 each
            finally:
                await c.stop()
        got = await scrape(http_port(server))
    assert value(got, "kgroupd_consumergroup_lag_sum", group="g1") == 1
    assert value(got, "kgroupd_consumergroup_lag_sum", group="__other__") == 2
    assert value(got, "kgroupd_consumergroup_lag", group="__other__", topic="a", partition="0") == 2
    assert value(got, "kgroupd_log_end_offset", topic="a", partition="0") == 1
    assert value(got, "kgroupd_log_end_offset", topic="__other__", partition="0") == 2
    groups = {dict(labels)["group"] for (n, labels) in got if n == "kgroupd_group_members"}
    assert groups == {"g1", "__other__"}


async def test_no_metrics_collects_nothing_and_serves_no_metrics() -> None:
    async with running_server(metrics=False) as server:
        assert server.broker.stats is None
        async with aiohttp.ClientSession() as http:
            base = f"http://127.0.0.1:{http_port(server)}"
            async with http.get(f"{base}/metrics") as resp:
                assert resp.status == 404
            async with http.get(f"{base}/readyz") as resp:
                assert resp.status == 200


def slow_data_dir(root: Path) -> Path:
    """A data dir as kill -9 leaves it after 200,000 offset commits: no snapshot, so the
    next start replays every record of the coordinator log (over a second)."""
    broker = ThreadedBroker(
        data_dir=root / "live", create_topics=["t:100"], fsync="never", metrics=False
    )
    broker.start()
    try:
        assert broker.server is not None and broker._loop is not None
        coordinator = broker.server.broker.coordinator

        async def fill() -> None:
            for g in range(2000):
                parts = [(p, p, -1, "") for p in range(100)]
                coordinator.commit_offsets(OffsetCommit(f"g{g}", (OffsetCommitTopic("t", parts),)))
                if g % 100 == 0:
                    await asyncio.sleep(0)  # the records are written as the loop turns
            state.before_send()  # every record in the file, as before an answer goes out

        state = broker.server.broker
        asyncio.run_coroutine_threadsafe(fill(), broker._loop).result(60)
        shutil.copytree(root / "live", root / "crashed")  # what is in the files now
    finally:
        broker.stop()
    return root / "crashed"


async def test_readyz_is_503_until_a_slow_data_dir_has_loaded(tmp_path: Path) -> None:
    data = await asyncio.to_thread(slow_data_dir, tmp_path)
    proc = await start("--port", "0", "--log-format", "json", "--data-dir", str(data))
    try:
        http = await wait_for_event(proc, "http_listening")  # --http-port 0 logs its port
        port = http["port"]
        assert isinstance(port, int) and port > 0
        seen: list[int] = []
        api_seen: list[int] = []
        health_503 = 0
        async with aiohttp.ClientSession() as session:
            base = f"http://127.0.0.1:{port}"
            deadline = time.monotonic() + 60
            while True:
                async with session.get(f"{base}/healthz") as health:
                    assert health.status == 200  # serving, while loading too
                async with session.get(f"{base}/readyz") as ready:
                    seen.append(ready.status)
                    if ready.status == 200:
                        break
                    assert ready.status == 503
                    assert "loading the data dir" in await ready.text()
                    async with session.get(f"{base}/api/groups") as api:
                        api_seen.append(api.status)
                    # the image's HEALTHCHECK (python -m kgroupd.broker.cli.healthcheck) says not
                    # yet, unless the load ended between the two requests: then /readyz says so too
                    said = await asyncio.to_thread(healthcheck_ready, port)
                    if said is None:
                        async with session.get(f"{base}/readyz") as again:
                            assert again.status == 200
                    else:
                        assert "503" in said
                        health_503 += 1
                assert time.monotonic() < deadline
                await asyncio.sleep(0.05)
            assert await asyncio.to_thread(healthcheck_ready, port) is None
            # answered promptly while loading: the load does not block the loop
            assert seen.count(503) >= 5, seen
            assert health_503 >= 1  # the health check said "not yet" while loading
            # the JSON API too: 503 while nothing can be read yet (a late one may be a 200)
            assert api_seen.count(503) >= 4 and set(api_seen) <= {200, 503}, api_seen
            loaded = await wait_for_event(proc, "loaded")  # the start-up summary
            assert (loaded["groups"], loaded["committed_offsets"]) == (2000, 2000 * 100)
            listening = await wait_for_event(proc, "listening")
            with socket.create_connection(("127.0.0.1", int(listening["port"])), 5):
                pass  # the Kafka listener accepts once ready
            async with session.get(f"{base}/metrics") as resp:
                text = await resp.text()
            assert 'kgroupd_groups{state="Empty",type="classic"} 2000.0' in text
            async with session.get(f"{base}/api/groups/g1999") as resp:
                group = await resp.json()
            assert (group["state"], group["members"]) == ("Empty", [])
            assert [r["committed"] for r in group["offsets"]] == list(range(100))
    finally:
        proc.kill()
        await proc.wait()


def healthcheck_ready(port: int) -> str | None:
    from kgroupd.broker.cli.healthcheck import ready

    return ready("127.0.0.1", port, 5)


async def test_a_taken_http_port_stops_start_up_with_one_line() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        code, _, err = await run_to_end("--port", "0", "--http-port", str(port))
    assert code == 1
    lines = err.strip().splitlines()
    assert lines[-1].startswith("kgroupd: error: cannot listen for HTTP on 127.0.0.1:")
    assert str(port) in lines[-1] and "--http-port" in lines[-1]
    assert not any("Traceback" in line for line in lines)


async def test_no_http_serves_nothing() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    proc = await start(
        "--port", "0", "--log-format", "json", "--no-http", env={"KGROUPD_HTTP_PORT": str(port)}
    )
    try:
        await wait_for_event(proc, "listening")
        try:
            socket.create_connection(("127.0.0.1", port), 2).close()
        except ConnectionRefusedError:
            pass
        else:
            raise AssertionError(f"something listens on {port} under --no-http")
    finally:
        proc.kill()
        _, err = await proc.communicate()
    assert b"http_listening" not in err


async def test_version_prints_the_version() -> None:
    from importlib.metadata import version

    code, out, _ = await run_to_end("--version")
    assert code == 0
    assert out.strip() == f"kgroupd {version('kgroupd')}"


def test_kafka_api_names_are_the_metrics_labels() -> None:
    from kgroupd.broker.handlers import supported_versions
    from kgroupd.protocol.api_names import API_NAMES

    assert {key for key, _, _ in supported_versions()} == set(API_NAMES)


async def test_consumer_group_epoch_bumps_are_rebalances() -> None:
    """KIP-848 (confluent-kafka, group.protocol=consumer): a member joining bumps the group
    epoch, counted as a rebalance; the group is of type consumer, its generation the epoch."""
    from confluent_kafka import Consumer

    async with running_server(
        create_topics=(TopicSpec("kip848", 2),),
        group_consumer_min_heartbeat_interval_ms=100,
        group_consumer_heartbeat_interval_ms=200,
    ) as server:
        port = http_port(server)
        consumer = Consumer(
            {
                "bootstrap.servers": f"127.0.0.1:{server.port}",
                "group.id": "kip848-group",
                "group.protocol": "consumer",
                "enable.auto.commit": False,
            }
        )
        try:
            consumer.subscribe(["kip848"])
            deadline = time.monotonic() + 20
            while True:
                await asyncio.to_thread(consumer.poll, 0.1)
                got = await scrape(port)
                if value(got, "kgroupd_group_members", group="kip848-group") == 1:
                    break
                assert time.monotonic() < deadline, "the member never joined"
            assert (
                value(got, "kgroupd_groups", state="Stable", type="consumer")
                + value(got, "kgroupd_groups", state="Reconciling", type="consumer")
                == 1
            )
            assert value(got, "kgroupd_group_generation", group="kip848-group") >= 1
            assert (
                value(got, "kgroupd_rebalances_total", group="kip848-group", reason="member_joined")
                >= 1
            )
            assert (
                value(got, "kgroupd_requests_total", api="ConsumerGroupHeartbeat", version="1")
                + value(got, "kgroupd_requests_total", api="ConsumerGroupHeartbeat", version="0")
                >= 1
            )
        finally:
            await asyncio.to_thread(consumer.close)
        left = await scrape(port)
        assert (
            value(left, "kgroupd_rebalances_total", group="kip848-group", reason="member_left") == 1
        )


def test_rebalance_reasons_name_every_coordinator_reason() -> None:
    from kgroupd.broker.coordinator.events import REBALANCE_REASONS, rebalance_reason

    cases = {
        "adding new member m-1": "member_joined",
        "member m-1 joined or changed its subscription": "member_joined",
        "member rejoining (m-1)": "member_rejoined",
        "leader rejoined in Stable (m-1)": "member_rejoined",
        "follower changed metadata in Stable (m-1)": "metadata_changed",
        "static member s-1 changes the selected protocol": "metadata_changed",
        "explicit LeaveGroup for ['m-1']": "member_left",
        "member m-1 left the group": "member_left",
        "session of m-1 expired": "session_expired",
        "member m-1 fenced (session timeout)": "session_expired",
        "members ['m-1'] sent no SyncGroup in time": "sync_timeout",
        "Downgrade group g from consumer to classic.": "migration",
    }
    for text, reason in cases.items():
        assert rebalance_reason(text) == reason, text
        assert reason in REBALANCE_REASONS
