"""A PySpark data source that reads Kafka topics from kgroupd (or any Kafka broker).

    from pipeline.source import KgroupdDataSource

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

import asyncio
import dataclasses
import json
import logging
import re
import time
from collections.abc import Coroutine, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import pyarrow as pa
import pyarrow.compute as pc
from aiokafka import AIOKafkaClient, AIOKafkaConsumer, TopicPartition
from aiokafka.protocol.commit import OffsetCommitRequest
from aiokafka.protocol.fetch import FetchRequest
from aiokafka.record.memory_records import MemoryRecords
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    InputPartition,
)
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

log = logging.getLogger("kgroupd.source")

EARLIEST = -2  # in startingOffsets/endingOffsets JSON, as in Spark's Kafka source
LATEST = -1
COORDINATOR_GROUP = 0  # FindCoordinator key type
NO_ERROR = 0

T = TypeVar("T")
TP = tuple[str, int]
Offsets = dict[TP, int]

BASE_FIELDS = [
    StructField("key", BinaryType()),
    StructField("value", BinaryType()),
    StructField("topic", StringType()),
    StructField("partition", IntegerType()),
    StructField("offset", LongType()),
    StructField("timestamp", TimestampType()),
    StructField("timestampType", IntegerType()),
]
HEADERS_FIELD = StructField(
    "headers",
    ArrayType(StructType([StructField("key", StringType()), StructField("value", BinaryType())])),
)


def kafka_schema(include_headers: bool = False) -> StructType:
    """The row schema of Spark's Kafka source (``headers`` only when asked for)."""
    return StructType([*BASE_FIELDS, *([HEADERS_FIELD] if include_headers else [])])


class DataLossError(RuntimeError):
    """Records the query should read are gone (retention, a deleted topic or partition)."""


# --- options ---------------------------------------------------------------------------------


def _bool(options: Mapping[str, str], name: str, default: bool) -> bool:
    raw = options.get(name)
    if raw is None:
        return default
    value = str(raw).strip().lower()
    if value not in ("true", "false"):
        raise ValueError(f"option {name} must be true or false, not {raw!r}")
    return value == "true"


def _offset_spec(raw: str | None, default: str, name: str) -> str | dict[TP, int]:
    """``earliest``, ``latest`` or a JSON ``{"topic": {"partition": offset}}``."""
    if raw is None:
        return default
    text = raw.strip()
    if text.lower() in ("earliest", "latest"):
        return text.lower()
    try:
        parsed = json.loads(text)
    except ValueError as exc:
        raise ValueError(f"option {name}: not earliest, latest or JSON: {raw!r}") from exc
    if not isinstance(parsed, dict):
        raise ValueError(f"option {name}: JSON must be an object of topics, got {raw!r}")
    out: dict[TP, int] = {}
    for topic, parts in parsed.items():
        if not isinstance(parts, dict):
            raise ValueError(f"option {name}: topic {topic!r} needs an object of partitions")
        for partition, offset in parts.items():
            out[(str(topic), int(partition))] = int(offset)
    return out


