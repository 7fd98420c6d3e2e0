"""Metadata (3)."""

from __future__ import annotations

from kgroupd.protocol.codec import BOOL, INT16, INT32, NULL, STRING, UUID, ArrayOf, F, Message

METADATA_REQUEST = Message(
    "MetadataRequest",
    3,
    "0-13",
    "9+",
    [
        F(
            "topics",
            [
                F("topic_id", UUID, "10+"),
                F("name", STRING, nullable="10+"),
            ],
            nullable="1+",
        ),
        F("allow_auto_topic_creation", BOOL, "4+", default=True),
        F("include_cluster_authorized_operations", BOOL, "8-10"),
        F("include_topic_authorized_operations", BOOL, "8+"),
    ],
)

METADATA_RESPONSE = Message(
    "MetadataResponse",
    3,
    "0-13",
    "9+",
    [
        F("throttle_time_ms", INT32, "3+"),
        F(
            "brokers",
            [
                F("node_id", INT32),
                F("host", STRING),
                F("port", INT32),
                F("rack", STRING, "1+", nullable="1+", default=NULL),
            ],
        ),
        F("cluster_id", STRING, "2+", nullable="2+", default=NULL),
        F("controller_id", INT32, "1+", default=-1),
        F(
            "topics",
            [
                F("error_code", INT16),
                F("name", STRING, nullable="12+"),
                F("topic_id", UUID, "10+"),
                F("is_internal", BOOL, "1+"),
                F(
                    "partitions",
                    [
                        F("error_code", INT16),
                        F("partition_index", INT32),
                        F("leader_id", INT32),
                        F("leader_epoch", INT32, "7+", default=-1),
                        F("replica_nodes", ArrayOf(INT32)),
                        F("isr_nodes", ArrayOf(INT32)),
                        F("offline_replicas", ArrayOf(INT32), "5+"),
                    ],
                ),
                F("topic_authorized_operations", INT32, "8+", default=-2147483648),
            ],
        ),
        F("cluster_authorized_operations", INT32, "8-10", default=-2147483648),
        F("error_code", INT16, "13+"),
    ],
)

# api_key -> (request, response)
DEFINITIONS: dict[int, tuple[Message, Message]] = {
    3: (METADATA_REQUEST, METADATA_RESPONSE),
}
