"""Exactly-once consume-transform-produce with confluent-kafka, aiokafka and kafkajs: 10,000
input records, the processor (a subprocess, ``tests/support/ctp_processor.py`` or
``tests/js/ctp_processor.js``) SIGKILLed in the middle and restarted with the same
transactional id; the output topic read with read_committed holds each input's output exactly
once, and the group's committed offsets are the input's end offsets. The kafkajs processor is
a group member (subscribe, sessionTimeout 6 s so the killed member is expelled quickly)."""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from kgroupd.broker.config.settings import TopicSpec
from kgroupd.broker.net.server import KafkaServer
from kgroupd.broker.testing import running_server
from tests.conftest import require

ROOT = Path(__file__).resolve().parents[2]
RECORDS, PARTITIONS = 10_000, 6


@pytest_asyncio.fixture
async def server() -> AsyncIterator[KafkaServer]:
    topics = (TopicSpec("eos-in", PARTITIONS), TopicSpec("eos-out", PARTITIONS))
    async with running_server(log_level="warning", create_topics=topics) as srv:
        yield srv


async def processor(client: str, bootstrap: str) -> asyncio.subprocess.Process:
    args = ("eos-in", "eos-out", f"eos-{client}", f"eos-{client}-txn")
    if client == "kafkajs":
        from tests.integration.test_groups_kafkajs import JS_DIR, install_kafkajs

        modules = await asyncio.to_thread(install_kafkajs)
        return await asyncio.create_subprocess_exec(
            "node",
            str(JS_DIR / "ctp_processor.js"),
            bootstrap,
            *args,
            env={**os.environ, "NODE_PATH": str(modules)},
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
    return await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "tests.support.ctp_processor",
        client,
        bootstrap,
        *args,
        str(PARTITIONS),
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )


@pytest.mark.parametrize("client", ["confluent", "aiokafka", "kafkajs"])
async def test_consume_transform_produce_survives_a_killed_processor(
    server: KafkaServer, client: str
) -> None:
    if client == "kafkajs":
        require(shutil.which("node") is not None and shutil.which("npm") is not None, "node, npm")
    bootstrap = f"127.0.0.1:{server.port}"
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=5)
    await producer.start()
    try:
        sent = [
            await producer.send("eos-in", f"i{n}".encode(), partition=n % PARTITIONS)
            for n in range(RECORDS)
        ]
        await asyncio.gather(*sent)
    finally:
        await producer.stop()

    first = await processor(client, bootstrap)
    assert first.stdout is not None
    processed = 0
    while processed < RECORDS // 3:
        line = await asyncio.wait_for(first.stdout.readline(), 60)
        assert line, (await first.stderr.read()).decode()[-3000:]  # type: ignore[union-attr]
        processed = int(line.split()[1])
    first.send_signal(signal.SIGKILL)  # in the middle, maybe inside a transaction
    await first.wait()
    assert processed < RECORDS

    second = await processor(client, bootstrap)
    _out, err = await asyncio.wait_for(second.communicate(), 180)
    assert second.returncode == 0, err.decode()[-3000:]

    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap, isolation_level="read_committed", group_id=f"eos-{client}"
    )
    await consumer.start()
    try:
        outs = [TopicPartition("eos-out", p) for p in range(PARTITIONS)]
        consumer.assign(outs)
        await consumer.seek_to_beginning(*outs)
        got: list[bytes] = []
        for _ in range(200):
            batches = await consumer.getmany(timeout_ms=200)
            got += [r.value for recs in batches.values() for r in recs]
            if len(got) >= RECORDS and not any(batches.values()):
                break
        ins = [TopicPartition("eos-in", p) for p in range(PARTITIONS)]
        ends = await consumer.end_offsets(ins)
        committed = {tp: await consumer.committed(tp) for tp in ins}
    finally:
        await consumer.stop()
    assert len(got) == RECORDS, f"{len(got) - len(set(got))} duplicates, {len(set(got))} distinct"
    assert sorted(got) == sorted(f"out-i{n}".encode() for n in range(RECORDS))
    assert committed == ends
