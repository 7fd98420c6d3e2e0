"""Running streaming queries over the "kgroupd" source into Spark's memory sink."""

from __future__ import annotations

from pathlib import Path
from typing import Any

QUERY_TIMEOUT_S = 120


def stream(spark: Any, options: dict[str, str]) -> Any:
    reader = spark.readStream.format("kgroupd")
    for name, value in options.items():
        reader = reader.option(name, value)
    return reader.load()


def run_available_now(
    spark: Any, options: dict[str, str], checkpoint: Path
) -> tuple[set[tuple[str, int, int]], list[dict[str, Any]]]:
    """One availableNow run from ``checkpoint``: the (topic, partition, offset) of every
    record it read (each exactly once, checked) and the query's progress reports.

    The rows are collected with foreachBatch (the memory sink cannot restart from a
    checkpoint)."""
    rows: list[tuple[str, int, int]] = []

    def collect(batch: Any, _batch_id: int) -> None:
        rows.extend(tuple(r) for r in batch.select("topic", "partition", "offset").collect())

    query = (
        stream(spark, options)
        .writeStream.foreachBatch(collect)
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    try:
        assert query.awaitTermination(QUERY_TIMEOUT_S), "the availableNow query did not finish"
    finally:
        query.stop()
    got = set(rows)
    assert len(got) == len(rows), "a record was read twice"
    return got, [dict(p) for p in query.recentProgress]


def data_batches(progress: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [p for p in progress if p["numInputRows"] > 0]
