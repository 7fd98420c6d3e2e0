"""The cluster, topic and replication APIs of Kafka 4.3 that admin clients and tools call
(issue 29): DescribeCluster, DescribeTopicPartitions, DescribeLogDirs, AlterReplicaLogDirs,
OffsetForLeaderEpoch, ElectLeaders, List/AlterPartitionReassignments,
GetTelemetrySubscriptions/PushTelemetry.

Real clients: the Java Admin 4.3 (``tests/java/KgroupdClusterCheck.java``: describeCluster,
describeTopics paged through DescribeTopicPartitions, describeLogDirs, electLeaders,
reassignments, client quotas, a consumer validating its position with OffsetForLeaderEpoch,
and the KIP-714 telemetry the Java clients ask for); kafka-python 3 (its version inference
needs DescribeLogDirs v5; describe_log_dirs, alter_replica_log_dirs, elect_leaders,
reassignments); confluent-kafka (describe_cluster, describe_topics, elect_leaders). The rest
over the raw wire.
"""

from __future__ import annotations

import asyncio
import json
import uuid
import warnings
from pathlib import Path
from typing import Any

import pytest

from kgroupd.broker.net.server import KafkaServer
from kgroupd.broker.telemetry import DEFAULT_INTERVAL_MS, subscription_id
from kgroupd.broker.testing import running_server
from kgroupd.protocol.codec import ZERO_UUID
from tests.conftest import require
from tests.support.java import JavaClient, java_available, prepare_java_client
from tests.support.kafka_wire import (
    WireClient,
    build_batch,
    create_topic,
    only_partition,
    produce_request,
)

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka import TopicPartition as KpTopicPartition
    from kafka.admin import KafkaAdminClient

NONE, UNKNOWN_TOPIC, INVALID_REQUEST = 0, 3, 42
FENCED_EPOCH, UNKNOWN_EPOCH = 74, 75
ELECTION_NOT_NEEDED, NO_REASSIGNMENT, INVALID_ASSIGNMENT = 84, 85, 39
THROTTLED, UNKNOWN_SUBSCRIPTION, MISMATCHED_ENDPOINT, UNSUPPORTED_ENDPOINT = 89, 117, 114, 115


async def _produce(wire: WireClient, topic: str, partition: int, count: int) -> None:
    for i in range(count):
        batch = build_batch([(b"k%d" % i, b"v" * 100, [])])
        resp = await wire.request(0, 9, produce_request(topic, partition, batch))
        assert only_partition(resp)["error_code"] == 0


def _served(server: KafkaServer, api_key: int) -> bool:
    """Was ``api_key`` asked of the broker (its request metrics)?"""
    stats = server.broker.stats
    assert stats is not None
    return any(k >> 8 == api_key for k in stats.requests)


# --- real clients --------------------------------------------------------------------------


