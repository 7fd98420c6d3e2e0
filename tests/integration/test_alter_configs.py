"""AlterConfigs (33) and IncrementalAlterConfigs (44): Kafka's answers on the wire, real admin
clients, a retention.ms change taking effect on a live topic, and --data-dir keeping it."""

from __future__ import annotations

import asyncio
import time
import warnings
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    ResourceType,
)

from kgroupd.broker.net.server import KafkaServer
from kgroupd.broker.testing import ThreadedBroker, running_server
from kgroupd.protocol.errors import ErrorCode
from tests.support.kafka_wire import (
    WireClient,
    build_batch,
    create_topic,
    list_offsets_request,
    only_partition,
    produce_request,
)

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)  # kafka-python 3.0's JSON loading
    from kafka import KafkaAdminClient
    from kafka.admin import AlterConfigOp
    from kafka.admin import ConfigResource as KConfigResource

SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3
TOPIC, BROKER = 2, 4


def incremental(resources: list[tuple[int, str, list[tuple[str, int, str | None]]]]) -> Any:
    return {
        "resources": [
            {
                "resource_type": rtype,
                "resource_name": name,
                "configs": [
                    {"name": k, "config_operation": op, "value": v} for k, op, v in configs
                ],
            }
            for rtype, name, configs in resources
        ],
        "validate_only": False,
    }


def legacy(resources: list[tuple[int, str, dict[str, str | None]]], validate_only: bool) -> Any:
    return {
        "resources": [
            {
                "resource_type": rtype,
                "resource_name": name,
                "configs": [{"name": k, "value": v} for k, v in configs.items()],
            }
            for rtype, name, configs in resources
        ],
        "validate_only": validate_only,
    }


def answers(resp: dict[str, Any]) -> list[tuple[int, str | None]]:
    return [(r["error_code"], r["error_message"]) for r in resp["responses"]]


async def test_incremental_alter_configs_rules_on_the_wire(server: KafkaServer) -> None:
    topics = server.broker.topics
    async with await WireClient.connect(server.port) as wire:
        await create_topic(wire, "ia", 1, {"retention.bytes": "1000"})
        for version in (0, 1):
            resp = await wire.request(
                44, version, incremental([(TOPIC, "ia", [("retention.ms", SET, "60000")])])
            )
            assert answers(resp) == [(0, None)]
        topic = topics.get("ia")
        assert topic is not None
        assert topic.configs == {"retention.bytes": "1000", "retention.ms": "60000"}
        ops = [("cleanup.policy", APPEND, "compact"), ("retention.bytes", DELETE, None)]
        assert answers(await wire.request(44, 1, incremental([(TOPIC, "ia", ops)]))) == [(0, None)]
        assert topic.configs == {"retention.ms": "60000", "cleanup.policy": "delete,compact"}
        ops = [("cleanup.policy", SUBTRACT, "delete"), ("no.such", DELETE, None)]
        assert answers(await wire.request(44, 1, incremental([(TOPIC, "ia", ops)]))) == [(0, None)]
        assert topic.configs["cleanup.policy"] == "compact"
        refused = [
            ([("retention.ms", APPEND, "5")], ErrorCode.INVALID_CONFIG,
             "Can't APPEND to key retention.ms because its type is not LIST."),
            ([("retention.ms", SET, "-5")], ErrorCode.INVALID_CONFIG,
             "Invalid value -5 for configuration retention.ms: Value must be at least -1"),
            ([("retention.ms", SET, "x")], ErrorCode.INVALID_CONFIG,
             "Invalid value x for configuration retention.ms: Not a number of type LONG"),
            ([("no.such", SET, "1")], ErrorCode.INVALID_CONFIG,
             "Unknown topic config name: no.such"),
            ([("retention.ms", SET, None), ("segment.ms", APPEND, None)],
             ErrorCode.INVALID_REQUEST, "Null value not supported for : retention.ms, segment.ms"),
            ([("retention.ms", SET, "1"), ("retention.ms", DELETE, None)],
             ErrorCode.INVALID_REQUEST, "Error due to duplicate config keys"),
            ([("retention.ms", 9, "1")], ErrorCode.INVALID_REQUEST, "Unknown operations type 9"),
        ]  # fmt: skip
        for ops, code, message in refused:
            resp = await wire.request(44, 1, incremental([(TOPIC, "ia", ops)]))
            assert answers(resp) == [(code, message)], ops
        assert topic.configs == {"retention.ms": "60000", "cleanup.policy": "compact"}
        described = await wire.request(
            32,
            3,
            {
                "resources": [
                    {"resource_type": TOPIC, "resource_name": "ia", "configuration_keys": None}
                ],
                "include_synonyms": False,
                "include_documentation": False,
            },
        )
        entries = {c["name"]: c for c in described["results"][0]["configs"]}
        assert entries["retention.ms"]["value"] == "60000"
        assert entries["retention.ms"]["config_source"] == 1  # DYNAMIC_TOPIC_CONFIG
        assert entries["retention.bytes"]["config_source"] == 5  # DEFAULT_CONFIG: deleted
        assert entries["retention.ms"]["config_type"] == 5  # Kafka's ConfigType LONG
        assert entries["segment.bytes"]["config_type"] == 3  # INT
        resources = [
            (TOPIC, "nope", [("retention.ms", SET, "1")]),
            (TOPIC, "", [("retention.ms", SET, "1")]),
            (TOPIC, "bad name", []),
            (BROKER, "0", [("log.retention.ms", SET, "1"), ("num.partitions", SET, "3")]),
            (BROKER, "", [("log.retention.ms", DELETE, None)]),
            (BROKER, "7", []),
            (BROKER, "x", []),
            (7, "r", []),
            (TOPIC, "twice", []),
            (TOPIC, "twice", []),
        ]
        resp = await wire.request(44, 1, incremental(resources))
        assert [(r["resource_type"], r["resource_name"]) for r in resp["responses"]] == [
            (t, n) for t, n, _ in resources
        ]
        assert answers(resp) == [
            (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "The topic 'nope' does not exist."),
            (ErrorCode.INVALID_REQUEST, "Default topic resources are not allowed."),
            (ErrorCode.INVALID_TOPIC_EXCEPTION, answers(resp)[2][1]),
            (
                ErrorCode.INVALID_REQUEST,
                "Cannot update these configs dynamically: Set(log.retention.ms, num.partitions)",
            ),
            (0, None),  # a DELETE of a broker config nobody set: nothing to do
            (ErrorCode.INVALID_REQUEST, "Unexpected broker id, expected 0, but received 7"),
            (ErrorCode.INVALID_REQUEST, "Node id must be an integer, but it is: x"),
            (ErrorCode.INVALID_REQUEST, "Unknown resource type 7"),
            (ErrorCode.INVALID_REQUEST, "Each resource must appear at most once."),
            (ErrorCode.INVALID_REQUEST, "Each resource must appear at most once."),
        ]


