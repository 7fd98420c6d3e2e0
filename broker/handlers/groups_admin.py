"""Group administration: DescribeGroups v0-v6, ListGroups v0-v5, DeleteGroups v0-v2.

DescribeGroups v3+ answers the authorized operations when asked (with no authorizer, every
operation Kafka defines on a group), v6 GROUP_ID_NOT_FOUND for an unknown group; ListGroups
v4 filters by state, v5 by type and names each group's type.

Share groups (KIP-932) are listed as Kafka lists them (protocol type "share", type "share",
state Empty or Stable); DescribeGroups, which describes classic groups, answers a share group
as it answers an unknown one (Dead; from v6 GROUP_ID_NOT_FOUND "Group X is not a classic
group."); DeleteGroups deletes an Empty share group with its share-partition state.
"""

from __future__ import annotations

from typing import Any

from kgroupd.broker.coordinator import DeleteGroups, DescribeGroups, ListGroups
from kgroupd.broker.coordinator.commands import ListedGroup
from kgroupd.broker.handlers.authorized import GROUP_OPERATIONS, NOT_REQUESTED, authorized
from kgroupd.broker.handlers.group_offsets import when_durable
from kgroupd.broker.handlers.registry import Fields, RequestContext, handler
from kgroupd.broker.security.acls import CLUSTER_NAME, ResourceType
from kgroupd.broker.security.rules import CLUSTER_DESCRIBE, GROUP_DELETE, GROUP_DESCRIBE
from kgroupd.broker.share.admin import delete_group as delete_share_group
from kgroupd.protocol.errors import ErrorCode


def _refused_group(group_id: str) -> Fields:
    return {
        "error_code": int(ErrorCode.GROUP_AUTHORIZATION_FAILED),
        "group_id": group_id,
        "group_state": "",
        "protocol_type": "",
        "protocol_data": "",
        "members": [],
        "authorized_operations": NOT_REQUESTED,
    }


@handler(15)
def handle_describe_groups(ctx: RequestContext, req: Fields) -> Fields:
    """Groups the principal may not DESCRIBE get GROUP_AUTHORIZATION_FAILED, in place."""
    names = req["groups"] or []
    refused = {g for g in names if ctx.denies(GROUP_DESCRIBE, g)}
    asked = tuple(g for g in names if g not in refused)
    cmd = DescribeGroups(asked, unknown_group_not_found=ctx.api_version >= 6)
    result = ctx.broker.coordinator.describe_groups(cmd) if asked else None
    described = {g.group_id: g for g in result.groups} if result is not None else {}
    wanted = req["include_authorized_operations"]
    share_groups = ctx.broker.share.coordinator.groups
    groups = []
    for name in names:
        g = described.get(name)
        if name in refused or g is None:
            groups.append(_refused_group(name))
            continue
        if g.error == ErrorCode.GROUP_ID_NOT_FOUND and name in share_groups:
            groups.append(
                {
                    **_refused_group(name),
                    "error_code": int(g.error),
                    "group_state": "",
                    "error_message": f"Group {name} is not a classic group.",
                }
            )
            continue
        ops = NOT_REQUESTED
        if wanted:
            ops = authorized(ctx, ResourceType.GROUP, name, GROUP_OPERATIONS)
        groups.append(
            {
                "error_code": int(g.error),
                "group_id": g.group_id,
                "group_state": g.state,
                "protocol_type": g.protocol_type,
                "protocol_data": g.protocol_data,
                "members": [
                    {
                        "member_id": m.member_id,
                        "group_instance_id": m.group_instance_id,
                        "client_id": m.client_id,
                        "client_host": m.client_host,
                        "member_metadata": m.metadata,
                        "member_assignment": m.assignment,
                    }
                    for m in g.members
                ],
                "authorized_operations": ops,
            }
        )
    return {"groups": groups}


@handler(16)
def handle_list_groups(ctx: RequestContext, req: Fields) -> Fields:
    cmd = ListGroups(tuple(req["states_filter"]), tuple(req["types_filter"]))
    result = ctx.broker.coordinator.list_groups(cmd)
    listed = list(result.groups) + _share_groups(ctx, cmd)
    # DESCRIBE on the cluster shows every group; otherwise those the principal may DESCRIBE
    every = not ctx.denies(CLUSTER_DESCRIBE, CLUSTER_NAME)
    return {
        "error_code": int(result.error),
        "groups": [
            {
                "group_id": g.group_id,
                "protocol_type": g.protocol_type,
                "group_state": g.state,
                "group_type": g.group_type,
            }
            for g in listed
            if every or not ctx.denies(GROUP_DESCRIBE, g.group_id)
        ],
    }


def _share_groups(ctx: RequestContext, cmd: ListGroups) -> list[ListedGroup]:
    types = {t.lower() for t in cmd.types_filter}
    if types and "share" not in types:
        return []
    states = {s.lower() for s in cmd.states_filter}
    return [
        ListedGroup(g.group_id, "share", g.state.value, "share")
        for g in ctx.broker.share.coordinator.groups.values()
        if not states or g.state.value.lower() in states
    ]


@handler(42)
def handle_delete_groups(ctx: RequestContext, req: Fields) -> Fields | Any:
    names = req["groups_names"] or []
    refused = {g for g in names if ctx.denies(GROUP_DELETE, g)}
    share = ctx.broker.share
    shared = {g for g in names if g in share.coordinator.groups}
    allowed = tuple(g for g in names if g not in refused and g not in shared)
    done = iter(ctx.broker.coordinator.delete_groups(DeleteGroups(allowed)).results)
    results = []
    for name in names:
        if name in refused:
            results.append((name, ErrorCode.GROUP_AUTHORIZATION_FAILED))
        elif name in shared:
            results.append((name, delete_share_group(share, name)))
        else:
            results.append(next(done))
    reply = {"results": [{"group_id": gid, "error_code": int(code)} for gid, code in results]}
    # The tombstones are durable before the answer (--fsync always).
    synced = ctx.broker.state_synced() if allowed else None
    if shared:
        synced = synced or ctx.broker.share_synced()
    return when_durable(synced, reply)
