"""Produce (0) and InitProducerId (22)."""

from __future__ import annotations

from kgroupd.protocol.codec import (
    BOOL,
    INT16,
    INT32,
    INT64,
    NULL,
    RECORDS_VIEW,
    STRING,
    UUID,
    F,
    Message,
)

PRODUCE_REQUEST = Message(
    "ProduceRequest",
    0,
    "0-13",
    "9+",
    [
        F("transactional_id", STRING, "3+", nullable="3+", default=NULL),
        F("acks", INT16),
        F("timeout_ms", INT32),
        F(
            "topic_data",
            [
                F("name", STRING, "0-12"),
                F("topic_id", UUID, "13+"),
                F(
                    "partition_data",
                    [
                        F("index", INT32),
                        F("records", RECORDS_VIEW, nullable="0+"),
                    ],
                ),
            ],
        ),
    ],
)

PRODUCE_RESPONSE = Message(
    "ProduceResponse",
    0,
    "0-13",
    "9+",
    [
        F(
            "responses",
            [
                F("name", STRING, "0-12"),
                F("topic_id", UUID, "13+"),
                F(
                    "partition_responses",
                    [
                        F("index", INT32),
                        F("error_code", INT16),
                        F("base_offset", INT64),
                        F("log_append_time_ms", INT64, "2+", default=-1),
                        F("log_start_offset", INT64, "5+", default=-1),
                        F(
                            "record_errors",
                            [
                                F("batch_index", INT32, "8+"),
                                F(
                                    "batch_index_error_message",
                                    STRING,
                                    "8+",
                                    nullable="8+",
                                    default=NULL,
                                ),
                            ],
                            "8+",
                        ),
                        F("error_message", STRING, "8+", nullable="8+", default=NULL),
                        F(
                            "current_leader",
                            [
                                F("leader_id", INT32, "10+", default=-1),
                                F("leader_epoch", INT32, "10+", default=-1),
                            ],
                            "10+",
                            tag=0,
                            tagged="10+",
                            struct=True,
                        ),
                    ],
                ),
            ],
        ),
        F("throttle_time_ms", INT32, "1+"),
        F(
            "node_endpoints",
            [
                F("node_id", INT32, "10+"),
                F("host", STRING, "10+"),
                F("port", INT32, "10+"),
                F("rack", STRING, "10+", nullable="10+", default=NULL),
            ],
            "10+",
            tag=0,
            tagged="10+",
        ),
    ],
)

INIT_PRODUCER_ID_REQUEST = Message(
    "InitProducerIdRequest",
    22,
    "0-5",
    "2+",
    [
        F("transactional_id", STRING, nullable="0+"),
        F("transaction_timeout_ms", INT32),
        F("producer_id", INT64, "3+", default=-1),
        F("producer_epoch", INT16, "3+", default=-1),
        F("enable2_pc", BOOL, "6+"),
        F("keep_prepared_txn", BOOL, "6+"),
    ],
)

INIT_PRODUCER_ID_RESPONSE = Message(
    "InitProducerIdResponse",
    22,
    "0-5",
    "2+",
    [
        F("throttle_time_ms", INT32),
        F("error_code", INT16),
        F("producer_id", INT64, default=-1),
        F("producer_epoch", INT16),
        F("ongoing_txn_producer_id", INT64, "6+", default=-1),
        F("ongoing_txn_producer_epoch", INT16, "6+", default=-1),
    ],
)

# api_key -> (request, response)
DEFINITIONS: dict[int, tuple[Message, Message]] = {
    0: (PRODUCE_REQUEST, PRODUCE_RESPONSE),
    22: (INIT_PRODUCER_ID_REQUEST, INIT_PRODUCER_ID_RESPONSE),
}
