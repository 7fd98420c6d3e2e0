"""Transactions: AddPartitionsToTxn (24), AddOffsetsToTxn (25), EndTxn (26),
WriteTxnMarkers (27), TxnOffsetCommit (28), DescribeProducers (61), DescribeTransactions (65),
ListTransactions (66).

Defined for every version of Kafka 4.3's message JSON (none of them has
``latestVersionUnstable`` set), but not served yet: ``SERVED`` lists none of them until the
transaction coordinator is wired into the broker (issue 11).
"""

from __future__ import annotations

from kgroupd.protocol.codec import (
    BOOL,
    INT8,
    INT16,
    INT32,
    INT64,
    NULL,
    STRING,
    ArrayOf,
    F,
    Message,
)

# AddPartitionsToTxnTopic, a common struct of the request's v0-v3 body and v4+ transactions
_ADD_PARTITIONS_TOPIC = [
    F("name", STRING),
    F("partitions", ArrayOf(INT32)),
]

ADD_PARTITIONS_TO_TXN_REQUEST = Message(
    "AddPartitionsToTxnRequest",
    24,
    "0-5",
    "3+",
    [
        # v4+: brokers batching several transactions (verification); v0-v3: clients
        F(
            "transactions",
            [
                F("transactional_id", STRING, "4+"),
                F("producer_id", INT64, "4+"),
                F("producer_epoch", INT16, "4+"),
                F("verify_only", BOOL, "4+"),
                F("topics", _ADD_PARTITIONS_TOPIC, "4+"),
            ],
            "4+",
        ),
        F("v3_and_below_transactional_id", STRING, "0-3"),
        F("v3_and_below_producer_id", INT64, "0-3"),
        F("v3_and_below_producer_epoch", INT16, "0-3"),
        F("v3_and_below_topics", _ADD_PARTITIONS_TOPIC, "0-3"),
    ],
)

# AddPartitionsToTxnTopicResult, common to the response's v0-v3 body and v4+ results
_ADD_PARTITIONS_TOPIC_RESULT = [
    F("name", STRING),
    F(
        "results_by_partition",
        [
            F("partition_index", INT32),
            F("partition_error_code", INT16),
        ],
    ),
]

ADD_PARTITIONS_TO_TXN_RESPONSE = Message(
    "AddPartitionsToTxnResponse",
    24,
    "0-5",
    "3+",
    [
        F("throttle_time_ms", INT32),
        F("error_code", INT16, "4+"),
        F(
            "results_by_transaction",
            [
                F("transactional_id", STRING, "4+"),
                F("topic_results", _ADD_PARTITIONS_TOPIC_RESULT, "4+"),
            ],
            "4+",
        ),
        F("results_by_topic_v3_and_below", _ADD_PARTITIONS_TOPIC_RESULT, "0-3"),
    ],
)

ADD_OFFSETS_TO_TXN_REQUEST = Message(
    "AddOffsetsToTxnRequest",
    25,
    "0-4",
    "3+",
    [
        F("transactional_id", STRING),
        F("producer_id", INT64),
        F("producer_epoch", INT16),
        F("group_id", STRING),
    ],
)

ADD_OFFSETS_TO_TXN_RESPONSE = Message(
    "AddOffsetsToTxnResponse",
    25,
    "0-4",
    "3+",
    [
        F("throttle_time_ms", INT32),
        F("error_code", INT16),
    ],
)

END_TXN_REQUEST = Message(
    "EndTxnRequest",
    26,
    "0-5",
    "3+",
    [
        F("transactional_id", STRING),
        F("producer_id", INT64),
        F("producer_epoch", INT16),
        F("committed", BOOL),
    ],
)

END_TXN_RESPONSE = Message(
    "EndTxnResponse",
    26,
    "0-5",
    "3+",
    [
        F("throttle_time_ms", INT32),
        F("error_code", INT16),
        # v5+ (KIP-890 part 2): the producer id and epoch the transaction ended with
        F("producer_id", INT64, "5+", default=-1),
        F("producer_epoch", INT16, "5+", default=-1),
    ],
)

# Version 0 was removed in Kafka 4.0; version 1 is the flexible baseline.
WRITE_TXN_MARKERS_REQUEST = Message(
    "WriteTxnMarkersRequest",
    27,
    "1-2",
    "1+",
    [
        F(
            "markers",
            [
                F("producer_id", INT64),
                F("producer_epoch", INT16),
                F("transaction_result", BOOL),
                F(
                    "topics",
                    [
                        F("name", STRING),
                        F("partition_indexes", ArrayOf(INT32)),
                    ],
                ),
                F("coordinator_epoch", INT32),
                F("transaction_version", INT8, "2+"),
            ],
        ),
    ],
)

