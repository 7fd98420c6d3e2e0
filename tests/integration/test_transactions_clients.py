"""Transactional producers of confluent-kafka (librdkafka), aiokafka and kafkajs against
kgroupd: a committed and an aborted transaction across every partition of two topics, read
back by each client's own consumer with read_committed (exactly the committed records) and
read_uncommitted (every record, aborted ones as ordinary records, never a control record);
and zombie fencing: the older of two producers with one transactional id fails."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import time
from collections.abc import AsyncIterator

import pytest
import pytest_asyncio
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.errors import ProducerFenced

from kgroupd.broker.config.settings import TopicSpec
from kgroupd.broker.net.server import KafkaServer
from kgroupd.broker.testing import running_server
from tests.conftest import require

TOPICS = {"ta": 3, "tb": 2}


def values(prefix: str, kind: str) -> list[str]:
    return sorted(f"{prefix}-{kind}-{t}-{p}" for t, n in TOPICS.items() for p in range(n))


@pytest_asyncio.fixture
async def server() -> AsyncIterator[KafkaServer]:
    specs = tuple(TopicSpec(t, n) for t, n in TOPICS.items())
    async with running_server(
        log_level="warning", create_topics=specs, initial_rebalance_delay_ms=0
    ) as srv:
        yield srv


# --- confluent-kafka -------------------------------------------------------------------------
def _confluent_read(bootstrap: str, isolation: str) -> list[str]:
    from confluent_kafka import Consumer
    from confluent_kafka import TopicPartition as CTP

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"read-{isolation}",
            "isolation.level": isolation,
            "enable.auto.commit": False,
        }
    )
    consumer.assign([CTP(t, p, 0) for t, n in TOPICS.items() for p in range(n)])
    got: list[str] = []
    last = time.monotonic()
    deadline = last + 20
    while time.monotonic() < deadline and (not got or time.monotonic() - last < 2):
        msg = consumer.poll(0.1)
        if msg is None or msg.error():
            continue
        got.append(msg.value().decode())
        last = time.monotonic()
    consumer.close()
    return sorted(got)


async def test_confluent_kafka_commit_and_abort(server: KafkaServer) -> None:
    from confluent_kafka import Producer

    bootstrap = f"127.0.0.1:{server.port}"

    def run() -> tuple[list[str], list[str]]:
        producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": "cf-txn"})
        producer.init_transactions(20)
        for kind, commit in (("c", True), ("a", False)):
            producer.begin_transaction()
            for topic, n in TOPICS.items():
                for p in range(n):
                    producer.produce(topic, f"cf-{kind}-{topic}-{p}".encode(), partition=p)
            producer.flush(20)  # written before the abort, not purged from the queue
            if commit:
                producer.commit_transaction(20)
            else:
                producer.abort_transaction(20)
        return _confluent_read(bootstrap, "read_committed"), _confluent_read(
            bootstrap, "read_uncommitted"
        )

    committed, uncommitted = await asyncio.to_thread(run)
    assert committed == values("cf", "c")
    assert uncommitted == sorted(values("cf", "c") + values("cf", "a"))


async def test_confluent_kafka_zombie_is_fenced(server: KafkaServer) -> None:
    from confluent_kafka import KafkaError, KafkaException, Producer

    bootstrap = f"127.0.0.1:{server.port}"

    def run() -> KafkaError:
        old = Producer({"bootstrap.servers": bootstrap, "transactional.id": "cf-zombie"})
        old.init_transactions(20)
        new = Producer({"bootstrap.servers": bootstrap, "transactional.id": "cf-zombie"})
        new.init_transactions(20)
        old.begin_transaction()
        old.produce("ta", b"zombie", partition=0)
        try:
            old.commit_transaction(20)
        except KafkaException as exc:
            error: KafkaError = exc.args[0]
            return error
        raise AssertionError("the fenced producer committed")

    error = await asyncio.to_thread(run)
    assert error.fatal() and error.code() in (
        KafkaError._FENCED,
        KafkaError.PRODUCER_FENCED,
        KafkaError.INVALID_PRODUCER_EPOCH,
    ), error


# --- aiokafka --------------------------------------------------------------------------------
async def _aiokafka_read(bootstrap: str, isolation: str) -> list[str]:
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, isolation_level=isolation)
    await consumer.start()
    try:
        tps = [TopicPartition(t, p) for t, n in TOPICS.items() for p in range(n)]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        got: list[str] = []
        for _ in range(8):
            batches = await consumer.getmany(timeout_ms=200)
            got += [r.value.decode() for recs in batches.values() for r in recs]
        return sorted(got)
    finally:
        await consumer.stop()


async def test_aiokafka_commit_and_abort(server: KafkaServer) -> None:
    bootstrap = f"127.0.0.1:{server.port}"
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, transactional_id="aio-txn")
    await producer.start()
    try:
        for kind in ("c", "a"):
            with pytest.raises(RuntimeError) if kind == "a" else _nothing():
                async with producer.transaction():
                    for topic, n in TOPICS.items():
                        for p in range(n):
                            await producer.send_and_wait(
                                topic, f"aio-{kind}-{topic}-{p}".encode(), partition=p
                            )
                    if kind == "a":
                        raise RuntimeError("abort")
    finally:
        await producer.stop()
    assert await _aiokafka_read(bootstrap, "read_committed") == values("aio", "c")
    assert await _aiokafka_read(bootstrap, "read_uncommitted") == sorted(
        values("aio", "c") + values("aio", "a")
    )


class _nothing:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


async def test_aiokafka_zombie_is_fenced(server: KafkaServer) -> None:
    bootstrap = f"127.0.0.1:{server.port}"
    old = AIOKafkaProducer(bootstrap_servers=bootstrap, transactional_id="aio-zombie")
    await old.start()
    new = AIOKafkaProducer(bootstrap_servers=bootstrap, transactional_id="aio-zombie")
    await new.start()
    try:
        with pytest.raises(ProducerFenced):
            async with old.transaction():
                await old.send_and_wait("ta", b"zombie", partition=0)
    finally:
        await new.stop()
        await old.stop()


# --- kafkajs ---------------------------------------------------------------------------------
async def _kafkajs(server: KafkaServer, mode: str, prefix: str) -> dict[str, object]:
    require(shutil.which("node") is not None and shutil.which("npm") is not None, "node and npm")
    from tests.integration.test_groups_kafkajs import JS_DIR, install_kafkajs

    modules = await asyncio.to_thread(install_kafkajs)
    opts = {"brokers": [f"127.0.0.1:{server.port}"], "mode": mode, "topics": TOPICS}
    opts["prefix"] = prefix
    proc = await asyncio.create_subprocess_exec(
        "node",
        str(JS_DIR / "transactions.js"),
        json.dumps(opts),
        env={**os.environ, "NODE_PATH": str(modules)},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 90)
    assert proc.returncode == 0, (out.decode(), err.decode()[-3000:])
    result: dict[str, object] = json.loads(out.decode().strip().splitlines()[-1])
    return result


async def test_kafkajs_commit_and_abort(server: KafkaServer) -> None:
    result = await _kafkajs(server, "commit-abort", "js")
    assert result["committed"] == values("js", "c")
    assert result["uncommitted"] == sorted(values("js", "c") + values("js", "a"))


async def test_kafkajs_zombie_is_fenced(server: KafkaServer) -> None:
    result = await _kafkajs(server, "fence", "jsz")
    assert result["error"] in ("INVALID_PRODUCER_EPOCH", "PRODUCER_FENCED"), result
