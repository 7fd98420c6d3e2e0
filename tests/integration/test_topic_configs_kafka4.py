"""Every topic config of Kafka 4.3 a user can set (LogConfig), with Kafka's checks, defaults
and DescribeConfigs types and sources; ``message.timestamp.before.max.ms`` and
``message.timestamp.after.max.ms`` (KIP-937) enforced at produce as Kafka's LogValidator
does; DescribeConfigs of ``__consumer_offsets``, so ``kgroupd topics describe`` lists every
topic once a group exists (issue 29)."""

from __future__ import annotations

import asyncio
import time
import warnings
from typing import Any

import pytest

from kgroupd.broker.cli.admin import amain
from kgroupd.broker.net.server import KafkaServer
from tests.support.kafka_wire import (
    WireClient,
    build_batch,
    create_topic,
    create_topics_request,
    only_partition,
    produce_request,
)

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka import KafkaProducer
    from kafka.errors import InvalidTimestampError

INVALID_TIMESTAMP, INVALID_CONFIG = 32, 40
DYNAMIC_TOPIC_CONFIG, DEFAULT_CONFIG = 1, 5
BOOLEAN, STRING, INT, LONG, DOUBLE, LIST = 1, 2, 3, 5, 6, 7
HOUR_MS = 3_600_000

# Kafka 4.3's LogConfig: every topic config, a value other than its default, and its type
KAFKA_43 = {
    "cleanup.policy": ("compact", LIST),
    "compression.gzip.level": ("9", INT),
    "compression.lz4.level": ("17", INT),
    "compression.type": ("zstd", STRING),
    "compression.zstd.level": ("-5", INT),
    "delete.retention.ms": ("1000", LONG),
    "file.delete.delay.ms": ("1", LONG),
    "flush.messages": ("10", LONG),
    "flush.ms": ("1000", LONG),
    "follower.replication.throttled.replicas": ("0:1,1:1", LIST),
    "index.interval.bytes": ("8192", INT),
    "leader.replication.throttled.replicas": ("*", LIST),
    "local.retention.bytes": ("-1", LONG),
    "local.retention.ms": ("1000", LONG),
    "max.compaction.lag.ms": ("100000", LONG),
    "max.message.bytes": ("2000000", INT),
    "message.downconversion.enable": ("false", BOOLEAN),
    "message.timestamp.after.max.ms": ("60000", LONG),
    "message.timestamp.before.max.ms": ("60000", LONG),
    "message.timestamp.type": ("LogAppendTime", STRING),
    "min.cleanable.dirty.ratio": ("0.1", DOUBLE),
    "min.compaction.lag.ms": ("10", LONG),
    "min.insync.replicas": ("1", INT),
    "preallocate": ("true", BOOLEAN),
    "remote.log.copy.disable": ("true", BOOLEAN),
    "remote.log.delete.on.disable": ("true", BOOLEAN),
    "remote.storage.enable": ("false", BOOLEAN),
    "retention.bytes": ("1000000", LONG),
    "retention.ms": ("100000", LONG),
    "segment.bytes": ("2000000", INT),
    "segment.index.bytes": ("4096", INT),
    "segment.jitter.ms": ("10", LONG),
    "segment.ms": ("100000", LONG),
    "unclean.leader.election.enable": ("true", BOOLEAN),
}


async def _describe(wire: WireClient, topic: str) -> dict[str, Any]:
    answer = await wire.request(
        32,
        4,
        {
            "resources": [{"resource_type": 2, "resource_name": topic, "configuration_keys": None}],
            "include_synonyms": False,
            "include_documentation": False,
        },
    )
    (result,) = answer["results"]
    assert result["error_code"] == 0, result
    return {
        c["name"]: (c["value"], c["config_source"], c["config_type"]) for c in result["configs"]
    }


