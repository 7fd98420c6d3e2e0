"""ListOffsets, OffsetCommit, OffsetFetch, OffsetDelete.

Overrides (aiokafka's class is wrong):

* ListOffsets v4/v5 request: aiokafka's ``OffsetRequest_v4``/``_v5`` declare
  ``current_leader_epoch`` as **Int64**; Kafka's schema says int32.  Decoding
  a real client's v4/v5 request with aiokafka's class misreads every
  partition after the first 4 bytes of the epoch.  ``ListOffsetsRequest_v4``
  and ``_v5`` below use Int32 (responses are fine and reused).

New (missing from aiokafka 0.14), names follow aiokafka's v3 classes:

* OffsetCommit v4: same wire shape as v3.  v5: drops ``retention_time``.
  v6: partitions gain ``leader_epoch`` (committed leader epoch, int32, after
  ``offset``).  v7: adds ``group_instance_id`` (nullable, after
  ``consumer_id``).  Responses v4-v7 have the v3 shape.
* OffsetFetch v4: same wire shape as v3.  v5: response partitions gain
  ``leader_epoch`` (committed leader epoch, after ``offset``).
  Request ``topics`` is nullable (None = all topics the group has offsets for).
* OffsetDelete v0 (api_key 47).
"""

from __future__ import annotations

from aiokafka.protocol.api import RequestStruct, Response
from aiokafka.protocol.commit import (
    OffsetCommitResponse_v3,
    OffsetFetchRequest_v3,
    OffsetFetchResponse_v3,
)
from aiokafka.protocol.offset import OffsetResponse_v4, OffsetResponse_v5
from aiokafka.protocol.types import Array, Int8, Int16, Int32, Int64, Schema, String

# ---------------------------------------------------------------------------- ListOffsets (2)


class ListOffsetsRequest_v4(RequestStruct):
    """Overrides aiokafka's OffsetRequest_v4 (current_leader_epoch was Int64)."""

    API_KEY = 2
    API_VERSION = 4
    RESPONSE_TYPE = OffsetResponse_v4
    SCHEMA = Schema(
        ("replica_id", Int32),
        ("isolation_level", Int8),
        (
            "topics",
            Array(
                ("topic", String("utf-8")),
                (
                    "partitions",
                    Array(
                        ("partition", Int32),
                        ("current_leader_epoch", Int32),
                        ("timestamp", Int64),
                    ),
                ),
            ),
        ),
    )


class ListOffsetsRequest_v5(RequestStruct):
    """Overrides aiokafka's OffsetRequest_v5 (current_leader_epoch was Int64)."""

    API_KEY = 2
    API_VERSION = 5
    RESPONSE_TYPE = OffsetResponse_v5
    SCHEMA = ListOffsetsRequest_v4.SCHEMA


# --------------------------------------------------------------------------- OffsetCommit (8)


class OffsetCommitResponse_v4(Response):
    API_KEY = 8
    API_VERSION = 4
    SCHEMA = OffsetCommitResponse_v3.SCHEMA


class OffsetCommitResponse_v5(Response):
    API_KEY = 8
    API_VERSION = 5
    SCHEMA = OffsetCommitResponse_v3.SCHEMA


class OffsetCommitResponse_v6(Response):
    API_KEY = 8
    API_VERSION = 6
    SCHEMA = OffsetCommitResponse_v3.SCHEMA


class OffsetCommitResponse_v7(Response):
    API_KEY = 8
    API_VERSION = 7
    SCHEMA = OffsetCommitResponse_v3.SCHEMA


_COMMIT_TOPICS_V2 = (
    "topics",
    Array(
        ("topic", String("utf-8")),
        (
            "partitions",
            Array(
                ("partition", Int32),
                ("offset", Int64),
                ("metadata", String("utf-8")),  # nullable
            ),
        ),
    ),
)

_COMMIT_TOPICS_V6 = (
    "topics",
    Array(
        ("topic", String("utf-8")),
        (
            "partitions",
            Array(
                ("partition", Int32),
                ("offset", Int64),
                ("leader_epoch", Int32),
                ("metadata", String("utf-8")),  # nullable
            ),
        ),
    ),
)


class OffsetCommitRequest_v4(RequestStruct):
    API_KEY = 8
    API_VERSION = 4
    RESPONSE_TYPE = OffsetCommitResponse_v4
    SCHEMA = Schema(
        ("consumer_group", String("utf-8")),
        ("consumer_group_generation_id", Int32),
        ("consumer_id", String("utf-8")),
        ("retention_time", Int64),
        _COMMIT_TOPICS_V2,
    )