async def test_alter_configs_replaces_the_whole_set(server: KafkaServer) -> None:
    topics = server.broker.topics
    async with await WireClient.connect(server.port) as wire:
        await create_topic(wire, "la", 1, {"retention.bytes": "1000", "segment.ms": "5000"})
        topic = topics.get("la")
        assert topic is not None
        for version in (0, 1, 2):
            resp = await wire.request(
                33, version, legacy([(TOPIC, "la", {"retention.ms": "9"})], True)
            )
            assert answers(resp) == [(0, None)]
        assert topic.configs == {"retention.bytes": "1000", "segment.ms": "5000"}  # validate_only
        resp = await wire.request(33, 2, legacy([(TOPIC, "la", {"retention.ms": "9"})], False))
        assert answers(resp) == [(0, None)]
        assert topic.configs == {"retention.ms": "9"}  # the rest back to their defaults
        resp = await wire.request(
            33,
            2,
            legacy(
                [
                    (TOPIC, "la", {"retention.ms": None}),
                    (TOPIC, "nope", {"retention.ms": "1"}),
                    (TOPIC, "nope2", {"retention.ms": "x"}),
                    (BROKER, "0", {"message.max.bytes": "10"}),
                    (8, "kgroupd", {}),
                ],
                False,
            ),
        )
        assert answers(resp) == [
            (ErrorCode.INVALID_REQUEST, "Null value not supported for : retention.ms"),
            (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "The topic 'nope' does not exist."),
            (  # the configs are checked before the topic, as the controller does
                ErrorCode.INVALID_CONFIG,
                "Invalid value x for configuration retention.ms: Not a number of type LONG",
            ),
            (ErrorCode.INVALID_REQUEST,
             "Cannot update these configs dynamically: Set(message.max.bytes)"),
            (ErrorCode.INVALID_REQUEST, "Unknown resource type 8"),
        ]  # fmt: skip
        assert topic.configs == {"retention.ms": "9"}