async def test_every_kafka_4_3_topic_config_is_accepted_and_described(
    server: KafkaServer,
) -> None:
    async with await WireClient.connect(server.port) as wire:
        await create_topic(wire, "all-configs", 1, {k: v for k, (v, _) in KAFKA_43.items()})
        await create_topic(wire, "defaults", 1)
        configured = await _describe(wire, "all-configs")
        defaults = await _describe(wire, "defaults")
    assert configured == {k: (v, DYNAMIC_TOPIC_CONFIG, t) for k, (v, t) in KAFKA_43.items()}
    assert set(defaults) == set(KAFKA_43)
    assert {s for _, s, _ in defaults.values()} == {DEFAULT_CONFIG}
    assert defaults["message.timestamp.after.max.ms"][0] == str(HOUR_MS)  # Kafka 4's
    assert defaults["message.timestamp.before.max.ms"][0] == str(2**63 - 1)
    assert defaults["compression.gzip.level"][0] == "-1"
    assert defaults["local.retention.ms"][0] == "-2"


@pytest.mark.parametrize(
    ("config", "value", "message"),
    [
        ("compression.gzip.level", "0", "Value must be between 1 and 9 or equal to -1"),
        ("compression.lz4.level", "18", "Value must be no more than 17"),
        ("compression.zstd.level", "-131073", "Value must be at least -131072"),
        ("preallocate", "yes", "Expected value to be either true or false"),
        (
            "leader.replication.throttled.replicas",
            "0:a",
            "leader.replication.throttled.replicas must be the literal '*' or a list of "
            "replicas in the following format: [partitionId]:[brokerId],[partitionId]:"
            "[brokerId],...",
        ),
        ("message.timestamp.after.max.ms", "-1", "Value must be at least 0"),
        ("segment.index.bytes", "3", "Value must be at least 4"),
        ("local.retention.bytes", "-3", "Value must be at least -2"),
    ],
)
async def test_bad_values_are_refused_with_kafkas_messages(
    server: KafkaServer, config: str, value: str, message: str
) -> None:
    async with await WireClient.connect(server.port) as wire:
        answer = await wire.request(19, 7, create_topics_request("bad", 1, {config: value}))
    (result,) = answer["topics"]
    assert result["error_code"] == INVALID_CONFIG
    assert result["error_message"] == f"Invalid value {value} for configuration {config}: {message}"


async def test_configs_are_checked_together(server: KafkaServer) -> None:
    async with await WireClient.connect(server.port) as wire:
        lag = await wire.request(
            19,
            7,
            create_topics_request(
                "lag", 1, {"min.compaction.lag.ms": "500", "max.compaction.lag.ms": "100"}
            ),
        )
        tiered = await wire.request(
            19, 7, create_topics_request("tiered", 1, {"remote.storage.enable": "true"})
        )
    assert (lag["topics"][0]["error_code"], lag["topics"][0]["error_message"]) == (
        INVALID_CONFIG,
        "conflict topic config setting min.compaction.lag.ms (500) > max.compaction.lag.ms (100)",
    )
    assert (tiered["topics"][0]["error_code"], tiered["topics"][0]["error_message"]) == (
        INVALID_CONFIG,
        "Tiered Storage functionality is disabled in the broker. Topic cannot be configured "
        "with remote log storage.",
    )


# --- message.timestamp.before.max.ms / after.max.ms ----------------------------------------


async def _produce(wire: WireClient, topic: str, batch: bytes) -> dict[str, Any]:
    return only_partition(await wire.request(0, 9, produce_request(topic, 0, batch)))