@dataclass(frozen=True)
class SourceOptions:
    """The options, checked once on the driver; the names are Spark's Kafka source's."""

    bootstrap_servers: str
    subscribe: tuple[str, ...] = ()
    subscribe_pattern: str | None = None
    assign: tuple[TP, ...] = ()
    starting: str | dict[TP, int] = "latest"
    ending: str | dict[TP, int] = "latest"
    max_offsets_per_trigger: int | None = None
    fail_on_data_loss: bool = True
    include_headers: bool = False
    group_id: str | None = None
    poll_timeout_ms: int = 120_000
    fetch_max_bytes: int = 64 * 1024 * 1024
    max_partition_fetch_bytes: int = 16 * 1024 * 1024
    ignored: tuple[str, ...] = field(default=())

    @classmethod
    def parse(cls, options: Mapping[str, str], batch: bool = False) -> SourceOptions:
        # Spark hands options over case-insensitively; normalise to lower case.
        opts = {str(k).lower(): str(v) for k, v in options.items()}
        servers = opts.get("kafka.bootstrap.servers")
        if not servers:
            raise ValueError("option kafka.bootstrap.servers is required")
        modes = [m for m in ("subscribe", "subscribepattern", "assign") if m in opts]
        if len(modes) != 1:
            raise ValueError(
                "exactly one of the options subscribe, subscribePattern, assign is required, "
                f"got {modes or 'none'}"
            )
        subscribe: tuple[str, ...] = ()
        pattern = None
        assign: tuple[TP, ...] = ()
        if "subscribe" in opts:
            subscribe = tuple(t.strip() for t in opts["subscribe"].split(",") if t.strip())
            if not subscribe:
                raise ValueError("option subscribe names no topic")
        elif "subscribepattern" in opts:
            pattern = opts["subscribepattern"]
            re.compile(pattern)
        else:
            try:
                parsed = json.loads(opts["assign"])
                assign = tuple(
                    sorted((str(t), int(p)) for t, parts in parsed.items() for p in parts)
                )
            except (ValueError, AttributeError, TypeError) as exc:
                raise ValueError(
                    f'option assign must be JSON like {{"topic": [0, 1]}}, got {opts["assign"]!r}'
                ) from exc
        starting = _offset_spec(
            opts.get("startingoffsets"), "earliest" if batch else "latest", "startingOffsets"
        )
        ending = _offset_spec(opts.get("endingoffsets"), "latest", "endingOffsets")
        if batch and ending == "earliest":
            raise ValueError("endingOffsets cannot be earliest")
        if not batch and "endingoffsets" in opts:
            raise ValueError("endingOffsets is for batch queries (spark.read) only")
        if starting == "latest" and batch:
            raise ValueError("startingOffsets cannot be latest for batch queries")
        max_offsets = opts.get("maxoffsetspertrigger")
        max_per_trigger = int(max_offsets) if max_offsets is not None else None
        if max_per_trigger is not None and max_per_trigger < 1:
            raise ValueError("maxOffsetsPerTrigger must be at least 1")
        ignored = []
        if "kafka.group.id" in opts:
            # Reading never starts from a group's offsets; see group.id.
            log.warning(
                "option kafka.group.id is ignored: reading starts at startingOffsets or the "
                "checkpoint; use group.id to commit progress to a consumer group"
            )
            ignored.append("kafka.group.id")
        return cls(
            bootstrap_servers=servers,
            subscribe=subscribe,
            subscribe_pattern=pattern,
            assign=assign,
            starting=starting,
            ending=ending,
            max_offsets_per_trigger=max_per_trigger,
            fail_on_data_loss=_bool(opts, "failondataloss", True),
            include_headers=_bool(opts, "includeheaders", False),
            group_id=opts.get("group.id") or None,
            poll_timeout_ms=int(opts.get("kafkaconsumer.polltimeoutms", 120_000)),
            fetch_max_bytes=int(opts.get("fetchmaxbytes", 64 * 1024 * 1024)),
            max_partition_fetch_bytes=int(opts.get("maxpartitionfetchbytes", 16 * 1024 * 1024)),
            ignored=tuple(ignored),
        )

    def selects(self, topic: str) -> bool:
        if self.subscribe:
            return topic in self.subscribe
        if self.subscribe_pattern is not None:
            return not topic.startswith("__") and bool(re.fullmatch(self.subscribe_pattern, topic))
        return any(t == topic for t, _ in self.assign)


# --- offsets as JSON -------------------------------------------------------------------------


def to_json(offsets: Offsets) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    for (topic, partition), offset in sorted(offsets.items()):
        out.setdefault(topic, {})[str(partition)] = int(offset)
    return out


