"""Delegation tokens (KIP-48): CreateDelegationToken (38), RenewDelegationToken (39),
ExpireDelegationToken (40), DescribeDelegationToken (41), at Kafka 4.3's versions."""

from __future__ import annotations

from kgroupd.protocol.codec import BYTES, INT16, INT32, INT64, STRING, F, Message

_PRINCIPAL = [F("principal_type", STRING), F("principal_name", STRING)]

CREATE_DELEGATION_TOKEN_REQUEST = Message(
    "CreateDelegationTokenRequest",
    38,
    "1-3",
    "2+",
    [
        F("owner_principal_type", STRING, "3+", nullable="3+"),
        F("owner_principal_name", STRING, "3+", nullable="3+"),
        F("renewers", list(_PRINCIPAL)),
        F("max_lifetime_ms", INT64),
    ],
)

CREATE_DELEGATION_TOKEN_RESPONSE = Message(
    "CreateDelegationTokenResponse",
    38,
    "1-3",
    "2+",
    [
        F("error_code", INT16),
        *_PRINCIPAL,
        F("token_requester_principal_type", STRING, "3+"),
        F("token_requester_principal_name", STRING, "3+"),
        F("issue_timestamp_ms", INT64),
        F("expiry_timestamp_ms", INT64),
        F("max_timestamp_ms", INT64),
        F("token_id", STRING),
        F("hmac", BYTES),
        F("throttle_time_ms", INT32),
    ],
)

RENEW_DELEGATION_TOKEN_REQUEST = Message(
    "RenewDelegationTokenRequest",
    39,
    "1-2",
    "2+",
    [F("hmac", BYTES), F("renew_period_ms", INT64)],
)

RENEW_DELEGATION_TOKEN_RESPONSE = Message(
    "RenewDelegationTokenResponse",
    39,
    "1-2",
    "2+",
    [F("error_code", INT16), F("expiry_timestamp_ms", INT64), F("throttle_time_ms", INT32)],
)

EXPIRE_DELEGATION_TOKEN_REQUEST = Message(
    "ExpireDelegationTokenRequest",
    40,
    "1-2",
    "2+",
    [F("hmac", BYTES), F("expiry_time_period_ms", INT64)],
)

EXPIRE_DELEGATION_TOKEN_RESPONSE = Message(
    "ExpireDelegationTokenResponse",
    40,
    "1-2",
    "2+",
    [F("error_code", INT16), F("expiry_timestamp_ms", INT64), F("throttle_time_ms", INT32)],
)

DESCRIBE_DELEGATION_TOKEN_REQUEST = Message(
    "DescribeDelegationTokenRequest",
    41,
    "1-3",
    "2+",
    [F("owners", list(_PRINCIPAL), nullable="0+")],
)

DESCRIBE_DELEGATION_TOKEN_RESPONSE = Message(
    "DescribeDelegationTokenResponse",
    41,
    "1-3",
    "2+",
    [
        F("error_code", INT16),
        F(
            "tokens",
            [
                *_PRINCIPAL,
                F("token_requester_principal_type", STRING, "3+"),
                F("token_requester_principal_name", STRING, "3+"),
                F("issue_timestamp", INT64),
                F("expiry_timestamp", INT64),
                F("max_timestamp", INT64),
                F("token_id", STRING),
                F("hmac", BYTES),
                F("renewers", list(_PRINCIPAL)),
            ],
        ),
        F("throttle_time_ms", INT32),
    ],
)

# api_key -> (request, response)
DEFINITIONS: dict[int, tuple[Message, Message]] = {
    38: (CREATE_DELEGATION_TOKEN_REQUEST, CREATE_DELEGATION_TOKEN_RESPONSE),
    39: (RENEW_DELEGATION_TOKEN_REQUEST, RENEW_DELEGATION_TOKEN_RESPONSE),
    40: (EXPIRE_DELEGATION_TOKEN_REQUEST, EXPIRE_DELEGATION_TOKEN_RESPONSE),
    41: (DESCRIBE_DELEGATION_TOKEN_REQUEST, DESCRIBE_DELEGATION_TOKEN_RESPONSE),
}