async def test_timestamps_out_of_range_are_refused(server: KafkaServer) -> None:
    now = int(time.time() * 1000)
    async with await WireClient.connect(server.port) as wire:
        await create_topic(wire, "ts-default", 1)
        await create_topic(wire, "ts-before", 1, {"message.timestamp.before.max.ms": "60000"})
        await create_topic(wire, "ts-append", 1, {"message.timestamp.type": "LogAppendTime"})
        future = await _produce(
            wire, "ts-default", build_batch([(None, b"a", [], now + 2 * HOUR_MS)])
        )
        past = await _produce(wire, "ts-default", build_batch([(None, b"a", [], 1)]))
        mixed = build_batch(
            [(None, b"a", [], now), (None, b"b", [], now - 120_000), (None, b"c", [], now)],
            compression=1,  # gzip: read as Kafka reads it, decompressed
        )
        older = await _produce(wire, "ts-before", mixed)
        fine = await _produce(wire, "ts-before", build_batch([(None, b"a", [], now)]))
        appended = await _produce(
            wire, "ts-append", build_batch([(None, b"a", [], now + 2 * HOUR_MS)])
        )
        await wire.request(
            44,
            1,
            {
                "resources": [
                    {
                        "resource_type": 2,
                        "resource_name": "ts-default",
                        "configs": [
                            {
                                "name": "message.timestamp.after.max.ms",
                                "config_operation": 0,
                                "value": str(24 * HOUR_MS),
                            }
                        ],
                    }
                ],
                "validate_only": False,
            },
        )
        later = await _produce(
            wire, "ts-default", build_batch([(None, b"a", [], now + 2 * HOUR_MS)])
        )
    assert future["error_code"] == INVALID_TIMESTAMP
    assert future["error_message"] == (
        "One or more records have been rejected due to invalid timestamp"
    )
    ((index, text),) = [
        (e["batch_index"], e["batch_index_error_message"]) for e in future["record_errors"]
    ]
    assert index == 0 and text.startswith(
        f"Timestamp {now + 2 * HOUR_MS} of message with offset 0 "
    )
    assert "is out of range. The timestamp should be within [" in text
    assert past["error_code"] == 0  # no bound before, by default
    assert older["error_code"] == INVALID_TIMESTAMP
    assert [e["batch_index"] for e in older["record_errors"]] == [1]
    assert fine["error_code"] == 0
    assert appended["error_code"] == 0  # LogAppendTime: the broker's time is used
    assert later["error_code"] == 0
    topic = server.broker.topics.get("ts-default")
    assert topic is not None and topic.partitions[0].high_watermark == 2  # nothing refused kept


async def test_kafka_python_producer_gets_invalid_timestamp(server: KafkaServer) -> None:
    async with await WireClient.connect(server.port) as wire:
        await create_topic(wire, "kp-ts", 1)
    bootstrap = f"127.0.0.1:{server.port}"

    def send() -> BaseException | None:
        producer = KafkaProducer(bootstrap_servers=bootstrap, retries=0)
        try:
            future = producer.send(
                "kp-ts", b"v", timestamp_ms=int(time.time() * 1000) + 2 * HOUR_MS
            )
            try:
                future.get(timeout=30)
            except InvalidTimestampError as exc:
                return exc
            return None
        finally:
            producer.close()

    assert isinstance(await asyncio.to_thread(send), InvalidTimestampError)


# --- __consumer_offsets ---------------------------------------------------------------------


async def test_topics_describe_lists_consumer_offsets_once_a_group_exists(
    server: KafkaServer, capsys: pytest.CaptureFixture[str]
) -> None:
    async with await WireClient.connect(server.port) as wire:
        await create_topic(wire, "described", 1)
        commit = await wire.request(
            8,
            2,
            {
                "group_id": "g",
                "generation_id_or_member_epoch": -1,
                "member_id": "",
                "retention_time_ms": -1,
                "topics": [
                    {
                        "name": "described",
                        "partitions": [
                            {"partition_index": 0, "committed_offset": 0, "committed_metadata": ""}
                        ],
                    }
                ],
            },
        )
        assert commit["topics"][0]["partitions"][0]["error_code"] == 0
        offsets = await _describe(wire, "__consumer_offsets")
    assert offsets["cleanup.policy"] == ("compact", DYNAMIC_TOPIC_CONFIG, LIST)
    assert offsets["segment.bytes"] == ("104857600", DYNAMIC_TOPIC_CONFIG, INT)
    capsys.readouterr()
    code = await amain(["topics", "describe", "--bootstrap-server", f"127.0.0.1:{server.port}"])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "Topic: __consumer_offsets\t" in out and "Topic: described\t" in out
    assert "cleanup.policy=compact,compression.type=producer,segment.bytes=104857600" in out
