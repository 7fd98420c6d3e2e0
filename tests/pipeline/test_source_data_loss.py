"""The source never skips data silently: its offsets name the cluster and the topics they
were read from, and a stream that restarts against another cluster (a broker restarted
without its data), a recreated topic, or offsets beyond the log end fails naming the
partition, the checkpoint offset and what the broker has now (failOnDataLoss=true), or
says so and reads those partitions again from their earliest offset (false).

The container story: ``docker compose down && up`` with an in-memory broker and the
pipeline's checkpoint on a volume, the demo producer run again (equal per-partition
counts, so every checkpoint offset is a valid offset of the new log)."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections.abc import Coroutine
from pathlib import Path
from typing import Any, TypeVar

import pytest
from pyspark.errors import StreamingQueryException

from kgroupd.broker.testing import ThreadedBroker
from kgroupd.pipeline.demo_producer import make_events
from kgroupd.pipeline.demo_producer import produce as produce_events
from kgroupd.pipeline.job import JobConfig, start, summary
from kgroupd.pipeline.source import KgroupdStreamReader, SourceOptions
from kgroupd.pipeline.source.cluster import describe_any
from kgroupd.pipeline.source.kafka import EventLoop
from tests.pipeline.conftest import BrokerThread
from tests.pipeline.kafka_helpers import committed, create_topic, delete_topic, end_offsets, produce
from tests.pipeline.spark_helpers import run_available_now

pytestmark = pytest.mark.spark

START_MS = 1_700_000_000_000
T = TypeVar("T")


def on(broker: ThreadedBroker, coro: Coroutine[Any, Any, T]) -> T:
    """Run ``coro`` on the broker's event loop (the Spark calls block this thread)."""
    assert broker._loop is not None
    return asyncio.run_coroutine_threadsafe(coro, broker._loop).result(60)


def records(n: int, partitions: int, tag: str) -> list[tuple[int, bytes, bytes, list[Any]]]:
    return [(i % partitions, f"k{i}".encode(), f"{tag}-{i}".encode(), []) for i in range(n)]


def options(bootstrap: str, topic: str, fail_on_data_loss: bool, **more: str) -> dict[str, str]:
    return {
        "kafka.bootstrap.servers": bootstrap,
        "subscribe": topic,
        "startingOffsets": "earliest",
        "failOnDataLoss": str(fail_on_data_loss).lower(),
        **more,
    }


def test_offsets_name_the_cluster_and_the_topic_ids(broker: BrokerThread) -> None:
    bs = broker.bootstrap
    broker.run(create_topic(bs, "named", 2))
    with EventLoop() as loop:
        facts = loop.run(describe_any(bs, ["named"]))
    assert facts.cluster_id == broker.server.broker.cluster_id  # type: ignore[union-attr]
    topic_id = broker.server.broker.topics.get("named").topic_id  # type: ignore[union-attr]
    assert facts.topic_ids == {"named": str(topic_id)}
    reader = KgroupdStreamReader(SourceOptions.parse(options(bs, "named", True)))
    try:
        initial = reader.initialOffset()
    finally:
        reader.stop()
    assert initial == {
        "named": {"0": 0, "1": 0},
        "kgroupd:meta": {"cluster_id": facts.cluster_id, "topic_ids": {"named": str(topic_id)}},
    }
    json.dumps(initial)  # Spark keeps it as JSON in the checkpoint


@pytest.mark.parametrize("fail_on_data_loss", [True, False])
def test_recreated_topic_follows_fail_on_data_loss(
    spark: Any, broker: BrokerThread, tmp_path: Path, fail_on_data_loss: bool
) -> None:
    """The topic is deleted and created again with more records than were read: without
    topic ids the stream would go on at offset 20 and skip the new topic's first 20."""
    bs = broker.bootstrap
    topic = f"recreated-{fail_on_data_loss}"
    broker.run(create_topic(bs, topic, 2))
    broker.run(produce(bs, topic, records(40, 2, "old")))
    opts = options(bs, topic, fail_on_data_loss)
    got, _ = run_available_now(spark, opts, tmp_path / "ck")
    assert len(got) == 40
    broker.run(delete_topic(bs, topic))
    broker.run(create_topic(bs, topic, 2))
    broker.run(produce(bs, topic, records(60, 2, "new")))
    if fail_on_data_loss:
        with pytest.raises(StreamingQueryException) as caught:
            run_available_now(spark, opts, tmp_path / "ck")
        message = str(caught.value)
        assert f"{topic}-0 (checkpoint offset 20): topic {topic} had id" in message
        assert "deleted and created again" in message
        assert "the broker's offsets are 0 to 30" in message
    else:
        got, _ = run_available_now(spark, opts, tmp_path / "ck")
        assert got == {(topic, p, o) for p in range(2) for o in range(30)}