def from_json(offsets: Mapping[str, Any]) -> Offsets:
    return {
        (str(topic), int(partition)): int(offset)
        for topic, parts in offsets.items()
        for partition, offset in parts.items()
    }


def limit_rows(start: Offsets, latest: Offsets, max_rows: int) -> Offsets:
    """At most ``max_rows`` offsets past ``start``, shared in proportion to each partition's
    backlog (remainders to the largest fractions, ties by topic-partition): deterministic."""
    backlog = {tp: max(0, latest[tp] - start.get(tp, 0)) for tp in latest}
    total = sum(backlog.values())
    if total <= max_rows:
        return dict(latest)
    shares = {tp: lag * max_rows // total for tp, lag in backlog.items()}
    left = max_rows - sum(shares.values())
    order = sorted(backlog, key=lambda tp: (-((backlog[tp] * max_rows) % total), tp))
    for tp in order:
        if left == 0:
            break
        if shares[tp] < backlog[tp]:
            shares[tp] += 1
            left -= 1
    return {tp: (start.get(tp, 0) + shares[tp]) if backlog[tp] else latest[tp] for tp in latest}


# --- the driver's Kafka calls ----------------------------------------------------------------


class EventLoop:
    """A private event loop that blocking code drives, one coroutine at a time.

    Not ``asyncio.Runner``: on the main thread it swaps the SIGINT handler on every ``run``,
    and restoring it formats the repr of the finished task, result included, which for a
    fetch response is megabytes of bytes (most of the read time in a profile)."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        return self.loop.run_until_complete(coro)

    def close(self) -> None:
        if self.loop.is_closed():
            return
        try:
            self.loop.run_until_complete(self.loop.shutdown_asyncgens())
        finally:
            self.loop.close()

    def __enter__(self) -> EventLoop:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class KafkaAdmin:
    """Metadata, ListOffsets and simple (generation -1) offset commits, through aiokafka on a
    private event loop. Used from the driver only; every method blocks."""

    def __init__(self, opts: SourceOptions) -> None:
        self.opts = opts
        self._runner = EventLoop()
        self._client: AIOKafkaClient | None = None
        self._consumer: AIOKafkaConsumer | None = None

    def _run(self, coro: Any) -> Any:
        return self._runner.run(coro)

    async def _start(self) -> None:
        if self._client is None:
            client = AIOKafkaClient(bootstrap_servers=self.opts.bootstrap_servers)
            await client.bootstrap()
            self._client = client
        if self._consumer is None:
            consumer = AIOKafkaConsumer(
                bootstrap_servers=self.opts.bootstrap_servers, enable_auto_commit=False
            )
            await consumer.start()
            self._consumer = consumer

    def partitions(self) -> list[TP]:
        """The topic-partitions the options select that exist now."""
        return self._run(self._partitions())

    async def _partitions(self) -> list[TP]:
        await self._start()
        assert self._client is not None
        cluster = await self._client.fetch_all_metadata()
        found: list[TP] = []
        for topic in cluster.topics():
            if not self.opts.selects(topic):
                continue
            for partition in cluster.partitions_for_topic(topic) or ():
                found.append((topic, partition))
        if self.opts.assign:
            wanted = set(self.opts.assign)
            found = [tp for tp in found if tp in wanted]
        return sorted(found)

    def offsets(self, tps: Sequence[TP]) -> tuple[Offsets, Offsets]:
        """(earliest, latest) of each topic-partition."""
        return self._run(self._offsets(list(tps)))

    async def _offsets(self, tps: list[TP]) -> tuple[Offsets, Offsets]:
        await self._start()
        assert self._consumer is not None
        if not tps:
            return {}, {}
        kafka_tps = [TopicPartition(t, p) for t, p in tps]
        first = await self._consumer.beginning_offsets(kafka_tps)
        last = await self._consumer.end_offsets(kafka_tps)
        return (
            {(tp.topic, tp.partition): int(o) for tp, o in first.items()},
            {(tp.topic, tp.partition): int(o) for tp, o in last.items()},
        )

    def commit(self, group: str, offsets: Offsets) -> None:
        self._run(self._commit(group, offsets))

    async def _commit(self, group: str, offsets: Offsets) -> None:
        await self._start()
        assert self._client is not None
        if not offsets:
            return
        node = await self._client.coordinator_lookup(COORDINATOR_GROUP, group)
        topics: dict[str, list[tuple[int, int, str]]] = {}
        for (topic, partition), offset in sorted(offsets.items()):
            topics.setdefault(topic, []).append((partition, offset, ""))
        request = OffsetCommitRequest(
            group,
            OffsetCommitRequest.DEFAULT_GENERATION_ID,  # -1: a simple commit, no membership
            "",
            OffsetCommitRequest.DEFAULT_RETENTION_TIME,
            list(topics.items()),
        )
        response = await self._client.send(node, request)
        failed = [
            (topic, partition, code)
            for topic, parts in response.topics
            for partition, code in parts
            if code != NO_ERROR
        ]
        if failed:
            raise RuntimeError(f"OffsetCommit to group {group!r} failed: {failed}")

    def close(self) -> None:
        async def stop() -> None:
            if self._consumer is not None:
                await self._consumer.stop()
            if self._client is not None:
                await self._client.close()

        try:
            self._run(stop())
        finally:
            self._consumer = self._client = None
            self._runner.close()


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
    return ranges


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
        self._client = AIOKafkaClient(bootstrap_servers=self.opts.bootstrap_servers)
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
        consumer = AIOKafkaConsumer(bootstrap_servers=self.opts.bootstrap_servers)
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


class KgroupdDataSource(DataSource):
    """``spark.dataSource.register(KgroupdDataSource)``, then ``format("kgroupd")``."""

    @classmethod
    def name(cls) -> str:
        return "kgroupd"

    def schema(self) -> StructType:
        return kafka_schema(_bool(_lower(self.options), "includeheaders", False))

    def reader(self, schema: StructType) -> DataSourceReader:
        return KgroupdBatchReader(SourceOptions.parse(self.options, batch=True))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return KgroupdStreamReader(SourceOptions.parse(self.options))


def _lower(options: Mapping[str, str]) -> dict[str, str]:
    return {str(k).lower(): str(v) for k, v in options.items()}


class KgroupdBatchReader(DataSourceReader):
    """``spark.read.format("kgroupd")``: the records between startingOffsets (default
    earliest) and endingOffsets (default latest), as they are when the query is planned."""

    def __init__(self, opts: SourceOptions) -> None:
        self.opts = opts

    def partitions(self) -> Sequence[InputPartition]:
        admin = KafkaAdmin(self.opts)
        try:
            existing = admin.partitions()
            tps = existing
            if isinstance(self.opts.starting, dict):
                tps = sorted(set(tps) | set(self.opts.starting))
            earliest, latest = admin.offsets(existing)
        finally:
            admin.close()
        missing = [tp for tp in tps if tp not in latest]
        if missing:
            message = f"partitions {missing} named in startingOffsets do not exist"
            if self.opts.fail_on_data_loss:
                raise DataLossError(message)
            log.warning(message)
            tps = [tp for tp in tps if tp in latest]
        start = resolve(self.opts.starting, tps, earliest, latest, "startingOffsets")
        end = resolve(self.opts.ending, tps, earliest, latest, "endingOffsets")
        return plan(start, end, self.opts)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, OffsetRange)
        return read_range(partition, self.opts)


class KgroupdStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """``spark.readStream.format("kgroupd")``.

    Offsets are ``{"topic": {"partition": next offset to read}}``. With ``group.id``, the
    offsets of every finished batch are committed to that group: in ``commit(end)``, and for
    the ``start`` Spark hands to ``latestOffset`` (the end of the last batch it recorded as
    done), so an availableNow run's final call commits its last batch.
    """

    def __init__(self, opts: SourceOptions) -> None:
        self.opts = opts
        self._admin: KafkaAdmin | None = None
        self._target: Offsets | None = None  # availableNow: read no further than this
        self._latest: Offsets | None = None  # the broker's latest, for reportLatestOffset
        self._committed: Offsets | None = None

    # The reader is pickled to the executors: they get the options only.
    def __getstate__(self) -> dict[str, Any]:
        return {"opts": self.opts}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["opts"])  # type: ignore[misc]

    @property
    def admin(self) -> KafkaAdmin:
        if self._admin is None:
            self._admin = KafkaAdmin(self.opts)
        return self._admin

    def initialOffset(self) -> dict[str, Any]:
        tps = self.admin.partitions()
        if isinstance(self.opts.starting, dict):
            absent = sorted(set(self.opts.starting) - set(tps))
            if absent:
                raise ValueError(f"startingOffsets names partitions that do not exist: {absent}")
        earliest, latest = self.admin.offsets(tps)
        return to_json(resolve(self.opts.starting, tps, earliest, latest, "startingOffsets"))

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.opts.max_offsets_per_trigger is not None:
            return ReadMaxRows(self.opts.max_offsets_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        tps = self.admin.partitions()
        self._target = self.admin.offsets(tps)[1]

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        begin = from_json(start)
        tps = self.admin.partitions()
        self._commit_progress(begin, set(tps))
        lost = sorted(set(begin) - set(tps))
        if lost:
            message = (
                f"partitions {lost} are gone (topic deleted?); records not yet read from "
                "them are lost"
            )
            if self.opts.fail_on_data_loss:
                raise DataLossError(message + " (set failOnDataLoss=false to go on without them)")
            log.warning(message)
        latest = self.admin.offsets(tps)[1]
        self._latest = dict(latest)
        for tp, offset in latest.items():
            if tp in begin and offset < begin[tp]:
                message = (
                    f"{tp[0]}-{tp[1]}: the latest offset {offset} is below the offset already "
                    f"read, {begin[tp]} (topic deleted and created again?)"
                )
                if self.opts.fail_on_data_loss:
                    raise DataLossError(message + " (set failOnDataLoss=false to go on)")
                log.warning(message + "; continuing from the new latest offset")
        end = dict(latest)
        if self._target is not None:
            # availableNow: nothing produced after the run started is read; partitions
            # created since are left for the next run.
            end = {tp: min(o, self._target[tp]) for tp, o in end.items() if tp in self._target}
            for tp in begin.keys() & end.keys():
                if latest[tp] >= begin[tp]:
                    end[tp] = max(end[tp], begin[tp])
        if isinstance(limit, ReadMaxRows):
            end = limit_rows({tp: o for tp, o in begin.items() if tp in end}, end, limit.max_rows)
        return to_json(end)

    def reportLatestOffset(self) -> dict[str, Any] | None:
        return to_json(self._latest) if self._latest is not None else None

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        begin, stop = from_json(start), from_json(end)
        # An offset that went back (a recreated topic) reads nothing this batch: the next one
        # starts at the new offset. failOnDataLoss=true already failed in latestOffset.
        return plan(begin, stop, dataclasses.replace(self.opts, fail_on_data_loss=False))

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, OffsetRange)
        return read_range(partition, self.opts)

    def commit(self, end: dict[str, Any]) -> None:
        self._commit_progress(from_json(end))

    def _commit_progress(self, offsets: Offsets, existing: set[TP] | None = None) -> None:
        group = self.opts.group_id
        if group is None or not offsets or offsets == self._committed:
            return
        if existing is None:
            existing = set(self.admin.partitions())
        present = {tp: o for tp, o in offsets.items() if tp in existing}
        self.admin.commit(group, present)
        self._committed = dict(offsets)

    def stop(self) -> None:
        if self._admin is not None:
            self._admin.close()
            self._admin = None
