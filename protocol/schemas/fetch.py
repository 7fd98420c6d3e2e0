"""Fetch (1)."""

from __future__ import annotations

from kgroupd.protocol.codec import (
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

FETCH_REQUEST = Message(
    "FetchRequest",
    1,
    "4-18",
    "12+",
    [
        F("cluster_id", STRING, "12+", nullable="12+", default=NULL, tag=0, tagged="12+"),
        F("replica_id", INT32, "0-14", default=-1),
        F(
            "replica_state",
            [
                F("replica_id", INT32, "15+", default=-1),
                F("replica_epoch", INT64, "15+", default=-1),
            ],
            "15+",
            tag=1,
            tagged="15+",
            struct=True,
        ),
        F("max_wait_ms", INT32),
        F("min_bytes", INT32),
        F("max_bytes", INT32, "3+", default=2147483647),
        F("isolation_level", INT8, "4+"),
        F("session_id", INT32, "7+"),
        F("session_epoch", INT32, "7+", default=-1),
        F(
            "topics",
            [
                F("topic", STRING, "0-12"),
                F("topic_id", UUID, "13+"),
                F(
                    "partitions",
                    [
                        F("partition", INT32),
                        F("current_leader_epoch", INT32, "9+", default=-1),
                        F("fetch_offset", INT64),
                        F("last_fetched_epoch", INT32, "12+", default=-1),
                        F("log_start_offset", INT64, "5+", default=-1),
                        F("partition_max_bytes", INT32),
                        F("replica_directory_id", UUID, "17+", tag=0, tagged="17+"),
                        F(
                            "high_watermark",
                            INT64,
                            "18+",
                            default=9223372036854775807,
                            tag=1,
                            tagged="18+",
                        ),
                    ],
                ),
            ],
        ),
        F(
            "forgotten_topics_data",
            [
                F("topic", STRING, "7-12"),
                F("topic_id", UUID, "13+"),
                F("partitions", ArrayOf(INT32), "7+"),
            ],
            "7+",
        ),
        F("rack_id", STRING, "11+"),
    ],
)

FETCH_RESPONSE = Message(
    "FetchResponse",
    1,
    "4-18",
    "12+",
    [
        F("throttle_time_ms", INT32, "1+"),
        F("error_code", INT16, "7+"),
        F("session_id", INT32, "7+"),
        F(
            "responses",
            [
                F("topic", STRING, "0-12"),
                F("topic_id", UUID, "13+"),
                F(
                    "partitions",
                    [
                        F("partition_index", INT32),
                        F("error_code", INT16),
                        F("high_watermark", INT64),
                        F("last_stable_offset", INT64, "4+", default=-1),
                        F("log_start_offset", INT64, "5+", default=-1),
                        F(
                            "diverging_epoch",
                            [
                                F("epoch", INT32, "12+", default=-1),
                                F("end_offset", INT64, "12+", default=-1),
                            ],
                            "12+",
                            tag=0,
                            tagged="12+",
                            struct=True,
                        ),
                        F(
                            "current_leader",
                            [
                                F("leader_id", INT32, "12+", default=-1),
                                F("leader_epoch", INT32, "12+", default=-1),
                            ],
                            "12+",
                            tag=1,
                            tagged="12+",
                            struct=True,
                        ),
                        F(
                            "snapshot_id",
                            [
                                F("end_offset", INT64, default=-1),
                                F("epoch", INT32, default=-1),
                            ],
                            "12+",
                            tag=2,
                            tagged="12+",
                            struct=True,
                        ),
                        F(
                            "aborted_transactions",
                            [
                                F("producer_id", INT64, "4+"),
                                F("first_offset", INT64, "4+"),
                            ],
                            "4+",
                            nullable="4+",
                        ),
                        F("preferred_read_replica", INT32, "11+", default=-1),
                        F("records", RECORDS, nullable="0+"),
                    ],
                ),
            ],
        ),
        F(
            "node_endpoints",
            [
                F("node_id", INT32, "16+"),
                F("host", STRING, "16+"),
                F("port", INT32, "16+"),
                F("rack", STRING, "16+", nullable="16+", default=NULL),
            ],
            "16+",
            tag=0,
            tagged="16+",
        ),
    ],
)

# api_key -> (request, response)
DEFINITIONS: dict[int, tuple[Message, Message]] = {
    1: (FETCH_REQUEST, FETCH_RESPONSE),
}
