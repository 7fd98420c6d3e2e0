"""Group administration: DescribeGroups v0-v6, ListGroups v0-v5, DeleteGroups v0-v2.

DescribeGroups v3+ answers the authorized operations when asked (with no authorizer, every
operation Kafka defines on a group), v6 GROUP_ID_NOT_FOUND for an unknown group; ListGroups
v4 filters by state, v5 by type and names each group's type.
"""

from __future__ import annotations

from typing import Any

from broker.coordinator import DeleteGroups, DescribeGroups, ListGroups
from broker.handlers.authorized import GROUP_OPERATIONS, NOT_REQUESTED
from broker.handlers.group_offsets import when_durable
from broker.handlers.registry import Fields, RequestContext, handler


@handler(15)
def handle_describe_groups(ctx: RequestContext, req: Fields) -> Fields:
    cmd = DescribeGroups(tuple(req["groups"]), unknown_group_not_found=ctx.api_version >= 6)
    result = ctx.broker.coordinator.describe_groups(cmd)
    ops = GROUP_OPERATIONS if req["include_authorized_operations"] else NOT_REQUESTED
    return {
        "groups": [
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
            for g in result.groups
        ]
    }


@handler(16)
def handle_list_groups(ctx: RequestContext, req: Fields) -> Fields:
    cmd = ListGroups(tuple(req["states_filter"]), tuple(req["types_filter"]))
    result = ctx.broker.coordinator.list_groups(cmd)
    return {
        "error_code": int(result.error),
        "groups": [
            {
                "group_id": g.group_id,
                "protocol_type": g.protocol_type,
                "group_state": g.state,
                "group_type": g.group_type,
            }
            for g in result.groups
        ],
    }


@handler(42)
def handle_delete_groups(ctx: RequestContext, req: Fields) -> Fields | Any:
    result = ctx.broker.coordinator.delete_groups(DeleteGroups(tuple(req["groups_names"])))
    reply = {
        "results": [{"group_id": gid, "error_code": int(code)} for gid, code in result.results]
    }
    # The tombstones are durable before the answer (--fsync always).
    return when_durable(ctx.broker.state_synced(), reply)