class OffsetCommitRequest_v5(RequestStruct):
    API_KEY = 8
    API_VERSION = 5
    RESPONSE_TYPE = OffsetCommitResponse_v5
    SCHEMA = Schema(
        ("consumer_group", String("utf-8")),
        ("consumer_group_generation_id", Int32),
        ("consumer_id", String("utf-8")),
        _COMMIT_TOPICS_V2,
    )


class OffsetCommitRequest_v6(RequestStruct):
    API_KEY = 8
    API_VERSION = 6
    RESPONSE_TYPE = OffsetCommitResponse_v6
    SCHEMA = Schema(
        ("consumer_group", String("utf-8")),
        ("consumer_group_generation_id", Int32),
        ("consumer_id", String("utf-8")),
        _COMMIT_TOPICS_V6,
    )


class OffsetCommitRequest_v7(RequestStruct):
    API_KEY = 8
    API_VERSION = 7
    RESPONSE_TYPE = OffsetCommitResponse_v7
    SCHEMA = Schema(
        ("consumer_group", String("utf-8")),
        ("consumer_group_generation_id", Int32),
        ("consumer_id", String("utf-8")),
        ("group_instance_id", String("utf-8")),  # nullable
        _COMMIT_TOPICS_V6,
    )


# ---------------------------------------------------------------------------- OffsetFetch (9)


class OffsetFetchResponse_v4(Response):
    API_KEY = 9
    API_VERSION = 4
    SCHEMA = OffsetFetchResponse_v3.SCHEMA


class OffsetFetchResponse_v5(Response):
    API_KEY = 9
    API_VERSION = 5
    SCHEMA = Schema(
        ("throttle_time_ms", Int32),
        (
            "topics",
            Array(
                ("topic", String("utf-8")),
                (
                    "partitions",
                    Array(
                        ("partition", Int32),
                        ("offset", Int64),
                        ("leader_epoch", Int32),
                        ("metadata", String("utf-8")),  # nullable
                        ("error_code", Int16),
                    ),
                ),
            ),
        ),
        ("error_code", Int16),
    )


class OffsetFetchRequest_v4(RequestStruct):
    API_KEY = 9
    API_VERSION = 4
    RESPONSE_TYPE = OffsetFetchResponse_v4
    SCHEMA = OffsetFetchRequest_v3.SCHEMA  # consumer_group, topics (nullable)


class OffsetFetchRequest_v5(RequestStruct):
    API_KEY = 9
    API_VERSION = 5
    RESPONSE_TYPE = OffsetFetchResponse_v5
    SCHEMA = OffsetFetchRequest_v3.SCHEMA


# --------------------------------------------------------------------------- OffsetDelete (47)


class OffsetDeleteResponse_v0(Response):
    API_KEY = 47
    API_VERSION = 0
    SCHEMA = Schema(
        ("error_code", Int16),
        ("throttle_time_ms", Int32),
        (
            "topics",
            Array(
                ("topic", String("utf-8")),
                ("partitions", Array(("partition", Int32), ("error_code", Int16))),
            ),
        ),
    )


class OffsetDeleteRequest_v0(RequestStruct):
    API_KEY = 47
    API_VERSION = 0
    RESPONSE_TYPE = OffsetDeleteResponse_v0
    SCHEMA = Schema(
        ("group_id", String("utf-8")),
        (
            "topics",
            Array(
                ("topic", String("utf-8")),
                ("partitions", Array(Int32)),
            ),
        ),
    )


MESSAGES: dict[tuple[int, int], tuple[type[RequestStruct], type[Response]]] = {
    (2, 4): (ListOffsetsRequest_v4, OffsetResponse_v4),
    (2, 5): (ListOffsetsRequest_v5, OffsetResponse_v5),
    (8, 4): (OffsetCommitRequest_v4, OffsetCommitResponse_v4),
    (8, 5): (OffsetCommitRequest_v5, OffsetCommitResponse_v5),
    (8, 6): (OffsetCommitRequest_v6, OffsetCommitResponse_v6),
    (8, 7): (OffsetCommitRequest_v7, OffsetCommitResponse_v7),
    (9, 4): (OffsetFetchRequest_v4, OffsetFetchResponse_v4),
    (9, 5): (OffsetFetchRequest_v5, OffsetFetchResponse_v5),
    (47, 0): (OffsetDeleteRequest_v0, OffsetDeleteResponse_v0),
}
