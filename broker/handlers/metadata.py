"""Metadata v0-v13.

v1: null topics means all (v0: empty means all), controller id, rack, is_internal.
v2: cluster id. v3: throttle time. v4: allow_auto_topic_creation. v5: offline replicas.
v7: leader epoch. ``__transaction_state`` is listed (internal) once a transactional id was
used, ``__consumer_offsets`` once created (the first FindCoordinator, a Metadata request
naming it with auto creation allowed, or a data dir with groups). v8: authorized
operations when asked (with no authorizer, every operation Kafka defines on a topic, or on
the cluster up to v10). v9: flexible. v10: topic ids, and topics asked for by id (an
unknown id: UNKNOWN_TOPIC_ID). v12: a null name in the answer for a topic asked for by
unknown id. v13: a top-level error code.
"""

from __future__ import annotations

import uuid
from typing import Any

from kgroupd.broker.handlers.authorized import (
    CLUSTER_OPERATIONS,
    NOT_REQUESTED,
    TOPIC_OPERATIONS,
    authorized,
)
from kgroupd.broker.handlers.metadata_parts import Entry, encoded
from kgroupd.broker.handlers.registry import Fields, RequestContext, handler
from kgroupd.broker.log.consumer_offsets import OFFSETS_TOPIC
from kgroupd.broker.log.topics import Topic, TopicError, validate_topic_name
from kgroupd.broker.quotas import REQUEST as REQUEST_QUOTA
from kgroupd.broker.security.acls import CLUSTER_NAME, ResourceType
from kgroupd.broker.security.rules import CLUSTER_CREATE, TOPIC_CREATE, TOPIC_DESCRIBE
from kgroupd.protocol.codec import ZERO_UUID
from kgroupd.protocol.errors import ErrorCode


def topic_entry(ctx: RequestContext, topic: Topic, operations: int = NOT_REQUESTED) -> Fields:
    node = ctx.broker.node_id
    nodes = ctx.broker.nodes  # --nodes N > 1: leaders spread over them
    if nodes is not None:
        partitions = [nodes.partition_entry(topic.name, i) for i in range(len(topic.partitions))]
    else:
        partitions = [
            {
                "error_code": 0,
                "partition_index": i,
                "leader_id": node,
                "leader_epoch": 0,
                "replica_nodes": [node],
                "isr_nodes": [node],
                "offline_replicas": [],
            }
            for i in range(len(topic.partitions))
        ]
    return {
        "error_code": 0,
        "name": topic.name,
        "topic_id": topic.topic_id,
        "is_internal": topic.name in ctx.broker.topics.internal,
        "partitions": partitions,
        "topic_authorized_operations": operations,
    }


TRANSACTION_STATE = "__transaction_state"


def transaction_state_entry(ctx: RequestContext, ops: int = NOT_REQUESTED) -> Fields:
    """The transaction coordinator's internal topic, as Kafka lists it once created (on the
    first transactional use): ``--transaction-partitions`` partitions, all led here. Its id
    is derived from the cluster id, so it is stable across restarts."""
    broker = ctx.broker
    node = broker.node_id
    nodes = broker.nodes
    if nodes is not None:
        count = broker.config.transaction_partitions
        partitions = [nodes.partition_entry(TRANSACTION_STATE, i) for i in range(count)]
        return {
            "error_code": 0,
            "name": TRANSACTION_STATE,
            "topic_id": transaction_state_id(broker.cluster_id),
            "is_internal": True,
            "partitions": partitions,
            "topic_authorized_operations": ops,
        }
    return {
        "error_code": 0,
        "name": TRANSACTION_STATE,
        "topic_id": transaction_state_id(broker.cluster_id),
        "is_internal": True,
        "partitions": [
            {
                "error_code": 0,
                "partition_index": i,
                "leader_id": node,
                "leader_epoch": 0,
                "replica_nodes": [node],
                "isr_nodes": [node],
                "offline_replicas": [],
            }
            for i in range(broker.config.transaction_partitions)
        ],
        "topic_authorized_operations": ops,
    }


def transaction_state_id(cluster_id: str) -> uuid.UUID:
    return uuid.uuid5(uuid.NAMESPACE_URL, f"kgroupd:{cluster_id}:{TRANSACTION_STATE}")


def error_entry(name: str | None, code: ErrorCode, topic_id: uuid.UUID = ZERO_UUID) -> Fields:
    return {
        "error_code": int(code),
        "name": name,
        "topic_id": topic_id,
        "is_internal": False,
        "partitions": [],
    }


