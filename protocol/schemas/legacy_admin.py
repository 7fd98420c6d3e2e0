"""Admin / group-inspection APIs: CreateTopics, DescribeConfigs, DescribeGroups,
ListGroups.

New (missing from aiokafka 0.14):

* CreateTopics v4: same wire shape as v3 (v4 only changed broker behaviour:
  the ``replication_factor`` / ``num_partitions`` sentinel ``-1`` is allowed).
* DescribeConfigs v3: request gains ``include_documentation``; each config
  entry gains ``config_type`` (int8) and ``config_documentation`` (nullable).
* DescribeGroups v4: members gain ``group_instance_id`` (nullable, after
  ``member_id``).

Overrides (aiokafka's class is wrong):

* ``DescribeGroupsRequest_v3.RESPONSE_TYPE`` is ``DescribeGroupsResponse_v2``
  in aiokafka, whose schema lacks the per-group ``authorized_operations``
  that v3 adds; we pair v3 with ``DescribeGroupsResponse_v3``.
* ``ListGroupsRequest_v2.API_VERSION`` is ``1`` in aiokafka (copy/paste slip);
  ours says ``2``.
"""

from __future__ import annotations

from aiokafka.protocol.admin import (
    CreateTopicsRequest_v3,
    CreateTopicsResponse_v3,
    DescribeGroupsResponse_v3,
    ListGroupsRequest_v0,
    ListGroupsResponse_v2,
)
from aiokafka.protocol.admin import (
    DescribeGroupsRequest_v3 as _AioDescribeGroupsRequest_v3,
)
from aiokafka.protocol.api import RequestStruct, Response
from aiokafka.protocol.types import Array, Boolean, Bytes, Int8, Int16, Int32, Schema, String

# --------------------------------------------------------------------------- CreateTopics (19)


class CreateTopicsResponse_v4(Response):
    API_KEY = 19
    API_VERSION = 4
    SCHEMA = CreateTopicsResponse_v3.SCHEMA


class CreateTopicsRequest_v4(RequestStruct):
    API_KEY = 19
    API_VERSION = 4
    RESPONSE_TYPE = CreateTopicsResponse_v4
    SCHEMA = CreateTopicsRequest_v3.SCHEMA


# ------------------------------------------------------------------------ DescribeConfigs (32)


class DescribeConfigsResponse_v3(Response):
    API_KEY = 32
    API_VERSION = 3
    SCHEMA = Schema(
        ("throttle_time_ms", Int32),
        (
            "resources",
            Array(
                ("error_code", Int16),
                ("error_message", String("utf-8")),  # nullable
                ("resource_type", Int8),
                ("resource_name", String("utf-8")),
                (
                    "config_entries",
                    Array(
                        # "config_names" (sic) matches aiokafka's v0-v2 naming.
                        ("config_names", String("utf-8")),
                        ("config_value", String("utf-8")),  # nullable
                        ("read_only", Boolean),
                        ("config_source", Int8),
                        ("is_sensitive", Boolean),
                        (
                            "config_synonyms",
                            Array(
                                ("config_name", String("utf-8")),
                                ("config_value", String("utf-8")),  # nullable
                                ("config_source", Int8),
                            ),
                        ),
                        ("config_type", Int8),
                        ("config_documentation", String("utf-8")),  # nullable
                    ),
                ),
            ),
        ),
    )


class DescribeConfigsRequest_v3(RequestStruct):
    API_KEY = 32
    API_VERSION = 3
    RESPONSE_TYPE = DescribeConfigsResponse_v3
    SCHEMA = Schema(
        (
            "resources",
            Array(
                ("resource_type", Int8),
                ("resource_name", String("utf-8")),
                ("config_names", Array(String("utf-8"))),  # nullable: None = all
            ),
        ),
        ("include_synonyms", Boolean),
        ("include_documentation", Boolean),
    )


# ------------------------------------------------------------------------- DescribeGroups (15)


class DescribeGroupsRequest_v3(RequestStruct):
    """Overrides aiokafka's DescribeGroupsRequest_v3 (RESPONSE_TYPE was v2)."""

    API_KEY = 15
    API_VERSION = 3
    RESPONSE_TYPE = DescribeGroupsResponse_v3
    SCHEMA = _AioDescribeGroupsRequest_v3.SCHEMA


class DescribeGroupsResponse_v4(Response):
    API_KEY = 15
    API_VERSION = 4
    SCHEMA = Schema(
        ("throttle_time_ms", Int32),
        (
            "groups",
            Array(
                ("error_code", Int16),
                ("group", String("utf-8")),
                ("state", String("utf-8")),
                ("protocol_type", String("utf-8")),
                ("protocol", String("utf-8")),
                (
                    "members",
                    Array(
                        ("member_id", String("utf-8")),
                        ("group_instance_id", String("utf-8")),  # nullable
                        ("client_id", String("utf-8")),
                        ("client_host", String("utf-8")),
                        ("member_metadata", Bytes),
                        ("member_assignment", Bytes),
                    ),
                ),
                ("authorized_operations", Int32),
            ),
        ),
    )


class DescribeGroupsRequest_v4(RequestStruct):
    API_KEY = 15
    API_VERSION = 4
    RESPONSE_TYPE = DescribeGroupsResponse_v4
    SCHEMA = DescribeGroupsRequest_v3.SCHEMA


# ----------------------------------------------------------------------------- ListGroups (16)


class ListGroupsRequest_v2(RequestStruct):
    """Overrides aiokafka's ListGroupsRequest_v2 (API_VERSION was 1)."""

    API_KEY = 16
    API_VERSION = 2
    RESPONSE_TYPE = ListGroupsResponse_v2
    SCHEMA = ListGroupsRequest_v0.SCHEMA


MESSAGES: dict[tuple[int, int], tuple[type[RequestStruct], type[Response]]] = {
    (19, 4): (CreateTopicsRequest_v4, CreateTopicsResponse_v4),
    (32, 3): (DescribeConfigsRequest_v3, DescribeConfigsResponse_v3),
    (15, 3): (DescribeGroupsRequest_v3, DescribeGroupsResponse_v3),
    (15, 4): (DescribeGroupsRequest_v4, DescribeGroupsResponse_v4),
    (16, 2): (ListGroupsRequest_v2, ListGroupsResponse_v2),
}
