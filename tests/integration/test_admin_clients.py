"""DeleteRecords and IncrementalAlterConfigs from the Java Admin (kafka-clients 4.3) and from
kafkajs (issue 12); kafka-python and confluent-kafka are in test_delete_records.py and
test_alter_configs.py.

- Java (``tests/java/KgroupdAdminCheck.java``): deleteRecords moves the log start, and
  listOffsets(earliest) and a consumer with auto.offset.reset=earliest follow it;
  incrementalAlterConfigs lowers retention.ms on a live topic whose records are an hour old:
  describeConfigs shows the value with source DYNAMIC_TOPIC_CONFIG and the old records are
  gone at once.
- kafkajs (``tests/js/admin_records.js``): admin.deleteTopicRecords, fetchTopicOffsets, and a
  consumer from the beginning starting at the new log start.
"""

from __future__ import annotations

import asyncio
import json
import os
import time

import pytest

from kgroupd.broker.net.server import KafkaServer
from tests.conftest import require
from tests.support.java import JavaClient, java_available, prepare_java_client
from tests.support.kafka_wire import (
    WireClient,
    build_batch,
    create_topic,
    only_partition,
    produce_request,
)


async def _fill(server: KafkaServer, topic: str, count: int, age_ms: int = 0) -> None:
    async with await WireClient.connect(server.port) as wire:
        await create_topic(wire, topic, 1)
        stamp = int(time.time() * 1000) - age_ms
        for i in range(count):
            batch = build_batch([(None, b"v%d" % i, [])], timestamp_ms=stamp)
            resp = await wire.request(0, 8, produce_request(topic, 0, batch))
            assert only_partition(resp)["error_code"] == 0


@pytest.mark.java
async def test_java_admin_delete_records_and_incremental_alter_configs(
    server: KafkaServer,
) -> None:
    require(java_available(), "java and javac (JDK 17) are not on PATH; the Java client needs them")
    java: JavaClient = await asyncio.to_thread(prepare_java_client)
    await _fill(server, "java-records", 10)
    await _fill(server, "java-retention", 4, age_ms=3_600_000)
    command = java.command(
        "KgroupdAdminCheck", f"127.0.0.1:{server.port}", "java-records", "6", "java-retention"
    )
    proc = await asyncio.create_subprocess_exec(
        *command, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    out, err = await asyncio.wait_for(proc.communicate(), 90)
    where = f"\n--- stdout ---\n{out.decode()[-3000:]}\n--- stderr ---\n{err.decode()[-6000:]}"
    lines = [ln for ln in out.decode().splitlines() if ln.startswith("KGROUPD_ADMIN ")]
    assert proc.returncode == 0 and lines, where
    s = json.loads(lines[-1].split(" ", 1)[1])
    assert (s["low_watermark"], s["earliest"], s["consumer_first"]) == (6, 6, 6), where
    assert (s["retention_ms"], s["retention_source"]) == ("60000", "DYNAMIC_TOPIC_CONFIG"), where
    # every batch older than a minute is gone but the active one, which retention keeps
    assert s["retention_earliest"] == 3, where


async def test_kafkajs_delete_topic_records(server: KafkaServer) -> None:
    from tests.integration.test_groups_kafkajs import JS_DIR, install_kafkajs

    require(all(map(_which, ("node", "npm"))), "node and npm are not on PATH; kafkajs needs them")
    modules = await asyncio.to_thread(install_kafkajs)
    await _fill(server, "js-records", 8)
    opts = {"brokers": [f"127.0.0.1:{server.port}"], "topic": "js-records", "before": 5}
    proc = await asyncio.create_subprocess_exec(
        "node",
        str(JS_DIR / "admin_records.js"),
        json.dumps(opts),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env={**os.environ, "NODE_PATH": str(modules)},
    )
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    where = f"\n--- stdout ---\n{out.decode()}\n--- stderr ---\n{err.decode()[-4000:]}"
    assert proc.returncode == 0, where
    result = json.loads(out.decode().strip().splitlines()[-1])
    assert result == {"low": "5", "high": "8", "first": "5"}, where


def _which(name: str) -> bool:
    import shutil

    return shutil.which(name) is not None
