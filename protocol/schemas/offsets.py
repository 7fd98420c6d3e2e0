"""Committed offsets: OffsetCommit (8), OffsetFetch (9), OffsetDelete (47)."""

from __future__ import annotations

from kgroupd.protocol.codec import (
    BOOL,
    INT16,
    INT32,
    INT64,
    NULL,
    STRING,
    UUID,
    ArrayOf,
    F,
    Message,
)

OFFSET_COMMIT_REQUEST = Message(
    "OffsetCommitRequest",
    8,
    "0-10",
    "8+",
    [
        F("group_id", STRING),
        F("generation_id_or_member_epoch", INT32, "1+", default=-1),
        F("member_id", STRING, "1+"),
        F("group_instance_id", STRING, "7+", nullable="7+", default=NULL),
        F("retention_time_ms", INT64, "2-4", default=-1),
        F(
            "topics",
            [
                F("name", STRING, "0-9"),
                F("topic_id", UUID, "10+"),
                F(
                    "partitions",
                    [
                        F("partition_index", INT32),
                        F("committed_offset", INT64),
                        F("committed_leader_epoch", INT32, "6+", default=-1),
                        F("commit_timestamp", INT64, "1", default=-1),
                        F("committed_metadata", STRING, nullable="0+"),
                    ],
                ),
            ],
        ),
    ],
)

OFFSET_COMMIT_RESPONSE = Message(
    "OffsetCommitResponse",
    8,
    "0-10",
    "8+",
    [
        F("throttle_time_ms", INT32, "3+"),
        F(
            "topics",
            [
                F("name", STRING, "0-9"),
                F("topic_id", UUID, "10+"),
                F(
                    "partitions",
                    [
                        F("partition_index", INT32),
                        F("error_code", INT16),
                    ],
                ),
            ],
        ),
    ],
)

OFFSET_FETCH_REQUEST = Message(
    "OffsetFetchRequest",
    9,
    "0-10",
    "6+",
    [
        F("group_id", STRING, "0-7"),
        F(
            "topics",
            [
                F("name", STRING, "0-7"),
                F("partition_indexes", ArrayOf(INT32), "0-7"),
            ],
            "0-7",
            nullable="2-7",
        ),
        F(
            "groups",
            [
                F("group_id", STRING, "8+"),
                F("member_id", STRING, "9+", nullable="9+", default=NULL),
                F("member_epoch", INT32, "9+", default=-1),
                F(
                    "topics",
                    [
                        F("name", STRING, "8-9"),
                        F("topic_id", UUID, "10+"),
                        F("partition_indexes", ArrayOf(INT32), "8+"),
                    ],
                    "8+",
                    nullable="8+",
                ),
            ],
            "8+",
        ),
        F("require_stable", BOOL, "7+"),
    ],
)

OFFSET_FETCH_RESPONSE = Message(
    "OffsetFetchResponse",
    9,
    "0-10",
    "6+",
    [
        F("throttle_time_ms", INT32, "3+"),
        F(
            "topics",
            [
                F("name", STRING, "0-7"),
                F(
                    "partitions",
                    [
                        F("partition_index", INT32, "0-7"),
                        F("committed_offset", INT64, "0-7"),
                        F("committed_leader_epoch", INT32, "5-7", default=-1),
                        F("metadata", STRING, "0-7", nullable="0-7"),
                        F("error_code", INT16, "0-7"),
                    ],
                    "0-7",
                ),
            ],
            "0-7",
        ),
        F("error_code", INT16, "2-7"),
        F(
            "groups",
            [
                F("group_id", STRING, "8+"),
                F(
                    "topics",
                    [
                        F("name", STRING, "8-9"),
                        F("topic_id", UUID, "10+"),
                        F(
                            "partitions",
                            [
                                F("partition_index", INT32, "8+"),
                                F("committed_offset", INT64, "8+"),
                                F("committed_leader_epoch", INT32, "8+", default=-1),
                                F("metadata", STRING, "8+", nullable="8+"),
                                F("error_code", INT16, "8+"),
                            ],
                            "8+",
                        ),
                    ],
                    "8+",
                ),
                F("error_code", INT16, "8+"),
            ],
            "8+",
        ),
    ],
)

OFFSET_DELETE_REQUEST = Message(
    "OffsetDeleteRequest",
    47,
    "0-0",
    "none",
    [
        F("group_id", STRING),
        F(
            "topics",
            [
                F("name", STRING),
                F(
                    "partitions",
                    [
                        F("partition_index", INT32),
                    ],
                ),
            ],
        ),
    ],
)

OFFSET_DELETE_RESPONSE = Message(
    "OffsetDeleteResponse",
    47,
    "0-0",
    "none",
    [
        F("error_code", INT16),
        F("throttle_time_ms", INT32),
        F(
            "topics",
            [
                F("name", STRING),
                F(
                    "partitions",
                    [
                        F("partition_index", INT32),
                        F("error_code", INT16),
                    ],
                ),
            ],
        ),
    ],
)

# api_key -> (request, response)
DEFINITIONS: dict[int, tuple[Message, Message]] = {
    8: (OFFSET_COMMIT_REQUEST, OFFSET_COMMIT_RESPONSE),
    9: (OFFSET_FETCH_REQUEST, OFFSET_FETCH_RESPONSE),
    47: (OFFSET_DELETE_REQUEST, OFFSET_DELETE_RESPONSE),
}
