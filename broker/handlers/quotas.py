"""DescribeClientQuotas v0-v1 and AlterClientQuotas v0-v1 (KIP-546), over
``kgroupd.broker.quotas``: DESCRIBE_CONFIGS on the cluster to describe, ALTER_CONFIGS to alter
(a refusal answers every entity with CLUSTER_AUTHORIZATION_FAILED, as Kafka does)."""

from __future__ import annotations

from kgroupd.broker.handlers.registry import Fields, Held, Reply, RequestContext, handler
from kgroupd.broker.log.partition import now_ms
from kgroupd.broker.log.topics import TopicError
from kgroupd.broker.quotas import MUTATION, REQUEST, Alteration, Entity, QuotaError, entity_of
from kgroupd.broker.security.acls import CLUSTER_NAME
from kgroupd.broker.security.rules import CLUSTER_ALTER_CONFIGS, CLUSTER_DESCRIBE_CONFIGS
from kgroupd.broker.throttle import WINDOW_MS
from kgroupd.protocol.errors import ErrorCode

_REFUSED = "Cluster authorization failed."


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


def charge_request_time(ctx: RequestContext, reply: Reply, seconds: float) -> Reply:
    """Kafka's request quota (``request_percentage``, KIP-124): the time the broker spent on
    the request, as a percentage of one thread's second, against the client's quota; the
    throttle time goes into the answer (the larger of it and a byte-rate quota's)."""
    ms = charge(ctx, REQUEST, seconds * 100, cap=REQUEST_THROTTLE_MAX_MS)
    if ms:
        fields = reply.reply if isinstance(reply, Held) else reply
        if isinstance(fields, dict):
            fields["throttle_time_ms"] = max(fields.get("throttle_time_ms") or 0, ms)
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


def _wire_entity(entity: Entity) -> list[Fields]:
    return [{"entity_type": t, "entity_name": n} for t, n in entity]


@handler(48)
def handle_describe_client_quotas(ctx: RequestContext, req: Fields) -> Fields:
    if ctx.denies(CLUSTER_DESCRIBE_CONFIGS, CLUSTER_NAME):
        code = int(ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
        return {"error_code": code, "error_message": _REFUSED, "entries": None}
    components = [(c["entity_type"], c["match_type"], c["match"]) for c in req["components"]]
    try:
        found = ctx.broker.quotas.describe(components, req["strict"])
    except QuotaError as exc:
        return {"error_code": int(exc.code), "error_message": exc.message, "entries": None}
    entries = [
        {
            "entity": _wire_entity(entity),
            "values": [{"key": k, "value": v} for k, v in sorted(values.items())],
        }
        for entity, values in found
    ]
    return {"error_code": 0, "error_message": None, "entries": entries}


@handler(49)
def handle_alter_client_quotas(ctx: RequestContext, req: Fields) -> Fields:
    entries = req["entries"]
    if ctx.denies(CLUSTER_ALTER_CONFIGS, CLUSTER_NAME):
        code = int(ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
        return {
            "entries": [
                {"error_code": code, "error_message": _REFUSED, "entity": e["entity"]}
                for e in entries
            ]
        }
    alterations = [
        Alteration(
            entity_of((d["entity_type"], d["entity_name"]) for d in e["entity"]),
            [(op["key"], op["value"], op["remove"]) for op in e["ops"]],
        )
        for e in entries
    ]
    results = ctx.broker.quotas.alter(alterations, req["validate_only"])
    if not req["validate_only"]:
        done = [a.entity for a in alterations if results[a.entity] is None]
        if done:
            ctx.log.info("client_quotas_altered", entities=[dict(e) for e in done])
    out = []
    for entity, error in results.items():
        out.append(
            {
                "error_code": int(error.code) if error is not None else 0,
                "error_message": error.message if error is not None else None,
                "entity": _wire_entity(entity),
            }
        )
    return {"entries": out}
