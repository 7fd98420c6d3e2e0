"""The GROUP config resource (type 32) on the wire and through confluent-kafka's admin client:
Kafka 4.3's group configs described with their defaults, altered both ways, refused with
Kafka's errors."""

from __future__ import annotations

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
from kgroupd.broker.testing import ThreadedBroker
from kgroupd.protocol.errors import ErrorCode
from tests.support.kafka_wire import WireClient

GROUP = 32
SET, DELETE, APPEND = 0, 1, 2


def describe(name: str, keys: list[str] | None = None) -> dict[str, Any]:
    return {
        "resources": [{"resource_type": GROUP, "resource_name": name, "configuration_keys": keys}],
        "include_synonyms": False,
        "include_documentation": False,
    }


def incremental(name: str, ops: list[tuple[str, int, str | None]]) -> dict[str, Any]:
    return {
        "resources": [
            {
                "resource_type": GROUP,
                "resource_name": name,
                "configs": [{"name": k, "config_operation": op, "value": v} for k, op, v in ops],
            }
        ],
        "validate_only": False,
    }


def answer(resp: dict[str, Any]) -> tuple[int, str | None]:
    (r,) = resp["responses"]
    return r["error_code"], r["error_message"]


async def test_group_configs_on_the_wire(server: KafkaServer) -> None:
    async with await WireClient.connect(server.port) as wire:
        resp = await wire.request(32, 4, describe("any-group"))
        (result,) = resp["results"]
        assert result["error_code"] == 0
        entries = {c["name"]: c for c in result["configs"]}
        assert entries["share.record.lock.duration.ms"]["value"] == "30000"
        assert entries["share.record.lock.duration.ms"]["config_source"] == 5  # DEFAULT_CONFIG
        assert entries["share.record.lock.duration.ms"]["config_type"] == 3  # INT
        assert entries["share.auto.offset.reset"]["value"] == "latest"
        assert entries["share.renew.acknowledge.enable"]["config_type"] == 1  # BOOLEAN
        assert not any(e["read_only"] for e in entries.values())

        ops = [
            ("share.auto.offset.reset", SET, "earliest"),
            ("share.delivery.count.limit", SET, "3"),
        ]
        assert answer(await wire.request(44, 1, incremental("g1", ops))) == (0, None)
        resp = await wire.request(32, 4, describe("g1", ["share.auto.offset.reset"]))
        (entry,) = resp["results"][0]["configs"]
        assert (entry["value"], entry["config_source"]) == ("earliest", 8)  # GROUP_CONFIG
        assert server.broker.group_configs.overrides("g1") == {
            "share.auto.offset.reset": "earliest",
            "share.delivery.count.limit": "3",
        }
        ops = [("share.delivery.count.limit", DELETE, None)]
        assert answer(await wire.request(44, 1, incremental("g1", ops))) == (0, None)
        assert server.broker.group_configs.overrides("g1") == {
            "share.auto.offset.reset": "earliest"
        }

        refused = [
            ("g1", [("no.such", SET, "1")], ErrorCode.INVALID_CONFIG,
             "Unknown group config name: no.such"),
            ("g1", [("share.delivery.count.limit", SET, "1")], ErrorCode.INVALID_CONFIG,
             "Invalid value 1 for configuration share.delivery.count.limit: "
             "Value must be at least 2"),
            ("g1", [("share.delivery.count.limit", APPEND, "3")], ErrorCode.INVALID_CONFIG,
             "Can't APPEND to key share.delivery.count.limit because its type is not LIST."),
            ("", [("share.delivery.count.limit", SET, "3")], ErrorCode.INVALID_REQUEST,
             "Default group resources are not allowed."),
        ]  # fmt: skip
        for name, ops, code, message in refused:
            assert answer(await wire.request(44, 1, incremental(name, ops))) == (code, message)
        assert server.broker.group_configs.overrides("g1") == {
            "share.auto.offset.reset": "earliest"
        }

        # legacy AlterConfigs replaces the whole set
        legacy = {
            "resources": [
                {
                    "resource_type": GROUP,
                    "resource_name": "g1",
                    "configs": [{"name": "share.isolation.level", "value": "read_committed"}],
                }
            ],
            "validate_only": False,
        }
        assert answer(await wire.request(33, 2, legacy)) == (0, None)
        assert server.broker.group_configs.overrides("g1") == {
            "share.isolation.level": "read_committed"
        }
        resp = await wire.request(32, 4, describe(""))
        assert resp["results"][0]["error_code"] == ErrorCode.INVALID_REQUEST
        assert resp["results"][0]["error_message"] == "Group name must not be empty"


def test_confluent_admin_group_configs() -> None:
    with ThreadedBroker() as broker:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        res = ConfigResource(
            ResourceType.GROUP,
            "cg",
            incremental_configs=[
                ConfigEntry(
                    "share.record.lock.duration.ms",
                    "20000",
                    incremental_operation=AlterConfigOpType.SET,
                )
            ],
        )
        admin.incremental_alter_configs([res])[res].result(10)
        described = admin.describe_configs([ConfigResource(ResourceType.GROUP, "cg")])
        entries = next(iter(described.values())).result(10)
        assert entries["share.record.lock.duration.ms"].value == "20000"
        assert entries["share.record.lock.duration.ms"].source == ConfigSource.GROUP_CONFIG.value
        assert entries["share.session.timeout.ms"].source == ConfigSource.DEFAULT_CONFIG.value
        bad = ConfigResource(
            ResourceType.GROUP,
            "cg",
            incremental_configs=[
                ConfigEntry(
                    "share.record.lock.duration.ms",
                    "90000",
                    incremental_operation=AlterConfigOpType.SET,
                )
            ],
        )
        with pytest.raises(KafkaException) as info:
            admin.incremental_alter_configs([bad])[bad].result(10)
        assert info.value.args[0].name() == "INVALID_CONFIG"
