"""Topic administration: CreateTopics (19), DeleteTopics (20), DeleteRecords (21),
CreatePartitions (37), DescribeConfigs (32), AlterConfigs (33), IncrementalAlterConfigs (44)."""

from __future__ import annotations

from kgroupd.protocol.codec import (
    BOOL,
    INT8,
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

CREATE_TOPICS_REQUEST = Message(
    "CreateTopicsRequest",
    19,
    "0-7",
    "5+",
    [
        F(
            "topics",
            [
                F("name", STRING),
                F("num_partitions", INT32),
                F("replication_factor", INT16),
                F(
                    "assignments",
                    [
                        F("partition_index", INT32),
                        F("broker_ids", ArrayOf(INT32)),
                    ],
                ),
                F(
                    "configs",
                    [
                        F("name", STRING),
                        F("value", STRING, nullable="0+"),
                    ],
                ),
            ],
        ),
        F("timeout_ms", INT32, default=60000),
        F("validate_only", BOOL, "1+"),
    ],
)

CREATE_TOPICS_RESPONSE = Message(
    "CreateTopicsResponse",
    19,
    "0-7",
    "5+",
    [
        F("throttle_time_ms", INT32, "2+"),
        F(
            "topics",
            [
                F("name", STRING),
                F("topic_id", UUID, "7+"),
                F("error_code", INT16),
                F("error_message", STRING, "1+", nullable="0+"),
                F("topic_config_error_code", INT16, "5+", tag=0, tagged="5+"),
                F("num_partitions", INT32, "5+", default=-1),
                F("replication_factor", INT16, "5+", default=-1),
                F(
                    "configs",
                    [
                        F("name", STRING, "5+"),
                        F("value", STRING, "5+", nullable="5+"),
                        F("read_only", BOOL, "5+"),
                        F("config_source", INT8, "5+", default=-1),
                        F("is_sensitive", BOOL, "5+"),
                    ],
                    "5+",
                    nullable="5+",
                ),
            ],
        ),
    ],
)

DELETE_TOPICS_REQUEST = Message(
    "DeleteTopicsRequest",
    20,
    "0-6",
    "4+",
    [
        F(
            "topics",
            [
                F("name", STRING, "6+", nullable="6+", default=NULL),
                F("topic_id", UUID, "6+"),
            ],
            "6+",
        ),
        F("topic_names", ArrayOf(STRING), "0-5"),
        F("timeout_ms", INT32),
    ],
)

DELETE_TOPICS_RESPONSE = Message(
    "DeleteTopicsResponse",
    20,
    "0-6",
    "4+",
    [
        F("throttle_time_ms", INT32, "1+"),
        F(
            "responses",
            [
                F("name", STRING, nullable="6+"),
                F("topic_id", UUID, "6+"),
                F("error_code", INT16),
                F("error_message", STRING, "5+", nullable="5+", default=NULL),
            ],
        ),
    ],
)

CREATE_PARTITIONS_REQUEST = Message(
    "CreatePartitionsRequest",
    37,
    "0-3",
    "2+",
    [
        F(
            "topics",
            [
                F("name", STRING),
                F("count", INT32),
                F(
                    "assignments",
                    [
                        F("broker_ids", ArrayOf(INT32)),
                    ],
                    nullable="0+",
                ),
            ],
        ),
        F("timeout_ms", INT32),
        F("validate_only", BOOL),
    ],
)

CREATE_PARTITIONS_RESPONSE = Message(
    "CreatePartitionsResponse",
    37,
    "0-3",
    "2+",
    [
        F("throttle_time_ms", INT32),
        F(
            "results",
            [
                F("name", STRING),
                F("error_code", INT16),
                F("error_message", STRING, nullable="0+", default=NULL),
            ],
        ),
    ],
)

DESCRIBE_CONFIGS_REQUEST = Message(
    "DescribeConfigsRequest",
    32,
    "0-4",
    "4+",
    [
        F(
            "resources",
            [
                F("resource_type", INT8),
                F("resource_name", STRING),
                F("configuration_keys", ArrayOf(STRING), nullable="0+"),
            ],
        ),
        F("include_synonyms", BOOL, "1+"),
        F("include_documentation", BOOL, "3+"),
    ],
)

DESCRIBE_CONFIGS_RESPONSE = Message(
    "DescribeConfigsResponse",
    32,
    "0-4",
    "4+",
    [
        F("throttle_time_ms", INT32),
        F(
            "results",
            [
                F("error_code", INT16),
                F("error_message", STRING, nullable="0+"),
                F("resource_type", INT8),
                F("resource_name", STRING),
                F(
                    "configs",
                    [
                        F("name", STRING),
                        F("value", STRING, nullable="0+"),
                        F("read_only", BOOL),
                        F("config_source", INT8, "1+", default=-1),
                        F("is_default", BOOL, "0"),
                        F("is_sensitive", BOOL),
                        F(
                            "synonyms",
                            [
                                F("name", STRING, "1+"),
                                F("value", STRING, "1+", nullable="0+"),
                                F("source", INT8, "1+"),
                            ],
                            "1+",
                        ),
                        F("config_type", INT8, "3+"),
                        F("documentation", STRING, "3+", nullable="0+"),
                    ],
                ),
            ],
        ),
    ],
)


DELETE_RECORDS_REQUEST = Message(
    "DeleteRecordsRequest",
    21,
    "0-2",
    "2+",
    [
        F(
            "topics",
            [
                F("name", STRING),
                F("partitions", [F("partition_index", INT32), F("offset", INT64)]),
            ],
        ),
        F("timeout_ms", INT32),
    ],
)

DELETE_RECORDS_RESPONSE = Message(
    "DeleteRecordsResponse",
    21,
    "0-2",
    "2+",
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
                        F("low_watermark", INT64),
                        F("error_code", INT16),
                    ],
                ),
            ],
        ),
    ],
)


