"""The cluster as admin clients describe it: DescribeCluster v0-v2, DescribeTopicPartitions v0,
DescribeLogDirs v1-v5, AlterReplicaLogDirs v1-v2, as a Kafka 4.3 cluster of one broker
answers them.

DescribeCluster lists this broker (never fenced) and names it the controller, as a KRaft
broker names one of the live brokers; v1's endpoint type must be 1 (BROKER): 2 (CONTROLLER)
is MISMATCHED_ENDPOINT_TYPE, any other UNSUPPORTED_ENDPOINT_TYPE (INVALID_REQUEST at v0).
DescribeTopicPartitions (the Java admin's describeTopics) pages through topics in name order,
at most ``response_partition_limit`` (capped at Kafka's max.request.partition.size.limit,
2000) partitions per answer, with a cursor to go on from; no topics means every topic the
principal may describe. DescribeLogDirs answers one log dir: the data dir (its disk's total
and usable bytes), or in memory "(in memory)" with the memory budget as its size; partition
sizes are the bytes of the partition's batches, the offset lag 0 (this broker leads all).
AlterReplicaLogDirs to that one log dir is done (every replica is there already); any other
path is LOG_DIR_NOT_FOUND, an unknown partition REPLICA_NOT_AVAILABLE, as Kafka answers.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from kgroupd.broker.handlers.authorized import (
    CLUSTER_OPERATIONS,
    NOT_REQUESTED,
    TOPIC_OPERATIONS,
    authorized,
)
from kgroupd.broker.handlers.metadata import (
    TRANSACTION_STATE,
    topic_entry,
    transaction_state_entry,
)
from kgroupd.broker.handlers.registry import Fields, RequestContext, handler
from kgroupd.broker.log.topics import TopicError, validate_topic_name
from kgroupd.broker.security.acls import CLUSTER_NAME, ResourceType
from kgroupd.broker.security.rules import CLUSTER_ALTER, CLUSTER_DESCRIBE, TOPIC_DESCRIBE
from kgroupd.protocol.codec import ZERO_UUID
from kgroupd.protocol.errors import ErrorCode

BROKER_ENDPOINT, CONTROLLER_ENDPOINT = 1, 2
_ENDPOINT_NAMES = {BROKER_ENDPOINT: "BROKER", CONTROLLER_ENDPOINT: "CONTROLLER"}
MAX_PARTITIONS = 2000  # Kafka's max.request.partition.size.limit
MEMORY_LOG_DIR = "(in memory)"


@handler(60)
def handle_describe_cluster(ctx: RequestContext, req: Fields) -> Fields:
    wanted = req["endpoint_type"]
    old = ctx.api_version == 0
    if wanted not in _ENDPOINT_NAMES:
        code = ErrorCode.INVALID_REQUEST if old else ErrorCode.UNSUPPORTED_ENDPOINT_TYPE
        return {"error_code": int(code), "error_message": f"Unsupported endpoint type {wanted}"}
    if wanted != BROKER_ENDPOINT:
        code = ErrorCode.INVALID_REQUEST if old else ErrorCode.MISMATCHED_ENDPOINT_TYPE
        message = (
            "The request was sent to an endpoint of type BROKER, but we wanted an endpoint "
            f"of type {_ENDPOINT_NAMES[wanted]}"
        )
        return {"error_code": int(code), "error_message": message}
    ops = NOT_REQUESTED
    if req["include_cluster_authorized_operations"]:
        ops = (
            0
            if ctx.denies(CLUSTER_DESCRIBE, CLUSTER_NAME)
            else authorized(ctx, ResourceType.CLUSTER, CLUSTER_NAME, CLUSTER_OPERATIONS)
        )
    broker = ctx.broker
    nodes = broker.nodes  # --nodes N > 1: the live ones
    brokers = (
        [(broker.node_id, *ctx.advertised)] if nodes is None else nodes.brokers(ctx.advertised)
    )
    return {
        "error_code": 0,
        "error_message": None,
        "endpoint_type": BROKER_ENDPOINT,
        "cluster_id": broker.cluster_id,
        "controller_id": broker.node_id if nodes is None else nodes.controller,
        "brokers": [{"broker_id": n, "host": h, "port": p, "rack": None} for n, h, p in brokers],
        "cluster_authorized_operations": ops,
    }


# DescribeTopicPartitions ------------------------------------------------------------------


def _all_topics(ctx: RequestContext) -> list[str]:
    broker = ctx.broker
    names = [*broker.topics.topics, *broker.topics.internal]
    if broker.transactions.used:
        names.append(TRANSACTION_STATE)
    return names


def _described(ctx: RequestContext, name: str) -> Fields | None:
    """The topic's Metadata-shaped entry, or None if it does not exist."""
    topics = ctx.broker.topics
    if name == TRANSACTION_STATE:
        return transaction_state_entry(ctx) if ctx.broker.transactions.used else None
    topic = topics.get(name) or topics.internal.get(name)
    return topic_entry(ctx, topic) if topic is not None else None


