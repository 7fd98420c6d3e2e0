"""Topic administration: CreateTopics v0-v7, DeleteTopics v0-v6, CreatePartitions v0-v3,
DescribeConfigs v0-v4.

CreateTopics v1 adds validate_only and error messages, v2 throttle time; v4 lets -1 mean
the broker's default partitions and replication; v5 (flexible) answers the created topic's
partitions, replication and configs; v7 its topic id. DeleteTopics v6 deletes by name or by
topic id (an unknown id: UNKNOWN_TOPIC_ID). DescribeConfigs v1 adds synonyms and the config
source, v3 the config type and documentation, v4 is flexible.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable

from kgroupd.broker.handlers.group_configs import describe_group
from kgroupd.broker.handlers.metadata import TRANSACTION_STATE
from kgroupd.broker.handlers.registry import Fields, RequestContext, handler
from kgroupd.broker.handlers.throttling import PartitionMutations
from kgroupd.broker.log.consumer_offsets import OFFSETS_TOPIC
from kgroupd.broker.log.topics import TOPIC_CONFIGS, Topic, TopicError
from kgroupd.broker.quotas import REQUEST as REQUEST_QUOTA
from kgroupd.broker.security.acls import CLUSTER_NAME
from kgroupd.broker.security.rules import (
    CLUSTER_CREATE,
    CLUSTER_DESCRIBE_CONFIGS,
    TOPIC_ALTER,
    TOPIC_CREATE,
    TOPIC_DELETE,
    TOPIC_DESCRIBE_CONFIGS,
)
from kgroupd.protocol.codec import ZERO_UUID
from kgroupd.protocol.errors import ErrorCode

# Kafka 4's controller refuses a request creating more partitions than this at once
# (KAFKA-17870 for CreateTopics, KAFKA-19673 for CreatePartitions).
MAX_PARTITIONS_PER_REQUEST = 10_000


def partition_limit_error(ctx: RequestContext, requested: int) -> TopicError | None:
    """POLICY_VIOLATION for a request adding more than 10,000 partitions, or more than
    --max-partitions would allow; None if the request may go on."""
    if requested > MAX_PARTITIONS_PER_REQUEST:
        return TopicError(
            ErrorCode.POLICY_VIOLATION, "Excessively large number of partitions per request."
        )
    have = ctx.broker.topics.partition_count()
    limit = ctx.broker.config.max_partitions
    if have + requested > limit:
        return TopicError(
            ErrorCode.POLICY_VIOLATION,
            f"The request would take the broker to {have + requested} partitions, over its "
            f"limit of {limit} (--max-partitions).",
        )
    return None


# Kafka's internal topics (Topic.INTERNAL_TOPICS) and its KRaft metadata log. kgroupd serves
# the first two from its own state (the group and transaction coordinators): never as a topic a
# client creates, which would sit beside them under the same name.
INTERNAL_TOPICS = frozenset(
    {OFFSETS_TOPIC, TRANSACTION_STATE, "__share_group_state", "__cluster_metadata"}
)


def internal_topic_error(ctx: RequestContext, name: str) -> TopicError | None:
    """CreateTopics of an internal topic's name: TOPIC_ALREADY_EXISTS once the broker has it
    (as Kafka answers), else INVALID_REQUEST (Kafka's answer for ``__cluster_metadata``; Kafka
    would create the others as its internal topics, which kgroupd makes only itself)."""
    if name not in INTERNAL_TOPICS:
        return None
    broker = ctx.broker
    if name in broker.topics.internal or (name == TRANSACTION_STATE and broker.transactions.used):
        return TopicError(ErrorCode.TOPIC_ALREADY_EXISTS, f"Topic '{name}' already exists.")
    message = f"Creation of internal topic {name} is prohibited."
    return TopicError(ErrorCode.INVALID_REQUEST, message)


@handler(19)
def handle_create_topics(ctx: RequestContext, req: Fields) -> Fields | Awaitable[Fields]:
    broker = ctx.broker
    validate_only = req["validate_only"]
    items = req["topics"]
    names = [t["name"] for t in items]
    results: list[Fields] = []
    requested = sum(
        len(t["assignments"])
        if t["assignments"]
        else (t["num_partitions"] if t["num_partitions"] > 0 else broker.config.default_partitions)
        for t in items
    )
    refused = partition_limit_error(ctx, requested)
    if refused is not None:  # the whole request, before anything is allocated, as Kafka
        return {
            "topics": [
                {
                    "name": t["name"],
                    "error_code": int(refused.code),
                    "error_message": refused.message,
                    "num_partitions": -1,
                    "replication_factor": -1,
                    "configs": None,
                }
                for t in items
            ]
        }
    mutations = PartitionMutations(ctx, strict_since=6)
    # (a request quota writes its throttle time into the fields: answered at once then)
    if validate_only or requested <= CREATE_SLICE or broker.throttle.enabled(REQUEST_QUOTA):
        with broker.topics.one_write():  # topics.json once for the request
            for item in items:
                results.append(_create_one(ctx, item, names, validate_only, mutations))
        return mutations.answer({"topics": results})
    return _create_in_slices(ctx, items, names, mutations)


# A CreateTopics adding more partitions than this makes them this many at a time, giving the
# event loop back between (a coroutine answers it).
CREATE_SLICE = 1_000


async def _create_in_slices(
    ctx: RequestContext, items: list[Fields], names: list[str], mutations: PartitionMutations
) -> Fields:
    results = []
    for item in items:
        slices = _Sliced()
        found = _create_one(ctx, item, names, False, mutations, slices)
        if slices.pending is not None:
            name, partitions, checked = slices.pending
            try:
                topic = await ctx.broker.topics.create_in_slices(
                    name, partitions, checked, CREATE_SLICE
                )
            except TopicError as exc:
                found = _refused(name, exc)
            else:
                ctx.log.info("topic_created", topic=name, partitions=partitions)
                defaults = ctx.broker.topics.defaults
                found = _created(name, topic.topic_id, partitions, checked, defaults)
        results.append(found)
    return mutations.answer({"topics": results})


class _Sliced:
    """Where ``_create_one`` leaves a topic to create in slices (name, partitions, configs)."""

    pending: tuple[str, int, dict[str, str]] | None = None


def _refused(name: str, exc: TopicError) -> Fields:
    return {
        "name": name,
        "error_code": int(exc.code),
        "error_message": exc.message,
        "num_partitions": -1,
        "replication_factor": -1,
        "configs": None,
    }


def _create_one(
    ctx: RequestContext,
    item: Fields,
    names: list[str],
    validate_only: bool,
    mutations: PartitionMutations,
    slices: _Sliced | None = None,
) -> Fields:
    """One topic of a CreateTopics: checked, then created (or, given ``slices``, left there
    to create in slices); its answer."""
    broker = ctx.broker
    name = item["name"]
    partitions = item["num_partitions"]
    replication = item["replication_factor"]
    assignment = item["assignments"]
    configs = {c["name"]: c["value"] for c in item["configs"]}
    try:
        if ctx.denies(CLUSTER_CREATE, CLUSTER_NAME) and ctx.denies(TOPIC_CREATE, name):
            raise TopicError(ErrorCode.TOPIC_AUTHORIZATION_FAILED, "Authorization failed.")
        if names.count(name) > 1:
            raise TopicError(
                ErrorCode.INVALID_REQUEST,
                f"Create topics request from client `{ctx.client_id}` contains multiple "
                f"entries for the following topics: {name}",
            )
        internal = internal_topic_error(ctx, name)
        if internal is not None:
            raise internal
        if assignment:
            if partitions != -1 or replication != -1:
                raise TopicError(
                    ErrorCode.INVALID_REQUEST,
                    "Both numPartitions or replicationFactor and replicasAssignments "
                    "were set. Both cannot be used at the same time.",
                )
            for a in assignment:
                replicas = a["broker_ids"]
                if list(replicas) != [broker.node_id]:
                    raise TopicError(
                        ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                        f"Replica assignment {list(replicas)} names brokers other than "
                        f"the only one, {broker.node_id}",
                    )
            partitions = len(assignment)
            replication = 1
        checked = broker.topics.check_create(name, partitions, replication, configs)
        if partitions == -1:
            partitions = broker.config.default_partitions
        topic_id = ZERO_UUID
        if not validate_only:
            mutations.take(partitions)
            if slices is not None:
                slices.pending = (name, partitions, checked)
                return {}
            topic_id = broker.topics.create(name, partitions, checked).topic_id
            ctx.log.info("topic_created", topic=name, partitions=partitions)
        return _created(name, topic_id, partitions, checked, broker.topics.defaults)
    except TopicError as exc:
        return _refused(name, exc)


def config_source(key: str, configs: dict[str, str], defaults: dict[str, str]) -> int:
    """A topic config's DescribeConfigs source: the topic's own (DYNAMIC_TOPIC_CONFIG), a
    broker flag's (STATIC_BROKER_CONFIG) or Kafka's default (DEFAULT_CONFIG)."""
    if key in configs:
        return _SOURCE_DYNAMIC_TOPIC
    return _SOURCE_STATIC_BROKER if key in defaults else _SOURCE_DEFAULT


def _created(
    name: str,
    topic_id: uuid.UUID,
    partitions: int,
    configs: dict[str, str],
    defaults: dict[str, str],
) -> Fields:
    return {
        "name": name,
        "topic_id": topic_id,
        "error_code": 0,
        "error_message": None,
        "num_partitions": partitions,
        "replication_factor": 1,
        "configs": [
            {
                "name": k,
                "value": configs.get(k, defaults.get(k, d.default)),
                "read_only": False,
                "config_source": config_source(k, configs, defaults),
                "is_sensitive": False,
            }
            for k, d in TOPIC_CONFIGS.items()
        ],
    }


@handler(20)
def handle_delete_topics(ctx: RequestContext, req: Fields) -> Fields:
    if ctx.api_version >= 6:
        wanted = [(t["name"], t["topic_id"]) for t in req["topics"]]
    else:
        wanted = [(name, ZERO_UUID) for name in req["topic_names"]]
    mutations = PartitionMutations(ctx, strict_since=5)
    with ctx.broker.topics.one_write():  # topics.json once for the request
        responses = [_delete(ctx, name, topic_id, mutations) for name, topic_id in wanted]
    return mutations.answer({"responses": responses})


def _delete(
    ctx: RequestContext, name: str | None, topic_id: uuid.UUID, mutations: PartitionMutations
) -> Fields:
    topics = ctx.broker.topics
    if name is None:  # v6: by id
        found = topics.by_id(topic_id)
        if found is None:
            return {
                "name": None,
                "topic_id": topic_id,
                "error_code": int(ErrorCode.UNKNOWN_TOPIC_ID),
                "error_message": f"Topic id {topic_id} does not exist",
            }
        name = found.name
    if ctx.denies(TOPIC_DELETE, name):
        return {
            "name": name,
            "topic_id": topic_id,
            "error_code": int(ErrorCode.TOPIC_AUTHORIZATION_FAILED),
            "error_message": "Authorization failed.",
        }
    if name in topics.internal:
        return {
            "name": name,
            "topic_id": topic_id,
            "error_code": int(ErrorCode.INVALID_TOPIC_EXCEPTION),
            "error_message": f"Topic {name} is an internal topic and cannot be deleted.",
        }
    found = topics.get(name)
    try:
        if found is not None:  # an unknown topic is answered as such first
            mutations.take(len(found.partitions))
    except TopicError as exc:
        code, message = int(exc.code), exc.message
        return {"name": name, "topic_id": topic_id, "error_code": code, "error_message": message}
    topic = topics.delete(name)
    if topic is None:
        return {
            "name": name,
            "topic_id": topic_id,
            "error_code": int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
            "error_message": "This server does not host this topic-partition.",
        }
    ctx.broker.producers.forget_topic(name)
    ctx.log.info("topic_deleted", topic=name)
    return {"name": name, "topic_id": topic.topic_id, "error_code": 0}


@handler(37)
def handle_create_partitions(ctx: RequestContext, req: Fields) -> Fields | Awaitable[Fields]:
    topics = ctx.broker.topics
    validate_only = req["validate_only"]
    results = []
    requested = 0
    for item in req["topics"]:
        topic = topics.get(item["name"])
        if topic is not None and item["count"] > len(topic.partitions):
            requested += item["count"] - len(topic.partitions)
    refused = partition_limit_error(ctx, requested)
    if refused is not None:  # the whole request, before anything is allocated, as Kafka
        code = int(refused.code)
        return {
            "results": [
                {
                    "name": t["name"],
                    "error_code": int(refused.code),
                    "error_message": refused.message,
                }
                for t in req["topics"]
            ]
        }
    mutations = PartitionMutations(ctx, strict_since=3)
    sliced = (
        not validate_only
        and requested > CREATE_SLICE
        and not ctx.broker.throttle.enabled(REQUEST_QUOTA)
    )
    if sliced:
        return _add_partitions_in_slices(ctx, req["topics"], mutations)
    with topics.one_write():  # topics.json once for the request
        for item in req["topics"]:
            name, count = item["name"], item["count"]
            code, message = _partitions_refused(ctx, item)
            if code == ErrorCode.NONE and not validate_only:
                try:
                    mutations.take(count - len(topics.topics[name].partitions))
                    topics.add_partitions(name, count)
                    ctx.log.info("partitions_created", topic=name, partitions=count)
                except TopicError as exc:
                    code, message = exc.code, exc.message
            results.append({"name": name, "error_code": int(code), "error_message": message})
    return mutations.answer({"results": results})


async def _add_partitions_in_slices(
    ctx: RequestContext, items: list[Fields], mutations: PartitionMutations
) -> Fields:
    topics = ctx.broker.topics
    results = []
    for item in items:
        name, count = item["name"], item["count"]
        code, message = _partitions_refused(ctx, item)
        if code == ErrorCode.NONE:
            try:
                mutations.take(count - len(topics.topics[name].partitions))
                await topics.add_partitions_in_slices(name, count, CREATE_SLICE)
                ctx.log.info("partitions_created", topic=name, partitions=count)
            except TopicError as exc:
                code, message = exc.code, exc.message
        results.append({"name": name, "error_code": int(code), "error_message": message})
    return mutations.answer({"results": results})


def _partitions_refused(ctx: RequestContext, item: Fields) -> tuple[ErrorCode, str | None]:
    """Why one topic of a CreatePartitions may not grow as asked, or (NONE, None)."""
    topics = ctx.broker.topics
    name = item["name"]
    count = item["count"]
    raw = item["assignments"]
    assignment = None if raw is None else [a["broker_ids"] for a in raw]
    topic = topics.get(name)
    code: ErrorCode = ErrorCode.NONE
    message: str | None = None
    if ctx.denies(TOPIC_ALTER, name):
        code, message = ErrorCode.TOPIC_AUTHORIZATION_FAILED, "Authorization failed."
    elif name in topics.internal:
        code = ErrorCode.INVALID_TOPIC_EXCEPTION
        message = f"Cannot add partitions to internal topic {name}."
    elif topic is None:
        code, message = (
            ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
            f"The topic '{name}' does not exist.",
        )
    elif name in topics.creating:  # partitions being added a slice at a time: retriable
        code = ErrorCode.REASSIGNMENT_IN_PROGRESS
        message = f"Partitions are being added to topic {name}."
    elif count < len(topic.partitions):
        code = ErrorCode.INVALID_PARTITIONS
        message = (
            f"Topic currently has {len(topic.partitions)} partitions, which is higher "
            f"than the requested {count}."
        )
    elif count == len(topic.partitions):
        code, message = ErrorCode.INVALID_PARTITIONS, f"Topic already has {count} partitions."
    elif assignment is not None and len(assignment) != count - len(topic.partitions):
        code = ErrorCode.INVALID_REPLICA_ASSIGNMENT
        message = (
            f"Increasing the number of partitions by {count - len(topic.partitions)} "
            f"but {len(assignment)} assignments provided."
        )
    elif assignment is not None and any(list(a) != [ctx.broker.node_id] for a in assignment):
        code = ErrorCode.INVALID_REPLICA_ASSIGNMENT
        message = f"Replica assignments may name only broker {ctx.broker.node_id}."
    return code, message


# DescribeConfigs ----------------------------------------------------------------------------

_TOPIC = 2
_BROKER = 4
_GROUP = 32
_SOURCE_DYNAMIC_TOPIC = 1
_SOURCE_STATIC_BROKER = 4
_SOURCE_DEFAULT = 5
# Kafka's DescribeConfigsResponse.ConfigType (4 is SHORT)
_TYPE_STRING, _TYPE_INT, _TYPE_LONG, _TYPE_BOOLEAN, _TYPE_LIST, _TYPE_DOUBLE = 2, 3, 5, 1, 7, 6


_TYPES = {
    "long": _TYPE_LONG,
    "int": _TYPE_INT,
    "double": _TYPE_DOUBLE,
    "bool": _TYPE_BOOLEAN,
    "list": _TYPE_LIST,
    "replicas": _TYPE_LIST,
}
# __transaction_state's configs, as Kafka's transaction coordinator creates it (its
# min.insync.replicas that of a single broker, as transaction.state.log.min.isr=1 sets)
_TRANSACTION_STATE_CONFIGS = {
    "cleanup.policy": "compact",
    "compression.type": "uncompressed",
    "min.insync.replicas": "1",
    "segment.bytes": "104857600",
    "unclean.leader.election.enable": "false",
}


def _described_topic(ctx: RequestContext, name: str) -> Topic | None:
    """A topic, or an internal one (``__consumer_offsets``, ``__transaction_state``)."""
    topics = ctx.broker.topics
    found = topics.get(name) or topics.internal.get(name)
    if found is None and name == TRANSACTION_STATE and ctx.broker.transactions.used:
        found = Topic(name, [], dict(_TRANSACTION_STATE_CONFIGS), defaults=topics.defaults)
    return found


def _broker_configs(ctx: RequestContext) -> dict[str, tuple[str, int]]:
    c = ctx.broker.config
    out = {
        "broker.id": (str(c.node_id), _TYPE_INT),
        "node.id": (str(c.node_id), _TYPE_INT),
        "num.partitions": (str(c.default_partitions), _TYPE_INT),
        "default.replication.factor": ("1", _TYPE_INT),
        "auto.create.topics.enable": (str(c.auto_create_topics).lower(), _TYPE_BOOLEAN),
        "message.max.bytes": (str(c.message_max_bytes), _TYPE_INT),
        "socket.request.max.bytes": (str(c.max_request_bytes), _TYPE_INT),
        "offsets.topic.num.partitions": (str(c.offsets_partitions), _TYPE_INT),
        "offsets.retention.minutes": (str(c.offsets_retention_minutes), _TYPE_INT),
        "offset.metadata.max.bytes": (str(c.offset_metadata_max_bytes), _TYPE_INT),
        "group.initial.rebalance.delay.ms": (str(c.initial_rebalance_delay_ms), _TYPE_INT),
        "group.min.session.timeout.ms": (str(c.group_min_session_timeout_ms), _TYPE_INT),
        "group.max.session.timeout.ms": (str(c.group_max_session_timeout_ms), _TYPE_INT),
        "group.max.size": (str(c.group_max_size or 2147483647), _TYPE_INT),
        "log.retention.ms": ("604800000", _TYPE_LONG),
        "log.retention.bytes": ("-1", _TYPE_LONG),
        "log.retention.check.interval.ms": (str(c.log_retention_check_interval_ms), _TYPE_LONG),
        "log.index.interval.bytes": (
            TOPIC_CONFIGS["index.interval.bytes"].default
            if c.log_index_interval_bytes is None
            else str(c.log_index_interval_bytes),
            _TYPE_INT,
        ),
        "log.roll.hours": (str(c.log_roll_hours), _TYPE_INT),
        "log.roll.jitter.hours": (str(c.log_roll_jitter_hours), _TYPE_INT),
    }
    if c.log_roll_ms is not None:
        out["log.roll.ms"] = (str(c.log_roll_ms), _TYPE_LONG)
    if c.log_roll_jitter_ms is not None:
        out["log.roll.jitter.ms"] = (str(c.log_roll_jitter_ms), _TYPE_LONG)
    return out


def _entry(name: str, value: str, source: int, typ: int) -> Fields:
    return {
        "name": name,
        "value": value,
        "read_only": source != _SOURCE_DYNAMIC_TOPIC and source != _SOURCE_DEFAULT,
        "is_default": source == _SOURCE_DEFAULT,
        "config_source": source,
        "is_sensitive": False,
        "synonyms": [],
        "config_type": typ,
        "documentation": None,
    }


@handler(32)
def handle_describe_configs(ctx: RequestContext, req: Fields) -> Fields:
    out = []
    for res in req["resources"]:
        rtype = res["resource_type"]
        rname = res["resource_name"]
        wanted = res["configuration_keys"]
        entries: list[Fields] = []
        code, message = ErrorCode.NONE, None
        if rtype == _TOPIC and ctx.denies(TOPIC_DESCRIBE_CONFIGS, rname):
            code = ErrorCode.TOPIC_AUTHORIZATION_FAILED
        elif rtype == _BROKER and ctx.denies(CLUSTER_DESCRIBE_CONFIGS, CLUSTER_NAME):
            code = ErrorCode.CLUSTER_AUTHORIZATION_FAILED
        elif rtype == _TOPIC:
            topic = _described_topic(ctx, rname)
            if topic is None:
                code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                message = f"Topic {rname} does not exist"
            else:
                for key, d in TOPIC_CONFIGS.items():
                    source = config_source(key, topic.configs, topic.defaults)
                    typ = _TYPES.get(d.kind, _TYPE_STRING)
                    entries.append(_entry(key, topic.config(key), source, typ))
        elif rtype == _BROKER:
            if rname not in ("", str(ctx.broker.node_id)):
                code = ErrorCode.INVALID_REQUEST
                message = (
                    f"Unexpected broker id, expected {ctx.broker.node_id} but received {rname}"
                )
            else:
                bc = ctx.broker.config
                unset = (
                    set()
                    if bc.log_index_interval_bytes is not None
                    else {"log.index.interval.bytes"}
                )
                if bc.log_roll_hours == 168:
                    unset.add("log.roll.hours")
                if bc.log_roll_jitter_hours == 0:
                    unset.add("log.roll.jitter.hours")
                for key, (value, typ) in _broker_configs(ctx).items():
                    source = _SOURCE_DEFAULT if key in unset else _SOURCE_STATIC_BROKER
                    entries.append(_entry(key, value, source, typ))
        elif rtype == _GROUP:
            code, message, entries = describe_group(ctx, rname)
        else:
            code = ErrorCode.INVALID_REQUEST
            message = f"Unsupported resource type {rtype}"
        if wanted is not None:
            entries = [e for e in entries if e["name"] in wanted]
        out.append(
            {
                "error_code": int(code),
                "error_message": message,
                "resource_type": rtype,
                "resource_name": rname,
                "configs": entries,
            }
        )
    return {"results": out}
