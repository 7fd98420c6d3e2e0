"""ApiVersions (18), v0-v4. v1 adds throttle_time_ms; v3 (KIP-511) is flexible and adds the
client's software name and version, and the feature tags (KIP-584). The response header is
v0 for every version, so a client that does not know our versions can read the error code.
"""

from __future__ import annotations

from kgroupd.protocol.codec import BOOL, INT16, INT32, INT64, STRING, F, Message

REQUEST = Message(
    "ApiVersionsRequest",
    18,
    "0-4",
    "3+",
    [
        F("client_software_name", STRING, "3+"),
        F("client_software_version", STRING, "3+"),
    ],
)

RESPONSE = Message(
    "ApiVersionsResponse",
    18,
    "0-4",
    "3+",
    [
        F("error_code", INT16),
        F(
            "api_keys",
            [
                F("api_key", INT16),
                F("min_version", INT16),
                F("max_version", INT16),
            ],
        ),
        F("throttle_time_ms", INT32, "1+"),
        F(
            "supported_features",
            [F("name", STRING), F("min_version", INT16), F("max_version", INT16)],
            "3+",
            tag=0,
            tagged="3+",
        ),
        F("finalized_features_epoch", INT64, "3+", default=-1, tag=1, tagged="3+"),
        F(
            "finalized_features",
            [F("name", STRING), F("max_version_level", INT16), F("min_version_level", INT16)],
            "3+",
            tag=2,
            tagged="3+",
        ),
        F("zk_migration_ready", BOOL, "3+", default=False, tag=3, tagged="3+"),
    ],
)


DEFINITIONS: dict[int, tuple[Message, Message]] = {18: (REQUEST, RESPONSE)}