WRITE_TXN_MARKERS_RESPONSE = Message(
    "WriteTxnMarkersResponse",
    27,
    "1-2",
    "1+",
    [
        F(
            "markers",
            [
                F("producer_id", INT64),
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
        ),
    ],
)

TXN_OFFSET_COMMIT_REQUEST = Message(
    "TxnOffsetCommitRequest",
    28,
    "0-5",
    "3+",
    [
        F("transactional_id", STRING),
        F("group_id", STRING),
        F("producer_id", INT64),
        F("producer_epoch", INT16),
        F("generation_id", INT32, "3+", default=-1),
        F("member_id", STRING, "3+"),
        F("group_instance_id", STRING, "3+", nullable="3+", default=NULL),
        F(
            "topics",
            [
                F("name", STRING),
                F(
                    "partitions",
                    [
                        F("partition_index", INT32),
                        F("committed_offset", INT64),
                        F("committed_leader_epoch", INT32, "2+", default=-1),
                        F("committed_metadata", STRING, nullable="0+"),
                    ],
                ),
            ],
        ),
    ],
)

TXN_OFFSET_COMMIT_RESPONSE = Message(
    "TxnOffsetCommitResponse",
    28,
    "0-5",
    "3+",
    [
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

DESCRIBE_PRODUCERS_REQUEST = Message(
    "DescribeProducersRequest",
    61,
    "0",
    "0+",
    [
        F(
            "topics",
            [
                F("name", STRING),
                F("partition_indexes", ArrayOf(INT32)),
            ],
        ),
    ],
)

DESCRIBE_PRODUCERS_RESPONSE = Message(
    "DescribeProducersResponse",
    61,
    "0",
    "0+",
    [
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
                        F("error_message", STRING, nullable="0+", default=NULL),
                        F(
                            "active_producers",
                            [
                                F("producer_id", INT64),
                                F("producer_epoch", INT32),  # int32 here, as Kafka has it
                                F("last_sequence", INT32, default=-1),
                                F("last_timestamp", INT64, default=-1),
                                F("coordinator_epoch", INT32),
                                F("current_txn_start_offset", INT64, default=-1),
                            ],
                        ),
                    ],
                ),
            ],
        ),
    ],
)

DESCRIBE_TRANSACTIONS_REQUEST = Message(
    "DescribeTransactionsRequest",
    65,
    "0",
    "0+",
    [
        F("transactional_ids", ArrayOf(STRING)),
    ],
)

DESCRIBE_TRANSACTIONS_RESPONSE = Message(
    "DescribeTransactionsResponse",
    65,
    "0",
    "0+",
    [
        F("throttle_time_ms", INT32),
        F(
            "transaction_states",
            [
                F("error_code", INT16),
                F("transactional_id", STRING),
                F("transaction_state", STRING),
                F("transaction_timeout_ms", INT32),
                F("transaction_start_time_ms", INT64),
                F("producer_id", INT64),
                F("producer_epoch", INT16),
                F(
                    "topics",
                    [
                        F("topic", STRING),
                        F("partitions", ArrayOf(INT32)),
                    ],
                ),
            ],
        ),
    ],
)

LIST_TRANSACTIONS_REQUEST = Message(
    "ListTransactionsRequest",
    66,
    "0-2",
    "0+",
    [
        F("state_filters", ArrayOf(STRING)),
        F("producer_id_filters", ArrayOf(INT64)),
        F("duration_filter", INT64, "1+", default=-1),
        F("transactional_id_pattern", STRING, "2+", nullable="2+", default=NULL),
    ],
)

LIST_TRANSACTIONS_RESPONSE = Message(
    "ListTransactionsResponse",
    66,
    "0-2",
    "0+",
    [
        F("throttle_time_ms", INT32),
        F("error_code", INT16),
        F("unknown_state_filters", ArrayOf(STRING)),
        F(
            "transaction_states",
            [
                F("transactional_id", STRING),
                F("producer_id", INT64),
                F("transaction_state", STRING),
            ],
        ),
    ],
)

# api_key -> (request, response)
DEFINITIONS: dict[int, tuple[Message, Message]] = {
    24: (ADD_PARTITIONS_TO_TXN_REQUEST, ADD_PARTITIONS_TO_TXN_RESPONSE),
    25: (ADD_OFFSETS_TO_TXN_REQUEST, ADD_OFFSETS_TO_TXN_RESPONSE),
    26: (END_TXN_REQUEST, END_TXN_RESPONSE),
    27: (WRITE_TXN_MARKERS_REQUEST, WRITE_TXN_MARKERS_RESPONSE),
    28: (TXN_OFFSET_COMMIT_REQUEST, TXN_OFFSET_COMMIT_RESPONSE),
    61: (DESCRIBE_PRODUCERS_REQUEST, DESCRIBE_PRODUCERS_RESPONSE),
    65: (DESCRIBE_TRANSACTIONS_REQUEST, DESCRIBE_TRANSACTIONS_RESPONSE),
    66: (LIST_TRANSACTIONS_REQUEST, LIST_TRANSACTIONS_RESPONSE),
}
