"""The pytest plugin as a user meets it: a test suite of its own (no conftest, no
``pytest_plugins`` line) in a fresh directory, run by pytest in a subprocess, uses the
``kgroupd_bootstrap`` and ``kgroupd_broker`` fixtures with real clients: an async aiokafka test
and a sync confluent-kafka one on the session broker, the ``kgroupd_controls`` fixture (an
idempotent confluent-kafka producer meets two injected NOT_LEADER_OR_FOLLOWER), and a broker
with a data dir, a topic and two listeners whose committed offset survives ``restart()``."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

USER_TESTS = """
import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from confluent_kafka import Consumer, Producer, TopicPartition as TP


@pytest.mark.asyncio
async def test_async_client_on_the_session_broker(kgroupd_bootstrap):
    producer = AIOKafkaProducer(bootstrap_servers=kgroupd_bootstrap)
    await producer.start()
    try:
        meta = await producer.send_and_wait("user-async", b"hello")
    finally:
        await producer.stop()
    assert meta.offset == 0


def test_sync_client_on_the_same_broker(kgroupd_bootstrap):
    p = Producer({"bootstrap.servers": kgroupd_bootstrap})
    p.produce("user-sync", b"x")
    assert p.flush(10) == 0
    c = Consumer({"bootstrap.servers": kgroupd_bootstrap, "group.id": "g"})
    md = c.list_topics(timeout=10)
    assert "user-async" in md.topics  # the first test's topic: one broker per session
    c.close()


def test_controls_of_the_session_broker(kgroupd_controls, kgroupd_bootstrap):
    rule = kgroupd_controls.inject_error("Produce", "NOT_LEADER_OR_FOLLOWER", count=2)
    assert rule["count"] == 2
    p = Producer({"bootstrap.servers": kgroupd_bootstrap, "enable.idempotence": True})
    p.produce("user-controls", b"x")
    assert p.flush(10) == 0
    assert kgroupd_controls.pending_errors() == []  # both met, then delivered


def test_a_broker_with_settings_keeps_offsets_across_restart(kgroupd_broker, tmp_path):
    broker = kgroupd_broker(
        data_dir=tmp_path / "data",
        create_topics=["events:3"],
        listeners="INTERNAL://127.0.0.1:0,EXTERNAL://127.0.0.2:0",
        listener_security_protocol_map="INTERNAL:PLAINTEXT,EXTERNAL:PLAINTEXT",
    )
    assert set(broker.bootstraps) == {"INTERNAL", "EXTERNAL"}
    assert broker.bootstraps["EXTERNAL"].startswith("127.0.0.2:")
    c = Consumer({"bootstrap.servers": broker.bootstraps["EXTERNAL"], "group.id": "keep"})
    assert len(c.list_topics("events", timeout=10).topics["events"].partitions) == 3
    c.commit(offsets=[TP("events", 2, 7)], asynchronous=False)
    c.close()
    broker.restart()
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "keep"})
    (tp,) = c.committed([TP("events", 2)], timeout=10)
    c.close()
    assert tp.offset == 7
"""


def test_an_installed_kgroupd_gives_any_suite_its_fixtures(tmp_path: Path) -> None:
    suite = tmp_path / "their-project"
    suite.mkdir()
    (suite / "test_with_kgroupd.py").write_text(USER_TESTS)
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"],
        cwd=suite,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert proc.returncode == 0, proc.stdout[-5000:] + proc.stderr[-3000:]
    assert "4 passed" in proc.stdout, proc.stdout
