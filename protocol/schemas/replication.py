"""Replication APIs, answered as a cluster of one broker answers them: OffsetForLeaderEpoch
(23), ElectLeaders (43), AlterPartitionReassignments (45), ListPartitionReassignments (46)."""

from __future__ import annotations

from kgroupd.protocol.codec import (
    BOOL,
    INT8,
    INT16,
    INT32,
    INT64,
    NULL,
    STRING,
    ArrayOf,
    F,
    Message,
)

OFFSET_FOR_LEADER_EPOCH_REQUEST = Message(
    "OffsetForLeaderEpochRequest",
    23,
    "2-4",
    "4+",
    [
        F("replica_id", INT32, "3+", default=-2),
        F(
            "topics",
            [
                F("topic", STRING),
                F(
                    "partitions",
                    [
                        F("partition", INT32),
                        F("current_leader_epoch", INT32, "2+", default=-1),
                        F("leader_epoch", INT32),
                    ],
                ),
            ],
        ),
    ],
)

OFFSET_FOR_LEADER_EPOCH_RESPONSE = Message(
    "OffsetForLeaderEpochResponse",
    23,
    "2-4",
    "4+",
    [
        F("throttle_time_ms", INT32, "2+"),
        F(
            "topics",
            [
                F("topic", STRING),
                F(
                    "partitions",
                    [
                        F("error_code", INT16),
                        F("partition", INT32),
                        F("leader_epoch", INT32, "1+", default=-1),
                        F("end_offset", INT64, default=-1),
                    ],
                ),
            ],
        ),
    ],
)

ELECT_LEADERS_REQUEST = Message(
    "ElectLeadersRequest",
    43,
    "0-2",
    "2+",
    [
        F("election_type", INT8, "1+"),
        F(
            "topic_partitions",
            [F("topic", STRING), F("partitions", ArrayOf(INT32))],
            nullable="0+",
        ),
        F("timeout_ms", INT32, default=60000),
    ],
)

ELECT_LEADERS_RESPONSE = Message(
    "ElectLeadersResponse",
    43,
    "0-2",
    "2+",
    [
        F("throttle_time_ms", INT32),
        F("error_code", INT16, "1+"),
        F(
            "replica_election_results",
            [
                F("topic", STRING),
                F(
                    "partition_result",
                    [
                        F("partition_id", INT32),
                        F("error_code", INT16),
                        F("error_message", STRING, nullable="0+"),
                    ],
                ),
            ],
        ),
    ],
)

ALTER_PARTITION_REASSIGNMENTS_REQUEST = Message(
    "AlterPartitionReassignmentsRequest",
    45,
    "0-1",
    "0+",
    [
        F("timeout_ms", INT32, default=60000),
        F("allow_replication_factor_change", BOOL, "1+", default=True),
        F(
            "topics",
            [
                F("name", STRING),
                F(
                    "partitions",
                    [
                        F("partition_index", INT32),
                        F("replicas", ArrayOf(INT32), nullable="0+", default=NULL),
                    ],
                ),
            ],
        ),
    ],
)

ALTER_PARTITION_REASSIGNMENTS_RESPONSE = Message(
    "AlterPartitionReassignmentsResponse",
    45,
    "0-1",
    "0+",
    [
        F("throttle_time_ms", INT32),
        F("allow_replication_factor_change", BOOL, "1+", default=True),
        F("error_code", INT16),
        F("error_message", STRING, nullable="0+"),
        F(
            "responses",
            [
                F("name", STRING),
                F(
                    "partitions",
                    [
                        F("partition_index", INT32),
                        F("error_code", INT16),
                        F("error_message", STRING, nullable="0+"),
                    ],
                ),
            ],
        ),
    ],
)

LIST_PARTITION_REASSIGNMENTS_REQUEST = Message(
    "ListPartitionReassignmentsRequest",
    46,
    "0",
    "0+",
    [
        F("timeout_ms", INT32, default=60000),
        F(
            "topics",
            [F("name", STRING), F("partition_indexes", ArrayOf(INT32))],
            nullable="0+",
            default=NULL,
        ),
    ],
)

LIST_PARTITION_REASSIGNMENTS_RESPONSE = Message(
    "ListPartitionReassignmentsResponse",
    46,
    "0",
    "0+",
    [
        F("throttle_time_ms", INT32),
        F("error_code", INT16),
        F("error_message", STRING, nullable="0+"),
        F(
            "topics",
            [
                F("name", STRING),
                F(
                    "partitions",
                    [
                        F("partition_index", INT32),
                        F("replicas", ArrayOf(INT32)),
                        F("adding_replicas", ArrayOf(INT32)),
                        F("removing_replicas", ArrayOf(INT32)),
                    ],
                ),
            ],
        ),
    ],
)

# api_key -> (request, response)
DEFINITIONS: dict[int, tuple[Message, Message]] = {
    23: (OFFSET_FOR_LEADER_EPOCH_REQUEST, OFFSET_FOR_LEADER_EPOCH_RESPONSE),
    43: (ELECT_LEADERS_REQUEST, ELECT_LEADERS_RESPONSE),
    45: (ALTER_PARTITION_REASSIGNMENTS_REQUEST, ALTER_PARTITION_REASSIGNMENTS_RESPONSE),
    46: (LIST_PARTITION_REASSIGNMENTS_REQUEST, LIST_PARTITION_REASSIGNMENTS_RESPONSE),
}
