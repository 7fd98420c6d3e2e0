"""ACL administration: DescribeAcls v1-v3, CreateAcls v1-v3, DeleteAcls v1-v3 (v0 is gone
since Kafka 4). Without ``--authorizer acl`` each answers SECURITY_DISABLED, as Kafka does
with no authorizer configured. DescribeAcls needs DESCRIBE on the cluster (checked by the
connection, ``kgroupd.broker.security.rules``); CreateAcls and DeleteAcls need ALTER."""

from __future__ import annotations

from kgroupd.broker.handlers.registry import Fields, RequestContext, handler
from kgroupd.broker.security.acls import CLUSTER_NAME, AclBinding, AclFilter
from kgroupd.broker.security.rules import CLUSTER_ALTER
from kgroupd.protocol.errors import ErrorCode

_DISABLED = "No Authorizer is configured on the broker"


def _filter(f: Fields) -> AclFilter:
    return AclFilter(
        f["resource_type_filter"],
        f["resource_name_filter"],
        f["pattern_type_filter"],
        f["principal_filter"],
        f["host_filter"],
        f["operation"],
        f["permission_type"],
    )


@handler(29)
def handle_describe_acls(ctx: RequestContext, req: Fields) -> Fields:
    authorizer = ctx.broker.authorizer
    reply: Fields = {"throttle_time_ms": 0, "error_code": 0, "resources": []}
    if authorizer is None:
        return {**reply, "error_code": int(ErrorCode.SECURITY_DISABLED), "error_message": _DISABLED}
    acl_filter = _filter(req)
    problem = acl_filter.invalid()
    if problem is not None:
        return {**reply, "error_code": int(ErrorCode.INVALID_REQUEST), "error_message": problem}
    grouped: dict[tuple[int, str, int], list[Fields]] = {}
    for acl in authorizer.matching(acl_filter):
        grouped.setdefault((acl.resource_type, acl.resource_name, acl.pattern_type), []).append(
            {
                "principal": acl.principal,
                "host": acl.host,
                "operation": acl.operation,
                "permission_type": acl.permission,
            }
        )
    reply["resources"] = [
        {"resource_type": t, "resource_name": n, "pattern_type": p, "acls": acls}
        for (t, n, p), acls in grouped.items()
    ]
    return reply


@handler(30)
def handle_create_acls(ctx: RequestContext, req: Fields) -> Fields:
    authorizer = ctx.broker.authorizer
    results = []
    created = []
    for c in req["creations"] or []:
        code, message = ErrorCode.NONE, None
        acl = AclBinding(
            c["resource_type"],
            c["resource_name"] or "",
            c["resource_pattern_type"],
            c["principal"] or "",
            c["host"] or "",
            c["operation"],
            c["permission_type"],
        )
        if authorizer is None:
            code, message = ErrorCode.SECURITY_DISABLED, _DISABLED
        elif ctx.denies(CLUSTER_ALTER, CLUSTER_NAME):
            code, message = ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "Authorization failed."
        else:
            message = acl.invalid()
            if message is not None:
                code = ErrorCode.INVALID_REQUEST
            else:
                created.append(acl)
        results.append({"error_code": int(code), "error_message": message})
    if created and authorizer is not None:
        authorizer.add(created)
        ctx.log.info("acls_created", count=len(created))
    return {"throttle_time_ms": 0, "results": results}


@handler(31)
def handle_delete_acls(ctx: RequestContext, req: Fields) -> Fields:
    authorizer = ctx.broker.authorizer
    results: list[Fields] = []
    deleted: set[AclBinding] = set()
    for f in req["filters"] or []:
        if authorizer is None:
            code, message = ErrorCode.SECURITY_DISABLED, _DISABLED
        elif ctx.denies(CLUSTER_ALTER, CLUSTER_NAME):
            code, message = ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "Authorization failed."
        else:
            acl_filter = _filter(f)
            problem = acl_filter.invalid()
            if problem is None:
                matched = authorizer.matching(acl_filter)
                deleted.update(matched)
                results.append(
                    {
                        "error_code": 0,
                        "error_message": None,
                        "matching_acls": [
                            {
                                "error_code": 0,
                                "error_message": None,
                                "resource_type": a.resource_type,
                                "resource_name": a.resource_name,
                                "pattern_type": a.pattern_type,
                                "principal": a.principal,
                                "host": a.host,
                                "operation": a.operation,
                                "permission_type": a.permission,
                            }
                            for a in matched
                        ],
                    }
                )
                continue
            code, message = ErrorCode.INVALID_REQUEST, problem
        results.append({"error_code": int(code), "error_message": message, "matching_acls": []})
    if deleted and authorizer is not None:
        authorizer.remove(deleted)
        ctx.log.info("acls_deleted", count=len(deleted))
    return {"throttle_time_ms": 0, "filter_results": results}
