"""Topics: names, partitions, per-topic configs (Kafka's names and defaults) and retention."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import re
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from kgroupd.broker.log.budget import MemoryBudget
from kgroupd.broker.log.partition import PartitionLog, SegmentStore
from kgroupd.protocol.errors import ErrorCode

MAX_TOPIC_NAME = 249
# A retention pass (``TopicManager.retention_pass``) gives the event loop back after this
# long of work: a pass over 100,000 partitions holds it no longer than this at a time.
RETENTION_SLICE_S = 0.01
_LEGAL = re.compile(r"^[a-zA-Z0-9._-]+$")
_NUMBER = re.compile(r"[+-]?[0-9]+")  # Java's Long.parseLong
_LONG_MAX = str(2**63 - 1)
_REPLICA = re.compile(r"([0-9]+:[0-9]+)?")  # Kafka's ThrottledReplicaListValidator


@dataclass(frozen=True)
class ConfigDef:
    default: str
    # "long", "int", "double", "bool", "enum", "list" (cleanup.policy: APPEND/SUBTRACT
    # apply) or "replicas" (a throttled-replicas list: ``*`` or partition:broker pairs)
    kind: str
    choices: tuple[str, ...] = ()
    at_least: int | None = None  # Kafka's ConfigDef.Range.atLeast
    at_most: int | None = None  # and between(at_least, at_most)
    also: int | None = None  # a value allowed outside the range (gzip's -1: its default)


# The topic configs kgroupd understands, with Kafka's defaults and bounds.
TOPIC_CONFIGS: dict[str, ConfigDef] = {
    "cleanup.policy": ConfigDef(
        "delete", "list", ("delete", "compact", "compact,delete", "delete,compact")
    ),
    "retention.ms": ConfigDef("604800000", "long", at_least=-1),
    "retention.bytes": ConfigDef("-1", "long"),
    "segment.bytes": ConfigDef("1073741824", "int", at_least=14),  # RECORD_OVERHEAD_V0
    "segment.ms": ConfigDef("604800000", "long", at_least=1),
    "segment.jitter.ms": ConfigDef("0", "long", at_least=0),
    # the sparse index's spacing (kgroupd.broker.storage.segment); broker default
    # --log-index-interval-bytes (Kafka: log.index.interval.bytes)
    "index.interval.bytes": ConfigDef("4096", "int", at_least=0),
    "max.message.bytes": ConfigDef("1048588", "int", at_least=0),
    "message.timestamp.type": ConfigDef("CreateTime", "enum", ("CreateTime", "LogAppendTime")),
    "min.insync.replicas": ConfigDef("1", "int", at_least=1),
    "compression.type": ConfigDef(
        "producer", "enum", ("producer", "uncompressed", "gzip", "snappy", "lz4", "zstd")
    ),
    # Log compaction (kgroupd.broker.log.cleaner)
    "min.cleanable.dirty.ratio": ConfigDef("0.5", "double"),
    "min.compaction.lag.ms": ConfigDef("0", "long", at_least=0),
    "max.compaction.lag.ms": ConfigDef("9223372036854775807", "long", at_least=1),
    "delete.retention.ms": ConfigDef("86400000", "long", at_least=0),
    # KIP-937, enforced at produce for CreateTime topics (kgroupd.broker.handlers.produce)
    "message.timestamp.before.max.ms": ConfigDef(_LONG_MAX, "long", at_least=0),
    "message.timestamp.after.max.ms": ConfigDef("3600000", "long", at_least=0),  # Kafka 4
    # Kept and described, with no effect here: kgroupd writes segments its own way
    # (--fsync, no preallocation, files deleted at once, no offset index size cap), and
    # one broker has no replicas, elections or tiered storage.
    "segment.index.bytes": ConfigDef("10485760", "int", at_least=4),
    "flush.messages": ConfigDef(_LONG_MAX, "long", at_least=1),
    "flush.ms": ConfigDef(_LONG_MAX, "long", at_least=0),
    "file.delete.delay.ms": ConfigDef("60000", "long", at_least=0),
    "preallocate": ConfigDef("false", "bool"),
    "compression.gzip.level": ConfigDef("-1", "int", at_least=1, at_most=9, also=-1),
    "compression.lz4.level": ConfigDef("9", "int", at_least=1, at_most=17),
    "compression.zstd.level": ConfigDef("3", "int", at_least=-131072, at_most=22),
    "message.downconversion.enable": ConfigDef("true", "bool"),  # a no-op in Kafka 4 too
    "unclean.leader.election.enable": ConfigDef("false", "bool"),
    "leader.replication.throttled.replicas": ConfigDef("", "replicas"),
    "follower.replication.throttled.replicas": ConfigDef("", "replicas"),
    "remote.storage.enable": ConfigDef("false", "bool"),
    "local.retention.ms": ConfigDef("-2", "long", at_least=-2),
    "local.retention.bytes": ConfigDef("-2", "long", at_least=-2),
    "remote.log.copy.disable": ConfigDef("false", "bool"),
    "remote.log.delete.on.disable": ConfigDef("false", "bool"),
}
_BITS = {"int": 32, "long": 64}
_DOUBLE = re.compile(r"[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?")


class TopicError(Exception):
    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def validate_topic_name(name: str | None) -> None:
    if not name:
        raise TopicError(ErrorCode.INVALID_TOPIC_EXCEPTION, "Topic name is empty")
    if name in (".", ".."):
        raise TopicError(ErrorCode.INVALID_TOPIC_EXCEPTION, f"Topic name cannot be {name!r}")
    if len(name) > MAX_TOPIC_NAME:
        raise TopicError(
            ErrorCode.INVALID_TOPIC_EXCEPTION,
            f"Topic name is longer than {MAX_TOPIC_NAME} characters",
        )
    if not _LEGAL.match(name):
        raise TopicError(
            ErrorCode.INVALID_TOPIC_EXCEPTION,
            f"Topic name {name!r} is illegal, it contains a character other than "
            "ASCII alphanumerics, '.', '_' and '-'",
        )


def validate_configs(
    configs: dict[str, str | None], defaults: dict[str, str] | None = None
) -> dict[str, str]:
    """Kafka's checks of topic configs (LogConfig.validate), with its messages; ``defaults``
    are the broker's (the topic's configs are checked together with them)."""
    out: dict[str, str] = {}
    for key, value in configs.items():
        spec = TOPIC_CONFIGS.get(key)
        if spec is None:
            raise TopicError(ErrorCode.INVALID_CONFIG, f"Unknown topic config name: {key}")
        if value is None:
            raise TopicError(ErrorCode.INVALID_CONFIG, f"Null value for topic config {key}")
        problem = _config_problem(spec, value, key)
        if problem is not None:
            message = f"Invalid value {value} for configuration {key}: {problem}"
            raise TopicError(ErrorCode.INVALID_CONFIG, message)
        out[key] = value
    _check_together({**(defaults or {}), **out})
    return out


def _check_together(configs: dict[str, str]) -> None:
    """LogConfig.validateValues and the tiered-storage check, on the topic's effective
    configs."""

    def get(key: str) -> str:
        return configs.get(key, TOPIC_CONFIGS[key].default).strip()

    low, high = int(get("min.compaction.lag.ms")), int(get("max.compaction.lag.ms"))
    if low > high:
        raise TopicError(
            ErrorCode.INVALID_CONFIG,
            f"conflict topic config setting min.compaction.lag.ms ({low}) > "
            f"max.compaction.lag.ms ({high})",
        )
    if get("remote.storage.enable").lower() == "true":  # kgroupd has no tiered storage
        raise TopicError(
            ErrorCode.INVALID_CONFIG,
            "Tiered Storage functionality is disabled in the broker. Topic cannot be "
            "configured with remote log storage.",
        )


def _config_problem(spec: ConfigDef, value: str, key: str) -> str | None:
    bits = _BITS.get(spec.kind)
    if bits is not None:
        number = int(value.strip()) if _NUMBER.fullmatch(value.strip()) else None
        if number is None or not -(2 ** (bits - 1)) <= number < 2 ** (bits - 1):
            return f"Not a number of type {spec.kind.upper()}"
        if number == spec.also:
            return None
        low, high = spec.at_least, spec.at_most
        gzip = spec.also is not None and low is not None and high is not None  # its check
        if gzip and not low <= number <= high:  # type: ignore[operator]
            return f"Value must be between {low} and {high} or equal to {spec.also}"
        if spec.at_least is not None and number < spec.at_least:
            return f"Value must be at least {spec.at_least}"
        if spec.at_most is not None and number > spec.at_most:
            return f"Value must be no more than {spec.at_most}"
    elif spec.kind == "double":  # min.cleanable.dirty.ratio: Kafka's Range.between(0, 1)
        if not _DOUBLE.fullmatch(value.strip()):
            return "Not a number of type DOUBLE"
        if float(value) < 0:
            return "Value must be at least 0.0"
        if float(value) > 1:
            return "Value must be no more than 1.0"
    elif spec.kind == "bool":
        if value.strip().lower() not in ("true", "false"):
            return "Expected value to be either true or false"
    elif spec.kind == "replicas":
        items = [item.strip() for item in value.split(",")]
        if not (all(_REPLICA.fullmatch(i) for i in items) or "".join(items) == "*"):
            return (
                f"{key} must be the literal '*' or a list of replicas in the following "
                "format: [partitionId]:[brokerId],[partitionId]:[brokerId],..."
            )
    elif value.replace(" ", "") not in spec.choices:
        return f"must be one of {list(spec.choices)}"
    return None


@dataclass
class Topic:
    name: str
    partitions: list[PartitionLog]
    configs: dict[str, str] = field(default_factory=dict)
    topic_id: uuid.UUID = field(default_factory=uuid.uuid4)
    # the broker's defaults of topic configs (--log-index-interval-bytes...), shared by every
    # topic (TopicManager.defaults): a topic's own config beats them, they beat Kafka's
    defaults: dict[str, str] = field(default_factory=dict)
    # the produce path's timestamp rules, for the configs dict they were read from
    _timestamps: tuple[dict[str, str], tuple[bool, int, int]] | None = field(
        default=None, repr=False, compare=False
    )

    def config(self, key: str) -> str:
        found = self.configs.get(key)
        if found is None:
            found = self.defaults.get(key, TOPIC_CONFIGS[key].default)
        return found

    @property
    def compacted(self) -> bool:
        """cleanup.policy holds compact (compact or compact,delete)."""
        return "compact" in self.config("cleanup.policy")

    @property
    def log_append_time(self) -> bool:
        return self.config("message.timestamp.type") == "LogAppendTime"

    def timestamp_rules(self) -> tuple[bool, int, int]:
        """(LogAppendTime, message.timestamp.before.max.ms, message.timestamp.after.max.ms),
        read again once the configs are replaced (AlterConfigs sets a new dict)."""
        cached = self._timestamps
        if cached is None or cached[0] is not self.configs:
            rules = (
                self.log_append_time,
                int(self.config("message.timestamp.before.max.ms")),
                int(self.config("message.timestamp.after.max.ms")),
            )
            self._timestamps = cached = (self.configs, rules)
        return cached[1]

    def add_partitions(self, total: int) -> None:
        for i in range(len(self.partitions), total):
            self.partitions.append(PartitionLog(self.name, i))


class TopicStore(Protocol):
    """Where the topic table and segments persist under --data-dir
    (``kgroupd.broker.storage.topic_store`` implements it)."""

    def attach(
        self, log: PartitionLog, segment_bytes: int, index_interval: int
    ) -> SegmentStore: ...

    def save_topics(self, topics: TopicManager, changed: str | None = None) -> None: ...

    def drop_topic(self, name: str, partitions: int) -> None: ...

    def held(self) -> contextlib.AbstractContextManager[None]: ...

    def files_done(self) -> asyncio.Future[None] | None: ...

    def set_segment_bytes(self, name: str, segment_bytes: int) -> None: ...

    def set_index_interval(self, name: str, index_interval: int) -> None: ...

    def set_roll_ms(self, name: str, segment_ms: int, jitter_ms: int) -> None: ...

    def forget_partitions(self, name: str, first: int, end: int) -> None: ...


class TopicManager:
    def __init__(self) -> None:
        self.topics: dict[str, Topic] = {}
        self.ids: dict[uuid.UUID, Topic] = {}
        self.ids_by_bytes: dict[bytes, Topic] = {}  # the same, by the id's 16 bytes
        # Under --data-dir: segment files and topics.json (kgroupd.broker.storage.topic_store).
        self.store: TopicStore | None = None
        # The broker's defaults of topic configs (Kafka's log.* broker configs), as config
        # name -> value; only those set by a flag (DescribeConfigs: STATIC_BROKER_CONFIG).
        self.defaults: dict[str, str] = {}
        # What the partitions' batches in memory count against: --max-memory-bytes in
        # memory, --log-cache-bytes under --data-dir (kgroupd.broker.log.budget).
        self.budget: MemoryBudget | None = None
        # Bumped on every create/delete/partition change, for metadata caches.
        self.version = 0
        # Called after every create/delete/partition change (the coordinator re-resolves
        # consumer groups' subscriptions).
        self.listeners: list[Callable[[], None]] = []
        # Internal topics served from the broker's own state (``__consumer_offsets``): read
        # by Fetch and ListOffsets (``partition``, ``by_id``), never in ``topics``, so
        # produce, deletion, subscriptions and the data-dir's topic table never see them.
        self.internal: dict[str, Topic] = {}
        # name -> called with a partition index before that partition is read
        self.internal_readers: dict[str, Callable[[int], None]] = {}
        # topics being created a slice at a time (``create_in_slices``): name -> partitions
        self.creating: dict[str, int] = {}
        # the partitions of every topic in ``topics`` but those named ``__...``, kept as
        # topics come, grow and go (``partition_count``: no walk over 100,000 topics)
        self._made = 0

    def _changed(self) -> None:
        self.version += 1
        for listener in self.listeners:
            listener()

    def one_write(self) -> contextlib.AbstractContextManager[None]:
        """Under --data-dir, the topic changes made inside are written to topics.json once, as
        it ends (``TopicStore.held``): for a request changing many topics. Nothing inside may
        wait."""
        return contextlib.nullcontext() if self.store is None else self.store.held()

    async def files_done(self) -> None:
        """Under --data-dir: once the segment files retention left to the storage's file
        thread are deleted (``retention_pass``)."""
        done = None if self.store is None else self.store.files_done()
        if done is not None:
            await done

    def view(self) -> dict[str, tuple[uuid.UUID, int]]:
        """Every topic as ``name -> (topic id, partition count)``."""
        return {name: (t.topic_id, len(t.partitions)) for name, t in self.topics.items()}

    def get(self, name: str) -> Topic | None:
        return self.topics.get(name)

    def by_id(self, topic_id: uuid.UUID) -> Topic | None:
        """The topic with this id (a recreated topic has a new one)."""
        found = self.ids.get(topic_id)
        if found is None:
            for topic in self.internal.values():
                if topic.topic_id == topic_id:
                    return topic
        return found

    def partition(self, name: str, index: int) -> PartitionLog | None:
        topic = self.topics.get(name)
        if topic is None:
            topic = self.internal.get(name)
            if topic is not None and name in self.internal_readers:
                self.internal_readers[name](index)
        if topic is None or not 0 <= index < len(topic.partitions):
            return None
        return topic.partitions[index]

    def partition_count(self) -> int:
        """Partitions of every topic but the internal ones (what --max-partitions bounds)."""
        return self._made + sum(self.creating.values())

    def _count(self, name: str, partitions: int) -> None:
        if not name.startswith("__"):
            self._made += partitions

    def check_create(
        self, name: str, partitions: int, replication: int, configs: dict[str, str | None]
    ) -> dict[str, str]:
        validate_topic_name(name)
        if name in self.topics or name in self.creating:
            raise TopicError(ErrorCode.TOPIC_ALREADY_EXISTS, f"Topic '{name}' already exists.")
        if partitions <= 0 and partitions != -1:
            raise TopicError(
                ErrorCode.INVALID_PARTITIONS, "Number of partitions must be larger than 0."
            )
        if replication <= 0 and replication != -1:
            raise TopicError(
                ErrorCode.INVALID_REPLICATION_FACTOR,
                "Replication factor must be larger than 0.",
            )
        if replication > 1:
            raise TopicError(
                ErrorCode.INVALID_REPLICATION_FACTOR,
                f"Unable to replicate the partition {replication} time(s): "
                "The target replication factor of "
                f"{replication} cannot be reached because only 1 broker(s) are registered.",
            )
        return validate_configs(configs)

    def create(
        self,
        name: str,
        partitions: int,
        configs: dict[str, str] | None = None,
        topic_id: uuid.UUID | None = None,
    ) -> Topic:
        topic = Topic(name, [], dict(configs or {}), topic_id or uuid.uuid4(), self.defaults)
        self._grow(topic, partitions)
        self._register(topic)
        return topic

    async def create_in_slices(
        self, name: str, partitions: int, configs: dict[str, str], step: int
    ) -> Topic:
        """``create``, its partitions made ``step`` at a time with the event loop given back
        between (a CreateTopics of 10,000 partitions holds it no longer than ``step`` take).
        The topic is known only once whole; meanwhile its name is taken (``check_create``)
        and its partitions count against the limit (``partition_count``)."""
        self.creating[name] = partitions
        topic = Topic(name, [], dict(configs), uuid.uuid4(), self.defaults)
        try:
            while len(topic.partitions) < partitions:
                gc.freeze()  # (below) each collection meanwhile walks one slice at most
                self._grow(topic, min(partitions, len(topic.partitions) + step))
                await asyncio.sleep(0)
        except BaseException:
            if self.store is not None:  # nothing was written: no file to remove
                self.store.drop_topic(name, len(topic.partitions))
            raise
        finally:
            del self.creating[name]
        self._register(topic)
        # The partitions live until the topic is deleted: out of the collector's way, or
        # every full collection walks them all (0.1-0.3 s at 100,000 partitions, measured:
        # a stall of the event loop). A deleted partition is freed by reference counting
        # (its store lets go of it: PartitionStore.forget).
        gc.freeze()
        return topic

    async def add_partitions_in_slices(self, name: str, total: int, step: int) -> None:
        """``add_partitions``, ``step`` at a time (``create_in_slices``): the topic has them
        once all are made; meanwhile its partitions are not to change (``creating``)."""
        topic = self.topics[name]
        before = len(topic.partitions)
        self.creating[name] = total - before
        fresh: list[PartitionLog] = []
        try:
            while before + len(fresh) < total:
                gc.freeze()
                start = before + len(fresh)
                fresh += self._make(topic, start, min(total, start + step))
                await asyncio.sleep(0)
            if self.topics.get(name) is not topic:
                raise TopicError(
                    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"The topic '{name}' does not exist."
                )
        except BaseException:
            if self.store is not None:
                self.store.forget_partitions(name, before, before + len(fresh))
            raise
        finally:
            del self.creating[name]
        topic.partitions += fresh
        self._count(name, len(fresh))
        self._changed()
        if self.store is not None:
            self.store.set_roll_ms(topic.name, *roll_configs(topic))
            self.store.save_topics(self, name)
        gc.freeze()

    def _grow(self, topic: Topic, total: int) -> None:
        topic.partitions += self._make(topic, len(topic.partitions), total)

    def _make(self, topic: Topic, first: int, end: int) -> list[PartitionLog]:
        """Partitions ``first`` to ``end`` of ``topic`` (not added to it), with their store."""
        fresh = [PartitionLog(topic.name, i) for i in range(first, end)]
        budget, store = self.budget, self.store
        for log in fresh:
            log.budget = budget
        if store is not None:
            segment_bytes, index_interval = _segment_configs(topic)
            for log in fresh:
                store.attach(log, segment_bytes, index_interval)
        return fresh

    def _register(self, topic: Topic) -> None:
        replaced = self.topics.get(topic.name)
        if replaced is not None:
            self._count(topic.name, -len(replaced.partitions))
        self.topics[topic.name] = topic
        self._count(topic.name, len(topic.partitions))
        self.ids[topic.topic_id] = topic
        self.ids_by_bytes[topic.topic_id.bytes] = topic
        self._changed()
        if self.store is not None:
            self.store.set_roll_ms(topic.name, *roll_configs(topic))
            self.store.save_topics(self, topic.name)

    def delete(self, name: str) -> Topic | None:
        topic = self.topics.pop(name, None)
        if topic is not None:
            self._count(name, -len(topic.partitions))
            self.ids.pop(topic.topic_id, None)
            self.ids_by_bytes.pop(topic.topic_id.bytes, None)
            self._changed()
            for log in topic.partitions:
                log.release()
                log._wake()
            if self.store is not None:
                self.store.save_topics(self, name)
                self.store.drop_topic(name, len(topic.partitions))
        return topic

    def add_partitions(self, name: str, total: int) -> None:
        topic = self.topics[name]
        gc.freeze()  # what lives now stays out of the collections the new partitions cause
        before = len(topic.partitions)
        self._grow(topic, total)
        self._count(name, len(topic.partitions) - before)
        self._changed()
        if self.store is not None:
            self.store.set_roll_ms(topic.name, *roll_configs(topic))
            self.store.save_topics(self, name)
        gc.freeze()  # and so do they (create_in_slices says why)

    def set_configs(self, name: str, configs: dict[str, str]) -> None:
        """Replace a topic's dynamic configs (AlterConfigs); retention reads them at its next
        pass, produce at the next batch, segments at their next roll (segment.bytes, and
        index.interval.bytes: a segment keeps the spacing it was started with, as Kafka's)."""
        topic = self.topics[name]
        topic.configs = dict(configs)
        if self.store is not None:
            segment_bytes, index_interval = _segment_configs(topic)
            self.store.set_segment_bytes(name, segment_bytes)
            self.store.set_index_interval(name, index_interval)
            self.store.set_roll_ms(name, *roll_configs(topic))
            self.store.save_topics(self, name)

    def apply_retention(self, now_ms: int, only: str | None = None) -> int:
        """One retention pass over every topic (or only the topic ``only``)."""
        dropped = 0
        for topic in self.topics.values() if only is None else [self.topics[only]]:
            if "delete" not in topic.config("cleanup.policy"):
                continue  # compact only: the cleaner keeps the latest of each key instead
            retention_ms = int(topic.config("retention.ms"))
            retention_bytes = int(topic.config("retention.bytes"))
            for log in topic.partitions:
                dropped += log.apply_retention(retention_ms, retention_bytes, now_ms)
        return dropped

    async def retention_pass(
        self, now_ms: int, slice_s: float = RETENTION_SLICE_S, only: str | None = None
    ) -> int:
        """``apply_retention`` over every topic (the periodic pass; or only the topic ``only``:
        an AlterConfigs of its retention), the event loop given back
        after each ``slice_s`` of work. A topic deleted meanwhile is skipped from there on;
        one created meanwhile waits for the next pass; configs are read again after each
        break (an AlterConfigs of retention applies them itself, at once)."""
        dropped = 0
        clock = time.perf_counter
        deadline = clock() + slice_s
        if only is None:
            todo = list(self.topics.values())
        else:
            todo = [self.topics[only]] if only in self.topics else []
        for topic in todo:
            index = 0
            while self.topics.get(topic.name) is topic and index < len(topic.partitions):
                if "delete" not in topic.config("cleanup.policy"):
                    break  # compact only: the cleaner keeps the latest of each key instead
                retention_ms = int(topic.config("retention.ms"))
                retention_bytes = int(topic.config("retention.bytes"))
                # the files on a thread, but not beside the cleaner (compact,delete)
                later = not topic.compacted
                logs = topic.partitions
                while index < len(logs):
                    log = logs[index]
                    dropped += log.apply_retention(retention_ms, retention_bytes, now_ms, later)
                    index += 1
                    if clock() >= deadline:
                        break
                if clock() >= deadline:
                    await asyncio.sleep(0)
                    deadline = clock() + slice_s
        return dropped


def _segment_configs(topic: Topic) -> tuple[int, int]:
    """segment.bytes and index.interval.bytes, as the segment files take them."""
    return int(topic.config("segment.bytes")), int(topic.config("index.interval.bytes"))


def roll_configs(topic: Topic) -> tuple[int, int]:
    """segment.ms and segment.jitter.ms: when a segment rolls by time."""
    return int(topic.config("segment.ms")), int(topic.config("segment.jitter.ms"))
