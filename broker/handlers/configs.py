"""AlterConfigs v0-v2 and IncrementalAlterConfigs v0-v1, for topics and groups (the GROUP
resource: ``kgroupd.broker.handlers.group_configs``).

AlterConfigs replaces a topic's dynamic configs with the ones given (those left out go back
to their defaults); IncrementalAlterConfigs applies SET, DELETE, APPEND and SUBTRACT (the last
two only to list configs: cleanup.policy) to them. The result is checked as CreateTopics
checks configs (``kgroupd.broker.log.topics.validate_configs``), then applied to the live topic
unless ``validate_only``: DescribeConfigs shows it as DYNAMIC_TOPIC_CONFIG, the next retention
pass and the next produce follow it, and ``--data-dir`` keeps it in topics.json.

Errors and their order are Kafka 4's (ConfigAdminManager.preprocess on the broker, then the
controller's ConfigurationControlManager): a repeated resource, repeated config keys, null
values and unknown operations are INVALID_REQUEST; a topic resource with no name is
INVALID_REQUEST, a bad value or unknown name INVALID_CONFIG, an unknown topic (checked after
the configs) UNKNOWN_TOPIC_OR_PARTITION. kgroupd has no dynamic broker configs: a BROKER
resource naming any is refused as Kafka refuses a config it cannot update dynamically.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Awaitable

from kgroupd.broker.handlers.group_configs import alter_group
from kgroupd.broker.handlers.registry import Fields, RequestContext, handler
from kgroupd.broker.log.partition import now_ms
from kgroupd.broker.log.topics import (
    TOPIC_CONFIGS,
    TopicError,
    validate_configs,
    validate_topic_name,
)
from kgroupd.broker.quotas import REQUEST as REQUEST_QUOTA
from kgroupd.broker.security.acls import CLUSTER_NAME
from kgroupd.broker.security.rules import CLUSTER_ALTER_CONFIGS, TOPIC_ALTER_CONFIGS
from kgroupd.protocol.errors import ErrorCode

TOPIC = 2
BROKER = 4
BROKER_LOGGER, CLIENT_METRICS, GROUP = 8, 16, 32
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3
OP_NAMES = {SET: "SET", DELETE: "DELETE", APPEND: "APPEND", SUBTRACT: "SUBTRACT"}
_INT = re.compile(r"[+-]?[0-9]{1,10}")


def _refuse(message: str, code: ErrorCode = ErrorCode.INVALID_REQUEST) -> TopicError:
    return TopicError(code, message)


@handler(33)
def handle_alter_configs(ctx: RequestContext, req: Fields) -> Fields | Awaitable[Fields]:
    return _respond(ctx, req, incremental=False)


@handler(44)
def handle_incremental_alter_configs(
    ctx: RequestContext, req: Fields
) -> Fields | Awaitable[Fields]:
    return _respond(ctx, req, incremental=True)


def _respond(ctx: RequestContext, req: Fields, incremental: bool) -> Fields | Awaitable[Fields]:
    """The answer; once the topics whose retention changed had it applied (as Kafka's
    dynamic config update: at once, not only at the next --log-retention-check-interval-ms
    pass), by a coroutine that gives the event loop back as the periodic pass does (a topic
    of 100,000 partitions) unless a request quota is on (answered at once then: the throttle
    time goes into the fields)."""
    retained: list[str] = []
    answer = {"responses": _answer(ctx, req, incremental, retained)}
    if not retained:
        return answer
    if ctx.broker.throttle.enabled(REQUEST_QUOTA):
        for name in retained:
            _retained(ctx, name, ctx.broker.topics.apply_retention(now_ms(), only=name))
        return answer
    return _answer_after_retention(ctx, answer, retained)


async def _answer_after_retention(ctx: RequestContext, answer: Fields, names: list[str]) -> Fields:
    for name in names:
        _retained(ctx, name, await ctx.broker.topics.retention_pass(now_ms(), only=name))
    await ctx.broker.topics.files_done()  # the segments are gone when answered
    return answer


def _retained(ctx: RequestContext, name: str, dropped: int) -> None:
    if dropped:
        ctx.log.info("retention", topic=name, batches_deleted=dropped)


def _answer(
    ctx: RequestContext, req: Fields, incremental: bool, retained: list[str]
) -> list[Fields]:
    resources = req["resources"]
    seen = Counter((r["resource_type"], r["resource_name"]) for r in resources)
    out = []
    with ctx.broker.topics.one_write():  # topics.json once for the request
        for res in resources:
            code, message = ErrorCode.NONE, None
            try:
                if seen[(res["resource_type"], res["resource_name"])] > 1:
                    raise _refuse("Each resource must appear at most once.")
                _alter(ctx, res, incremental, req["validate_only"], retained)
            except TopicError as exc:
                code, message = exc.code, exc.message
            out.append(
                {
                    "error_code": int(code),
                    "error_message": message,
                    "resource_type": res["resource_type"],
                    "resource_name": res["resource_name"],
                }
            )
    return out


def _alter(
    ctx: RequestContext, res: Fields, incremental: bool, validate_only: bool, retained: list[str]
) -> None:
    configs = res["configs"]
    names = [c["name"] for c in configs]
    if len(set(names)) != len(names):
        raise _refuse("Error due to duplicate config keys")
    nulls = [
        c["name"]
        for c in configs
        if c["value"] is None and not (incremental and c["config_operation"] == DELETE)
    ]
    if nulls:
        raise _refuse("Null value not supported for : " + ", ".join(nulls))
    for c in configs if incremental else ():
        if c["config_operation"] not in OP_NAMES:
            raise _refuse(f"Unknown operations type {c['config_operation']}")
    rtype = res["resource_type"]
    if rtype == TOPIC and ctx.denies(TOPIC_ALTER_CONFIGS, res["resource_name"]):
        raise _refuse("Authorization failed.", ErrorCode.TOPIC_AUTHORIZATION_FAILED)
    if rtype == BROKER and ctx.denies(CLUSTER_ALTER_CONFIGS, CLUSTER_NAME):
        raise _refuse("Authorization failed.", ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
    if rtype == TOPIC:
        if _alter_topic(ctx, res["resource_name"], configs, incremental, validate_only):
            retained.append(res["resource_name"])
    elif rtype == BROKER:
        changed = [c["name"] for c in configs if c.get("config_operation", SET) != DELETE]
        _check_broker(ctx, res["resource_name"], changed)
    elif rtype == GROUP:
        alter_group(ctx, res["resource_name"], configs, incremental, validate_only)
    elif rtype == CLIENT_METRICS or (incremental and rtype == BROKER_LOGGER):
        raise _refuse(f"Unsupported resource type {rtype}")  # Kafka's, not kgroupd's
    else:
        raise _refuse(f"Unknown resource type {rtype}")


def _check_broker(ctx: RequestContext, name: str, changed: list[str]) -> None:
    node_id = ctx.broker.node_id
    if name:
        if not _INT.fullmatch(name) or not -(2**31) <= int(name) < 2**31:
            raise _refuse(f"Node id must be an integer, but it is: {name}")
        if int(name) != node_id:
            raise _refuse(f"Unexpected broker id, expected {node_id}, but received {name}")
    if changed:
        raise _refuse(f"Cannot update these configs dynamically: Set({', '.join(changed)})")


_RETENTION = ("retention.ms", "retention.bytes")


def _alter_topic(
    ctx: RequestContext, name: str, configs: list[Fields], incremental: bool, validate_only: bool
) -> bool:
    """Whether the topic's retention changed (``_respond`` applies it)."""
    if not name:
        raise _refuse("Default topic resources are not allowed.")
    validate_topic_name(name)
    topics = ctx.broker.topics
    topic = topics.get(name)
    current = dict(topic.configs) if topic is not None else {}
    if incremental:
        wanted = _apply_ops(current, configs)
    else:  # the whole set: what is left out goes back to its default
        wanted = {c["name"]: c["value"] for c in configs}
    checked = validate_configs(wanted)
    if topic is None:
        raise _refuse(f"The topic '{name}' does not exist.", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
    if not validate_only and checked != topic.configs:
        before = [topic.config(k) for k in _RETENTION]
        topics.set_configs(name, checked)
        ctx.log.info("topic_configs_altered", topic=name, configs=checked)
        return [topic.config(k) for k in _RETENTION] != before
    return False


def _apply_ops(current: dict[str, str], configs: list[Fields]) -> dict[str, str | None]:
    new: dict[str, str | None] = dict(current)
    for c in configs:
        key, op, value = c["name"], c["config_operation"], c["value"]
        if op == SET:
            new[key] = value
        elif op == DELETE:
            new.pop(key, None)
        else:
            spec = TOPIC_CONFIGS.get(key)
            if spec is None or spec.kind != "list":
                raise _refuse(
                    f"Can't {OP_NAMES[op]} to key {key} because its type is not LIST.",
                    ErrorCode.INVALID_CONFIG,
                )
            parts = [p for p in (new.get(key) or spec.default).split(",") if p]
            for item in value.split(","):
                if op == APPEND and item not in parts:
                    parts.append(item)
                elif op == SUBTRACT and item in parts:
                    parts.remove(item)
            new[key] = ",".join(parts)
    return new
