"""Share groups (KIP-932): ShareGroupHeartbeat (76), ShareGroupDescribe (77), ShareFetch (78),
ShareAcknowledge (79), DescribeShareGroupOffsets (90), AlterShareGroupOffsets (91),
DeleteShareGroupOffsets (92), at Kafka 4.3's versions.

Every one is flexible from v0. Kafka 4.3 keeps only the versions of the GA protocol: the
heartbeat and describe start at v1, ShareFetch and ShareAcknowledge serve v1-v2 (v2 adds
RENEW acknowledgements, KIP-1222, and the acquire mode), DescribeShareGroupOffsets v1 adds
the lag.
"""

from __future__ import annotations

from kgroupd.protocol.codec import (
    BOOL,
    INT8,
    INT16,
    INT32,
    INT64,
    NULL,
    RECORDS,
    STRING,
    UUID,
    ArrayOf,
    F,
    Message,
)

_TOPIC_PARTITIONS = [F("topic_id", UUID), F("partitions", ArrayOf(INT32))]

HEARTBEAT_REQUEST = Message(
    "ShareGroupHeartbeatRequest",
    76,
    "1",
    "0+",
    [
        F("group_id", STRING),
        F("member_id", STRING),
        F("member_epoch", INT32),
        F("rack_id", STRING, nullable="0+", default=NULL),
        F("subscribed_topic_names", ArrayOf(STRING), nullable="0+", default=NULL),
    ],
)

HEARTBEAT_RESPONSE = Message(
    "ShareGroupHeartbeatResponse",
    76,
    "1",
    "0+",
    [
        F("throttle_time_ms", INT32),
        F("error_code", INT16),
        F("error_message", STRING, nullable="0+", default=NULL),
        F("member_id", STRING, nullable="0+", default=NULL),
        F("member_epoch", INT32),
        F("heartbeat_interval_ms", INT32),
        F(
            "assignment",
            [F("topic_partitions", _TOPIC_PARTITIONS)],
            nullable="0+",
            default=NULL,
            struct=True,
        ),
    ],
)

DESCRIBE_REQUEST = Message(
    "ShareGroupDescribeRequest",
    77,
    "1",
    "0+",
    [F("group_ids", ArrayOf(STRING)), F("include_authorized_operations", BOOL)],
)

DESCRIBE_RESPONSE = Message(
    "ShareGroupDescribeResponse",
    77,
    "1",
    "0+",
    [
        F("throttle_time_ms", INT32),
        F(
            "groups",
            [
                F("error_code", INT16),
                F("error_message", STRING, nullable="0+", default=NULL),
                F("group_id", STRING),
                F("group_state", STRING),
                F("group_epoch", INT32),
                F("assignment_epoch", INT32),
                F("assignor_name", STRING),
                F(
                    "members",
                    [
                        F("member_id", STRING),
                        F("rack_id", STRING, nullable="0+", default=NULL),
                        F("member_epoch", INT32),
                        F("client_id", STRING),
                        F("client_host", STRING),
                        F("subscribed_topic_names", ArrayOf(STRING)),
                        F(
                            "assignment",
                            [
                                F(
                                    "topic_partitions",
                                    [
                                        F("topic_id", UUID),
                                        F("topic_name", STRING),
                                        F("partitions", ArrayOf(INT32)),
                                    ],
                                )
                            ],
                            struct=True,
                        ),
                    ],
                ),
                F("authorized_operations", INT32, default=-(2**31)),
            ],
        ),
    ],
)

# 0: gap, 1: accept, 2: release, 3: reject, 4: renew (v2)
_ACK_BATCHES = F(
    "acknowledgement_batches",
    [F("first_offset", INT64), F("last_offset", INT64), F("acknowledge_types", ArrayOf(INT8))],
)
_LEADER = F("current_leader", [F("leader_id", INT32), F("leader_epoch", INT32)], struct=True)
_NODE_ENDPOINTS = F(
    "node_endpoints",
    [
        F("node_id", INT32),
        F("host", STRING),
        F("port", INT32),
        F("rack", STRING, nullable="0+", default=NULL),
    ],
)

FETCH_REQUEST = Message(
    "ShareFetchRequest",
    78,
    "1-2",
    "0+",
    [
        F("group_id", STRING, nullable="0+", default=NULL),
        F("member_id", STRING, nullable="0+"),
        F("share_session_epoch", INT32),
        F("max_wait_ms", INT32),
        F("min_bytes", INT32),
        F("max_bytes", INT32, default=0x7FFFFFFF),
        F("max_records", INT32, "1+"),
        F("batch_size", INT32, "1+"),
        F("share_acquire_mode", INT8, "2+"),
        F("is_renew_ack", BOOL, "2+"),
        F(
            "topics",
            [
                F("topic_id", UUID),
                F(
                    "partitions",
                    [
                        F("partition_index", INT32),
                        F("partition_max_bytes", INT32, "0"),
                        _ACK_BATCHES,
                    ],
                ),
            ],
        ),
        F("forgotten_topics_data", [F("topic_id", UUID), F("partitions", ArrayOf(INT32))]),
    ],
)

