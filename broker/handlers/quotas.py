"""DescribeClientQuotas v0-v1 and AlterClientQuotas v0-v1 (KIP-546), over
``kgroupd.broker.quotas``: DESCRIBE_CONFIGS on the cluster to describe, ALTER_CONFIGS to alter
(a refusal answers every entity with CLUSTER_AUTHORIZATION_FAILED, as Kafka does)."""

from __future__ import annotations

from kgroupd.broker.handlers.registry import Fields, RequestContext, handler
from kgroupd.broker.quotas import Alteration, Entity, QuotaError, entity_of
from kgroupd.broker.security.acls import CLUSTER_NAME
from kgroupd.broker.security.rules import CLUSTER_ALTER_CONFIGS, CLUSTER_DESCRIBE_CONFIGS
from kgroupd.protocol.errors import ErrorCode

_REFUSED = "Cluster authorization failed."


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
