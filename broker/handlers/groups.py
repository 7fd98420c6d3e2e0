"""Classic group membership: FindCoordinator v0-v6, JoinGroup v0-v9, SyncGroup v0-v5,
Heartbeat v0-v4, LeaveGroup v0-v5.

Each handler turns the wire request into a version-free coordinator command and back.
Version rules become flags: JoinGroup v4+ sets ``require_known_member_id`` (KIP-394), v9+
``skip_assignment_supported``. JoinGroup v1 adds the rebalance timeout (v0 uses the session
timeout), v5, SyncGroup v3, Heartbeat v3 and LeaveGroup v3 the group instance id (KIP-345);
LeaveGroup v3 takes a batch; JoinGroup v8 and LeaveGroup v5 carry reasons (logged).
FindCoordinator v4+ answers a batch of keys; key type SHARE (2, v6+, CLUSTER_ACTION) takes
a share partition's state key ``group:topicId:partition``, as a broker's share-state persister
asks for it (INVALID_REQUEST when malformed).
"""

from __future__ import annotations

import asyncio
import base64
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from kgroupd.broker.coordinator import (
    Deferred,
    JoinGroup,
    JoinGroupResult,
    LeaveGroup,
    SyncGroup,
    SyncGroupResult,
)
from kgroupd.broker.coordinator.beats import classic_beat
from kgroupd.broker.handlers.registry import Fields, RequestContext, handler
from kgroupd.broker.security.acls import CLUSTER_NAME
from kgroupd.broker.security.rules import CLUSTER_ACTION, GROUP_DESCRIBE, GROUP_READ, TXN_DESCRIBE
from kgroupd.protocol.errors import ErrorCode
from kgroupd.protocol.fast import decode_heartbeat, encode_heartbeat_response
from kgroupd.protocol.fast.heartbeat import ANSWER_V1, heartbeat_answer, read_heartbeat
from kgroupd.protocol.fast.heartbeat import FLEXIBLE_FROM as HEARTBEAT_FLEXIBLE_FROM

if TYPE_CHECKING:
    from kgroupd.broker.security.acls import Access
    from kgroupd.broker.state import Broker

_READ = GROUP_READ.operation  # the lane asks the ACL cache directly
_GROUP = GROUP_READ.resource_type
# a Heartbeat's body -> (version, its fields): a member's heartbeats are all alike
_BODIES: dict[bytes, tuple[int, str, int, str, str | None]] = {}
BODIES_KEPT = 4096  # bodies at most (then it starts over)

T = TypeVar("T")


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


@handler(10)
def handle_find_coordinator(ctx: RequestContext, req: Fields) -> Fields:
    key_type = req["key_type"]
    if ctx.api_version >= 4:
        return {
            "coordinators": [_coordinator(ctx, key, key_type) for key in req["coordinator_keys"]]
        }
    return _coordinator(ctx, req["key"], key_type)


def _coordinator(ctx: RequestContext, key: str, key_type: int) -> Fields:
    broker = ctx.broker
    code, message = ErrorCode.NONE, None
    if key_type == 0 and ctx.denies(GROUP_DESCRIBE, key):
        code = ErrorCode.GROUP_AUTHORIZATION_FAILED
    elif key_type == 1 and ctx.denies(TXN_DESCRIBE, key):
        code = ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    elif key_type == 1:
        if not key:
            code, message = ErrorCode.INVALID_REQUEST, "the transactional id must not be empty"
    elif key_type != 0:
        if key_type != 2:
            code = ErrorCode.INVALID_REQUEST
            message = f"Unsupported coordinator key type {key_type}"
        elif ctx.api_version < 6:  # as Kafka: the SHARE key type came with v6
            code = ErrorCode.INVALID_REQUEST
        elif ctx.denies(CLUSTER_ACTION, CLUSTER_NAME):
            code = ErrorCode.CLUSTER_AUTHORIZATION_FAILED
        elif share_state_key(key) is None:
            code = ErrorCode.INVALID_REQUEST
            message = f"Invalid share coordinator key {key!r}: want group:topicId:partition"
    elif not broker.coordinator.coordinator_for(key).owned:
        code = ErrorCode.NOT_COORDINATOR
    else:
        broker.offsets_topic.create()  # as Kafka creates __consumer_offsets on first use
    if code:
        return {
            "key": key,
            "error_code": int(code),
            "error_message": message,
            "node_id": -1,
            "host": "",
            "port": -1,
        }
    node, (host, port) = broker.node_id, ctx.advertised
    if broker.nodes is not None:  # --nodes N > 1: the key's node
        hashed = (share_state_key(key) or key) if key_type == 2 else key  # as Kafka hashes it
        node = broker.nodes.coordinator(key_type, hashed)
        host, port = broker.nodes.address(ctx.advertised, node)
    return {
        "key": key,
        "error_code": 0,
        "error_message": None,
        "node_id": node,
        "host": host,
        "port": port,
    }


def share_state_key(key: str) -> str | None:
    """A share-state key as Kafka's ``SharePartitionKey`` writes it (``group:topicId:partition``,
    the topic id in Kafka's base64 form; the group may hold colons), or None if malformed."""
    group, _, rest = key.rpartition(":")
    group, _, topic_id = group.rpartition(":")
    if not group or not topic_id or len(topic_id) > 24:
        return None
    try:
        partition = int(rest)
        raw = base64.b64decode(
            topic_id.replace("-", "+").replace("_", "/") + "=" * (-len(topic_id) % 4),
            validate=True,
        )
    except ValueError:
        return None
    if len(raw) != 16 or not -(2**31) <= partition < 2**31:
        return None
    return f"{group}:{base64.urlsafe_b64encode(raw).rstrip(b'=').decode()}:{partition}"