@handler(3)
def handle_metadata(ctx: RequestContext, req: Fields) -> Fields | Any:
    """The answer's fields, or (the common case) its body from the encoded topics
    (``metadata_parts``): ``Chunks``, or a coroutine of them."""
    broker = ctx.broker
    topics_mgr = broker.topics
    requested = req["topics"]
    if ctx.api_version == 0 and requested == []:
        requested = None
    ops = TOPIC_OPERATIONS if req["include_topic_authorized_operations"] else NOT_REQUESTED
    if ctx.access is not None and ops != NOT_REQUESTED:
        ops = -1  # per topic, below
    entries: list[Entry] = []
    if requested is None:
        # all topics: those the principal may not DESCRIBE are left out, as Kafka does
        if ctx.access is None:  # no authorizer: every topic, as it is
            entries = [(t, ops) for t in topics_mgr.topics.values()]
            entries.extend((t, ops) for t in topics_mgr.internal.values())
        else:
            entries = [
                (t, _ops(ctx, t.name, ops))
                for t in topics_mgr.topics.values()
                if not ctx.denies(TOPIC_DESCRIBE, t.name)
            ]
            entries.extend(
                (t, _ops(ctx, t.name, ops))
                for t in topics_mgr.internal.values()
                if not ctx.denies(TOPIC_DESCRIBE, t.name)
            )
        if broker.transactions.used and not ctx.denies(TOPIC_DESCRIBE, TRANSACTION_STATE):
            entries.append(transaction_state_entry(ctx, _ops(ctx, TRANSACTION_STATE, ops)))
    else:
        seen: set[str | uuid.UUID] = set()
        for item in requested:
            name = item["name"]
            topic_id = item["topic_id"]
            if topic_id != ZERO_UUID:  # v10+: asked for by id (the name is null or empty)
                if topic_id in seen:
                    continue
                seen.add(topic_id)
                found = topics_mgr.by_id(topic_id)
                if found is None and topic_id == transaction_state_id(broker.cluster_id):
                    found_name: str | None = TRANSACTION_STATE
                else:
                    found_name = found.name if found is not None else None
                if found_name is not None and ctx.denies(TOPIC_DESCRIBE, found_name):
                    code = ErrorCode.TOPIC_AUTHORIZATION_FAILED
                    entries.append(error_entry(None, code, topic_id))
                elif found is None and found_name is not None:
                    entries.append(transaction_state_entry(ctx, _ops(ctx, found_name, ops)))
                elif found is None:
                    entries.append(error_entry(None, ErrorCode.UNKNOWN_TOPIC_ID, topic_id))
                else:
                    entries.append((found, _ops(ctx, found.name, ops)))
                continue
            if name in seen:
                continue
            seen.add(name)
            entries.append(_by_name(ctx, name, req["allow_auto_topic_creation"], ops))
    cluster_ops = NOT_REQUESTED
    if req["include_cluster_authorized_operations"]:
        cluster_ops = authorized(ctx, ResourceType.CLUSTER, CLUSTER_NAME, CLUSTER_OPERATIONS)
    brokers = [
        {
            "node_id": broker.node_id,
            "host": ctx.advertised[0],
            "port": ctx.advertised[1],
            "rack": None,
        }
    ]
    controller = broker.node_id
    nodes = broker.nodes
    if nodes is not None:  # --nodes N > 1: the live ones
        brokers = [
            {"node_id": node, "host": host, "port": port, "rack": None}
            for node, host, port in nodes.brokers(ctx.advertised)
        ]
        controller = nodes.controller
    response: Fields = {
        "brokers": brokers,
        "cluster_id": broker.cluster_id,
        "controller_id": controller,
        "cluster_authorized_operations": cluster_ops,
    }
    # the throttle time goes into the fields; simulated nodes move leaders at run time, which
    # the encoded parts (keyed by topic and partition count) do not follow
    if nodes is not None or broker.throttle.enabled(REQUEST_QUOTA):
        response["topics"] = [topic_entry(ctx, *e) if isinstance(e, tuple) else e for e in entries]
        return response
    return encoded(ctx, response, entries, topic_entry)


def _ops(ctx: RequestContext, name: str, ops: int) -> int:
    """-1: the operations the principal may do on the topic (KIP-430)."""
    if ops != -1:
        return ops
    return authorized(ctx, ResourceType.TOPIC, name, TOPIC_OPERATIONS)


def _may_create(ctx: RequestContext, name: str) -> bool:
    return not ctx.denies(CLUSTER_CREATE, CLUSTER_NAME) or not ctx.denies(TOPIC_CREATE, name)


def _by_name(ctx: RequestContext, name: str, allow_auto: bool, ops: int) -> Entry:
    broker = ctx.broker
    if ctx.denies(TOPIC_DESCRIBE, name or ""):
        return error_entry(name, ErrorCode.TOPIC_AUTHORIZATION_FAILED)
    ops = _ops(ctx, name, ops)
    if name == TRANSACTION_STATE:  # internal: never a data topic
        return transaction_state_entry(ctx, ops)
    if name == OFFSETS_TOPIC and allow_auto:  # Kafka creates it when asked for
        broker.offsets_topic.create()
    topic = broker.topics.get(name) or broker.topics.internal.get(name)
    if topic is None and broker.config.auto_create_topics and allow_auto:
        if not _may_create(ctx, name):
            return error_entry(name, ErrorCode.TOPIC_AUTHORIZATION_FAILED)
        try:
            validate_topic_name(name)
        except TopicError as exc:
            return error_entry(name, exc.code)
        topic = broker.topics.create(name, broker.config.default_partitions)
        ctx.log.info("topic_auto_created", topic=name, partitions=broker.config.default_partitions)
    if topic is not None:
        return topic, ops
    try:
        validate_topic_name(name)
        code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    except TopicError as exc:
        code = exc.code
    return error_entry(name, code)
