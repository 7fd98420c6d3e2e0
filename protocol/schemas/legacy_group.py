"""Group-coordination APIs missing from aiokafka 0.14: FindCoordinator v2,
JoinGroup v3-v4, SyncGroup v2, Heartbeat v2-v3, LeaveGroup v2-v3.

Field names follow aiokafka's neighbouring versions (``group``,
``member_id``, ``group_instance_id`` ...), so a handler fills e.g.
JoinGroup v2/v3/v4 identically.

* FindCoordinator v2, JoinGroup v3/v4, SyncGroup v2, Heartbeat v2 and
  LeaveGroup v2 have the same wire shape as the previous version (the bumps
  only changed throttling / error semantics).
* Heartbeat v3 (KIP-345) adds ``group_instance_id`` (nullable).
* LeaveGroup v3 (KIP-345) replaces ``member_id`` with a batch ``members``
  array of ``(member_id, group_instance_id)``; the response gains a
  per-member ``members`` array of ``(member_id, group_instance_id,
  error_code)``.
"""

from __future__ import annotations

from aiokafka.protocol.api import RequestStruct, Response
from aiokafka.protocol.coordination import FindCoordinatorRequest_v1, FindCoordinatorResponse_v1
from aiokafka.protocol.group import (
    HeartbeatRequest_v1,
    HeartbeatResponse_v1,
    JoinGroupRequest_v2,
    JoinGroupResponse_v2,
    LeaveGroupRequest_v1,
    LeaveGroupResponse_v1,
    SyncGroupRequest_v1,
    SyncGroupResponse_v1,
)
from aiokafka.protocol.types import Array, Int16, Int32, Schema, String

# ------------------------------------------------------------------------ FindCoordinator (10)


class FindCoordinatorResponse_v2(Response):
    API_KEY = 10
    API_VERSION = 2
    # throttle_time_ms, error_code, error_message (nullable), coordinator_id, host, port
    SCHEMA = FindCoordinatorResponse_v1.SCHEMA


class FindCoordinatorRequest_v2(RequestStruct):
    API_KEY = 10
    API_VERSION = 2
    RESPONSE_TYPE = FindCoordinatorResponse_v2
    # coordinator_key, coordinator_type (int8: 0 group, 1 transaction)
    SCHEMA = FindCoordinatorRequest_v1.SCHEMA


# ------------------------------------------------------------------------------ JoinGroup (11)


class JoinGroupResponse_v3(Response):
    API_KEY = 11
    API_VERSION = 3
    # throttle_time_ms, error_code, generation_id, group_protocol, leader_id,
    # member_id, members: [(member_id, member_metadata)]
    SCHEMA = JoinGroupResponse_v2.SCHEMA


class JoinGroupResponse_v4(Response):
    API_KEY = 11
    API_VERSION = 4
    SCHEMA = JoinGroupResponse_v2.SCHEMA


class JoinGroupRequest_v3(RequestStruct):
    API_KEY = 11
    API_VERSION = 3
    RESPONSE_TYPE = JoinGroupResponse_v3
    # group, session_timeout, rebalance_timeout, member_id, protocol_type,
    # group_protocols: [(protocol_name, protocol_metadata)]
    SCHEMA = JoinGroupRequest_v2.SCHEMA


class JoinGroupRequest_v4(RequestStruct):
    API_KEY = 11
    API_VERSION = 4
    RESPONSE_TYPE = JoinGroupResponse_v4
    SCHEMA = JoinGroupRequest_v2.SCHEMA


# ------------------------------------------------------------------------------ SyncGroup (14)


class SyncGroupResponse_v2(Response):
    API_KEY = 14
    API_VERSION = 2
    # throttle_time_ms, error_code, member_assignment
    SCHEMA = SyncGroupResponse_v1.SCHEMA


class SyncGroupRequest_v2(RequestStruct):
    API_KEY = 14
    API_VERSION = 2
    RESPONSE_TYPE = SyncGroupResponse_v2
    # group, generation_id, member_id, group_assignment: [(member_id, member_metadata)]
    SCHEMA = SyncGroupRequest_v1.SCHEMA


# ------------------------------------------------------------------------------ Heartbeat (12)


class HeartbeatResponse_v2(Response):
    API_KEY = 12
    API_VERSION = 2
    SCHEMA = HeartbeatResponse_v1.SCHEMA  # throttle_time_ms, error_code


class HeartbeatResponse_v3(Response):
    API_KEY = 12
    API_VERSION = 3
    SCHEMA = HeartbeatResponse_v1.SCHEMA


class HeartbeatRequest_v2(RequestStruct):
    API_KEY = 12
    API_VERSION = 2
    RESPONSE_TYPE = HeartbeatResponse_v2
    SCHEMA = HeartbeatRequest_v1.SCHEMA  # group, generation_id, member_id


class HeartbeatRequest_v3(RequestStruct):
    API_KEY = 12
    API_VERSION = 3
    RESPONSE_TYPE = HeartbeatResponse_v3
    SCHEMA = Schema(
        ("group", String("utf-8")),
        ("generation_id", Int32),
        ("member_id", String("utf-8")),
        ("group_instance_id", String("utf-8")),  # nullable
    )


# ----------------------------------------------------------------------------- LeaveGroup (13)


class LeaveGroupResponse_v2(Response):
    API_KEY = 13
    API_VERSION = 2
    SCHEMA = LeaveGroupResponse_v1.SCHEMA  # throttle_time_ms, error_code


class LeaveGroupResponse_v3(Response):
    API_KEY = 13
    API_VERSION = 3
    SCHEMA = Schema(
        ("throttle_time_ms", Int32),
        ("error_code", Int16),
        (
            "members",
            Array(
                ("member_id", String("utf-8")),
                ("group_instance_id", String("utf-8")),  # nullable
                ("error_code", Int16),
            ),
        ),
    )


class LeaveGroupRequest_v2(RequestStruct):
    API_KEY = 13
    API_VERSION = 2
    RESPONSE_TYPE = LeaveGroupResponse_v2
    SCHEMA = LeaveGroupRequest_v1.SCHEMA  # group, member_id


class LeaveGroupRequest_v3(RequestStruct):
    API_KEY = 13
    API_VERSION = 3
    RESPONSE_TYPE = LeaveGroupResponse_v3
    SCHEMA = Schema(
        ("group", String("utf-8")),
        (
            "members",
            Array(
                ("member_id", String("utf-8")),
                ("group_instance_id", String("utf-8")),  # nullable
            ),
        ),
    )


MESSAGES: dict[tuple[int, int], tuple[type[RequestStruct], type[Response]]] = {
    (10, 2): (FindCoordinatorRequest_v2, FindCoordinatorResponse_v2),
    (11, 3): (JoinGroupRequest_v3, JoinGroupResponse_v3),
    (11, 4): (JoinGroupRequest_v4, JoinGroupResponse_v4),
    (14, 2): (SyncGroupRequest_v2, SyncGroupResponse_v2),
    (12, 2): (HeartbeatRequest_v2, HeartbeatResponse_v2),
    (12, 3): (HeartbeatRequest_v3, HeartbeatResponse_v3),
    (13, 2): (LeaveGroupRequest_v2, LeaveGroupResponse_v2),
    (13, 3): (LeaveGroupRequest_v3, LeaveGroupResponse_v3),
}