def _join_reply(r: JoinGroupResult) -> Fields:
    return {
        "error_code": int(r.error),
        "generation_id": r.generation_id,
        "protocol_name": r.protocol_name,
        "protocol_type": r.protocol_type,
        "leader": r.leader,
        "member_id": r.member_id,
        "skip_assignment": r.skip_assignment,
        "members": [
            {
                "member_id": m.member_id,
                "group_instance_id": m.group_instance_id,
                "metadata": m.metadata,
            }
            for m in r.members
        ],
    }


@handler(11)
def handle_join_group(ctx: RequestContext, req: Fields) -> Fields | Any:
    if ctx.broker.is_share_group(req["group_id"]):  # as Kafka: not a classic group's id
        return _join_reply(JoinGroupResult(ErrorCode.INCONSISTENT_GROUP_PROTOCOL))
    session = req["session_timeout_ms"]
    rebalance = req["rebalance_timeout_ms"]
    reason = req["reason"]
    if reason is not None:
        ctx.log.info(
            "join_group_reason", group_id=req["group_id"], member_id=req["member_id"], reason=reason
        )
    cmd = JoinGroup(
        group_id=req["group_id"],
        member_id=req["member_id"],
        session_timeout_ms=session,
        rebalance_timeout_ms=rebalance if ctx.api_version >= 1 else session,
        protocol_type=req["protocol_type"],
        protocols=tuple((p["name"], p["metadata"]) for p in req["protocols"]),
        group_instance_id=req["group_instance_id"],
        client_id=ctx.client_id or "",
        client_host=ctx.client_host,
        require_known_member_id=ctx.api_version >= 4,
        skip_assignment_supported=ctx.api_version >= 9,
        reason=reason,
    )
    return answer(ctx.broker.coordinator.join_group(cmd), _join_reply)


def _sync_reply(r: SyncGroupResult) -> Fields:
    return {
        "error_code": int(r.error),
        "protocol_type": r.protocol_type,
        "protocol_name": r.protocol_name,
        "assignment": r.assignment,
    }


@handler(14)
def handle_sync_group(ctx: RequestContext, req: Fields) -> Fields | Any:
    cmd = SyncGroup(
        group_id=req["group_id"],
        generation_id=req["generation_id"],
        member_id=req["member_id"],
        group_instance_id=req["group_instance_id"],
        protocol_type=req["protocol_type"],
        protocol_name=req["protocol_name"],
        assignments=tuple((a["member_id"], a["assignment"]) for a in req["assignments"]),
    )
    return answer(ctx.broker.coordinator.sync_group(cmd), _sync_reply, ctx.broker)


def hot_heartbeat(
    broker: Broker, frame: bytes, pos: int, version: int, corr: int, access: Access | None
) -> tuple[bytes, int] | None:
    """Heartbeat on the lane (``kgroupd.broker.net.hot``): as ``handle_heartbeat``. A member
    sends the same body every time: its fields are read once (``_BODIES``)."""
    body = frame[pos:]
    known = _BODIES.get(body)
    if known is None or known[0] != version:
        try:
            known = (version, *read_heartbeat(frame, pos, version))
        except Exception:
            return None  # the general path reads it again, and closes the connection
        if len(_BODIES) >= BODIES_KEPT:
            _BODIES.clear()
        _BODIES[body] = known
    _, group, generation, member, instance = known
    # a group allowed before is in the connection's set: no call (else ask, and cache)
    if (
        access is not None
        and group not in access.group_reads
        and not access.allowed(_GROUP, group, _READ)
    ):
        return None  # the general path refuses it
    coordinator = broker.coordinator
    shard = coordinator.shard_of.get(group) or coordinator.shard_for(group)
    error = classic_beat(shard, group, generation, member, instance)
    if version and version < HEARTBEAT_FLEXIBLE_FROM:  # v1-v3: throttle time, error code
        return ANSWER_V1.pack(10, corr, 0, error), error
    return heartbeat_answer(corr, error, version), error


@handler(12, decoder=decode_heartbeat, hot=hot_heartbeat, flexible_from=HEARTBEAT_FLEXIBLE_FROM)
def handle_heartbeat(ctx: RequestContext, req: Fields) -> bytes:
    # The hottest group request: decoded and encoded by hand (kgroupd.protocol.fast).
    code = ctx.broker.coordinator.heartbeat_error(
        req["group_id"], req["generation_id"], req["member_id"], req["group_instance_id"]
    )
    ctx.error = error = int(code)
    return encode_heartbeat_response(error, ctx.api_version)


@handler(13)
def handle_leave_group(ctx: RequestContext, req: Fields) -> Fields:
    batch = ctx.api_version >= 3
    if batch:
        members = tuple((m["member_id"], m["group_instance_id"]) for m in req["members"])
        for m in req["members"]:
            if m["reason"] is not None:
                ctx.log.info(
                    "leave_group_reason",
                    group_id=req["group_id"],
                    member_id=m["member_id"],
                    group_instance_id=m["group_instance_id"],
                    reason=m["reason"],
                )
    else:
        members = ((req["member_id"], None),)
    result = ctx.broker.coordinator.leave_group(LeaveGroup(req["group_id"], members))
    code = result.error
    if not batch and code == ErrorCode.NONE and result.members:
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
