"""The "kgroupd" PySpark source against a real broker: batch reads, startingOffsets and
endingOffsets JSON, admission control (maxOffsetsPerTrigger), group commits, new
partitions, re-planning, and data loss (deleted topics, retention) per failOnDataLoss."""

from __future__ import annotations

import dataclasses
import datetime as dt
import importlib.metadata
import json
import re
from pathlib import Path
from typing import Any

import pytest
from pyspark.errors import StreamingQueryException

from kgroupd.broker.handlers import HANDLERS
from kgroupd.pipeline.source import (
    KgroupdStreamReader,
    OffsetRange,
    SourceOptions,
    kafka_schema,
    read_range,
    split_ranges,
)
from tests.pipeline.conftest import BrokerThread
from tests.pipeline.kafka_helpers import (
    add_partitions,
    committed,
    create_topic,
    delete_topic,
    end_offsets,
    log_start_offsets,
    produce,
)
from tests.pipeline.spark_helpers import (
    data_batches,
    run_available_now,
    stream,
)

pytestmark = pytest.mark.spark


def records(n: int, partitions: int, tag: str) -> list[tuple[int, bytes, bytes, list[Any]]]:
    return [
        (i % partitions, f"k{i}".encode(), f"{tag}-{i}".encode(), [("h", f"{i}".encode())])
        for i in range(n)
    ]


def test_batch_read_rows_schema_and_offset_json(spark: Any, broker: BrokerThread) -> None:
    bs = broker.bootstrap
    broker.run(create_topic(bs, "batch", 2))
    before = dt.datetime.now(dt.UTC) - dt.timedelta(seconds=1)
    placed = broker.run(produce(bs, "batch", records(20, 2, "b")))
    expected = {
        (part, off): (f"k{i}".encode(), f"b-{i}".encode()) for i, (part, off) in enumerate(placed)
    }
    df = (
        spark.read.format("kgroupd")
        .option("kafka.bootstrap.servers", bs)
        .option("subscribe", "batch")
        .option("includeHeaders", "true")
        .load()
    )
    assert df.schema == kafka_schema(include_headers=True)
    rows = df.collect()
    assert len(rows) == 20
    for row in rows:
        key, value = expected[(row.partition, row.offset)]
        assert (row.topic, bytes(row.key), bytes(row.value)) == ("batch", key, value)
        assert row.timestampType == 0
        assert row.timestamp.replace(tzinfo=dt.UTC) >= before.replace(microsecond=0)
        assert [(h.key, bytes(h.value)) for h in row.headers] == [("h", value.split(b"-")[1])]
    # Without includeHeaders there is no headers column.
    plain = spark.read.format("kgroupd").option("kafka.bootstrap.servers", bs)
    assert "headers" not in plain.option("subscribe", "batch").load().columns

    # JSON offsets, -2 = earliest and -1 = latest, as in Spark's Kafka source.
    ranged = (
        spark.read.format("kgroupd")
        .option("kafka.bootstrap.servers", bs)
        .option("assign", json.dumps({"batch": [0, 1]}))
        .option("startingOffsets", json.dumps({"batch": {"0": 3, "1": -2}}))
        .option("endingOffsets", json.dumps({"batch": {"0": 7, "1": -1}}))
        .load()
    )
    got = {(r.partition, r.offset) for r in ranged.select("partition", "offset").collect()}
    assert got == {(0, o) for o in range(3, 7)} | {(1, o) for o in range(10)}


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
def test_compressed_topics_are_read(spark: Any, broker: BrokerThread, codec: str) -> None:
    """Batches compressed with each of Kafka's codecs decode in the executors (the spark
    extra brings cramjam, which aiokafka needs for snappy, lz4 and zstd)."""
    bs = broker.bootstrap
    topic = f"codec-{codec}"
    broker.run(create_topic(bs, topic, 2))
    broker.run(produce(bs, topic, records(50, 2, codec), compression=codec))
    df = spark.read.format("kgroupd").option("kafka.bootstrap.servers", bs)
    rows = df.option("subscribe", topic).load().select("value").collect()
    got = sorted(bytes(r.value) for r in rows)
    assert got == sorted(f"{codec}-{i}".encode() for i in range(50))
    # and a user who installs only the spark extra gets the codecs too
    spark_extra = [r for r in importlib.metadata.requires("kgroupd") or [] if "spark" in r]
    assert any(r.startswith("cramjam") for r in spark_extra), spark_extra


