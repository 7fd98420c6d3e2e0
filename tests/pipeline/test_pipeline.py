"""The reference pipeline (``kgroupd.pipeline.job``) end to end: 20,000 JSON events, an availableNow
run writing window counts to Parquet, then 5,000 more and a restart from the checkpoint."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from kgroupd.pipeline.demo_producer import Event, ensure_topic, make_events, produce
from kgroupd.pipeline.job import JobConfig, start, summary
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


def run(spark: Any, config: JobConfig) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The run's progress entries and its summary (what python -m kgroupd.pipeline prints last)."""
    query = start(spark, config)
    try:
        assert query.awaitTermination(180), "the pipeline's availableNow run did not finish"
    finally:
        query.stop()
    return [dict(p) for p in query.recentProgress], summary(spark, query, config)


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

    progress, done = run(spark, config)
    assert sum(p["numInputRows"] for p in progress) == 20_000
    expected = closed_windows(first)
    assert len(expected) > 300  # nearly every window is closed; the last few stay open
    assert written(spark, tmp_path / "counts") == expected
    # the run's summary line (python -m kgroupd.pipeline prints it last)
    assert (done["records_read"], done["windows_written"]) == (20_000, len(expected))
    assert done["batches"] >= 1 and done["output"] == config.output

    # Stop, produce 5,000 more (later event times), restart from the checkpoint.
    ends_before = broker.run(end_offsets(bs, TOPIC, PARTITIONS))
    more = make_events(5_000, start_ms=START_MS + 20_000 * 100, keys=10, seed=2)
    broker.run(produce(bs, TOPIC, more))
    progress, _done = run(spark, config)
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


def test_an_unreachable_broker_fails_fast_in_one_line() -> None:
    """``python -m kgroupd.pipeline`` with a wrong bootstrap address: exit 1 within 15 s (before
    Spark
    starts), one line on stderr naming the address."""
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    for address in (f"127.0.0.1:{port}", "no-such-host.invalid:9092"):
        t0 = time.monotonic()
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "kgroupd.pipeline",
                "--bootstrap-server",
                address,
                "--available-now",
            ],
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert time.monotonic() - t0 < 15
        lines = proc.stderr.strip().splitlines()
        assert proc.returncode == 1 and len(lines) == 1, proc.stderr
        assert address in lines[0] and "cannot reach the broker" in lines[0]