@pytest.mark.java
async def test_java_admin_describes_the_cluster_its_topics_and_log_dirs(
    server: KafkaServer,
) -> None:
    require(java_available(), "java and javac (JDK 17) are not on PATH; the Java client needs them")
    java: JavaClient = await asyncio.to_thread(prepare_java_client)
    async with await WireClient.connect(server.port) as wire:
        await create_topic(wire, "java-cluster", 3)
        await _produce(wire, "java-cluster", 0, 5)
        found = await wire.request(10, 4, {"key_type": 0, "coordinator_keys": ["g"]})
        assert found["coordinators"][0]["error_code"] == 0  # __consumer_offsets now exists
    command = java.command("KgroupdClusterCheck", f"127.0.0.1:{server.port}", "java-cluster")
    proc = await asyncio.create_subprocess_exec(
        *command, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    out, err = await asyncio.wait_for(proc.communicate(), 120)
    where = f"\n--- stdout ---\n{out.decode()[-3000:]}\n--- stderr ---\n{err.decode()[-6000:]}"
    lines = [ln for ln in out.decode().splitlines() if ln.startswith("KGROUPD_CLUSTER ")]
    assert proc.returncode == 0 and lines, where
    s = json.loads(lines[-1].split(" ", 1)[1])
    node = server.broker.node_id
    assert s["cluster_id"] == server.broker.cluster_id, where
    assert (s["nodes"], s["node"], s["controller"], s["node_id"]) == (
        1,
        f"127.0.0.1:{server.port}",
        node,
        node,
    ), where
    assert s["cluster_ops"] == 7, where  # every cluster operation Kafka defines
    assert (s["partitions"], s["leader"], s["topic_ops"]) == (3, node, 8), where
    log = server.broker.topics.partition("java-cluster", 0)
    assert log is not None
    assert (s["log_dirs"], s["partition_size"]) == (1, log.size_bytes), where
    assert s["total_bytes"] > 0, where
    assert s["election"] == "ElectionNotNeededException", where
    assert (s["reassignments"], s["reassigned"]) == (0, True), where
    assert s["alice_quota"] == 1048576.0, where
    assert s["offsets_policy"] == "compact/DYNAMIC_TOPIC_CONFIG", where
    assert s["consumer_first"] == 2, where
    # the Admin paged describeTopics through DescribeTopicPartitions (2 partitions an
    # answer), the consumer validated its position, and the clients asked for telemetry
    for api_key in (75, 35, 60, 43, 45, 46, 48, 49, 23, 71):
        assert _served(server, api_key), f"api {api_key} never asked{where}"
    assert server.broker.telemetry.instances


async def test_kafka_python_infers_kafka_4_3_and_reads_log_dirs(
    server: KafkaServer, tmp_path: Path
) -> None:
    async with await WireClient.connect(server.port) as wire:
        await create_topic(wire, "kp-dirs", 2)
        await _produce(wire, "kp-dirs", 1, 3)
    bootstrap = f"127.0.0.1:{server.port}"

    def admin_calls() -> tuple[Any, ...]:
        admin = KafkaAdminClient(bootstrap_servers=bootstrap)
        try:
            version = admin._manager.broker_version
            dirs = admin.describe_log_dirs()
            only = admin.describe_log_dirs({"kp-dirs": [1]})
            admin.elect_leaders(0, {"kp-dirs": [0, 1]})  # ELECTION_NOT_NEEDED is no error
            tp = KpTopicPartition("kp-dirs", 0)
            moved = admin.alter_partition_reassignments({tp: [server.broker.node_id]})
            ongoing = admin.list_partition_reassignments()
            node = server.broker.node_id
            placed = admin.alter_replica_log_dirs(
                {
                    ("kp-dirs", 0, node): "(in memory)",
                    ("kp-dirs", 1, node): "/elsewhere",
                    ("kp-dirs", 9, node): "(in memory)",
                }
            )
            return version, dirs, only, moved, ongoing, placed
        finally:
            admin.close()

    version, dirs, only, moved, ongoing, placed = await asyncio.to_thread(admin_calls)
    assert tuple(version[:2]) == (4, 3)
    (broker,) = dirs
    assert broker["broker"] == server.broker.node_id
    (log_dir,) = broker["log_dirs"]
    assert log_dir["error_code"] == 0 and log_dir["log_dir"] == "(in memory)"
    sizes = {
        (t["name"], p["partition_index"]): p["partition_size"]
        for t in log_dir["topics"]
        for p in t["partitions"]
    }
    log = server.broker.topics.partition("kp-dirs", 1)
    assert log is not None and log.size_bytes > 0
    assert sizes[("kp-dirs", 0)] == 0 and sizes[("kp-dirs", 1)] == log.size_bytes
    (only_dir,) = only[0]["log_dirs"]
    assert [
        (t["name"], [p["partition_index"] for p in t["partitions"]]) for t in only_dir["topics"]
    ] == [("kp-dirs", [1])]
    assert not ongoing
    assert moved == {KpTopicPartition("kp-dirs", 0): None}
    # AlterReplicaLogDirs: the one log dir holds every replica already
    assert {(r.partition, e.__name__) for r, e in placed.items()} == {
        (0, "NoError"),
        (1, "LogDirNotFoundError"),
        (9, "ReplicaNotAvailableError"),
    }


async def test_describe_log_dirs_names_the_data_dir_and_its_disk(tmp_path: Path) -> None:
    async with (
        running_server(log_level="warning", data_dir=str(tmp_path)) as server,
        await WireClient.connect(server.port) as wire,
    ):
        await create_topic(wire, "on-disk", 1)
        await _produce(wire, "on-disk", 0, 2)
        answer = await wire.request(35, 5, {"topics": [{"topic": "on-disk", "partitions": [0]}]})
    (result,) = answer["results"]
    assert result["log_dir"] == str(tmp_path.absolute())
    assert result["total_bytes"] >= result["usable_bytes"] > 0
    assert [t["name"] for t in result["topics"]] == ["on-disk"]
    assert result["topics"][0]["partitions"][0]["partition_size"] > 0


async def test_confluent_admin_describes_the_cluster_and_elects_no_leader(
    server: KafkaServer,
) -> None:
    from confluent_kafka import ElectionType, TopicCollection, TopicPartition
    from confluent_kafka.admin import AdminClient

    async with await WireClient.connect(server.port) as wire:
        await create_topic(wire, "ck-cluster", 2)
    admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{server.port}"})

    def calls() -> tuple[Any, Any, Any]:
        cluster = admin.describe_cluster(include_authorized_operations=True).result(30)
        topics = admin.describe_topics(TopicCollection(["ck-cluster"])).get("ck-cluster")
        assert topics is not None
        elected = admin.elect_leaders(ElectionType.PREFERRED, [TopicPartition("ck-cluster", 1)])
        return cluster, topics.result(30), elected.result(30)

    cluster, topic, elected = await asyncio.to_thread(calls)
    assert cluster.cluster_id == server.broker.cluster_id
    assert [n.id for n in cluster.nodes] == [server.broker.node_id]
    assert cluster.controller.id == server.broker.node_id
    assert len(topic.partitions) == 2 and topic.partitions[1].leader.id == server.broker.node_id
    ((tp, error),) = elected.items()
    assert (tp.topic, tp.partition) == ("ck-cluster", 1)
    assert error is not None and error.code() == ELECTION_NOT_NEEDED


# --- the wire -------------------------------------------------------------------------------


async def test_describe_cluster_endpoint_types(server: KafkaServer) -> None:
    async with await WireClient.connect(server.port) as wire:
        ok = await wire.request(60, 0, {"include_cluster_authorized_operations": False})
        controller = await wire.request(60, 1, {"endpoint_type": 2})
        v0_bad = await wire.request(60, 0, {})
        unknown = await wire.request(60, 2, {"endpoint_type": 7})
    assert (ok["error_code"], ok["controller_id"]) == (NONE, server.broker.node_id)
    assert ok["cluster_authorized_operations"] == -(2**31)  # not asked for
    assert controller["error_code"] == MISMATCHED_ENDPOINT
    assert controller["error_message"] == (
        "The request was sent to an endpoint of type BROKER, but we wanted an endpoint of "
        "type CONTROLLER"
    )
    assert v0_bad["error_code"] == NONE  # v0 has no endpoint type: BROKER
    assert (unknown["error_code"], unknown["error_message"]) == (
        UNSUPPORTED_ENDPOINT,
        "Unsupported endpoint type 7",
    )


async def test_describe_topic_partitions_pages_with_a_cursor(server: KafkaServer) -> None:
    async with await WireClient.connect(server.port) as wire:
        await create_topic(wire, "dtp-a", 3)
        await create_topic(wire, "dtp-b", 2)

        async def ask(**body: Any) -> dict[str, Any]:
            request = {"topics": [], "response_partition_limit": 2000, "cursor": None} | body
            return await wire.request(75, 0, request)

        first = await ask(response_partition_limit=2)
        second = await ask(response_partition_limit=2, cursor=first["next_cursor"])
        third = await ask(response_partition_limit=2, cursor=second["next_cursor"])
        named = await ask(topics=[{"name": "dtp-b"}, {"name": "nope"}, {"name": "bad/name"}])
        bad_cursor = await ask(
            topics=[{"name": "dtp-a"}], cursor={"topic_name": "dtp-b", "partition_index": 0}
        )
    pages = [
        [(t["name"], [p["partition_index"] for p in t["partitions"]]) for t in page["topics"]]
        for page in (first, second, third)
    ]
    assert pages == [[("dtp-a", [0, 1])], [("dtp-a", [2]), ("dtp-b", [0])], [("dtp-b", [1])]]
    assert first["next_cursor"] == {"topic_name": "dtp-a", "partition_index": 2}
    assert second["next_cursor"] == {"topic_name": "dtp-b", "partition_index": 1}
    assert third["next_cursor"] is None
    topic_b = server.broker.topics.get("dtp-b")
    assert topic_b is not None
    found = {t["name"]: t for t in named["topics"]}
    assert found["dtp-b"]["topic_id"] == topic_b.topic_id and found["dtp-b"]["error_code"] == 0
    assert (found["nope"]["error_code"], found["nope"]["topic_id"]) == (UNKNOWN_TOPIC, ZERO_UUID)
    assert found["bad/name"]["error_code"] == 17  # INVALID_TOPIC_EXCEPTION
    assert [(t["name"], t["error_code"]) for t in bad_cursor["topics"]] == [
        ("dtp-a", INVALID_REQUEST)
    ]


async def test_offset_for_leader_epoch_as_a_leader_at_epoch_0(server: KafkaServer) -> None:
    async with await WireClient.connect(server.port) as wire:
        await create_topic(wire, "epochs", 1)
        await _produce(wire, "epochs", 0, 4)

        async def ask(leader_epoch: int, current: int = -1, partition: int = 0) -> Any:
            answer = await wire.request(
                23,
                4,
                {
                    "replica_id": -1,
                    "topics": [
                        {
                            "topic": "epochs",
                            "partitions": [
                                {
                                    "partition": partition,
                                    "current_leader_epoch": current,
                                    "leader_epoch": leader_epoch,
                                }
                            ],
                        }
                    ],
                },
            )
            p = answer["topics"][0]["partitions"][0]
            return p["error_code"], p["leader_epoch"], p["end_offset"]

        assert await ask(0) == (NONE, 0, 4)
        assert await ask(0, current=0) == (NONE, 0, 4)
        assert await ask(3) == (NONE, -1, -1)  # no such epoch yet
        assert await ask(-1) == (NONE, -1, -1)
        assert await ask(-5) == (NONE, -5, 0)  # before every epoch: where epoch 0 starts
        assert (await ask(0, current=1))[0] == UNKNOWN_EPOCH
        assert (await ask(0, current=-3))[0] == FENCED_EPOCH
        assert (await ask(0, partition=9))[0] == UNKNOWN_TOPIC


async def test_elect_leaders_and_reassignments_of_one_broker(server: KafkaServer) -> None:
    node = server.broker.node_id
    async with await WireClient.connect(server.port) as wire:
        await create_topic(wire, "elect", 2)
        named = await wire.request(
            43,
            2,
            {"election_type": 1, "topic_partitions": [{"topic": "elect", "partitions": [1, 5]}]},
        )
        everything = await wire.request(43, 2, {"election_type": 0, "topic_partitions": None})
        bad_type = await wire.request(
            43, 2, {"election_type": 9, "topic_partitions": [{"topic": "elect", "partitions": [0]}]}
        )
        moves = await wire.request(
            45,
            1,
            {
                "topics": [
                    {
                        "name": "elect",
                        "partitions": [
                            {"partition_index": 0, "replicas": [node]},
                            {"partition_index": 1, "replicas": [node, node]},
                            {"partition_index": 0, "replicas": [node + 1]},
                            {"partition_index": 1, "replicas": []},
                            {"partition_index": 1, "replicas": None},
                            {"partition_index": 7, "replicas": [node]},
                        ],
                    },
                    {"name": "nope", "partitions": [{"partition_index": 0, "replicas": [node]}]},
                ]
            },
        )
        listed = await wire.request(
            46, 0, {"topics": [{"name": "elect", "partition_indexes": [0]}]}
        )
    results = [
        (p["partition_id"], p["error_code"])
        for p in named["replica_election_results"][0]["partition_result"]
    ]
    assert results == [(1, ELECTION_NOT_NEEDED), (5, UNKNOWN_TOPIC)]
    assert everything["replica_election_results"] == [{"topic": "elect", "partition_result": []}]
    assert bad_type["error_code"] == INVALID_REQUEST
    parts = [(p["error_code"], p["error_message"]) for p in moves["responses"][0]["partitions"]]
    assert parts == [
        (NONE, None),
        (
            INVALID_ASSIGNMENT,
            f"The manual partition assignment includes the broker {node} more than once.",
        ),
        (
            INVALID_ASSIGNMENT,
            f"The manual partition assignment includes broker {node + 1}, but no such broker "
            "is registered.",
        ),
        (INVALID_ASSIGNMENT, "The manual partition assignment includes an empty replica list."),
        (NO_REASSIGNMENT, "No partition reassignment is in progress."),
        (UNKNOWN_TOPIC, "Unable to find partition elect:7."),
    ]
    assert moves["responses"][1]["partitions"][0]["error_message"] == (
        "Unable to find a topic named nope."
    )
    assert (listed["error_code"], listed["topics"]) == (NONE, [])


async def test_telemetry_as_a_broker_with_no_client_metrics(server: KafkaServer) -> None:
    async with await WireClient.connect(server.port) as wire:
        got = await wire.request(71, 0, {"client_instance_id": ZERO_UUID})
        instance = got["client_instance_id"]
        again = await wire.request(71, 0, {"client_instance_id": instance})

        async def push(subscription: int, terminating: bool = False, codec: int = 0) -> int:
            body = {
                "client_instance_id": instance,
                "subscription_id": subscription,
                "terminating": terminating,
                "compression_type": codec,
                "metrics": b"\x0a\x00",
            }
            return int((await wire.request(72, 0, body))["error_code"])

        wrong = await push(got["subscription_id"] + 1)
        too_soon = await push(got["subscription_id"])
        last = await push(got["subscription_id"], terminating=True)
        after_last = await push(got["subscription_id"], terminating=True)
        reserved = await wire.request(
            72,
            0,
            {
                "client_instance_id": ZERO_UUID,
                "subscription_id": 0,
                "terminating": False,
                "compression_type": 0,
                "metrics": b"",
            },
        )
    assert got["error_code"] == NONE and instance != ZERO_UUID
    assert got["subscription_id"] == subscription_id(instance)
    assert got["requested_metrics"] == [] and got["push_interval_ms"] == DEFAULT_INTERVAL_MS
    assert got["accepted_compression_types"] == [4, 3, 1, 2]
    assert again["error_code"] == THROTTLED  # before the push interval
    assert wrong == UNKNOWN_SUBSCRIPTION  # the push right after a Get is accepted...
    assert too_soon == THROTTLED  # ...the next one only a push interval later
    assert last == NONE  # a terminating push is always taken
    assert after_last == INVALID_REQUEST
    assert reserved["error_code"] == INVALID_REQUEST


def test_subscription_ids_are_kafkas() -> None:
    """Kafka's computeSubscriptionId: CRC-32C of "[]300000" xor Uuid.hashCode."""
    instance = uuid.UUID("00000000-0000-0001-0000-000000000002")
    # hashCode: (1 ^ 2) folded = 3; crc32c(b"[]300000") as a signed int
    from crc32c import crc32c

    crc = crc32c(b"[]300000")
    signed = crc - 2**32 if crc >= 2**31 else crc
    assert subscription_id(instance) == signed ^ 3