def test_confluent_incremental_and_legacy_alter_configs() -> None:
    with ThreadedBroker(create_topics=["cc:1"]) as broker:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        res = ConfigResource(
            ResourceType.TOPIC,
            "cc",
            incremental_configs=[
                ConfigEntry("retention.ms", "3600000", incremental_operation=AlterConfigOpType.SET),
                ConfigEntry(
                    "cleanup.policy", "compact", incremental_operation=AlterConfigOpType.APPEND
                ),
            ],
        )
        admin.incremental_alter_configs([res])[res].result(10)
        described = _describe(admin, "cc")
        assert described["retention.ms"].value == "3600000"
        assert described["retention.ms"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
        assert described["cleanup.policy"].value == "delete,compact"
        assert described["retention.bytes"].source == ConfigSource.DEFAULT_CONFIG.value
        bad = ConfigResource(
            ResourceType.TOPIC,
            "cc",
            incremental_configs=[
                ConfigEntry("retention.ms", "-7", incremental_operation=AlterConfigOpType.SET)
            ],
        )
        with pytest.raises(KafkaException) as info:
            admin.incremental_alter_configs([bad])[bad].result(10)
        assert info.value.args[0].name() == "INVALID_CONFIG"
        unknown = ConfigResource(
            ResourceType.TOPIC,
            "missing",
            incremental_configs=[
                ConfigEntry("retention.ms", "1", incremental_operation=AlterConfigOpType.SET)
            ],
        )
        with pytest.raises(KafkaException) as info:
            admin.incremental_alter_configs([unknown])[unknown].result(10)
        assert info.value.args[0].name() == "UNKNOWN_TOPIC_OR_PART"
        brokers = ConfigResource(
            ResourceType.BROKER,
            "0",
            incremental_configs=[
                ConfigEntry("num.partitions", "3", incremental_operation=AlterConfigOpType.SET)
            ],
        )
        with pytest.raises(KafkaException) as info:
            admin.incremental_alter_configs([brokers])[brokers].result(10)
        assert info.value.args[0].name() == "INVALID_REQUEST"
        whole = ConfigResource(ResourceType.TOPIC, "cc", set_config={"retention.bytes": "4096"})
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)  # alter_configs is deprecated
            admin.alter_configs([whole])[whole].result(10)
        described = _describe(admin, "cc")
        assert described["retention.bytes"].value == "4096"
        assert described["retention.ms"].source == ConfigSource.DEFAULT_CONFIG.value


def _describe(admin: AdminClient, topic: str) -> dict[str, ConfigEntry]:
    res = ConfigResource(ResourceType.TOPIC, topic)
    result: dict[str, ConfigEntry] = admin.describe_configs([res])[res].result(10)
    return result


def test_kafka_python_alter_configs_both_ways() -> None:
    with ThreadedBroker(create_topics=["kc:1"]) as broker:
        admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
        try:
            res = KConfigResource(
                "TOPIC",
                "kc",
                {"retention.ms": "120000", "cleanup.policy": (AlterConfigOp.APPEND, "compact")},
            )
            assert admin.alter_configs([res]) == {"topic": {"kc": "OK"}}  # incremental
            assert broker.server is not None
            topic = broker.server.broker.topics.get("kc")
            assert topic is not None
            assert topic.configs == {"retention.ms": "120000", "cleanup.policy": "delete,compact"}
            res = KConfigResource("TOPIC", "kc", {"retention.ms": "-3"})
            (result,) = admin.alter_configs([res], incremental=False)["topic"].values()
            assert "InvalidConfigurationError" in result and "at least -1" in result
            res = KConfigResource("TOPIC", "kc", {"segment.ms": "1000"})
            assert admin.alter_configs([res], incremental=False) == {"topic": {"kc": "OK"}}
            # kafka-python re-sends the other modified configs, so AlterConfigs keeps them
            assert topic.configs == {
                "retention.ms": "120000",
                "cleanup.policy": "delete,compact",
                "segment.ms": "1000",
            }
            res = KConfigResource("TOPIC", "kc", ["retention.ms"])
            assert admin.reset_configs([res]) == {"topic": {"kc": "OK"}}
            assert "retention.ms" not in topic.configs
        finally:
            admin.close()


