"""Classic group membership and administration: FindCoordinator (10), JoinGroup (11),
Heartbeat (12), LeaveGroup (13), SyncGroup (14), DescribeGroups (15), ListGroups (16),
DeleteGroups (42)."""

from __future__ import annotations

from kgroupd.protocol.codec import (
    BOOL,
    BYTES,
    INT8,
    INT16,
    INT32,
    NULL,
    STRING,
    ArrayOf,
    F,
    Message,
)

FIND_COORDINATOR_REQUEST = Message(
    "FindCoordinatorRequest",
    10,
    "0-6",
    "3+",
    [
        F("key", STRING, "0-3"),
        F("key_type", INT8, "1+"),
        F("coordinator_keys", ArrayOf(STRING), "4+"),
    ],
)

FIND_COORDINATOR_RESPONSE = Message(
    "FindCoordinatorResponse",
    10,
    "0-6",
    "3+",
    [
        F("throttle_time_ms", INT32, "1+"),
        F("error_code", INT16, "0-3"),
        F("error_message", STRING, "1-3", nullable="1-3"),
        F("node_id", INT32, "0-3"),
        F("host", STRING, "0-3"),
        F("port", INT32, "0-3"),
        F(
            "coordinators",
            [
                F("key", STRING, "4+"),
                F("node_id", INT32, "4+"),
                F("host", STRING, "4+"),
                F("port", INT32, "4+"),
                F("error_code", INT16, "4+"),
                F("error_message", STRING, "4+", nullable="4+"),
            ],
            "4+",
        ),
    ],
)

JOIN_GROUP_REQUEST = Message(
    "JoinGroupRequest",
    11,
    "0-9",
    "6+",
    [
        F("group_id", STRING),
        F("session_timeout_ms", INT32),
        F("rebalance_timeout_ms", INT32, "1+", default=-1),
        F("member_id", STRING),
        F("group_instance_id", STRING, "5+", nullable="5+", default=NULL),
        F("protocol_type", STRING),
        F(
            "protocols",
            [
                F("name", STRING),
                F("metadata", BYTES),
            ],
        ),
        F("reason", STRING, "8+", nullable="8+", default=NULL),
    ],
)

JOIN_GROUP_RESPONSE = Message(
    "JoinGroupResponse",
    11,
    "0-9",
    "6+",
    [
        F("throttle_time_ms", INT32, "2+"),
        F("error_code", INT16),
        F("generation_id", INT32, default=-1),
        F("protocol_type", STRING, "7+", nullable="7+", default=NULL),
        F("protocol_name", STRING, nullable="7+"),
        F("leader", STRING),
        F("skip_assignment", BOOL, "9+"),
        F("member_id", STRING),
        F(
            "members",
            [
                F("member_id", STRING),
                F("group_instance_id", STRING, "5+", nullable="5+", default=NULL),
                F("metadata", BYTES),
            ],
        ),
    ],
)

HEARTBEAT_REQUEST = Message(
    "HeartbeatRequest",
    12,
    "0-4",
    "4+",
    [
        F("group_id", STRING),
        F("generation_id", INT32),
        F("member_id", STRING),
        F("group_instance_id", STRING, "3+", nullable="3+", default=NULL),
    ],
)

HEARTBEAT_RESPONSE = Message(
    "HeartbeatResponse",
    12,
    "0-4",
    "4+",
    [
        F("throttle_time_ms", INT32, "1+"),
        F("error_code", INT16),
    ],
)

LEAVE_GROUP_REQUEST = Message(
    "LeaveGroupRequest",
    13,
    "0-5",
    "4+",
    [
        F("group_id", STRING),
        F("member_id", STRING, "0-2"),
        F(
            "members",
            [
                F("member_id", STRING, "3+"),
                F("group_instance_id", STRING, "3+", nullable="3+", default=NULL),
                F("reason", STRING, "5+", nullable="5+", default=NULL),
            ],
            "3+",
        ),
    ],
)

LEAVE_GROUP_RESPONSE = Message(
    "LeaveGroupResponse",
    13,
    "0-5",
    "4+",
    [
        F("throttle_time_ms", INT32, "1+"),
        F("error_code", INT16),
        F(
            "members",
            [
                F("member_id", STRING, "3+"),
                F("group_instance_id", STRING, "3+", nullable="3+"),
                F("error_code", INT16, "3+"),
            ],
            "3+",
        ),
    ],
)