class _BadCursor(Exception):
    pass


@handler(75)
def handle_describe_topic_partitions(ctx: RequestContext, req: Fields) -> Fields:
    try:
        return _describe_topic_partitions(ctx, req)
    except _BadCursor as exc:  # Kafka's getErrorResponse: every topic asked for, the error
        message = str(exc)
        ctx.log.info("describe_topic_partitions_refused", reason=message)
        return {
            "topics": [
                {
                    "error_code": int(ErrorCode.INVALID_REQUEST),
                    "name": t["name"],
                    "topic_id": ZERO_UUID,
                    "is_internal": False,
                    "partitions": [],
                }
                for t in req["topics"]
            ]
        }


def _describe_topic_partitions(ctx: RequestContext, req: Fields) -> Fields:
    cursor = req["cursor"]
    after = cursor["topic_name"] if cursor is not None else ""
    everything = not req["topics"]
    asked = _all_topics(ctx) if everything else [t["name"] for t in req["topics"]]
    names = sorted({n for n in asked if n >= after})
    if cursor is not None and not everything and cursor["topic_name"] not in names:
        raise _BadCursor(
            "DescribeTopicPartitionsRequest topic list should contain the cursor topic: "
            + cursor["topic_name"]
        )
    if cursor is not None and cursor["partition_index"] < 0:
        raise _BadCursor(
            "DescribeTopicPartitionsRequest cursor partition must be valid: "
            f"Cursor(topicName={cursor['topic_name']}, "
            f"partitionIndex={cursor['partition_index']})"
        )
    refused = [n for n in names if ctx.denies(TOPIC_DESCRIBE, n)]
    remaining = max(min(MAX_PARTITIONS, req["response_partition_limit"]), 1)
    out: list[Fields] = []
    next_cursor: Fields | None = None
    for name in (n for n in names if n not in refused):
        if remaining <= 0:
            next_cursor = {"topic_name": name, "partition_index": 0}
            break
        entry = _described(ctx, name)
        ops = authorized(ctx, ResourceType.TOPIC, name, TOPIC_OPERATIONS)
        if entry is None:
            if not everything:
                out.append({**_missing(name), "topic_authorized_operations": ops})
            continue
        start = cursor["partition_index"] if cursor is not None and name == after else 0
        parts = entry["partitions"]
        upper = min(len(parts), start + remaining)
        entry["partitions"] = [
            # Kafka lists the eligible leader replicas (KIP-966) even when there are none:
            # the Java admin reads them unchecked
            {**p, "eligible_leader_replicas": [], "last_known_elr": []}
            for p in parts[start:upper]
        ]
        entry["topic_authorized_operations"] = ops
        out.append(entry)
        if upper < len(parts):
            next_cursor = {"topic_name": name, "partition_index": upper}
            break
        remaining -= upper - start
    out.extend(
        {
            "error_code": int(ErrorCode.TOPIC_AUTHORIZATION_FAILED),
            "name": name,
            "topic_id": ZERO_UUID,
            "is_internal": False,
            "partitions": [],
        }
        for name in ([] if everything else refused)
    )
    return {"topics": out, "next_cursor": next_cursor}


