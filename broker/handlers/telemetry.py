"""GetTelemetrySubscriptions v0 and PushTelemetry v0 (KIP-714), answered as a Kafka broker with
no client metrics configured answers them (``kgroupd.broker.telemetry``): no metrics
requested, a push interval of 5 minutes, pushed metrics dropped."""

from __future__ import annotations

from kgroupd.broker.handlers.registry import Fields, RequestContext, handler
from kgroupd.broker.log.partition import now_ms
from kgroupd.broker.telemetry import (
    ACCEPTED_COMPRESSION_TYPES,
    DEFAULT_INTERVAL_MS,
    TELEMETRY_MAX_BYTES,
)
from kgroupd.protocol.errors import ErrorCode


@handler(71)
def handle_get_telemetry_subscriptions(ctx: RequestContext, req: Fields) -> Fields:
    error, instance_id, instance = ctx.broker.telemetry.subscribe(
        req["client_instance_id"], now_ms()
    )
    if error is not ErrorCode.NONE:  # Kafka's error response: the code and nothing else
        ctx.log.info("telemetry_refused", error=error.name)
        return {"error_code": int(error)}
    return {
        "error_code": 0,
        "client_instance_id": instance_id,
        "subscription_id": instance.subscription_id,
        "accepted_compression_types": ACCEPTED_COMPRESSION_TYPES,
        "push_interval_ms": DEFAULT_INTERVAL_MS,
        "telemetry_max_bytes": TELEMETRY_MAX_BYTES,
        "delta_temporality": True,
        "requested_metrics": [],
    }


@handler(72)
def handle_push_telemetry(ctx: RequestContext, req: Fields) -> Fields:
    metrics = req["metrics"]
    error = ctx.broker.telemetry.push(
        req["client_instance_id"],
        req["subscription_id"],
        req["terminating"],
        req["compression_type"],
        len(metrics) if metrics is not None else 0,
        now_ms(),
    )
    if error is not ErrorCode.NONE:
        ctx.log.info("telemetry_refused", error=error.name)
    return {"error_code": int(error)}
