"""Metadata (api_key 3) v6-v8, missing from aiokafka 0.14.

Field names follow aiokafka's ``MetadataRequest_v5`` / ``MetadataResponse_v5``.

* v6: same wire shape as v5 (request and response).
* v7: partitions gain ``leader_epoch`` (after ``leader``).
* v8: request gains ``include_cluster_authorized_operations`` and
  ``include_topic_authorized_operations``; response topics gain
  ``topic_authorized_operations`` (after ``partitions``) and the response gains
  a trailing ``cluster_authorized_operations``.  Both are int32 bit fields;
  ``-2147483648`` (INT32_MIN) means "not requested".
"""

from __future__ import annotations

from aiokafka.protocol.api import RequestStruct, Response
from aiokafka.protocol.metadata import MetadataRequest_v5, MetadataResponse_v5
from aiokafka.protocol.types import Array, Boolean, Int16, Int32, Schema, String

_BROKERS = (
    "brokers",
    Array(
        ("node_id", Int32),
        ("host", String("utf-8")),
        ("port", Int32),
        ("rack", String("utf-8")),  # nullable
    ),
)

_PARTITIONS_V7 = (
    "partitions",
    Array(
        ("error_code", Int16),
        ("partition", Int32),
        ("leader", Int32),
        ("leader_epoch", Int32),
        ("replicas", Array(Int32)),
        ("isr", Array(Int32)),
        ("offline_replicas", Array(Int32)),
    ),
)


class MetadataResponse_v6(Response):
    API_KEY = 3
    API_VERSION = 6
    SCHEMA = MetadataResponse_v5.SCHEMA


class MetadataResponse_v7(Response):
    API_KEY = 3
    API_VERSION = 7
    SCHEMA = Schema(
        ("throttle_time_ms", Int32),
        _BROKERS,
        ("cluster_id", String("utf-8")),  # nullable
        ("controller_id", Int32),
        (
            "topics",
            Array(
                ("error_code", Int16),
                ("topic", String("utf-8")),
                ("is_internal", Boolean),
                _PARTITIONS_V7,
            ),
        ),
    )


class MetadataResponse_v8(Response):
    API_KEY = 3
    API_VERSION = 8
    SCHEMA = Schema(
        ("throttle_time_ms", Int32),
        _BROKERS,
        ("cluster_id", String("utf-8")),  # nullable
        ("controller_id", Int32),
        (
            "topics",
            Array(
                ("error_code", Int16),
                ("topic", String("utf-8")),
                ("is_internal", Boolean),
                _PARTITIONS_V7,
                ("topic_authorized_operations", Int32),
            ),
        ),
        ("cluster_authorized_operations", Int32),
    )


class MetadataRequest_v6(RequestStruct):
    # topics: None (null array) = all topics; [] = no topics
    API_KEY = 3
    API_VERSION = 6
    RESPONSE_TYPE = MetadataResponse_v6
    SCHEMA = MetadataRequest_v5.SCHEMA


class MetadataRequest_v7(RequestStruct):
    API_KEY = 3
    API_VERSION = 7
    RESPONSE_TYPE = MetadataResponse_v7
    SCHEMA = MetadataRequest_v5.SCHEMA


class MetadataRequest_v8(RequestStruct):
    API_KEY = 3
    API_VERSION = 8
    RESPONSE_TYPE = MetadataResponse_v8
    SCHEMA = Schema(
        ("topics", Array(String("utf-8"))),  # nullable
        ("allow_auto_topic_creation", Boolean),
        ("include_cluster_authorized_operations", Boolean),
        ("include_topic_authorized_operations", Boolean),
    )


MESSAGES: dict[tuple[int, int], tuple[type[RequestStruct], type[Response]]] = {
    (3, 6): (MetadataRequest_v6, MetadataResponse_v6),
    (3, 7): (MetadataRequest_v7, MetadataResponse_v7),
    (3, 8): (MetadataRequest_v8, MetadataResponse_v8),
}
