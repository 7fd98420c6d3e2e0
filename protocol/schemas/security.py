"""Authentication: SaslHandshake (17), SaslAuthenticate (36), and the SCRAM credential
admin APIs DescribeUserScramCredentials (50) and AlterUserScramCredentials (51)."""

from __future__ import annotations

from kgroupd.protocol.codec import (
    BYTES,
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

SASL_HANDSHAKE_REQUEST = Message(
    "SaslHandshakeRequest", 17, "0-1", "none", [F("mechanism", STRING)]
)
SASL_HANDSHAKE_RESPONSE = Message(
    "SaslHandshakeResponse",
    17,
    "0-1",
    "none",
    [F("error_code", INT16), F("mechanisms", ArrayOf(STRING))],
)

SASL_AUTHENTICATE_REQUEST = Message(
    "SaslAuthenticateRequest", 36, "0-2", "2+", [F("auth_bytes", BYTES)]
)
SASL_AUTHENTICATE_RESPONSE = Message(
    "SaslAuthenticateResponse",
    36,
    "0-2",
    "2+",
    [
        F("error_code", INT16),
        F("error_message", STRING, nullable="0+", default=NULL),
        F("auth_bytes", BYTES),
        F("session_lifetime_ms", INT64, "1+"),
    ],
)

DESCRIBE_USER_SCRAM_CREDENTIALS_REQUEST = Message(
    "DescribeUserScramCredentialsRequest",
    50,
    "0",
    "0+",
    [F("users", [F("name", STRING)], nullable="0+")],
)
DESCRIBE_USER_SCRAM_CREDENTIALS_RESPONSE = Message(
    "DescribeUserScramCredentialsResponse",
    50,
    "0",
    "0+",
    [
        F("throttle_time_ms", INT32),
        F("error_code", INT16),
        F("error_message", STRING, nullable="0+", default=NULL),
        F(
            "results",
            [
                F("user", STRING),
                F("error_code", INT16),
                F("error_message", STRING, nullable="0+", default=NULL),
                F("credential_infos", [F("mechanism", INT8), F("iterations", INT32)]),
            ],
        ),
    ],
)

ALTER_USER_SCRAM_CREDENTIALS_REQUEST = Message(
    "AlterUserScramCredentialsRequest",
    51,
    "0",
    "0+",
    [
        F("deletions", [F("name", STRING), F("mechanism", INT8)]),
        F(
            "upsertions",
            [
                F("name", STRING),
                F("mechanism", INT8),
                F("iterations", INT32),
                F("salt", BYTES),
                F("salted_password", BYTES),
            ],
        ),
    ],
)
ALTER_USER_SCRAM_CREDENTIALS_RESPONSE = Message(
    "AlterUserScramCredentialsResponse",
    51,
    "0",
    "0+",
    [
        F("throttle_time_ms", INT32),
        F(
            "results",
            [
                F("user", STRING),
                F("error_code", INT16),
                F("error_message", STRING, nullable="0+", default=NULL),
            ],
        ),
    ],
)

DEFINITIONS: dict[int, tuple[Message, Message]] = {
    17: (SASL_HANDSHAKE_REQUEST, SASL_HANDSHAKE_RESPONSE),
    36: (SASL_AUTHENTICATE_REQUEST, SASL_AUTHENTICATE_RESPONSE),
    50: (DESCRIBE_USER_SCRAM_CREDENTIALS_REQUEST, DESCRIBE_USER_SCRAM_CREDENTIALS_RESPONSE),
    51: (ALTER_USER_SCRAM_CREDENTIALS_REQUEST, ALTER_USER_SCRAM_CREDENTIALS_RESPONSE),
}
