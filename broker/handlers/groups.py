"""Consumer groups: FindCoordinator v0-v2, JoinGroup v0-v5, SyncGroup v0-v3, Heartbeat v0-v3,
LeaveGroup v0-v3, DescribeGroups v0-v4, ListGroups v0-v2, DeleteGroups v0-v1.

Each handler turns the wire struct into a version-free coordinator command and back.
Version rules become flags: JoinGroup v4+ sets ``require_known_member_id`` (KIP-394).
JoinGroup v1 adds the rebalance timeout (v0 uses the session timeout), v5 and SyncGroup v3,
Heartbeat v3 and LeaveGroup v3 the group instance id (KIP-345); LeaveGroup v3 takes a batch.
FindCoordinator v1 adds the key type and error message; transaction coordinators (type 1)
are answered with a non-retriable error, since kgroupd has no transactions.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from broker.coordinator import (
    Deferred,
    DeleteGroups,
    DescribeGroups,
    Heartbeat,
    JoinGroup,
    JoinGroupResult,
    LeaveGroup,
    ListGroups,
    SyncGroup,
    SyncGroupResult,
)
from broker.handlers.group_offsets import when_durable
from broker.handlers.registry import Fields, RequestContext, handler
from protocol.errors import ErrorCode
from protocol.fast import decode_heartbeat, encode_error_only

if TYPE_CHECKING:
    from broker.state import Broker

T = TypeVar("T")
_NO_OPERATIONS = -2147483648


def answer(
    d: Deferred[T], convert: Callable[[T], Fields], broker: Broker | None = None
) -> Fields | Any:
    """The reply now when the coordinator answered at once, else an awaitable of it.

    With ``broker``, the reply also waits until the records written so far are durable
    (``--fsync always``): the leader's SyncGroup stores the assignments every member gets.
    """
    if d.done() and (broker is None or broker.durability is None):
        return convert(d.result())
    fut: asyncio.Future[T] = asyncio.get_running_loop().create_future()

    def resolve(value: T) -> None:
        if not fut.done():
            fut.set_result(value)

    d.add_callback(resolve)

    async def wait() -> Fields:
        value = await fut
        synced = broker.state_synced() if broker is not None else None
        if synced is not None:
            await synced
        return convert(value)

    return wait()


@handler(10, 0, 2)
def handle_find_coordinator(ctx: RequestContext, req: Fields) -> Fields:
    key = req.get("coordinator_key", req.get("consumer_group")) or ""
    key_type = req.get("coordinator_type", 0)
    broker = ctx.broker
    code, message = ErrorCode.NONE, None
    if key_type == 1:
        code = ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        message = "transactions are not supported by kgroupd"
    elif key_type != 0:
        code, message = ErrorCode.INVALID_REQUEST, f"Unsupported coordinator key type {key_type}"
    elif not broker.coordinator.coordinator_for(key).owned:
        code = ErrorCode.NOT_COORDINATOR
    if code:
        return {
            "error_code": int(code),
            "error_message": message,
            "coordinator_id": -1,
            "node_id": -1,
            "host": "",
            "port": -1,
        }
    return {
        "error_code": 0,
        "error_message": None,
        "coordinator_id": broker.node_id,
        "node_id": broker.node_id,
        "host": broker.advertised_host,
        "port": broker.advertised_port,
    }


def _join_reply(r: JoinGroupResult) -> Fields:
    return {
        "error_code": int(r.error),
        "generation_id": r.generation_id,
        "group_protocol": r.protocol_name or "",
        "protocol_name": r.protocol_name,
        "protocol_type": r.protocol_type,
        "leader_id": r.leader,
        "member_id": r.member_id,
        "skip_assignment": r.skip_assignment,
        "members": [
            {
                "member_id": m.member_id,
                "group_instance_id": m.group_instance_id,
                "member_metadata": m.metadata,
                "metadata": m.metadata,
            }
            for m in r.members
        ],
    }


@handler(11, 0, 5)
def handle_join_group(ctx: RequestContext, req: Fields) -> Fields | Any:
    session = req["session_timeout"]
    cmd = JoinGroup(
        group_id=req["group"],
        member_id=req["member_id"] or "",
        session_timeout_ms=session,
        rebalance_timeout_ms=req.get("rebalance_timeout") or session,
        protocol_type=req["protocol_type"] or "",
        protocols=tuple(
            (p["protocol_name"], p["protocol_metadata"] or b"") for p in req["group_protocols"]
        ),
        group_instance_id=req.get("group_instance_id"),
        client_id=ctx.client_id or "",
        client_host=ctx.client_host,
        require_known_member_id=ctx.api_version >= 4,
    )
    return answer(ctx.broker.coordinator.join_group(cmd), _join_reply)


def _sync_reply(r: SyncGroupResult) -> Fields:
    return {
        "error_code": int(r.error),
        "protocol_type": r.protocol_type,
        "protocol_name": r.protocol_name,
        "member_assignment": r.assignment,
        "assignment": r.assignment,
    }


@handler(14, 0, 3)
def handle_sync_group(ctx: RequestContext, req: Fields) -> Fields | Any:
    cmd = SyncGroup(
        group_id=req["group"],
        generation_id=req["generation_id"],
        member_id=req["member_id"],
        group_instance_id=req.get("group_instance_id"),
        protocol_type=req.get("protocol_type"),
        protocol_name=req.get("protocol_name"),
        assignments=tuple(
            (a["member_id"], a["member_metadata"] or b"") for a in req["group_assignment"] or ()
        ),
    )
    return answer(ctx.broker.coordinator.sync_group(cmd), _sync_reply, ctx.broker)


@handler(12, 0, 3, decoder=decode_heartbeat)
def handle_heartbeat(ctx: RequestContext, req: Fields) -> bytes:
    # The hottest group request: decoded and encoded by hand (protocol.fast).
    result = ctx.broker.coordinator.heartbeat(
        Heartbeat(
            req["group"], req["generation_id"], req["member_id"], req.get("group_instance_id")
        )
    )
    return encode_error_only(int(result.error), ctx.api_version)


@handler(13, 0, 3)
def handle_leave_group(ctx: RequestContext, req: Fields) -> Fields:
    if "members" in req:
        members = tuple((m["member_id"], m["group_instance_id"]) for m in req["members"] or ())
    else:
        members = ((req["member_id"], None),)
    result = ctx.broker.coordinator.leave_group(LeaveGroup(req["group"], members))
    code = result.error
    if "members" not in req and code == ErrorCode.NONE and result.members:
        # v0-v2 name one member and carry its error at the top level.
        code = result.members[0].error
    return {
        "error_code": int(code),
        "members": [
            {
                "member_id": m.member_id,
                "group_instance_id": m.group_instance_id,
                "error_code": int(m.error),
            }
            for m in result.members
        ],
    }


@handler(15, 0, 4)
def handle_describe_groups(ctx: RequestContext, req: Fields) -> Fields:
    result = ctx.broker.coordinator.describe_groups(DescribeGroups(tuple(req["groups"] or ())))
    return {
        "groups": [
            {
                "error_code": int(g.error),
                "group": g.group_id,
                "group_id": g.group_id,
                "state": g.state,
                "group_state": g.state,
                "protocol_type": g.protocol_type,
                "protocol": g.protocol_data,
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
                "authorized_operations": _NO_OPERATIONS,
            }
            for g in result.groups
        ]
    }


@handler(16, 0, 2)
def handle_list_groups(ctx: RequestContext, req: Fields) -> Fields:
    result = ctx.broker.coordinator.list_groups(ListGroups(tuple(req.get("states_filter") or ())))
    return {
        "error_code": int(result.error),
        "groups": [
            {
                "group": g.group_id,
                "group_id": g.group_id,
                "protocol_type": g.protocol_type,
                "group_state": g.state,
            }
            for g in result.groups
        ],
    }


@handler(42, 0, 1)
def handle_delete_groups(ctx: RequestContext, req: Fields) -> Fields | Any:
    result = ctx.broker.coordinator.delete_groups(
        DeleteGroups(tuple(req.get("groups_names") or ()))
    )
    reply = {
        "results": [{"group_id": gid, "error_code": int(code)} for gid, code in result.results]
    }
    # The tombstones are durable before the answer (--fsync always).
    return when_durable(ctx.broker.state_synced(), reply)