async def test_a_retention_change_applies_to_the_live_topic() -> None:
    server_cm = running_server(log_level="warning", log_retention_check_interval_ms=50)
    async with server_cm as server, await WireClient.connect(server.port) as wire:
        await create_topic(wire, "live", 1)
        old = int(time.time() * 1000) - 3_600_000  # an hour ago: kept by the default 7 days
        for i in range(5):
            batch = build_batch([(None, b"%d" % i, [])], timestamp_ms=old)
            resp = await wire.request(0, 8, produce_request("live", 0, batch))
            assert only_partition(resp)["error_code"] == 0
        await asyncio.sleep(0.2)  # a few retention passes: nothing is old enough
        assert await _earliest(wire, "live") == 0
        ops = [("retention.ms", SET, "60000")]
        resp = await wire.request(44, 1, incremental([(TOPIC, "live", ops)]))
        assert answers(resp) == [(0, None)]
        for _ in range(100):
            if await _earliest(wire, "live") == 4:
                break
            await asyncio.sleep(0.02)
        assert await _earliest(wire, "live") == 4  # all but the newest batch are gone


async def test_shortening_retention_applies_at_once() -> None:
    """With the default check interval (5 minutes) the alter itself runs the pass."""
    async with (
        running_server(log_level="warning") as server,
        await WireClient.connect(server.port) as wire,
    ):
        await create_topic(wire, "shortened", 1)
        old = int(time.time() * 1000) - 3_600_000
        for i in range(3):
            batch = build_batch([(None, b"%d" % i, [])], timestamp_ms=old)
            resp = await wire.request(0, 8, produce_request("shortened", 0, batch))
            assert only_partition(resp)["error_code"] == 0
        resp = await wire.request(
            44, 1, incremental([(TOPIC, "shortened", [("retention.ms", SET, "60000")])])
        )
        assert answers(resp) == [(0, None)]
        assert await _earliest(wire, "shortened") == 2  # answered after the pass ran


async def _earliest(wire: WireClient, topic: str) -> int:
    resp = await wire.request(2, 5, list_offsets_request(topic, [0], -2))
    return int(only_partition(resp)["offset"])


def test_altered_configs_survive_a_restart(tmp_path: Path) -> None:
    with ThreadedBroker(create_topics=["kept:1"], data_dir=tmp_path) as broker:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        res = ConfigResource(
            ResourceType.TOPIC,
            "kept",
            incremental_configs=[
                ConfigEntry(
                    "retention.ms", "86400000", incremental_operation=AlterConfigOpType.SET
                ),
                ConfigEntry("segment.bytes", "4096", incremental_operation=AlterConfigOpType.SET),
            ],
        )
        admin.incremental_alter_configs([res])[res].result(10)
        broker.restart()
        described = _describe(admin, "kept")
        assert described["retention.ms"].value == "86400000"
        assert described["retention.ms"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
        assert described["segment.bytes"].value == "4096"
        assert broker.server is not None
        store = broker.server.broker.durability.topic_store  # type: ignore[union-attr]
        assert store is not None and store.partitions[("kept", 0)].segment_bytes == 4096


async def test_retention_lowered_from_confluent_deletes_old_segment_files(tmp_path: Path) -> None:
    """With --data-dir, retention works on whole segments as Kafka's: lowering retention.ms
    with confluent-kafka's IncrementalAlterConfigs deletes the closed segments whose records
    are all older, at once; the active segment stays."""
    data = tmp_path / "data"
    server_cm = running_server(log_level="warning", data_dir=str(data))
    async with server_cm as server, await WireClient.connect(server.port) as wire:
        await create_topic(wire, "aged", 1, {"segment.bytes": "1024"})
        old = int(time.time() * 1000) - 3_600_000
        for i in range(12):  # ~100-byte batches: several 1 KiB segments
            batch = build_batch([(None, b"%04d" % i + b"x" * 60, [])], timestamp_ms=old)
            resp = await wire.request(0, 8, produce_request("aged", 0, batch))
            assert only_partition(resp)["error_code"] == 0
        segments = sorted((data / "topics" / "aged-0").glob("*.log"))
        assert len(segments) >= 2

        def alter() -> None:
            admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{server.port}"})
            op = AlterConfigOpType.SET
            res = ConfigResource(
                ResourceType.TOPIC,
                "aged",
                incremental_configs=[
                    ConfigEntry("retention.ms", "60000", incremental_operation=op)
                ],
            )
            admin.incremental_alter_configs([res])[res].result(10)
            described = _describe(admin, "aged")
            assert described["retention.ms"].value == "60000"
            assert described["retention.ms"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value

        await asyncio.to_thread(alter)
        left = sorted((data / "topics" / "aged-0").glob("*.log"))
        assert len(left) == 1 and left[0] == segments[-1]  # only the active one
        earliest = await _earliest(wire, "aged")
        assert earliest == int(left[0].stem)  # the log starts at the active segment
