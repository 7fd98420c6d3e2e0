"""ACL administration: DescribeAcls (29), CreateAcls (30), DeleteAcls (31)."""

from __future__ import annotations

from kgroupd.protocol.codec import INT8, INT16, INT32, NULL, STRING, F, Message

_PATTERN = F("pattern_type", INT8, "1+", default=3)  # LITERAL before v1

DESCRIBE_ACLS_REQUEST = Message(
    "DescribeAclsRequest",
    29,
    "1-3",
    "2+",
    [
        F("resource_type_filter", INT8),
        F("resource_name_filter", STRING, nullable="0+"),
        F("pattern_type_filter", INT8, "1+", default=3),
        F("principal_filter", STRING, nullable="0+"),
        F("host_filter", STRING, nullable="0+"),
        F("operation", INT8),
        F("permission_type", INT8),
    ],
)
DESCRIBE_ACLS_RESPONSE = Message(
    "DescribeAclsResponse",
    29,
    "1-3",
    "2+",
    [
        F("throttle_time_ms", INT32),
        F("error_code", INT16),
        F("error_message", STRING, nullable="0+", default=NULL),
        F(
            "resources",
            [
                F("resource_type", INT8),
                F("resource_name", STRING),
                _PATTERN,
                F(
                    "acls",
                    [
                        F("principal", STRING),
                        F("host", STRING),
                        F("operation", INT8),
                        F("permission_type", INT8),
                    ],
                ),
            ],
        ),
    ],
)

CREATE_ACLS_REQUEST = Message(
    "CreateAclsRequest",
    30,
    "1-3",
    "2+",
    [
        F(
            "creations",
            [
                F("resource_type", INT8),
                F("resource_name", STRING),
                F("resource_pattern_type", INT8, "1+", default=3),
                F("principal", STRING),
                F("host", STRING),
                F("operation", INT8),
                F("permission_type", INT8),
            ],
        )
    ],
)
CREATE_ACLS_RESPONSE = Message(
    "CreateAclsResponse",
    30,
    "1-3",
    "2+",
    [
        F("throttle_time_ms", INT32),
        F(
            "results",
            [F("error_code", INT16), F("error_message", STRING, nullable="0+", default=NULL)],
        ),
    ],
)

DELETE_ACLS_REQUEST = Message(
    "DeleteAclsRequest",
    31,
    "1-3",
    "2+",
    [
        F(
            "filters",
            [
                F("resource_type_filter", INT8),
                F("resource_name_filter", STRING, nullable="0+"),
                F("pattern_type_filter", INT8, "1+", default=3),
                F("principal_filter", STRING, nullable="0+"),
                F("host_filter", STRING, nullable="0+"),
                F("operation", INT8),
                F("permission_type", INT8),
            ],
        )
    ],
)
DELETE_ACLS_RESPONSE = Message(
    "DeleteAclsResponse",
    31,
    "1-3",
    "2+",
    [
        F("throttle_time_ms", INT32),
        F(
            "filter_results",
            [
                F("error_code", INT16),
                F("error_message", STRING, nullable="0+", default=NULL),
                F(
                    "matching_acls",
                    [
                        F("error_code", INT16),
                        F("error_message", STRING, nullable="0+", default=NULL),
                        F("resource_type", INT8),
                        F("resource_name", STRING),
                        _PATTERN,
                        F("principal", STRING),
                        F("host", STRING),
                        F("operation", INT8),
                        F("permission_type", INT8),
                    ],
                ),
            ],
        ),
    ],
)

DEFINITIONS: dict[int, tuple[Message, Message]] = {
    29: (DESCRIBE_ACLS_REQUEST, DESCRIBE_ACLS_RESPONSE),
    30: (CREATE_ACLS_REQUEST, CREATE_ACLS_RESPONSE),
    31: (DELETE_ACLS_REQUEST, DELETE_ACLS_RESPONSE),
}
