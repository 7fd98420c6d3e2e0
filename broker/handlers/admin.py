"""Topic administration: CreateTopics v0-v4, DeleteTopics v0-v3, CreatePartitions v0-v1,
DescribeConfigs v0-v3.

CreateTopics v1 adds validate_only and error messages, v2 throttle time; v4 lets -1 mean
the broker's default partitions and replication. DescribeConfigs v1 adds synonyms and the
config source, v3 the config type and documentation.
"""

from __future__ import annotations

from typing import Any

from broker.handlers.registry import Fields, RequestContext, handler
from broker.log.topics import TOPIC_CONFIGS, TopicError
from protocol.errors import ErrorCode


def _name(item: Fields) -> Any:
    return item.get("topic", item.get("name"))


@handler(19, 0, 4)
def handle_create_topics(ctx: RequestContext, req: Fields) -> Fields:
    broker = ctx.broker
    validate_only = bool(req.get("validate_only", False))
    items = req.get("create_topic_requests") or req.get("topics") or []
    names = [_name(t) for t in items]
    results: list[Fields] = []
    for item in items:
        name = _name(item)
        partitions = item["num_partitions"]
        replication = item["replication_factor"]
        assignment = item.get("replica_assignment") or item.get("assignments") or []
        raw_configs = item.get("configs") or []
        configs = {
            c.get("config_key", c.get("name")): c.get("config_value", c.get("value"))
            for c in raw_configs
        }
        try:
            if names.count(name) > 1:
                raise TopicError(
                    ErrorCode.INVALID_REQUEST,
                    f"Create topics request from client `{ctx.client_id}` contains multiple "
                    f"entries for the following topics: {name}",
                )
            if assignment:
                if partitions != -1 or replication != -1:
                    raise TopicError(
                        ErrorCode.INVALID_REQUEST,
                        "Both numPartitions or replicationFactor and replicasAssignments "
                        "were set. Both cannot be used at the same time.",
                    )
                for a in assignment:
                    replicas = a.get("replicas", a.get("broker_ids")) or []
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
            if not validate_only:
                broker.topics.create(name, partitions, checked)
                ctx.log.info("topic_created", topic=name, partitions=partitions)
            results.append(_created(name, partitions, checked))
        except TopicError as exc:
            results.append(
                {
                    "topic": name,
                    "name": name,
                    "error_code": int(exc.code),
                    "error_message": exc.message,
                    "num_partitions": -1,
                    "replication_factor": -1,
                    "configs": None,
                }
            )
    return {"topic_errors": results, "topics": results}


def _created(name: str, partitions: int, configs: dict[str, str]) -> Fields:
    return {
        "topic": name,
        "name": name,
        "error_code": 0,
        "error_message": None,
        "num_partitions": partitions,
        "replication_factor": 1,
        "configs": [
            {
                "name": k,
                "value": configs.get(k, d.default),
                "read_only": False,
                "config_source": 1 if k in configs else 5,
                "is_sensitive": False,
            }
            for k, d in TOPIC_CONFIGS.items()
        ],
    }


@handler(20, 0, 3)
def handle_delete_topics(ctx: RequestContext, req: Fields) -> Fields:
    results = []
    for name in req.get("topics") or req.get("topic_names") or []:
        if ctx.broker.topics.delete(name) is None:
            code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        else:
            code = ErrorCode.NONE
            ctx.broker.producers.forget_topic(name)
            ctx.log.info("topic_deleted", topic=name)
        results.append({"topic": name, "name": name, "error_code": int(code)})
    return {"topic_error_codes": results, "responses": results}


@handler(37, 0, 1)
def handle_create_partitions(ctx: RequestContext, req: Fields) -> Fields:
    topics = ctx.broker.topics
    validate_only = bool(req.get("validate_only", False))
    results = []
    for item in req.get("topic_partitions") or req.get("topics") or []:
        name = _name(item)
        spec = item.get("new_partitions") or item
        count = spec["count"]
        assignment = spec.get("assignment") or spec.get("assignments")
        topic = topics.get(name)
        code, message = ErrorCode.NONE, None
        if topic is None:
            code, message = (
                ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                f"The topic '{name}' does not exist.",
            )
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
        elif not validate_only:
            topics.add_partitions(name, count)
            ctx.log.info("partitions_created", topic=name, partitions=count)
        results.append(
            {"topic": name, "name": name, "error_code": int(code), "error_message": message}
        )
    return {"topic_errors": results, "results": results}


# DescribeConfigs ----------------------------------------------------------------------------

_TOPIC = 2
_BROKER = 4
_SOURCE_DYNAMIC_TOPIC = 1
_SOURCE_STATIC_BROKER = 4
_SOURCE_DEFAULT = 5
_TYPE_STRING, _TYPE_INT, _TYPE_LONG, _TYPE_BOOLEAN, _TYPE_LIST = 2, 3, 4, 1, 7


def _broker_configs(ctx: RequestContext) -> dict[str, tuple[str, int]]:
    c = ctx.broker.config
    return {
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
    }


def _entry(name: str, value: str, source: int, typ: int) -> Fields:
    return {
        "config_names": name,
        "config_name": name,
        "name": name,
        "config_value": value,
        "value": value,
        "read_only": source != _SOURCE_DYNAMIC_TOPIC and source != _SOURCE_DEFAULT,
        "is_default": source == _SOURCE_DEFAULT,
        "config_source": source,
        "is_sensitive": False,
        "config_synonyms": [],
        "synonyms": [],
        "config_type": typ,
        "documentation": None,
        "config_documentation": None,
    }


@handler(32, 0, 3)
def handle_describe_configs(ctx: RequestContext, req: Fields) -> Fields:
    out = []
    for res in req.get("resources") or []:
        rtype = res["resource_type"]
        rname = res["resource_name"]
        wanted = res.get("config_names")
        entries: list[Fields] = []
        code, message = ErrorCode.NONE, None
        if rtype == _TOPIC:
            topic = ctx.broker.topics.get(rname)
            if topic is None:
                code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                message = f"Topic {rname} does not exist"
            else:
                for key, d in TOPIC_CONFIGS.items():
                    source = _SOURCE_DYNAMIC_TOPIC if key in topic.configs else _SOURCE_DEFAULT
                    typ = {"long": _TYPE_LONG, "int": _TYPE_INT}.get(
                        d.kind, _TYPE_LIST if key == "cleanup.policy" else _TYPE_STRING
                    )
                    entries.append(_entry(key, topic.config(key), source, typ))
        elif rtype == _BROKER:
            if rname not in ("", str(ctx.broker.node_id)):
                code = ErrorCode.INVALID_REQUEST
                message = (
                    f"Unexpected broker id, expected {ctx.broker.node_id} but received {rname}"
                )
            else:
                for key, (value, typ) in _broker_configs(ctx).items():
                    entries.append(_entry(key, value, _SOURCE_STATIC_BROKER, typ))
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
                "config_entries": entries,
                "configs": entries,
            }
        )
    return {"resources": out, "results": out}