def _alter_configs(
    name: str, api_key: int, valid: str, flexible: str, incremental: bool
) -> Message:
    op = [F("config_operation", INT8)] if incremental else []
    return Message(
        name,
        api_key,
        valid,
        flexible,
        [
            F(
                "resources",
                [
                    F("resource_type", INT8),
                    F("resource_name", STRING),
                    F("configs", [F("name", STRING), *op, F("value", STRING, nullable="0+")]),
                ],
            ),
            F("validate_only", BOOL),
        ],
    )


def _alter_configs_response(name: str, api_key: int, valid: str, flexible: str) -> Message:
    return Message(
        name,
        api_key,
        valid,
        flexible,
        [
            F("throttle_time_ms", INT32),
            F(
                "responses",
                [
                    F("error_code", INT16),
                    F("error_message", STRING, nullable="0+", default=NULL),
                    F("resource_type", INT8),
                    F("resource_name", STRING),
                ],
            ),
        ],
    )


ALTER_CONFIGS_REQUEST = _alter_configs("AlterConfigsRequest", 33, "0-2", "2+", False)
ALTER_CONFIGS_RESPONSE = _alter_configs_response("AlterConfigsResponse", 33, "0-2", "2+")
INCREMENTAL_ALTER_CONFIGS_REQUEST = _alter_configs(
    "IncrementalAlterConfigsRequest", 44, "0-1", "1+", True
)
INCREMENTAL_ALTER_CONFIGS_RESPONSE = _alter_configs_response(
    "IncrementalAlterConfigsResponse", 44, "0-1", "1+"
)

# api_key -> (request, response)
LIST_CONFIG_RESOURCES_REQUEST = Message(
    "ListConfigResourcesRequest", 74, "0-1", "0+", [F("resource_types", ArrayOf(INT8), "1+")]
)

LIST_CONFIG_RESOURCES_RESPONSE = Message(
    "ListConfigResourcesResponse",
    74,
    "0-1",
    "0+",
    [
        F("throttle_time_ms", INT32),
        F("error_code", INT16),
        F(
            "config_resources",
            [F("resource_name", STRING), F("resource_type", INT8, "1+", default=16)],
        ),
    ],
)

DEFINITIONS: dict[int, tuple[Message, Message]] = {
    19: (CREATE_TOPICS_REQUEST, CREATE_TOPICS_RESPONSE),
    20: (DELETE_TOPICS_REQUEST, DELETE_TOPICS_RESPONSE),
    21: (DELETE_RECORDS_REQUEST, DELETE_RECORDS_RESPONSE),
    37: (CREATE_PARTITIONS_REQUEST, CREATE_PARTITIONS_RESPONSE),
    32: (DESCRIBE_CONFIGS_REQUEST, DESCRIBE_CONFIGS_RESPONSE),
    33: (ALTER_CONFIGS_REQUEST, ALTER_CONFIGS_RESPONSE),
    44: (INCREMENTAL_ALTER_CONFIGS_REQUEST, INCREMENTAL_ALTER_CONFIGS_RESPONSE),
    74: (LIST_CONFIG_RESOURCES_REQUEST, LIST_CONFIG_RESOURCES_RESPONSE),
}
