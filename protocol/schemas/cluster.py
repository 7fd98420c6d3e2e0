"""Cluster and topic description for admin clients: AlterReplicaLogDirs (34), DescribeLogDirs
(35), DescribeCluster (60), DescribeTopicPartitions (75)."""

from __future__ import annotations

from kgroupd.protocol.codec import (
    BOOL,
    INT8,
    INT16,
    INT32,
    INT64,
    NULL,
    STRING,
    UUID,
    ArrayOf,
    F,
    Message,
)

ALTER_REPLICA_LOG_DIRS_REQUEST = Message(
    "AlterReplicaLogDirsRequest",
    34,
    "1-2",
    "2+",
    [
        F(
            "dirs",
            [
                F("path", STRING),
                F("topics", [F("name", STRING), F("partitions", ArrayOf(INT32))]),
            ],
        ),
    ],
)

ALTER_REPLICA_LOG_DIRS_RESPONSE = Message(
    "AlterReplicaLogDirsResponse",
    34,
    "1-2",
    "2+",
    [
        F("throttle_time_ms", INT32),
        F(
            "results",
            [
                F("topic_name", STRING),
                F("partitions", [F("partition_index", INT32), F("error_code", INT16)]),
            ],
        ),
    ],
)

DESCRIBE_LOG_DIRS_REQUEST = Message(
    "DescribeLogDirsRequest",
    35,
    "1-5",
    "2+",
    [
        F(
            "topics",
            [F("topic", STRING), F("partitions", ArrayOf(INT32))],
            nullable="0+",
        ),
    ],
)

DESCRIBE_LOG_DIRS_RESPONSE = Message(
    "DescribeLogDirsResponse",
    35,
    "1-5",
    "2+",
    [
        F("throttle_time_ms", INT32),
        F("error_code", INT16, "3+"),
        F(
            "results",
            [
                F("error_code", INT16),
                F("log_dir", STRING),
                F(
                    "topics",
                    [
                        F("name", STRING),
                        F(
                            "partitions",
                            [
                                F("partition_index", INT32),
                                F("partition_size", INT64),
                                F("offset_lag", INT64),
                                F("is_future_key", BOOL),
                            ],
                        ),
                    ],
                ),
                F("total_bytes", INT64, "4+", default=-1),
                F("usable_bytes", INT64, "4+", default=-1),
                F("is_cordoned", BOOL, "5+"),
            ],
        ),
    ],
)

DESCRIBE_CLUSTER_REQUEST = Message(
    "DescribeClusterRequest",
    60,
    "0-2",
    "0+",
    [
        F("include_cluster_authorized_operations", BOOL),
        F("endpoint_type", INT8, "1+", default=1),
        F("include_fenced_brokers", BOOL, "2+"),
    ],
)

DESCRIBE_CLUSTER_RESPONSE = Message(
    "DescribeClusterResponse",
    60,
    "0-2",
    "0+",
    [
        F("throttle_time_ms", INT32),
        F("error_code", INT16),
        F("error_message", STRING, nullable="0+", default=NULL),
        F("endpoint_type", INT8, "1+", default=1),
        F("cluster_id", STRING),
        F("controller_id", INT32, default=-1),
        F(
            "brokers",
            [
                F("broker_id", INT32),
                F("host", STRING),
                F("port", INT32),
                F("rack", STRING, nullable="0+", default=NULL),
                F("is_fenced", BOOL, "2+"),
            ],
        ),
        F("cluster_authorized_operations", INT32, default=-2147483648),
    ],
)

_CURSOR = [F("topic_name", STRING), F("partition_index", INT32)]

DESCRIBE_TOPIC_PARTITIONS_REQUEST = Message(
    "DescribeTopicPartitionsRequest",
    75,
    "0",
    "0+",
    [
        F("topics", [F("name", STRING)]),
        F("response_partition_limit", INT32, default=2000),
        F("cursor", _CURSOR, nullable="0+", default=NULL, struct=True),
    ],
)

DESCRIBE_TOPIC_PARTITIONS_RESPONSE = Message(
    "DescribeTopicPartitionsResponse",
    75,
    "0",
    "0+",
    [
        F("throttle_time_ms", INT32),
        F(
            "topics",
            [
                F("error_code", INT16),
                F("name", STRING, nullable="0+"),
                F("topic_id", UUID),
                F("is_internal", BOOL),
                F(
                    "partitions",
                    [
                        F("error_code", INT16),
                        F("partition_index", INT32),
                        F("leader_id", INT32),
                        F("leader_epoch", INT32, default=-1),
                        F("replica_nodes", ArrayOf(INT32)),
                        F("isr_nodes", ArrayOf(INT32)),
                        F(
                            "eligible_leader_replicas",
                            ArrayOf(INT32),
                            nullable="0+",
                            default=NULL,
                        ),
                        F("last_known_elr", ArrayOf(INT32), nullable="0+", default=NULL),
                        F("offline_replicas", ArrayOf(INT32)),
                    ],
                ),
                F("topic_authorized_operations", INT32, default=-2147483648),
            ],
        ),
        F("next_cursor", _CURSOR, nullable="0+", default=NULL, struct=True),
    ],
)

# api_key -> (request, response)
DEFINITIONS: dict[int, tuple[Message, Message]] = {
    34: (ALTER_REPLICA_LOG_DIRS_REQUEST, ALTER_REPLICA_LOG_DIRS_RESPONSE),
    35: (DESCRIBE_LOG_DIRS_REQUEST, DESCRIBE_LOG_DIRS_RESPONSE),
    60: (DESCRIBE_CLUSTER_REQUEST, DESCRIBE_CLUSTER_RESPONSE),
    75: (DESCRIBE_TOPIC_PARTITIONS_REQUEST, DESCRIBE_TOPIC_PARTITIONS_RESPONSE),
}
