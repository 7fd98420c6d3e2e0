"""The reference pipeline (``pipeline.job``) end to end: 20,000 JSON events, an availableNow
run writing window counts to Parquet, then 5,000 more and a restart from the checkpoint."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from pipeline.demo_producer import Event, ensure_topic, make_events, produce
from pipeline.job import JobConfig, start
from tests.pipeline.conftest import BrokerThread
from tests.pipeline.kafka_helpers import committed, end_offsets

pytestmark = pytest.mark.spark

TOPIC = "events"
PARTITIONS = 3
GROUP = "pipeline-test"
WINDOW_MS = 60_000
WATERMARK_MS = 30_000
START_MS = 1_700_000_000_000  # a fixed instant: the expected windows do not depend on today


def closed_windows(events: list[Event]) -> dict[tuple[int, str], int]:
    """What the job must have written: the count per (window start, key) of every window
    the watermark (latest event time - 30 s) has passed, in append mode."""
    watermark = max(e.ts for e in events) - WATERMARK_MS
    counts = Counter((e.ts // WINDOW_MS * WINDOW_MS, e.key) for e in events)
    return {w: n for w, n in counts.items() if w[0] + WINDOW_MS <= watermark}


def written(spark: Any, path: Path) -> dict[tuple[int, str], int]:
    rows = (
        spark.read.parquet(str(path))
        .selectExpr(
            "unix_millis(window_start) AS start", "unix_millis(window_end) AS end", "key", "count"
        )
        .collect()
    )
    out: dict[tuple[int, str], int] = {}
    for row in rows:
        assert row.end - row.start == WINDOW_MS
        assert (row.start, row.key) not in out, f"window {row.start} {row.key} written twice"
        out[(row.start, row.key)] = row["count"]
    return out


def run(spark: Any, config: JobConfig) -> list[dict[str, Any]]:
    query = start(spark, config)
    try:
        assert query.awaitTermination(180), "the pipeline's availableNow run did not finish"
    finally:
        query.stop()
    return [dict(p) for p in query.recentProgress]


def test_window_counts_then_restart_reads_only_new_records(
    spark: Any, broker: BrokerThread, tmp_path: Path
) -> None:
    bs = broker.bootstrap
    config = JobConfig(
        bootstrap_server=bs,
        topic=TOPIC,
        group=GROUP,
        output=str(tmp_path / "counts"),
        checkpoint=str(tmp_path / "checkpoint"),
        window="1 minute",
        watermark="30 seconds",
        starting_offsets="earliest",
        available_now=True,
    )
    # 20,000 events, 100 ms apart with up to 1 s of disorder (less than the watermark
    # delay, so none is late): about 33 minutes of event time over 10 keys.
    first = make_events(20_000, start_ms=START_MS, keys=10, seed=1)
    broker.run(ensure_topic(bs, TOPIC, PARTITIONS))
    broker.run(produce(bs, TOPIC, first))

    progress = run(spark, config)
    assert sum(p["numInputRows"] for p in progress) == 20_000
    expected = closed_windows(first)
    assert len(expected) > 300  # nearly every window is closed; the last few stay open
    assert written(spark, tmp_path / "counts") == expected

    # Stop, produce 5,000 more (later event times), restart from the checkpoint.
    ends_before = broker.run(end_offsets(bs, TOPIC, PARTITIONS))
    more = make_events(5_000, start_ms=START_MS + 20_000 * 100, keys=10, seed=2)
    broker.run(produce(bs, TOPIC, more))
    progress = run(spark, config)
    # Only the new records were read, starting where the first run ended.
    assert sum(p["numInputRows"] for p in progress) == 5_000
    first_batch = next(p for p in progress if p["numInputRows"] > 0)
    resumed_at = json.loads(first_batch["sources"][0]["startOffset"])[TOPIC]
    assert {int(k): v for k, v in resumed_at.items()} == ends_before
    # Every window closed by now, including those the first run left open, is right.
    expected = closed_windows(first + more)
    assert written(spark, tmp_path / "counts") == expected
    assert sum(expected.values()) > 24_000

    # The group's committed offsets are the log end offsets: lag 0 for any lag tool.
    ends = broker.run(end_offsets(bs, TOPIC, PARTITIONS))
    assert sum(ends.values()) == 25_000
    assert broker.run(committed(broker.port, GROUP, TOPIC, PARTITIONS)) == ends
