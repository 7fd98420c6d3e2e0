"""The KIP-848 consumer group protocol: ConsumerGroupHeartbeat (68), ConsumerGroupDescribe (69).

Both are flexible from v0. ConsumerGroupHeartbeat v1 adds the subscription regex and lets the
client choose its member id (KIP-1082); ConsumerGroupDescribe v1 adds the member type.
"""

from __future__ import annotations

from kgroupd.protocol.codec import BOOL, INT8, INT16, INT32, NULL, STRING, UUID, ArrayOf, F, Message

_HEARTBEAT_PARTITIONS = [F("topic_id", UUID), F("partitions", ArrayOf(INT32))]

HEARTBEAT_REQUEST = Message(
    "ConsumerGroupHeartbeatRequest",
    68,
    "0-1",
    "0+",
    [
        F("group_id", STRING),
        F("member_id", STRING),
        F("member_epoch", INT32),
        F("instance_id", STRING, nullable="0+", default=NULL),
        F("rack_id", STRING, nullable="0+", default=NULL),
        F("rebalance_timeout_ms", INT32, default=-1),
        F("subscribed_topic_names", ArrayOf(STRING), nullable="0+", default=NULL),
        F("subscribed_topic_regex", STRING, "1+", nullable="1+", default=NULL),
        F("server_assignor", STRING, nullable="0+", default=NULL),
        F("topic_partitions", _HEARTBEAT_PARTITIONS, nullable="0+", default=NULL),
    ],
)

HEARTBEAT_RESPONSE = Message(
    "ConsumerGroupHeartbeatResponse",
    68,
    "0-1",
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
            [F("topic_partitions", _HEARTBEAT_PARTITIONS)],
            nullable="0+",
            default=NULL,
            struct=True,
        ),
    ],
)

_DESCRIBED_ASSIGNMENT = [
    F(
        "topic_partitions",
        [F("topic_id", UUID), F("topic_name", STRING), F("partitions", ArrayOf(INT32))],
    )
]

DESCRIBE_REQUEST = Message(
    "ConsumerGroupDescribeRequest",
    69,
    "0-1",
    "0+",
    [F("group_ids", ArrayOf(STRING)), F("include_authorized_operations", BOOL)],
)

DESCRIBE_RESPONSE = Message(
    "ConsumerGroupDescribeResponse",
    69,
    "0-1",
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
                        F("instance_id", STRING, nullable="0+", default=NULL),
                        F("rack_id", STRING, nullable="0+", default=NULL),
                        F("member_epoch", INT32),
                        F("client_id", STRING),
                        F("client_host", STRING),
                        F("subscribed_topic_names", ArrayOf(STRING)),
                        F("subscribed_topic_regex", STRING, nullable="0+", default=NULL),
                        F("assignment", _DESCRIBED_ASSIGNMENT, struct=True),
                        F("target_assignment", _DESCRIBED_ASSIGNMENT, struct=True),
                        F("member_type", INT8, "1+", default=-1),
                    ],
                ),
                F("authorized_operations", INT32, default=-(2**31)),
            ],
        ),
    ],
)

# api_key -> (request, response)
DEFINITIONS: dict[int, tuple[Message, Message]] = {
    68: (HEARTBEAT_REQUEST, HEARTBEAT_RESPONSE),
    69: (DESCRIBE_REQUEST, DESCRIBE_RESPONSE),
}
