"""index.interval.bytes, Kafka's topic config (INT, at least 0, default 4096), with its broker
default --log-index-interval-bytes (Kafka: log.index.interval.bytes): accepted by CreateTopics,
AlterConfigs and IncrementalAlterConfigs, refused as Kafka refuses a bad value, shown by
DescribeConfigs with its source, and followed by the segments' sparse indexes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient, ConfigResource, ConfigSource, NewTopic

from kgroupd.broker.config.settings import ConfigError, load_config
from kgroupd.broker.net.server import KafkaServer
from kgroupd.broker.testing import ThreadedBroker, running_server
from kgroupd.protocol.errors import ErrorCode
from tests.support.kafka_wire import WireClient, create_topic, create_topics_request
from tests.support.segment_data import BATCH, produce_raw, read_all, value_at

KEY = "index.interval.bytes"
TOPIC, BROKER = 2, 4
DYNAMIC_TOPIC_CONFIG, STATIC_BROKER_CONFIG, DEFAULT_CONFIG = 1, 4, 5


async def describe(wire: WireClient, rtype: int, name: str) -> dict[str, dict[str, Any]]:
    resp = await wire.request(
        32,
        3,
        {
            "resources": [
                {"resource_type": rtype, "resource_name": name, "configuration_keys": None}
            ],
            "include_synonyms": False,
            "include_documentation": False,
        },
    )
    (result,) = resp["results"]
    assert result["error_code"] == 0, result
    return {c["name"]: c for c in result["configs"]}


def alter(name: str, value: str, incremental: bool) -> dict[str, Any]:
    config: dict[str, Any] = {"name": KEY, "value": value}
    if incremental:
        config["config_operation"] = 0  # SET
    return {
        "resources": [{"resource_type": TOPIC, "resource_name": name, "configs": [config]}],
        "validate_only": False,
    }


BAD = [
    ("-1", "Value must be at least 0"),
    ("abc", "Not a number of type INT"),
    ("2147483648", "Not a number of type INT"),
    ("1.5", "Not a number of type INT"),
]


async def test_accepted_refused_and_described_as_kafka(server: KafkaServer) -> None:
    async with await WireClient.connect(server.port) as wire:
        for value, problem in BAD:
            resp = await wire.request(19, 5, create_topics_request("bad", 1, {KEY: value}))
            (result,) = resp["topics"]
            message = f"Invalid value {value} for configuration {KEY}: {problem}"
            assert (result["error_code"], result["error_message"]) == (
                ErrorCode.INVALID_CONFIG,
                message,
            ), value
        assert server.broker.topics.get("bad") is None

        resp = await wire.request(19, 5, create_topics_request("own", 1, {KEY: "0"}))
        (result,) = resp["topics"]
        assert result["error_code"] == 0, result
        created = {c["name"]: c for c in result["configs"]}
        assert (created[KEY]["value"], created[KEY]["config_source"]) == ("0", 1)
        await create_topic(wire, "plain", 1, {})

        own = (await describe(wire, TOPIC, "own"))[KEY]
        assert (own["value"], own["config_source"], own["config_type"]) == ("0", 1, 3)
        plain = (await describe(wire, TOPIC, "plain"))[KEY]
        assert (plain["value"], plain["config_source"]) == ("4096", DEFAULT_CONFIG)
        assert not plain["read_only"]
        broker_side = (await describe(wire, BROKER, "0"))["log.index.interval.bytes"]
        assert (broker_side["value"], broker_side["config_source"]) == ("4096", DEFAULT_CONFIG)

        for api, incremental in ((33, False), (44, True)):
            for value, problem in BAD:
                resp = await wire.request(api, 1, alter("plain", value, incremental))
                (answer,) = resp["responses"]
                message = f"Invalid value {value} for configuration {KEY}: {problem}"
                assert (answer["error_code"], answer["error_message"]) == (
                    ErrorCode.INVALID_CONFIG,
                    message,
                ), (api, value)
            resp = await wire.request(api, 1, alter("plain", str(8192 + api), incremental))
            assert resp["responses"][0]["error_code"] == 0
            plain = (await describe(wire, TOPIC, "plain"))[KEY]
            assert (plain["value"], plain["config_source"]) == (
                str(8192 + api),
                DYNAMIC_TOPIC_CONFIG,
            )
        topic = server.broker.topics.get("plain")
        assert topic is not None and topic.configs == {KEY: str(8192 + 44)}


def test_the_broker_default_flag_and_variable() -> None:
    assert load_config([]).log_index_interval_bytes is None
    assert load_config(["--log-index-interval-bytes", "0"]).log_index_interval_bytes == 0
    env = {"KGROUPD_LOG_INDEX_INTERVAL_BYTES": "1024"}
    assert load_config([], env).log_index_interval_bytes == 1024
    assert load_config(["--log-index-interval-bytes", "2048"], env).log_index_interval_bytes == (
        2048
    )
    with pytest.raises(ConfigError, match="KGROUPD_LOG_INDEX_INTERVAL_BYTES"):
        load_config([], {"KGROUPD_LOG_INDEX_INTERVAL_BYTES": "-1"})
    for bad in ("-1", "2147483648", "x"):
        with pytest.raises(SystemExit) as exited:
            load_config(["--log-index-interval-bytes", bad])
        assert exited.value.code == 2


def test_confluent_sees_the_broker_default_as_static_broker_config() -> None:
    with ThreadedBroker(log_index_interval_bytes=1024) as broker:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        futures = admin.create_topics([NewTopic("d", 1), NewTopic("o", 1, config={KEY: "512"})])
        for f in futures.values():
            f.result(10)
        for name, value, source in (
            ("d", "1024", ConfigSource.STATIC_BROKER_CONFIG),
            ("o", "512", ConfigSource.DYNAMIC_TOPIC_CONFIG),
        ):
            res = ConfigResource("TOPIC", name)
            entry = admin.describe_configs([res])[res].result(10)[KEY]
            assert (entry.value, entry.source) == (value, source.value), name
        res = ConfigResource("BROKER", "0")
        entry = admin.describe_configs([res])[res].result(10)["log.index.interval.bytes"]
        assert (entry.value, entry.source) == ("1024", ConfigSource.STATIC_BROKER_CONFIG.value)


def entries(server: KafkaServer, topic: str) -> list[int]:
    """The sparse index entries of each segment of ``topic``-0."""
    store = server.broker.durability.topic_store  # type: ignore[union-attr]
    assert store is not None
    return [len(seg.rel) for seg in store.partitions[(topic, 0)].segments]


async def test_the_segments_index_as_often_as_it_says(tmp_path: Path) -> None:
    n = 200
    data = str(tmp_path / "data")
    settings: dict[str, Any] = {"data_dir": data, "log_level": "warning", "log_cache_bytes": 0}
    async with (
        running_server(**settings, log_index_interval_bytes=16384) as server,
        await WireClient.connect(server.port) as wire,
    ):
        await create_topic(wire, "every", 1, {KEY: "0", "segment.bytes": str(100 * BATCH)})
        await create_topic(wire, "broker", 1, {"segment.bytes": str(100 * BATCH)})
        for name in ("every", "broker"):
            assert await produce_raw(server.port, name, n) == n - 1
            assert await read_all(server.port, name, 0, n, value_at()) == n
        # 0: an entry per batch; the broker's 16 KiB: one per 16 batches of ~1 KiB
        assert entries(server, "every") == [100, 100]
        assert entries(server, "broker") == [6, 6]
        # altered, the next segment follows it (the active one keeps its spacing)
        resp = await wire.request(44, 1, alter("every", "4096", True))
        assert resp["responses"][0]["error_code"] == 0
        assert await produce_raw(server.port, "every", 150, first=n) == n + 149
        assert entries(server, "every") == [100, 100, 24, 12]  # one per 4 batches
        assert await read_all(server.port, "every", 0, n + 150, value_at()) == n + 150
        for start in (7, 99, 100, 201, 330):  # reads that walk from an index entry
            assert await read_all(server.port, "every", start, n + 150, value_at()) == (
                n + 150 - start
            )

    # a restart rebuilding the index files takes the topic's spacing
    for idx in (tmp_path / "data" / "topics" / "every-0").glob("*.idx"):
        idx.unlink()
    async with running_server(**settings) as server:
        assert entries(server, "every") == [24, 24, 24, 12]
        assert entries(server, "broker") == [6, 6]  # index files read back as written
        assert await read_all(server.port, "every", 0, n + 150, value_at()) == n + 150
