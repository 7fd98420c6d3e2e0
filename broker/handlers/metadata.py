"""Metadata v0-v8.

v1: null topics means all (v0: empty means all), controller id, rack, is_internal.
v2: cluster id. v3: throttle time. v4: allow_auto_topic_creation. v5: offline replicas.
v7: leader epoch. v8: authorized operations (we send -2147483648: not requested).
"""

from __future__ import annotations

from broker.handlers.registry import Fields, RequestContext, handler
from broker.log.topics import Topic, TopicError, validate_topic_name
from protocol.errors import ErrorCode

_NO_OPERATIONS = -2147483648


def topic_entry(ctx: RequestContext, topic: Topic) -> Fields:
    node = ctx.broker.node_id
    return {
        "error_code": 0,
        "topic": topic.name,
        "name": topic.name,
        "is_internal": False,
        "partitions": [
            {
                "error_code": 0,
                "partition": i,
                "partition_index": i,
                "leader": node,
                "leader_id": node,
                "leader_epoch": 0,
                "replicas": [node],
                "replica_nodes": [node],
                "isr": [node],
                "isr_nodes": [node],
                "offline_replicas": [],
            }
            for i in range(len(topic.partitions))
        ],
        "topic_authorized_operations": _NO_OPERATIONS,
    }


def error_entry(name: str, code: ErrorCode) -> Fields:
    return {
        "error_code": int(code),
        "topic": name,
        "name": name,
        "is_internal": False,
        "partitions": [],
        "topic_authorized_operations": _NO_OPERATIONS,
    }


@handler(3, 0, 8)
def handle_metadata(ctx: RequestContext, req: Fields) -> Fields:
    broker = ctx.broker
    topics_mgr = broker.topics
    requested = req.get("topics")
    if ctx.api_version == 0 and requested == []:
        requested = None
    allow_auto = req.get("allow_auto_topic_creation", True)
    entries: list[Fields] = []
    if requested is None:
        entries = [topic_entry(ctx, t) for t in topics_mgr.topics.values()]
    else:
        seen: set[str] = set()
        for item in requested:
            name = item if isinstance(item, str) else item.get("name") or item.get("topic")
            if name in seen:
                continue
            seen.add(name)
            topic = topics_mgr.get(name)
            if topic is None and broker.config.auto_create_topics and allow_auto:
                try:
                    validate_topic_name(name)
                except TopicError as exc:
                    entries.append(error_entry(name, exc.code))
                    continue
                topic = topics_mgr.create(name, broker.config.default_partitions)
                ctx.log.info(
                    "topic_auto_created", topic=name, partitions=broker.config.default_partitions
                )
            if topic is None:
                try:
                    validate_topic_name(name)
                    code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                except TopicError as exc:
                    code = exc.code
                entries.append(error_entry(name, code))
            else:
                entries.append(topic_entry(ctx, topic))
    return {
        "brokers": [
            {
                "node_id": broker.node_id,
                "host": broker.advertised_host,
                "port": broker.advertised_port,
                "rack": None,
            }
        ],
        "cluster_id": broker.cluster_id,
        "controller_id": broker.node_id,
        "topics": entries,
        "cluster_authorized_operations": _NO_OPERATIONS,
    }