def test_min_partitions_splits_ranges_as_spark_does(spark: Any, broker: BrokerThread) -> None:
    """minPartitions: fewer ranges than that are cut in proportion to their size (Spark's
    KafkaOffsetRangeCalculator); every record is still read exactly once."""
    assert split_ranges([OffsetRange("t", 0, 0, 100)], None) == [OffsetRange("t", 0, 0, 100)]
    cut = split_ranges([OffsetRange("t", 0, 0, 100), OffsetRange("t", 1, 5, 15)], 5)
    assert cut == [
        OffsetRange("t", 0, 0, 20),
        OffsetRange("t", 0, 20, 40),
        OffsetRange("t", 0, 40, 60),
        OffsetRange("t", 0, 60, 80),
        OffsetRange("t", 0, 80, 100),
        OffsetRange("t", 1, 5, 15),  # 10/110 of 5 rounds to 0: at least one part
    ]
    # enough ranges already: untouched
    two = [OffsetRange("t", 0, 0, 10), OffsetRange("t", 1, 0, 10)]
    assert split_ranges(two, 2) == two

    bs = broker.bootstrap
    broker.run(create_topic(bs, "minparts", 2))
    broker.run(produce(bs, "minparts", records(40, 2, "m")))
    df = (
        spark.read.format("kgroupd")
        .option("kafka.bootstrap.servers", bs)
        .option("subscribe", "minparts")
        .option("minPartitions", "5")
        .load()
    )
    assert df.rdd.getNumPartitions() == 6  # 20/40 of 5 = 2.5, rounded half up: 3 each
    rows = df.select("partition", "offset").collect()
    assert sorted((r.partition, r.offset) for r in rows) == [
        (p, o) for p in (0, 1) for o in range(20)
    ]
    with pytest.raises(Exception, match="minPartitions must be positive"):
        df.sparkSession.read.format("kgroupd").option("kafka.bootstrap.servers", bs).option(
            "subscribe", "minparts"
        ).option("minPartitions", "0").load().collect()


def test_stream_starting_offsets_json_and_group_commits(
    spark: Any, broker: BrokerThread, tmp_path: Path
) -> None:
    bs = broker.bootstrap
    broker.run(create_topic(bs, "start-json", 3))
    broker.run(produce(bs, "start-json", records(30, 3, "s")))  # 10 per partition
    options = {
        "kafka.bootstrap.servers": bs,
        "subscribe": "start-json",
        "startingOffsets": json.dumps({"start-json": {"0": 4, "1": -2, "2": -1}}),
        "group.id": "start-json-job",
    }
    got, _ = run_available_now(spark, options, tmp_path / "ck")
    assert got == {("start-json", 0, o) for o in range(4, 10)} | {
        ("start-json", 1, o) for o in range(10)
    }
    # The group's committed offsets reached the log end (the final latestOffset committed
    # the last batch), so lag tools see the job caught up.
    ends = broker.run(end_offsets(bs, "start-json", 3))
    assert ends == {0: 10, 1: 10, 2: 10}
    assert broker.run(committed(broker.port, "start-json-job", "start-json", 3)) == ends


def test_max_offsets_per_trigger_bounds_every_batch(
    spark: Any, broker: BrokerThread, tmp_path: Path
) -> None:
    bs = broker.bootstrap
    broker.run(create_topic(bs, "capped", 3))
    broker.run(produce(bs, "capped", records(1000, 3, "c")))
    options = {
        "kafka.bootstrap.servers": bs,
        "subscribe": "capped",
        "startingOffsets": "earliest",
        "maxOffsetsPerTrigger": "300",
    }
    got, progress = run_available_now(spark, options, tmp_path / "ck")
    assert len(got) == 1000
    sizes = [p["numInputRows"] for p in data_batches(progress)]
    assert sizes == [300, 300, 300, 100]
    # Each batch's offsets cover exactly the rows it read (the first batch starts at 0,
    # reported as no start offset).
    for p in data_batches(progress):
        start = (json.loads(p["sources"][0]["startOffset"] or "null") or {}).get("capped", {})
        end = json.loads(p["sources"][0]["endOffset"])["capped"]
        assert sum(end[k] - start.get(k, 0) for k in end) == p["numInputRows"]


