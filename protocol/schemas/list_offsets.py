"""ListOffsets (2)."""

from __future__ import annotations

from kgroupd.protocol.codec import INT8, INT16, INT32, INT64, STRING, ArrayOf, F, Message

LIST_OFFSETS_REQUEST = Message(
    "ListOffsetsRequest",
    2,
    "0-11",
    "6+",
    [
        F("replica_id", INT32),
        F("isolation_level", INT8, "2+"),
        F(
            "topics",
            [
                F("name", STRING),
                F(
                    "partitions",
                    [
                        F("partition_index", INT32),
                        F("current_leader_epoch", INT32, "4+", default=-1),
                        F("timestamp", INT64),
                        F("max_num_offsets", INT32, "0", default=1),
                    ],
                ),
            ],
        ),
        F("timeout_ms", INT32, "10+"),
    ],
)

LIST_OFFSETS_RESPONSE = Message(
    "ListOffsetsResponse",
    2,
    "0-11",
    "6+",
    [
        F("throttle_time_ms", INT32, "2+"),
        F(
            "topics",
            [
                F("name", STRING),
                F(
                    "partitions",
                    [
                        F("partition_index", INT32),
                        F("error_code", INT16),
                        F("old_style_offsets", ArrayOf(INT64), "0"),
                        F("timestamp", INT64, "1+", default=-1),
                        F("offset", INT64, "1+", default=-1),
                        F("leader_epoch", INT32, "4+", default=-1),
                    ],
                ),
            ],
        ),
    ],
)

# api_key -> (request, response)
DEFINITIONS: dict[int, tuple[Message, Message]] = {
    2: (LIST_OFFSETS_REQUEST, LIST_OFFSETS_RESPONSE),
}