@pytest.mark.parametrize("fail_on_data_loss", [True, False])
def test_checkpoint_beyond_the_log_end_follows_fail_on_data_loss(
    spark: Any, broker: BrokerThread, tmp_path: Path, fail_on_data_loss: bool
) -> None:
    bs = broker.bootstrap
    topic = f"short-{fail_on_data_loss}"
    broker.run(create_topic(bs, topic, 1))
    broker.run(produce(bs, topic, records(10, 1, "r")))
    opts = options(bs, topic, fail_on_data_loss, startingOffsets=json.dumps({topic: {"0": 100}}))
    if fail_on_data_loss:
        with pytest.raises(StreamingQueryException) as caught:
            run_available_now(spark, opts, tmp_path / "ck")
        message = str(caught.value)
        assert f"{topic}-0 (checkpoint offset 100): beyond the log end" in message
        assert "the broker's offsets are 0 to 10" in message
    else:
        got, _ = run_available_now(spark, opts, tmp_path / "ck")
        assert got == {(topic, 0, o) for o in range(10)}


def _job(tmp_path: Path, bootstrap: str) -> JobConfig:
    return JobConfig(
        bootstrap_server=bootstrap,
        topic="events",
        group="pipeline",
        output=str(tmp_path / "out"),
        checkpoint=str(tmp_path / "checkpoint"),
        available_now=True,
    )


def _run_job(spark: Any, config: JobConfig) -> dict[str, Any]:
    query = start(spark, config)
    try:
        assert query.awaitTermination(180), "the availableNow run did not finish"
    finally:
        query.stop()
    return summary(spark, query, config)


def _produce_demo(broker: ThreadedBroker, start_ms: int) -> None:
    """What ``python -m kgroupd.pipeline.demo_producer --count 2000`` sends: the same keys in the
    same order every time (seed 0), so every run puts as many events on each partition."""
    on(broker, produce_events(broker.bootstrap, "events", make_events(2000, start_ms=start_ms)))


def _ends(broker: ThreadedBroker) -> dict[int, int]:
    return on(broker, end_offsets(broker.bootstrap, "events", 3))


def test_broker_restarted_without_its_data_stops_the_pipeline(spark: Any, tmp_path: Path) -> None:
    """The compose story with an in-memory broker: the second run exits 1 with one line
    naming both cluster ids instead of reading 0 of the new events and exiting 0."""
    with ThreadedBroker(create_topics=["events:3"]) as broker:
        config = _job(tmp_path, broker.bootstrap)
        _produce_demo(broker, START_MS)
        first = _run_job(spark, config)
        assert first["records_read"] == 2000
        ends = _ends(broker)
        old_cluster = broker.server.broker.cluster_id  # type: ignore[union-attr]
        broker.restart()  # in memory: a new cluster, the topic empty again
        new_cluster = broker.server.broker.cluster_id  # type: ignore[union-attr]
        assert new_cluster != old_cluster
        _produce_demo(broker, START_MS + 600_000)
        assert _ends(broker) == ends  # equal per-partition counts: offsets look valid
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "kgroupd.pipeline",
                "--bootstrap-server",
                broker.bootstrap,
                "--group",
                config.group,
                "--output",
                config.output,
                "--checkpoint",
                config.checkpoint,
                "--available-now",
            ],
            capture_output=True,
            text=True,
            timeout=240,
        )
    assert proc.returncode == 1, proc.stderr[-3000:]
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("python -m kgroupd.pipeline: error: events-0 (checkpoint offset"), last
    assert f"read from cluster {old_cluster} but the broker is cluster {new_cluster}" in last
    assert "failOnDataLoss=false" in last
    done = json.loads(proc.stdout.strip().splitlines()[-1])
    assert done["records_read"] == 0


def test_broker_restarted_with_its_data_dir_reads_only_new_events(
    spark: Any, tmp_path: Path
) -> None:
    """The same story with the data volume: the same cluster, exactly the new events read,
    and the group's lag 0 afterwards."""
    with ThreadedBroker(create_topics=["events:3"], data_dir=tmp_path / "data") as broker:
        config = _job(tmp_path, broker.bootstrap)
        _produce_demo(broker, START_MS)
        assert _run_job(spark, config)["records_read"] == 2000
        broker.restart()
        _produce_demo(broker, START_MS + 600_000)
        assert _run_job(spark, config)["records_read"] == 2000
        ends = _ends(broker)
        assert sum(ends.values()) == 4000
        port = int(broker.bootstrap.rpartition(":")[2])
        assert on(broker, committed(port, "pipeline", "events", 3)) == ends