def test_replanned_batch_reads_the_same_records(broker: BrokerThread) -> None:
    """Spark re-plans a batch from its logged offsets after a failure: the same offsets must
    give the same ranges and the same records, even with more data on the topic since."""
    bs = broker.bootstrap
    broker.run(create_topic(bs, "replan", 2))
    broker.run(produce(bs, "replan", records(40, 2, "r")))
    opts = SourceOptions.parse({"kafka.bootstrap.servers": bs, "subscribe": "replan"})
    reader = KgroupdStreamReader(opts)
    try:
        start = {"replan": {"0": 3, "1": 0}}
        end = reader.latestOffset(start, _read_all())
        first = reader.partitions(start, end)
        broker.run(produce(bs, "replan", records(40, 2, "later")))
        again = reader.partitions(start, end)
    finally:
        reader.stop()
    assert first == again == [OffsetRange("replan", 0, 3, 20), OffsetRange("replan", 1, 0, 20)]

    def read(ranges: Any) -> list[tuple[Any, ...]]:
        out = []
        for part in ranges:
            for batch in read_range(part, opts):
                out.extend(zip(*(batch.column(i).to_pylist() for i in range(5)), strict=True))
        return out

    rows = read(first)
    assert rows == read(again)
    assert [(r[3], r[4]) for r in rows] == [
        (p, o) for p, s, e in ((0, 3, 20), (1, 0, 20)) for o in range(s, e)
    ]


def _read_all() -> Any:
    from pyspark.sql.streaming.datasource import ReadAllAvailable

    return ReadAllAvailable()


def test_partition_added_mid_stream_is_read(
    spark: Any, broker: BrokerThread, tmp_path: Path
) -> None:
    bs = broker.bootstrap
    broker.run(create_topic(bs, "grows", 1))
    broker.run(produce(bs, "grows", records(50, 1, "g")))
    options = {"kafka.bootstrap.servers": bs, "subscribe": "grows", "startingOffsets": "earliest"}
    query = (
        stream(spark, options)
        .writeStream.format("memory")
        .queryName("grows")
        .option("checkpointLocation", str(tmp_path / "ck"))
        .trigger(processingTime="500 milliseconds")
        .start()
    )
    try:
        query.processAllAvailable()
        assert spark.sql("SELECT count(*) FROM grows").first()[0] == 50
        broker.run(add_partitions(bs, "grows", 2))
        broker.run(produce(bs, "grows", [(1, None, f"new-{i}".encode(), []) for i in range(30)]))
        query.processAllAvailable()
        got = {tuple(r) for r in spark.sql("SELECT partition, offset FROM grows").collect()}
    finally:
        query.stop()
    assert got == {(0, o) for o in range(50)} | {(1, o) for o in range(30)}


@pytest.mark.parametrize("fail_on_data_loss", [True, False])
def test_deleted_topic_follows_fail_on_data_loss(
    spark: Any, broker: BrokerThread, tmp_path: Path, fail_on_data_loss: bool
) -> None:
    bs = broker.bootstrap
    gone, kept = f"gone-{fail_on_data_loss}", f"kept-{fail_on_data_loss}"
    for topic in (gone, kept):
        broker.run(create_topic(bs, topic, 1))
        broker.run(produce(bs, topic, records(5, 1, topic)))
    options = {
        "kafka.bootstrap.servers": bs,
        "subscribe": f"{gone},{kept}",
        "startingOffsets": "earliest",
        "failOnDataLoss": str(fail_on_data_loss).lower(),
    }
    got, _ = run_available_now(spark, options, tmp_path / "ck")
    assert len(got) == 10
    broker.run(delete_topic(bs, gone))
    broker.run(produce(bs, kept, records(3, 1, "more")))
    if fail_on_data_loss:
        with pytest.raises(StreamingQueryException, match="are gone"):
            run_available_now(spark, options, tmp_path / "ck")
    else:
        got, _ = run_available_now(spark, options, tmp_path / "ck")
        assert got == {(kept, 0, o) for o in range(5, 8)}


