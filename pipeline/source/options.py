"""The source's options, named and defaulted like Spark's Kafka source; its schema;
offsets as JSON; admission control."""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

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

from kgroupd.pipeline.source.security import (
    SECURITY_OPTIONS,
    STORE_PASSWORDS,
    Security,
    parse_security,
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


# kafka.* consumer configs that make sense for a reader, as aiokafka's client arguments
KAFKA_CLIENT_OPTIONS: dict[str, tuple[str, type]] = {
    "kafka.client.id": ("client_id", str),
    "kafka.request.timeout.ms": ("request_timeout_ms", int),
    "kafka.metadata.max.age.ms": ("metadata_max_age_ms", int),
    "kafka.connections.max.idle.ms": ("connections_max_idle_ms", int),
    "kafka.retry.backoff.ms": ("retry_backoff_ms", int),
}
# Refused as Spark's Kafka source refuses them, with what to use instead
KAFKA_REFUSED = {
    "kafka.auto.offset.reset": "set the source option startingOffsets instead",
    "kafka.key.deserializer": "keys are always read as bytes: cast the key column",
    "kafka.value.deserializer": "values are always read as bytes: cast the value column",
    "kafka.enable.auto.commit": "the checkpoint keeps the progress; group.id commits it to a group",
    "kafka.interceptor.classes": "consumer interceptors are not supported",
}


def _client_options(opts: Mapping[str, str]) -> tuple[tuple[str, Any], ...]:
    """The kafka.* options passed to the clients; a clear error for any other."""
    out = []
    for name, value in sorted(opts.items()):
        if not name.startswith("kafka.") or name in ("kafka.bootstrap.servers", "kafka.group.id"):
            continue
        if name in SECURITY_OPTIONS or name in STORE_PASSWORDS:
            continue  # parse_security
        if name in KAFKA_REFUSED:
            raise ValueError(f"Kafka option '{name[6:]}' is not supported: {KAFKA_REFUSED[name]}")
        if name not in KAFKA_CLIENT_OPTIONS:
            supported = ", ".join(
                ["kafka.bootstrap.servers", *sorted(KAFKA_CLIENT_OPTIONS), *SECURITY_OPTIONS]
            )
            raise ValueError(
                f"Kafka option '{name}' is not supported by the kgroupd source "
                f"(it would be ignored); the kafka.* options it passes on: {supported}"
            )
        arg, kind = KAFKA_CLIENT_OPTIONS[name]
        try:
            out.append((arg, kind(value)))
        except ValueError:
            raise ValueError(f"option {name} must be {kind.__name__}, got {value!r}") from None
    return tuple(out)


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
    min_partitions: int | None = None
    # kafka.* consumer options passed on to aiokafka's clients, as (argument, value)
    client_options: tuple[tuple[str, Any], ...] = ()
    # kafka.security.protocol, kafka.sasl.*, kafka.ssl.*: strings, so they pickle
    security: Security = field(default_factory=Security)
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
        raw_min = opts.get("minpartitions")
        min_partitions = int(raw_min) if raw_min is not None else None
        if min_partitions is not None and min_partitions < 1:
            raise ValueError(f"minPartitions must be positive, got {raw_min}")
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
            min_partitions=min_partitions,
            client_options=_client_options(opts),
            security=parse_security(opts),
            ignored=tuple(ignored),
        )

    def client_args(self) -> dict[str, Any]:
        """aiokafka's client arguments: the kafka.* options and the security settings (an
        SSL context is built on each call, where it is used: it cannot be pickled)."""
        return {**dict(self.client_options), **self.security.aiokafka_args()}

    def selects(self, topic: str) -> bool:
        if self.subscribe:
            return topic in self.subscribe
        if self.subscribe_pattern is not None:
            return not topic.startswith("__") and bool(re.fullmatch(self.subscribe_pattern, topic))
        return any(t == topic for t, _ in self.assign)


# --- offsets as JSON -------------------------------------------------------------------------


# Offsets JSON is Spark's ``{"topic": {"partition": offset}}`` plus one key no topic can
# have (":" is not allowed in topic names) saying which log the offsets refer to.
META_KEY = "kgroupd:meta"


def to_json(offsets: Offsets, meta: Mapping[str, Any] | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for (topic, partition), offset in sorted(offsets.items()):
        out.setdefault(topic, {})[str(partition)] = int(offset)
    if meta:
        out[META_KEY] = dict(meta)
    return out


def from_json(offsets: Mapping[str, Any]) -> Offsets:
    return {
        (str(topic), int(partition)): int(offset)
        for topic, parts in offsets.items()
        if topic != META_KEY
        for partition, offset in parts.items()
    }


def meta_of(offsets: Mapping[str, Any]) -> dict[str, Any]:
    """What the offsets JSON says of the log it was read from (empty for offsets written by
    hand or by an older version)."""
    meta = offsets.get(META_KEY)
    return dict(meta) if isinstance(meta, Mapping) else {}


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