FETCH_RESPONSE = Message(
    "ShareFetchResponse",
    78,
    "1-2",
    "0+",
    [
        F("throttle_time_ms", INT32),
        F("error_code", INT16),
        F("error_message", STRING, nullable="0+", default=NULL),
        F("acquisition_lock_timeout_ms", INT32, "1+"),
        F(
            "responses",
            [
                F("topic_id", UUID),
                F(
                    "partitions",
                    [
                        F("partition_index", INT32),
                        F("error_code", INT16),
                        F("error_message", STRING, nullable="0+", default=NULL),
                        F("acknowledge_error_code", INT16),
                        F("acknowledge_error_message", STRING, nullable="0+", default=NULL),
                        _LEADER,
                        F("records", RECORDS, nullable="0"),
                        F(
                            "acquired_records",
                            [
                                F("first_offset", INT64),
                                F("last_offset", INT64),
                                F("delivery_count", INT16),
                            ],
                        ),
                    ],
                ),
            ],
        ),
        _NODE_ENDPOINTS,
    ],
)

ACKNOWLEDGE_REQUEST = Message(
    "ShareAcknowledgeRequest",
    79,
    "1-2",
    "0+",
    [
        F("group_id", STRING, nullable="0+", default=NULL),
        F("member_id", STRING, nullable="0+"),
        F("share_session_epoch", INT32),
        F("is_renew_ack", BOOL, "2+"),
        F(
            "topics",
            [F("topic_id", UUID), F("partitions", [F("partition_index", INT32), _ACK_BATCHES])],
        ),
    ],
)

ACKNOWLEDGE_RESPONSE = Message(
    "ShareAcknowledgeResponse",
    79,
    "1-2",
    "0+",
    [
        F("throttle_time_ms", INT32),
        F("error_code", INT16),
        F("error_message", STRING, nullable="0+", default=NULL),
        F("acquisition_lock_timeout_ms", INT32, "2+"),
        F(
            "responses",
            [
                F("topic_id", UUID),
                F(
                    "partitions",
                    [
                        F("partition_index", INT32),
                        F("error_code", INT16),
                        F("error_message", STRING, nullable="0+", default=NULL),
                        _LEADER,
                    ],
                ),
            ],
        ),
        _NODE_ENDPOINTS,
    ],
)

_ERROR = [F("error_code", INT16), F("error_message", STRING, nullable="0+", default=NULL)]

DESCRIBE_OFFSETS_REQUEST = Message(
    "DescribeShareGroupOffsetsRequest",
    90,
    "0-1",
    "0+",
    [
        F(
            "groups",
            [
                F("group_id", STRING),
                F(
                    "topics",
                    [F("topic_name", STRING), F("partitions", ArrayOf(INT32))],
                    nullable="0+",
                ),
            ],
        )
    ],
)

DESCRIBE_OFFSETS_RESPONSE = Message(
    "DescribeShareGroupOffsetsResponse",
    90,
    "0-1",
    "0+",
    [
        F("throttle_time_ms", INT32),
        F(
            "groups",
            [
                F("group_id", STRING),
                F(
                    "topics",
                    [
                        F("topic_name", STRING),
                        F("topic_id", UUID),
                        F(
                            "partitions",
                            [
                                F("partition_index", INT32),
                                F("start_offset", INT64),
                                F("leader_epoch", INT32),
                                F("lag", INT64, "1+", default=-1),
                                *_ERROR,
                            ],
                        ),
                    ],
                ),
                *_ERROR,
            ],
        ),
    ],
)

ALTER_OFFSETS_REQUEST = Message(
    "AlterShareGroupOffsetsRequest",
    91,
    "0",
    "0+",
    [
        F("group_id", STRING),
        F(
            "topics",
            [
                F("topic_name", STRING),
                F("partitions", [F("partition_index", INT32), F("start_offset", INT64)]),
            ],
        ),
    ],
)

ALTER_OFFSETS_RESPONSE = Message(
    "AlterShareGroupOffsetsResponse",
    91,
    "0",
    "0+",
    [
        F("throttle_time_ms", INT32),
        *_ERROR,
        F(
            "responses",
            [
                F("topic_name", STRING),
                F("topic_id", UUID),
                F("partitions", [F("partition_index", INT32), *_ERROR]),
            ],
        ),
    ],
)

DELETE_OFFSETS_REQUEST = Message(
    "DeleteShareGroupOffsetsRequest",
    92,
    "0",
    "0+",
    [F("group_id", STRING), F("topics", [F("topic_name", STRING)])],
)

DELETE_OFFSETS_RESPONSE = Message(
    "DeleteShareGroupOffsetsResponse",
    92,
    "0",
    "0+",
    [
        F("throttle_time_ms", INT32),
        *_ERROR,
        F("responses", [F("topic_name", STRING), F("topic_id", UUID), *_ERROR]),
    ],
)

# api_key -> (request, response)
DEFINITIONS: dict[int, tuple[Message, Message]] = {
    76: (HEARTBEAT_REQUEST, HEARTBEAT_RESPONSE),
    77: (DESCRIBE_REQUEST, DESCRIBE_RESPONSE),
    78: (FETCH_REQUEST, FETCH_RESPONSE),
    79: (ACKNOWLEDGE_REQUEST, ACKNOWLEDGE_RESPONSE),
    90: (DESCRIBE_OFFSETS_REQUEST, DESCRIBE_OFFSETS_RESPONSE),
    91: (ALTER_OFFSETS_REQUEST, ALTER_OFFSETS_RESPONSE),
    92: (DELETE_OFFSETS_REQUEST, DELETE_OFFSETS_RESPONSE),
}