@pytest.mark.parametrize("fail_on_data_loss", [True, False])
def test_offsets_removed_by_retention_follow_fail_on_data_loss(
    spark: Any, broker: BrokerThread, tmp_path: Path, fail_on_data_loss: bool
) -> None:
    bs = broker.bootstrap
    topic = f"retained-{fail_on_data_loss}"
    # retention.bytes=1: a retention pass keeps only each partition's newest batch.
    broker.run(create_topic(bs, topic, 1, {"retention.bytes": "1"}))
    broker.run(produce(bs, topic, records(5, 1, "old"), one_batch_each=True))
    options = {
        "kafka.bootstrap.servers": bs,
        "subscribe": topic,
        "startingOffsets": "earliest",
        "failOnDataLoss": str(fail_on_data_loss).lower(),
        "kafkaConsumer.pollTimeoutMs": "10000",
    }
    got, _ = run_available_now(spark, options, tmp_path / "ck")
    assert got == {(topic, 0, o) for o in range(5)}
    broker.run(produce(bs, topic, records(5, 1, "new"), one_batch_each=True))  # offsets 5-9
    assert broker.apply_retention() > 0
    assert broker.run(log_start_offsets(bs, topic, 1)) == {0: 9}  # 5-8 are gone unread
    if fail_on_data_loss:
        with pytest.raises(StreamingQueryException, match="no longer on the broker"):
            run_available_now(spark, options, tmp_path / "ck")
    else:
        got, _ = run_available_now(spark, options, tmp_path / "ck")
        assert got == {(topic, 0, 9)}


def test_bad_options_are_refused(spark: Any, broker: BrokerThread) -> None:
    base = spark.read.format("kgroupd").option("kafka.bootstrap.servers", broker.bootstrap)
    with pytest.raises(Exception, match="exactly one of the options subscribe"):
        base.load().collect()
    with pytest.raises(Exception, match="startingOffsets cannot be latest"):
        base.option("subscribe", "x").option("startingOffsets", "latest").load().collect()

    # kafka.* options: those a reader can use are passed on, Spark's refused ones and
    # unknown ones are refused with a message (never silently ignored)
    def fresh() -> Any:  # a reader's options stick to it: one reader per case
        reader = spark.read.format("kgroupd").option("kafka.bootstrap.servers", broker.bootstrap)
        return reader.option("subscribe", "x")

    with pytest.raises(
        Exception, match=re.escape("auto.offset.reset' is not supported: set the source")
    ):
        fresh().option("kafka.auto.offset.reset", "earliest").load().collect()
    with pytest.raises(
        Exception, match=re.escape("'kafka.fetch.min.bytes' is not supported by the kgroupd")
    ):
        fresh().option("kafka.fetch.min.bytes", "1").load().collect()
    with pytest.raises(Exception, match=re.escape("option kafka.request.timeout.ms must be int")):
        fresh().option("kafka.request.timeout.ms", "soon").load().collect()


def test_kafka_client_options_are_passed_on(
    spark: Any, broker: BrokerThread, monkeypatch: pytest.MonkeyPatch
) -> None:
    opts = SourceOptions.parse(
        {
            "kafka.bootstrap.servers": broker.bootstrap,
            "subscribe": "passed",
            "kafka.client.id": "my-reader",
            "kafka.request.timeout.ms": "15000",
        },
        batch=True,
    )
    assert dict(opts.client_options) == {"client_id": "my-reader", "request_timeout_ms": 15000}
    seen: set[str | None] = set()
    for key in (1, 3):  # Fetch (executors) and Metadata (driver and executors)
        entry = HANDLERS[key]

        def tap(ctx: Any, req: Any, _fn: Any = entry.fn) -> Any:
            seen.add(ctx.client_id)
            return _fn(ctx, req)

        monkeypatch.setitem(HANDLERS, key, dataclasses.replace(entry, fn=tap))
    bs = broker.bootstrap
    broker.run(create_topic(bs, "passed", 1))
    broker.run(produce(bs, "passed", records(5, 1, "p")))
    seen.clear()
    rows = (
        spark.read.format("kgroupd")
        .option("kafka.bootstrap.servers", bs)
        .option("subscribe", "passed")
        .option("kafka.client.id", "my-reader")
        .load()
        .collect()
    )
    assert len(rows) == 5
    assert seen == {"my-reader"}, seen  # every request the source made carried it
