"""Client quotas (KIP-546): DescribeClientQuotas (48), AlterClientQuotas (49)."""

from __future__ import annotations

from kgroupd.protocol.codec import BOOL, FLOAT64, INT8, INT16, INT32, NULL, STRING, F, Message

_ENTITY = [F("entity_type", STRING), F("entity_name", STRING, nullable="0+")]

DESCRIBE_CLIENT_QUOTAS_REQUEST = Message(
    "DescribeClientQuotasRequest",
    48,
    "0-1",
    "1+",
    [
        F(
            "components",
            [
                F("entity_type", STRING),
                F("match_type", INT8),
                F("match", STRING, nullable="0+"),
            ],
        ),
        F("strict", BOOL),
    ],
)

DESCRIBE_CLIENT_QUOTAS_RESPONSE = Message(
    "DescribeClientQuotasResponse",
    48,
    "0-1",
    "1+",
    [
        F("throttle_time_ms", INT32),
        F("error_code", INT16),
        F("error_message", STRING, nullable="0+", default=NULL),
        F(
            "entries",
            [
                F("entity", _ENTITY),
                F("values", [F("key", STRING), F("value", FLOAT64)]),
            ],
            nullable="0+",
            default=NULL,
        ),
    ],
)

ALTER_CLIENT_QUOTAS_REQUEST = Message(
    "AlterClientQuotasRequest",
    49,
    "0-1",
    "1+",
    [
        F(
            "entries",
            [
                F("entity", _ENTITY),
                F("ops", [F("key", STRING), F("value", FLOAT64), F("remove", BOOL)]),
            ],
        ),
        F("validate_only", BOOL),
    ],
)

ALTER_CLIENT_QUOTAS_RESPONSE = Message(
    "AlterClientQuotasResponse",
    49,
    "0-1",
    "1+",
    [
        F("throttle_time_ms", INT32),
        F(
            "entries",
            [
                F("error_code", INT16),
                F("error_message", STRING, nullable="0+", default=NULL),
                F("entity", _ENTITY),
            ],
        ),
    ],
)

# api_key -> (request, response)
DEFINITIONS: dict[int, tuple[Message, Message]] = {
    48: (DESCRIBE_CLIENT_QUOTAS_REQUEST, DESCRIBE_CLIENT_QUOTAS_RESPONSE),
    49: (ALTER_CLIENT_QUOTAS_REQUEST, ALTER_CLIENT_QUOTAS_RESPONSE),
}
