"""Offset ranges: planning them (with failOnDataLoss) and reading one on an executor into
pyarrow record batches."""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from itertools import pairwise
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from aiokafka import AIOKafkaClient, AIOKafkaConsumer, TopicPartition
from aiokafka.protocol.fetch import FetchRequest
from aiokafka.record.memory_records import MemoryRecords
from pyspark.sql.datasource import (
    InputPartition,
)
from pyspark.sql.pandas.types import to_arrow_schema

from kgroupd.pipeline.source.kafka import EventLoop
from kgroupd.pipeline.source.options import (
    EARLIEST,
    LATEST,
    NO_ERROR,
    TP,
    DataLossError,
    Offsets,
    SourceOptions,
    kafka_schema,
    log,
)


def resolve(
    spec: str | dict[TP, int], tps: Sequence[TP], earliest: Offsets, latest: Offsets, name: str
) -> Offsets:
    """Concrete offsets for ``tps`` from ``earliest``/``latest``/JSON (with -2/-1 in it)."""
    if spec == "earliest":
        return {tp: earliest[tp] for tp in tps}
    if spec == "latest":
        return {tp: latest[tp] for tp in tps}
    assert isinstance(spec, dict)
    missing = sorted(set(tps) - set(spec))
    if missing:
        raise ValueError(f"{name} JSON must name every partition read; it lacks {missing}")
    unknown = sorted(set(spec) - set(tps))
    if unknown:
        raise ValueError(f"{name} JSON names partitions that do not exist: {unknown}")
    out = {}
    for tp in tps:
        offset = spec[tp]
        out[tp] = earliest[tp] if offset == EARLIEST else latest[tp] if offset == LATEST else offset
    return out


# --- reading (executors) ---------------------------------------------------------------------


@dataclass(frozen=True)
class OffsetRange(InputPartition):
    """One Spark task: the records of one topic-partition in [start, end)."""

    topic: str
    partition: int
    start: int
    end: int

    def __post_init__(self) -> None:
        # InputPartition keeps a ``value``; ours is the range itself.
        object.__setattr__(self, "value", (self.topic, self.partition, self.start, self.end))


def plan(
    start: Offsets, end: Offsets, opts: SourceOptions, failed: list[str] | None = None
) -> list[OffsetRange]:
    """One range per topic-partition with records between ``start`` and ``end``.

    A partition missing from ``start`` is new: it is read from offset 0, as Spark's source
    reads new partitions from their beginning (records already removed there are data loss).
    Partitions missing from ``end`` are no longer read.
    """
    ranges = []
    for tp in sorted(end):
        begin = start.get(tp, 0)
        stop = end[tp]
        if stop < begin:
            message = (
                f"{tp[0]}-{tp[1]}: offset went back from {begin} to {stop} "
                "(was the topic deleted and created again?); some data may have been lost"
            )
            if opts.fail_on_data_loss:
                raise DataLossError(message + " (set failOnDataLoss=false to go on)")
            log.warning(message)
            if failed is not None:
                failed.append(message)
            continue
        if stop > begin:
            ranges.append(OffsetRange(tp[0], tp[1], begin, stop))
    return split_ranges(ranges, opts.min_partitions)


