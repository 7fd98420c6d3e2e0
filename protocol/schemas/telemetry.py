"""Client telemetry (KIP-714): GetTelemetrySubscriptions (71), PushTelemetry (72)."""

from __future__ import annotations

from kgroupd.protocol.codec import (
    BOOL,
    BYTES,
    INT8,
    INT16,
    INT32,
    STRING,
    UUID,
    ArrayOf,
    F,
    Message,
)

GET_TELEMETRY_SUBSCRIPTIONS_REQUEST = Message(
    "GetTelemetrySubscriptionsRequest", 71, "0", "0+", [F("client_instance_id", UUID)]
)

GET_TELEMETRY_SUBSCRIPTIONS_RESPONSE = Message(
    "GetTelemetrySubscriptionsResponse",
    71,
    "0",
    "0+",
    [
        F("throttle_time_ms", INT32),
        F("error_code", INT16),
        F("client_instance_id", UUID),
        F("subscription_id", INT32),
        F("accepted_compression_types", ArrayOf(INT8)),
        F("push_interval_ms", INT32),
        F("telemetry_max_bytes", INT32),
        F("delta_temporality", BOOL),
        F("requested_metrics", ArrayOf(STRING)),
    ],
)

PUSH_TELEMETRY_REQUEST = Message(
    "PushTelemetryRequest",
    72,
    "0",
    "0+",
    [
        F("client_instance_id", UUID),
        F("subscription_id", INT32),
        F("terminating", BOOL),
        F("compression_type", INT8),
        F("metrics", BYTES),
    ],
)

PUSH_TELEMETRY_RESPONSE = Message(
    "PushTelemetryResponse", 72, "0", "0+", [F("throttle_time_ms", INT32), F("error_code", INT16)]
)

# api_key -> (request, response)
DEFINITIONS: dict[int, tuple[Message, Message]] = {
    71: (GET_TELEMETRY_SUBSCRIPTIONS_REQUEST, GET_TELEMETRY_SUBSCRIPTIONS_RESPONSE),
    72: (PUSH_TELEMETRY_REQUEST, PUSH_TELEMETRY_RESPONSE),
}