SYNC_GROUP_REQUEST = Message(
    "SyncGroupRequest",
    14,
    "0-5",
    "4+",
    [
        F("group_id", STRING),
        F("generation_id", INT32),
        F("member_id", STRING),
        F("group_instance_id", STRING, "3+", nullable="3+", default=NULL),
        F("protocol_type", STRING, "5+", nullable="5+", default=NULL),
        F("protocol_name", STRING, "5+", nullable="5+", default=NULL),
        F(
            "assignments",
            [
                F("member_id", STRING),
                F("assignment", BYTES),
            ],
        ),
    ],
)

SYNC_GROUP_RESPONSE = Message(
    "SyncGroupResponse",
    14,
    "0-5",
    "4+",
    [
        F("throttle_time_ms", INT32, "1+"),
        F("error_code", INT16),
        F("protocol_type", STRING, "5+", nullable="5+", default=NULL),
        F("protocol_name", STRING, "5+", nullable="5+", default=NULL),
        F("assignment", BYTES),
    ],
)

DESCRIBE_GROUPS_REQUEST = Message(
    "DescribeGroupsRequest",
    15,
    "0-6",
    "5+",
    [
        F("groups", ArrayOf(STRING)),
        F("include_authorized_operations", BOOL, "3+"),
    ],
)

DESCRIBE_GROUPS_RESPONSE = Message(
    "DescribeGroupsResponse",
    15,
    "0-6",
    "5+",
    [
        F("throttle_time_ms", INT32, "1+"),
        F(
            "groups",
            [
                F("error_code", INT16),
                F("error_message", STRING, "6+", nullable="6+", default=NULL),
                F("group_id", STRING),
                F("group_state", STRING),
                F("protocol_type", STRING),
                F("protocol_data", STRING),
                F(
                    "members",
                    [
                        F("member_id", STRING),
                        F("group_instance_id", STRING, "4+", nullable="4+", default=NULL),
                        F("client_id", STRING),
                        F("client_host", STRING),
                        F("member_metadata", BYTES),
                        F("member_assignment", BYTES),
                    ],
                ),
                F("authorized_operations", INT32, "3+", default=-2147483648),
            ],
        ),
    ],
)

LIST_GROUPS_REQUEST = Message(
    "ListGroupsRequest",
    16,
    "0-5",
    "3+",
    [
        F("states_filter", ArrayOf(STRING), "4+"),
        F("types_filter", ArrayOf(STRING), "5+"),
    ],
)

LIST_GROUPS_RESPONSE = Message(
    "ListGroupsResponse",
    16,
    "0-5",
    "3+",
    [
        F("throttle_time_ms", INT32, "1+"),
        F("error_code", INT16),
        F(
            "groups",
            [
                F("group_id", STRING),
                F("protocol_type", STRING),
                F("group_state", STRING, "4+"),
                F("group_type", STRING, "5+"),
            ],
        ),
    ],
)

DELETE_GROUPS_REQUEST = Message(
    "DeleteGroupsRequest",
    42,
    "0-2",
    "2+",
    [
        F("groups_names", ArrayOf(STRING)),
    ],
)

DELETE_GROUPS_RESPONSE = Message(
    "DeleteGroupsResponse",
    42,
    "0-2",
    "2+",
    [
        F("throttle_time_ms", INT32),
        F(
            "results",
            [
                F("group_id", STRING),
                F("error_code", INT16),
            ],
        ),
    ],
)

# api_key -> (request, response)
DEFINITIONS: dict[int, tuple[Message, Message]] = {
    10: (FIND_COORDINATOR_REQUEST, FIND_COORDINATOR_RESPONSE),
    11: (JOIN_GROUP_REQUEST, JOIN_GROUP_RESPONSE),
    12: (HEARTBEAT_REQUEST, HEARTBEAT_RESPONSE),
    13: (LEAVE_GROUP_REQUEST, LEAVE_GROUP_RESPONSE),
    14: (SYNC_GROUP_REQUEST, SYNC_GROUP_RESPONSE),
    15: (DESCRIBE_GROUPS_REQUEST, DESCRIBE_GROUPS_RESPONSE),
    16: (LIST_GROUPS_REQUEST, LIST_GROUPS_RESPONSE),
    42: (DELETE_GROUPS_REQUEST, DELETE_GROUPS_RESPONSE),
}
