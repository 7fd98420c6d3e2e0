"""The reference streaming job: windowed counts per key from JSON events on a topic.

It reads ``{"key": ..., "ts": <epoch ms>, ...}`` events through the "kgroupd" source,
counts events per key over tumbling event-time windows with a watermark, appends each
window to Parquet once the watermark has passed its end, and commits its progress to a
consumer group, where kgroupd's DescribeGroups/OffsetFetch (and any lag tool) show it.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming import StreamingQuery

from kgroupd.pipeline.source import KgroupdDataSource

EVENT_SCHEMA = "key STRING, ts LONG"


@dataclass(frozen=True)
class JobConfig:
    bootstrap_server: str
    topic: str = "events"
    group: str = "kgroupd-pipeline"
    output: str = "pipeline-out/window_counts"
    checkpoint: str = "pipeline-out/checkpoint"
    window: str = "1 minute"
    watermark: str = "30 seconds"
    starting_offsets: str = "earliest"
    max_offsets_per_trigger: int | None = None
    available_now: bool = False
    trigger_interval: str = "10 seconds"


def spark_session(master: str = "local[2]", app_name: str = "kgroupd-pipeline") -> SparkSession:
    """A session for the job, with the "kgroupd" source registered.

    PYSPARK_PYTHON defaults to this interpreter, so executors import the same packages.
    """
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    spark = (
        SparkSession.builder.master(master)
        .appName(app_name)
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    spark.dataSource.register(KgroupdDataSource)
    return spark


def read_events(spark: SparkSession, config: JobConfig) -> DataFrame:
    reader = (
        spark.readStream.format("kgroupd")
        .option("kafka.bootstrap.servers", config.bootstrap_server)
        .option("subscribe", config.topic)
        .option("startingOffsets", config.starting_offsets)
        .option("group.id", config.group)
    )
    if config.max_offsets_per_trigger is not None:
        reader = reader.option("maxOffsetsPerTrigger", str(config.max_offsets_per_trigger))
    return reader.load()


def window_counts(records: DataFrame, window: str, watermark: str) -> DataFrame:
    """Per key and event-time window: how many events. Records whose value is not such a
    JSON event are dropped."""
    events = (
        records.select(F.from_json(F.col("value").cast("string"), EVENT_SCHEMA).alias("e"))
        .where(F.col("e.key").isNotNull() & F.col("e.ts").isNotNull())
        .select(F.col("e.key").alias("key"), F.timestamp_millis(F.col("e.ts")).alias("event_time"))
    )
    return (
        events.withWatermark("event_time", watermark)
        .groupBy(F.window("event_time", window), "key")
        .count()
        .select(
            F.col("window.start").alias("window_start"),
            F.col("window.end").alias("window_end"),
            "key",
            "count",
        )
    )


def summary(spark: SparkSession, query: StreamingQuery, config: JobConfig) -> dict[str, object]:
    """What a run did, for its last log line: micro-batches run, records read (over the
    progress Spark keeps: the last 100 batches), the windows now in the output, and where."""
    progress = query.recentProgress
    last = query.lastProgress
    windows = 0
    if os.path.isdir(config.output):
        windows = spark.read.parquet(config.output).count()
    return {
        "event": "pipeline_done",
        "batches": int(last["batchId"]) + 1 if last else 0,
        "records_read": sum(int(p["numInputRows"]) for p in progress),
        "windows_written": windows,
        "output": config.output,
        "checkpoint": config.checkpoint,
    }


def reachable(bootstrap: str, timeout_s: float = 10.0) -> str | None:
    """None if a broker of the comma-separated ``bootstrap`` answers a Kafka ApiVersions
    request within ``timeout_s``, else why not (naming each address)."""
    from kgroupd.broker.cli.healthcheck import check

    problems = []
    for address in bootstrap.split(","):
        host, _, port = address.strip().rpartition(":")
        if not host or not port.isdigit():
            problems.append(f"{address!r} is not HOST:PORT")
            continue
        problem = check(host.strip("[]"), int(port), timeout_s)
        if problem is None:
            return None
        problems.append(problem)
    return "; ".join(problems)


def start(spark: SparkSession, config: JobConfig) -> StreamingQuery:
    counts = window_counts(read_events(spark, config), config.window, config.watermark)
    writer = (
        counts.writeStream.format("parquet")
        .outputMode("append")
        .option("path", config.output)
        .option("checkpointLocation", config.checkpoint)
        .queryName(f"kgroupd-pipeline-{config.topic}")
    )
    if config.available_now:
        writer = writer.trigger(availableNow=True)
    else:
        writer = writer.trigger(processingTime=config.trigger_interval)
    return writer.start()