INTERNAL_TOPICS = ("__consumer_offsets", "__transaction_state", "__share_group_state")


def _missing(name: str) -> Fields:
    try:
        validate_topic_name(name)
        code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    except TopicError:
        code = ErrorCode.INVALID_TOPIC_EXCEPTION
    return {
        "error_code": int(code),
        "name": name,
        "topic_id": ZERO_UUID,
        "is_internal": name in INTERNAL_TOPICS,
        "partitions": [],
    }


# DescribeLogDirs --------------------------------------------------------------------------


def log_dir(ctx: RequestContext) -> tuple[str, int, int]:
    """(the log dir's name, its total bytes, its usable bytes)."""
    broker = ctx.broker
    data_dir = broker.config.data_dir
    if data_dir is not None:
        path = Path(data_dir).absolute()
        usage = shutil.disk_usage(path)
        return str(path), usage.total, usage.free
    budget = broker.topics.budget
    if budget is None:
        return MEMORY_LOG_DIR, -1, -1
    return MEMORY_LOG_DIR, budget.limit, max(budget.limit - budget.total, 0)


@handler(35)
def handle_describe_log_dirs(ctx: RequestContext, req: Fields) -> Fields:
    if ctx.denies(CLUSTER_DESCRIBE, CLUSTER_NAME):
        return {"error_code": int(ErrorCode.CLUSTER_AUTHORIZATION_FAILED), "results": []}
    topics = ctx.broker.topics
    wanted: dict[str, set[int]] | None = None
    if req["topics"] is not None:
        wanted = {}
        for t in req["topics"]:
            wanted.setdefault(t["topic"], set()).update(t["partitions"])
    described = []
    for name, topic in [*topics.topics.items(), *topics.internal.items()]:
        indexes = [
            i for i in range(len(topic.partitions)) if wanted is None or i in wanted.get(name, ())
        ]
        parts = []
        for i in indexes:
            log = topics.partition(name, i)  # an internal topic's is brought up to date
            if log is not None:
                parts.append(
                    {
                        "partition_index": i,
                        "partition_size": log.size_bytes,
                        "offset_lag": 0,
                        "is_future_key": False,
                    }
                )
        if parts:
            described.append({"name": name, "partitions": parts})
    try:
        path, total, usable = log_dir(ctx)
    except OSError as exc:  # the data dir cannot be read: Kafka's offline log dir
        ctx.log.error("log_dir_unreadable", error=str(exc))
        name = str(Path(ctx.broker.config.data_dir or MEMORY_LOG_DIR).absolute())
        failed = {"error_code": int(ErrorCode.KAFKA_STORAGE_ERROR), "log_dir": name}
        return {"error_code": 0, "results": [failed]}
    result = {
        "error_code": 0,
        "log_dir": path,
        "topics": described,
        "total_bytes": total,
        "usable_bytes": usable,
        "is_cordoned": False,
    }
    return {"error_code": 0, "results": [result]}


@handler(34)
def handle_alter_replica_log_dirs(ctx: RequestContext, req: Fields) -> Fields:
    refused = ctx.denies(CLUSTER_ALTER, CLUSTER_NAME)
    try:
        ours = log_dir(ctx)[0]
    except OSError:
        ours = None
    results: dict[str, list[Fields]] = {}
    for d in req["dirs"]:
        for t in d["topics"]:
            name = t["name"]
            for index in t["partitions"]:
                if refused:
                    code = ErrorCode.CLUSTER_AUTHORIZATION_FAILED
                elif ours is None:
                    code = ErrorCode.KAFKA_STORAGE_ERROR
                elif d["path"] != ours:
                    code = ErrorCode.LOG_DIR_NOT_FOUND
                elif ctx.broker.topics.partition(name, index) is None:
                    code = ErrorCode.REPLICA_NOT_AVAILABLE
                else:
                    code = ErrorCode.NONE
                results.setdefault(name, []).append(
                    {"partition_index": index, "error_code": int(code)}
                )
    return {"results": [{"topic_name": n, "partitions": p} for n, p in results.items()]}
