"""The GROUP config resource (type 32) of DescribeConfigs, AlterConfigs and
IncrementalAlterConfigs: Kafka 4.3's per-group configs (``kgroupd.broker.share.group_config``).

DescribeConfigs lists every group config, the group's own value (source GROUP_CONFIG, 8) or the
broker default (DEFAULT_CONFIG, 5), none read-only; a group need not exist to have configs. An
empty group name is INVALID_REQUEST ("Group name must not be empty" to describe, "Default group
resources are not allowed." to alter). A refused config is INVALID_CONFIG with Kafka's message.
"""

from __future__ import annotations

from kgroupd.broker.handlers.registry import Fields, RequestContext
from kgroupd.broker.log.topics import TopicError
from kgroupd.broker.security.rules import GROUP_ALTER_CONFIGS, GROUP_DESCRIBE_CONFIGS
from kgroupd.broker.share.group_config import (
    CONFIG_DEFS,
    CONFIG_TYPE_IDS,
    GroupConfigError,
    validate,
)
from kgroupd.protocol.errors import ErrorCode

SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3
_OPS = {APPEND: "APPEND", SUBTRACT: "SUBTRACT"}
_SOURCE_DEFAULT, _SOURCE_GROUP = 5, 8


def describe_group(ctx: RequestContext, name: str) -> tuple[ErrorCode, str | None, list[Fields]]:
    """(error, message, config entries) of one GROUP resource."""
    if ctx.denies(GROUP_DESCRIBE_CONFIGS, name):
        return ErrorCode.GROUP_AUTHORIZATION_FAILED, None, []
    if not name:
        return ErrorCode.INVALID_REQUEST, "Group name must not be empty", []
    entries = []
    for key, value, kind, own in ctx.broker.group_configs.describe(name):
        source = _SOURCE_GROUP if own else _SOURCE_DEFAULT
        entries.append(
            {
                "name": key,
                "value": value,
                "read_only": False,
                "is_default": not own,
                "config_source": source,
                "is_sensitive": False,
                "synonyms": [],
                "config_type": CONFIG_TYPE_IDS[kind],
                "documentation": None,
            }
        )
    return ErrorCode.NONE, None, entries


def alter_group(
    ctx: RequestContext, name: str, configs: list[Fields], incremental: bool, validate_only: bool
) -> None:
    """Apply one GROUP resource's changes; raises ``TopicError`` (code, message) to refuse."""
    if ctx.denies(GROUP_ALTER_CONFIGS, name):
        raise TopicError(ErrorCode.GROUP_AUTHORIZATION_FAILED, "Authorization failed.")
    if not name:
        raise TopicError(ErrorCode.INVALID_REQUEST, "Default group resources are not allowed.")
    store = ctx.broker.group_configs
    if incremental:
        props = store.overrides(name)
        for c in configs:
            key, op = c["name"], c["config_operation"]
            if op == SET:
                props[key] = c["value"]
            elif op == DELETE:
                props.pop(key, None)
            else:
                raise TopicError(
                    ErrorCode.INVALID_CONFIG,
                    f"Can't {_OPS[op]} to key {key} because its type is not LIST.",
                )
    else:  # the whole set: what is left out goes back to its default
        props = {c["name"]: c["value"] for c in configs}
    try:
        validate(props, store.settings)
    except GroupConfigError as exc:
        raise TopicError(ErrorCode.INVALID_CONFIG, str(exc)) from None
    if not validate_only and props != store.overrides(name):
        store.set_overrides(name, props)
        ctx.log.info("group_configs_altered", group_id=name, configs=props)


__all__ = ["CONFIG_DEFS", "alter_group", "describe_group"]
