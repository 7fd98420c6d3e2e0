"""``kgroupd topics ...``: kafka-topics' list, describe, create and delete."""

from __future__ import annotations

import argparse
from typing import Any

from .client import AdminClient, KafkaError, check
from .output import emit_json
from .properties import UsageError

CREATE_TOPICS, DELETE_TOPICS, DESCRIBE_CONFIGS = 19, 20, 32
_DYNAMIC_TOPIC_CONFIG = 1
_TOPIC_RESOURCE = 2


async def cmd_list(admin: AdminClient, args: argparse.Namespace) -> int:
    meta = await admin.metadata(None)
    names = sorted(
        t["name"]
        for t in meta["topics"]
        if t["error_code"] == 0 and not (args.exclude_internal and t["is_internal"])
    )
    if args.output == "json":
        emit_json(names)
    else:
        for name in names:
            print(name)
    return 0


async def _configs(admin: AdminClient, topic: str) -> dict[str, str]:
    """The topic's own configs (those set on it, not the defaults)."""
    conn = await admin.any()
    if not conn.supports(DESCRIBE_CONFIGS):
        return {}
    body = {
        "resources": [
            {"resource_type": _TOPIC_RESOURCE, "resource_name": topic, "configuration_keys": None}
        ],
        "include_synonyms": False,
        "include_documentation": False,
    }
    version, resp = await conn.request(DESCRIBE_CONFIGS, body)
    (result,) = resp["results"]
    check(result["error_code"], result.get("error_message"))
    out = {}
    for c in result["configs"]:
        own = c["config_source"] == _DYNAMIC_TOPIC_CONFIG if version >= 1 else not c["is_default"]
        if own and not c["is_sensitive"]:
            out[c["name"]] = c["value"]
    return out


async def cmd_describe(admin: AdminClient, args: argparse.Namespace) -> int:
    meta = await admin.metadata(None if args.topic is None else [args.topic])
    described: list[dict[str, Any]] = []
    for t in sorted(meta["topics"], key=lambda t: t["name"] or ""):
        check(t["error_code"], f"topic {t['name']}")
        parts = sorted(t["partitions"], key=lambda p: p["partition_index"])
        described.append(
            {
                "topic": t["name"],
                "topic_id": str(t["topic_id"]),
                "partition_count": len(parts),
                "replication_factor": len(parts[0]["replica_nodes"]) if parts else 0,
                "configs": await _configs(admin, t["name"]),
                "partitions": [
                    {
                        "partition": p["partition_index"],
                        "leader": p["leader_id"],
                        "replicas": p["replica_nodes"],
                        "isr": p["isr_nodes"],
                    }
                    for p in parts
                ],
            }
        )
    if args.output == "json":
        emit_json(described if args.topic is None else described[0])
        return 0
    for d in described:
        configs = ",".join(f"{k}={v}" for k, v in sorted(d["configs"].items()))
        print(
            f"Topic: {d['topic']}\tTopicId: {_topic_id(d['topic_id'])}\t"
            f"PartitionCount: {d['partition_count']}\t"
            f"ReplicationFactor: {d['replication_factor']}\tConfigs: {configs}"
        )
        for p in d["partitions"]:
            print(
                f"\tTopic: {d['topic']}\tPartition: {p['partition']}\tLeader: {p['leader']}\t"
                f"Replicas: {_ids(p['replicas'])}\tIsr: {_ids(p['isr'])}"
            )
    return 0


def _ids(nodes: list[int]) -> str:
    return ",".join(str(n) for n in nodes)


def _topic_id(uuid_text: str) -> str:
    """Kafka prints topic ids in URL-safe base64 without padding."""
    import base64
    import uuid

    raw = uuid.UUID(uuid_text).bytes
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _configs_arg(pairs: list[str]) -> dict[str, str]:
    out = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name:
            raise UsageError(f"--config {pair!r}: expected name=value")
        out[name] = value
    return out


async def cmd_create(admin: AdminClient, args: argparse.Namespace) -> int:
    configs = _configs_arg(args.config)
    conn = await admin.controller()
    version = conn.version(CREATE_TOPICS)
    partitions = -1 if args.partitions is None else args.partitions
    if partitions == -1 and version < 4:
        raise UsageError(f"{conn.address} needs --partitions (CreateTopics v{version})")
    body = {
        "topics": [
            {
                "name": args.topic,
                "num_partitions": partitions,
                "replication_factor": args.replication_factor
                if args.replication_factor is not None
                else (-1 if version >= 4 else 1),
                "assignments": [],
                "configs": [{"name": k, "value": v} for k, v in configs.items()],
            }
        ],
        "timeout_ms": 30_000,
        "validate_only": False,
    }
    _, resp = await conn.request(CREATE_TOPICS, body)
    (result,) = resp["topics"]
    check(result["error_code"], result.get("error_message"))
    if args.output == "json":
        emit_json({"topic": args.topic, "created": True})
    else:
        print(f"Created topic {args.topic}.")
    return 0


async def cmd_delete(admin: AdminClient, args: argparse.Namespace) -> int:
    conn = await admin.controller()
    body = {
        "topics": [{"name": args.topic}],
        "topic_names": [args.topic],
        "timeout_ms": 30_000,
    }
    _, resp = await conn.request(DELETE_TOPICS, body)
    (result,) = resp["responses"]
    if result["error_code"] != 0:
        raise KafkaError(result["error_code"], result.get("error_message") or f"topic {args.topic}")
    if args.output == "json":
        emit_json({"topic": args.topic, "deleted": True})
    else:
        print(f"Deleted topic {args.topic}.")
    return 0
