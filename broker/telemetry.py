"""Client telemetry (KIP-714) as Kafka's ClientMetricsManager keeps it with no client metrics
configured: every client instance is known (a new one gets an id), subscribed to no metrics,
asked to come back every 5 minutes; a GetTelemetrySubscriptions or PushTelemetry sooner than
that is THROTTLING_QUOTA_EXCEEDED, a push naming another subscription id
UNKNOWN_SUBSCRIPTION_ID, an unknown compression type UNSUPPORTED_COMPRESSION_TYPE, metrics over
``telemetry.max.bytes`` TELEMETRY_TOO_LARGE, any push after a terminating one INVALID_REQUEST.
Pushed metrics go nowhere (Kafka hands them to a receiver plugin; kgroupd has none).

Instances are forgotten, as Kafka's cache forgets them, after max(60 s, 3 push intervals)
without a request, or beyond 16,384 instances (the least recently used first).
"""

from __future__ import annotations

import uuid
from collections import OrderedDict
from dataclasses import dataclass

from kgroupd.protocol.crc import crc32c
from kgroupd.protocol.errors import ErrorCode

DEFAULT_INTERVAL_MS = 5 * 60 * 1000  # ClientMetricsConfigs.DEFAULT_INTERVAL_MS
CACHE_EXPIRY_MS = 60 * 1000
CACHE_MAX_SIZE = 16384
TELEMETRY_MAX_BYTES = 1024 * 1024  # telemetry.max.bytes
# ZSTD, LZ4, GZIP, SNAPPY: Kafka's order of preference
ACCEPTED_COMPRESSION_TYPES = [4, 3, 1, 2]
COMPRESSION_IDS = range(5)  # none, gzip, snappy, lz4, zstd
RESERVED = (uuid.UUID(int=0), uuid.UUID(int=1))  # Uuid.ZERO_UUID, Uuid.METADATA_TOPIC_ID


def java_uuid_hash(value: uuid.UUID) -> int:
    """Kafka's Uuid.hashCode: the two halves xor-ed, folded to a signed int."""
    xor = (value.int >> 64) ^ (value.int & (2**64 - 1))
    folded = ((xor >> 32) ^ xor) & 0xFFFFFFFF
    return folded - 2**32 if folded >= 2**31 else folded


def subscription_id(
    instance: uuid.UUID, metrics: str = "[]", interval: int = DEFAULT_INTERVAL_MS
) -> int:
    """CRC-32C of the subscribed metrics and push interval, xor-ed with the instance's hash."""
    crc = crc32c(f"{metrics}{interval}".encode())
    signed = crc - 2**32 if crc >= 2**31 else crc
    out = (signed ^ java_uuid_hash(instance)) & 0xFFFFFFFF
    return out - 2**32 if out >= 2**31 else out


@dataclass
class Instance:
    subscription_id: int
    last_get: int = 0
    last_push: int = 0
    terminating: bool = False
    expires: int = 0


class ClientTelemetry:
    def __init__(self) -> None:
        self.instances: OrderedDict[uuid.UUID, Instance] = OrderedDict()

    def _instance(self, instance_id: uuid.UUID, now: int) -> Instance:
        found = self.instances.get(instance_id)
        if found is not None and found.expires <= now:
            del self.instances[instance_id]
            found = None
        if found is None:
            found = Instance(subscription_id(instance_id))
            self.instances[instance_id] = found
            while len(self.instances) > CACHE_MAX_SIZE:
                self.instances.popitem(last=False)
        else:
            self.instances.move_to_end(instance_id)
        found.expires = now + max(CACHE_EXPIRY_MS, 3 * DEFAULT_INTERVAL_MS)
        return found

    def subscribe(self, instance_id: uuid.UUID, now: int) -> tuple[ErrorCode, uuid.UUID, Instance]:
        """GetTelemetrySubscriptions: (error, the instance's id, its state)."""
        if instance_id in RESERVED:
            instance_id = uuid.uuid4()
            while instance_id in self.instances or instance_id in RESERVED:
                instance_id = uuid.uuid4()
        instance = self._instance(instance_id, now)
        if now - max(instance.last_get, instance.last_push) < DEFAULT_INTERVAL_MS:
            return ErrorCode.THROTTLING_QUOTA_EXCEEDED, instance_id, instance
        instance.last_get = now
        return ErrorCode.NONE, instance_id, instance

    def push(
        self,
        instance_id: uuid.UUID,
        subscription: int,
        terminating: bool,
        compression: int,
        size: int,
        now: int,
    ) -> ErrorCode:
        """PushTelemetry: the error, checked in Kafka's order."""
        if instance_id in RESERVED:
            return ErrorCode.INVALID_REQUEST
        instance = self._instance(instance_id, now)
        try:
            if instance.terminating:
                return ErrorCode.INVALID_REQUEST
            accepted = instance.last_get > instance.last_push or (
                now - instance.last_push >= DEFAULT_INTERVAL_MS
            )
            if accepted:
                instance.last_push = now
            elif not terminating:
                return ErrorCode.THROTTLING_QUOTA_EXCEEDED
            if subscription != instance.subscription_id:
                return ErrorCode.UNKNOWN_SUBSCRIPTION_ID
            if compression not in COMPRESSION_IDS:
                return ErrorCode.UNSUPPORTED_COMPRESSION_TYPE
            if size > TELEMETRY_MAX_BYTES:
                return ErrorCode.TELEMETRY_TOO_LARGE
            return ErrorCode.NONE
        finally:
            instance.terminating = terminating
