"""A PySpark data source that reads Kafka topics from kgroupd (or any Kafka broker).

    from kgroupd.pipeline.source import KgroupdDataSource

    spark.dataSource.register(KgroupdDataSource)
    df = (
        spark.readStream.format("kgroupd")
        .option("kafka.bootstrap.servers", "127.0.0.1:9092")
        .option("subscribe", "events")
        .option("group.id", "my-job")  # progress shows in the group (optional)
        .load()
    )

Options are named and defaulted like Spark's own Kafka source (see ``SourceOptions``), and
the rows have its schema. Offsets are JSON ``{"topic": {"partition": next_offset}}``.

The driver side (offset planning, group commits) and the executor side (``read``) each use
aiokafka on a private event loop. Executors read one topic-partition range per Spark task
with aiokafka's client and record decoder, and yield pyarrow record batches.
"""

from __future__ import annotations

from kgroupd.pipeline.source.kafka import EventLoop, KafkaAdmin
from kgroupd.pipeline.source.options import (
    EARLIEST,
    LATEST,
    DataLossError,
    Offsets,
    SourceOptions,
    from_json,
    kafka_schema,
    limit_rows,
    to_json,
)
from kgroupd.pipeline.source.ranges import (
    OffsetRange,
    RangeFetcher,
    plan,
    read_range,
    resolve,
    split_ranges,
)
from kgroupd.pipeline.source.readers import (
    KgroupdBatchReader,
    KgroupdDataSource,
    KgroupdStreamReader,
)

__all__ = [
    "EARLIEST",
    "LATEST",
    "DataLossError",
    "EventLoop",
    "KafkaAdmin",
    "KgroupdBatchReader",
    "KgroupdDataSource",
    "KgroupdStreamReader",
    "OffsetRange",
    "Offsets",
    "RangeFetcher",
    "SourceOptions",
    "from_json",
    "kafka_schema",
    "limit_rows",
    "plan",
    "read_range",
    "resolve",
    "split_ranges",
    "to_json",
]
