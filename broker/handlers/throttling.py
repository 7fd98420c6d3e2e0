"""What a request pays against its client's quotas (Kafka's ClientQuotaManager and
ControllerMutationQuotaManager as the handlers use them): produce and fetch bytes, request
time, partition mutations. On the request path of every API that has a quota, so apart from
the DescribeClientQuotas/AlterClientQuotas handlers (``quotas``), which load on first use."""

from __future__ import annotations

import struct
from collections.abc import Awaitable
from typing import Any

from kgroupd.broker.handlers.registry import Fields, Held, Reply, RequestContext
from kgroupd.broker.log.partition import now_ms
from kgroupd.broker.log.topics import TopicError
from kgroupd.broker.quotas import MUTATION, REQUEST
from kgroupd.broker.throttle import WINDOW_MS
from kgroupd.protocol.errors import ErrorCode
from kgroupd.protocol.fast import Chunks


def charge(
    ctx: RequestContext, key: str, value: float, keep: bool = True, cap: int | None = None
) -> int:
    """Record ``value`` against the client's ``key`` quota (``kgroupd.broker.throttle``): the
    throttle time it earned in ms (0: none; at most ``cap``), for which the connection is
    muted. With ``keep=False`` a value that earned a throttle time is taken back (the answer
    drops it)."""
    throttle = ctx.broker.throttle
    if not throttle.enabled(key):
        return 0
    user, client, now = ctx.principal.partition(":")[2], ctx.client_id or "", now_ms()
    ms = throttle.record(key, user, client, value, now)
    if cap is not None:
        ms = min(ms, cap)
    if ms > 0:
        ctx.log.info("quota_throttled", quota=key, throttle_time_ms=ms)
        if not keep:
            throttle.unrecord(key, user, client, value, now)
        if ctx.throttle is not None:
            ctx.throttle(ms)
    return ms


REQUEST_THROTTLE_MAX_MS = WINDOW_MS  # Kafka bounds a request quota's throttle to one window
UNTHROTTLED = frozenset({17, 36})  # SASL: answered before a client is known, as Kafka's


# API key -> the first version whose hand-encoded answer (bytes or ``Chunks``) starts with
# throttle_time_ms: Fetch, OffsetCommit, Heartbeat, ConsumerGroupHeartbeat.
THROTTLE_FIRST = {1: 1, 8: 3, 12: 1, 68: 0}
_I32 = struct.Struct(">i")


def charge_request_time(ctx: RequestContext, reply: Reply, seconds: float) -> Reply:
    """Kafka's request quota (``request_percentage``, KIP-124): the time the broker spent on
    the request, as a percentage of one thread's second, against the client's quota; the
    throttle time goes into the answer (the larger of it and a byte-rate quota's), dict or
    hand-encoded, now or when an awaited answer comes."""
    ms = charge(ctx, REQUEST, seconds * 100, cap=REQUEST_THROTTLE_MAX_MS)
    if not ms:
        return reply
    encoded = ctx.api_version >= THROTTLE_FIRST.get(ctx.api_key, 32767)
    if isinstance(reply, Held):
        return Held(reply.until, _throttled(reply.reply, ms, encoded))
    if reply is None or isinstance(reply, dict | bytes | Chunks):
        return _throttled(reply, ms, encoded)
    return _later(reply, ms, encoded)


async def _later(waiting: Awaitable[Any], ms: int, encoded: bool) -> Any:
    return _throttled(await waiting, ms, encoded)


def _throttled(reply: Any, ms: int, encoded: bool) -> Any:
    """``reply`` with throttle_time_ms at least ``ms``."""
    if isinstance(reply, dict):
        reply["throttle_time_ms"] = max(reply.get("throttle_time_ms") or 0, ms)
    elif encoded and isinstance(reply, bytes) and len(reply) >= 4:
        return _I32.pack(max(_I32.unpack_from(reply)[0], ms)) + reply[4:]
    elif encoded and isinstance(reply, Chunks) and reply and len(reply[0]) >= 4:
        first = bytes(reply[0])
        reply[0] = _I32.pack(max(_I32.unpack_from(first)[0], ms)) + first[4:]
    return reply


class PartitionMutations:
    """One request's partition mutations against the client's ``controller_mutation_rate``
    (KIP-599): strict from ``strict_since`` (a throttled topic is THROTTLING_QUOTA_EXCEEDED),
    permissive before (taken, only throttled)."""

    def __init__(self, ctx: RequestContext, strict_since: int) -> None:
        self.ctx = ctx
        self.strict = ctx.api_version >= strict_since
        self.enabled = ctx.broker.throttle.enabled(MUTATION)
        self.throttle_ms = 0

    def take(self, partitions: int) -> None:
        """Count ``partitions`` created or deleted; ``TopicError`` if refused."""
        if not self.enabled:
            return
        ctx = self.ctx
        allowed, ms = ctx.broker.throttle.mutate(
            MUTATION,
            ctx.principal.partition(":")[2],
            ctx.client_id or "",
            partitions,
            now_ms(),
            self.strict,
        )
        self.throttle_ms = max(self.throttle_ms, ms)
        if not allowed:
            raise TopicError(ErrorCode.THROTTLING_QUOTA_EXCEEDED, THROTTLED)

    def answer(self, reply: Fields) -> Fields:
        """The reply with the throttle time; the connection muted for it."""
        if self.throttle_ms:
            reply["throttle_time_ms"] = self.throttle_ms
            self.ctx.log.info("quota_throttled", quota=MUTATION, throttle_time_ms=self.throttle_ms)
            if self.ctx.throttle is not None:
                self.ctx.throttle(self.throttle_ms)
        return reply


THROTTLED = "The throttling quota has been exceeded."


def quota_cap(ctx: RequestContext, key: str) -> float | None:
    """The most the client may take at once without being throttled for sure (None: no
    quota)."""
    throttle = ctx.broker.throttle
    if not throttle.enabled(key):
        return None
    return throttle.max_in_window(key, ctx.principal.partition(":")[2], ctx.client_id or "")