def split_ranges(ranges: list[OffsetRange], min_partitions: int | None) -> list[OffsetRange]:
    """``minPartitions`` as Spark's KafkaOffsetRangeCalculator applies it: with fewer ranges
    than that, each range is cut into parts in proportion to its share of all the offsets
    (at least one part each), the parts as equal as offsets allow."""
    if min_partitions is None or len(ranges) >= min_partitions:
        return ranges
    total = sum(r.end - r.start for r in ranges)
    out = []
    for r in ranges:
        size = r.end - r.start
        parts = max(math.floor(size / total * min_partitions + 0.5), 1)  # Scala math.round
        bounds = [r.start + size * i // parts for i in range(parts + 1)]
        out += [OffsetRange(r.topic, r.partition, lo, hi) for lo, hi in pairwise(bounds) if hi > lo]
    return out


OFFSET_OUT_OF_RANGE = 1
LEADER_NOT_AVAILABLE = 5
RETRIABLE_FETCH_ERRORS = {
    3,  # UNKNOWN_TOPIC_OR_PARTITION (a deleted topic stays so until pollTimeoutMs passes)
    5,  # LEADER_NOT_AVAILABLE
    6,  # NOT_LEADER_OR_FOLLOWER
    74,  # FENCED_LEADER_EPOCH
    75,  # UNKNOWN_LEADER_EPOCH
}


class RangeFetcher:
    """Fetches one topic-partition with aiokafka's client and decodes the record batches
    with aiokafka's record reader.

    aiokafka's consumer would do the same fetches, but builds a ``ConsumerRecord`` per record
    on the way; going one level down reads about twice as many records per second (see
    BENCHMARKS.md), and the records go straight into Arrow columns."""

    def __init__(self, opts: SourceOptions, part: OffsetRange) -> None:
        self.opts = opts
        self.part = part
        self.tp = TopicPartition(part.topic, part.partition)
        self._client: AIOKafkaClient | None = None
        self.leader: int | None = None

    @property
    def client(self) -> AIOKafkaClient:
        assert self._client is not None, "start() first"
        return self._client

    async def start(self) -> None:
        # aiokafka objects must be made inside their event loop.
        self._client = AIOKafkaClient(
            bootstrap_servers=self.opts.bootstrap_servers, **self.opts.client_args()
        )
        await self._client.bootstrap()

    async def _find_leader(self) -> int | None:
        cluster = await self.client.fetch_all_metadata()
        leader = cluster.leader_for_partition(self.tp)
        return leader if leader is not None and leader >= 0 else None

    async def fetch(self, offset: int) -> tuple[int, bytes | None, int | None]:
        """(error code, record batches, log start offset when the broker says it)."""
        if self.leader is None:
            self.leader = await self._find_leader()
            if self.leader is None:
                await asyncio.sleep(0.2)  # metadata backoff, as a consumer would
                return LEADER_NOT_AVAILABLE, None, None
        request = FetchRequest(
            500,  # max wait ms: a long poll when there is nothing at ``offset`` yet
            1,
            self.opts.fetch_max_bytes,
            0,  # read_uncommitted, as Spark's source reads by default
            [(self.tp.topic, [(self.tp.partition, offset, self.opts.max_partition_fetch_bytes)])],
        )
        response = await self.client.send(self.leader, request)
        for _topic, partitions in response.topics:
            for _partition, error_code, _highwater, *data in partitions:
                # v5+: data = [last stable offset, log start offset, ..., records]
                log_start = data[1] if response.API_VERSION >= 5 else None
                if error_code in RETRIABLE_FETCH_ERRORS:
                    self.leader = None
                return error_code, data[-1], log_start
        raise RuntimeError(f"the fetch response has no {self.tp}")

    async def log_start_offset(self) -> int:
        consumer = AIOKafkaConsumer(
            bootstrap_servers=self.opts.bootstrap_servers, **self.opts.client_args()
        )
        await consumer.start()
        try:
            return int((await consumer.beginning_offsets([self.tp]))[self.tp])
        finally:
            await consumer.stop()

    async def close(self) -> None:
        if self._client is not None:
            await self._client.close()


def read_range(part: OffsetRange, opts: SourceOptions) -> Iterator[pa.RecordBatch]:
    """The records of ``part`` as pyarrow record batches (one per fetch response)."""
    schema = to_arrow_schema(kafka_schema(opts.include_headers), timezone="UTC")
    where = f"{part.topic}-{part.partition}"
    timeout_s = opts.poll_timeout_ms / 1000
    with EventLoop() as runner:
        fetcher = RangeFetcher(opts, part)
        runner.run(fetcher.start())
        try:
            position = part.start
            deadline = time.monotonic() + timeout_s
            while position < part.end:
                error, data, log_start = runner.run(fetcher.fetch(position))
                if error == OFFSET_OUT_OF_RANGE:
                    first = log_start
                    if first is None:
                        first = runner.run(fetcher.log_start_offset())
                    message = (
                        f"{where}: offsets {position} to {min(first, part.end)} are no longer "
                        f"on the broker (log start offset {first}); they were removed, "
                        "e.g. by retention"
                    )
                    if first <= position:  # not a gap at the start: past the log end
                        raise DataLossError(
                            f"{where}: offset {position} is out of range (log start {first}); "
                            "was the topic deleted and created again?"
                        )
                    if opts.fail_on_data_loss:
                        raise DataLossError(message + " (set failOnDataLoss=false to skip them)")
                    log.warning(message + "; skipping them")
                    position = first
                    deadline = time.monotonic() + timeout_s
                    continue
                if error not in (NO_ERROR, *RETRIABLE_FETCH_ERRORS):
                    raise RuntimeError(f"{where}: fetch at offset {position} failed: error {error}")
                columns, position_after = _decode(data, position, part.end, opts.include_headers)
                if position_after == position:
                    if time.monotonic() > deadline:
                        message = (
                            f"{where}: no records from offset {position} (reading up to "
                            f"{part.end}) within kafkaConsumer.pollTimeoutMs="
                            f"{opts.poll_timeout_ms}" + (f" (fetch error {error})" if error else "")
                        )
                        if opts.fail_on_data_loss:
                            raise DataLossError(message)
                        log.warning(message + "; skipping the rest of the range")
                        return
                    continue
                position = position_after
                deadline = time.monotonic() + timeout_s
                if columns is not None:
                    yield _to_arrow(columns, part, schema)
        finally:
            runner.run(fetcher.close())


Columns = tuple[list[Any], list[Any], list[int], list[int], list[int], list[Any] | None]


def _decode(
    data: bytes | None, position: int, end: int, include_headers: bool
) -> tuple[Columns | None, int]:
    """The records in [position, end) of a fetch response's record batches, as columns, and
    the offset to fetch next."""
    if not data:
        return None, position
    keys: list[Any] = []
    values: list[Any] = []
    offsets: list[int] = []
    timestamps: list[int] = []
    types: list[int] = []
    headers: list[Any] | None = [] if include_headers else None
    records = MemoryRecords(data)
    while records.has_next():
        batch = records.next_batch()
        if batch is None:  # a partial batch at the end of the response
            break
        if not batch.is_control_batch:
            for record in batch:
                offset = record.offset
                if offset < position:
                    continue  # fetches start at a batch boundary
                if offset >= end:
                    position = end
                    break
                keys.append(record.key)
                values.append(record.value)
                offsets.append(offset)
                timestamps.append(record.timestamp)
                types.append(record.timestamp_type)
                if headers is not None:
                    headers.append([{"key": k, "value": v} for k, v in record.headers])
        if position >= end:
            break
        # The next batch starts after this one, even when compaction removed its tail.
        position = max(position, batch.next_offset)
    if not offsets:
        return None, position
    return (keys, values, offsets, timestamps, types, headers), position


def _to_arrow(columns: Columns, part: OffsetRange, schema: pa.Schema) -> pa.RecordBatch:
    keys, values, offsets, timestamps, types, headers = columns
    n = len(offsets)
    millis = pa.array(timestamps, pa.int64())
    arrays = [
        pa.array(keys, pa.binary()),
        pa.array(values, pa.binary()),
        pa.repeat(pa.scalar(part.topic, pa.string()), n),
        pa.repeat(pa.scalar(part.partition, pa.int32()), n),
        pa.array(offsets, pa.int64()),
        pc.multiply(millis, 1000).cast(schema.field("timestamp").type),
        pa.array(types, pa.int32()),
    ]
    if headers is not None:
        arrays.append(pa.array(headers, schema.field("headers").type))
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


# --- Spark's interfaces ----------------------------------------------------------------------
