"""The KIP-848 consumer group protocol: ConsumerGroupHeartbeat v0-v1, ConsumerGroupDescribe
v0-v1 (both flexible).

ConsumerGroupHeartbeat v1 adds SubscribedTopicRegex and lets the client choose its member id
(KIP-1082: the flag ``client_generates_member_id``; in v0 the broker makes one at epoch 0).
ConsumerGroupDescribe v1 adds the member type (-1: unknown, since kgroupd does not migrate
members between the protocols yet). Topics are named by id on the wire; the describe answer
names them both ways.
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING

from kgroupd.broker.coordinator import ConsumerGroupDescribe, ConsumerGroupHeartbeat
from kgroupd.broker.coordinator.beats import consumer_beat
from kgroupd.broker.handlers.authorized import GROUP_OPERATIONS, NOT_REQUESTED, authorized
from kgroupd.broker.handlers.registry import Fields, RequestContext, handler
from kgroupd.broker.security.acls import ResourceType
from kgroupd.broker.security.rules import GROUP_DESCRIBE, GROUP_READ
from kgroupd.protocol.errors import ErrorCode
from kgroupd.protocol.fast.consumer import (
    decode_consumer_group_heartbeat,
    encode_consumer_group_heartbeat_response,
    read_steady_heartbeat,
    steady_heartbeat_answer,
)

if TYPE_CHECKING:
    from kgroupd.broker.security.acls import Access
    from kgroupd.broker.state import Broker

_READ = GROUP_READ.operation  # the lane asks the ACL cache directly
_GROUP = GROUP_READ.resource_type
# a steady heartbeat's body -> (version, read_steady_heartbeat's answer)
_STEADY: dict[bytes, tuple[int, str, str, bytes, int]] = {}
STEADY_KEPT = 4096  # bodies at most (then it starts over)

_LOGGED = frozenset(
    {
        ErrorCode.INVALID_REQUEST,
        ErrorCode.UNSUPPORTED_ASSIGNOR,
        ErrorCode.INVALID_REGULAR_EXPRESSION,
        ErrorCode.UNRELEASED_INSTANCE_ID,
        ErrorCode.GROUP_MAX_SIZE_REACHED,
    }
)


def hot_consumer_group_heartbeat(
    broker: Broker, frame: bytes, pos: int, version: int, corr: int, access: Access | None
) -> tuple[bytes, int] | None:
    """The steady heartbeat on the lane (``kgroupd.broker.net.hot``), as
    ``handle_consumer_group_heartbeat`` answers it; any other takes the general path. A
    member's steady heartbeats are all alike: their fields are read once (``_STEADY``)."""
    body = frame[pos:]
    steady = _STEADY.get(body)
    if steady is None or steady[0] != version:
        try:
            read = read_steady_heartbeat(frame, pos, version)
        except Exception:
            return None  # the general path reads it again, and closes the connection
        if read is None:
            return None
        if len(_STEADY) >= STEADY_KEPT:
            _STEADY.clear()
        steady = _STEADY[body] = (version, *read)
    _, group, member, raw_member, epoch = steady
    # a group allowed before is in the connection's set: no call (else ask, and cache)
    if (
        access is not None
        and group not in access.group_reads
        and not access.allowed(_GROUP, group, _READ)
    ):
        return None  # the general path refuses it
    coordinator = broker.coordinator
    shard = coordinator.shard_of.get(group) or coordinator.shard_for(group)
    if not consumer_beat(shard, group, member, epoch):
        return None
    answer = steady_heartbeat_answer(corr, raw_member, epoch, coordinator.consumer_heartbeat_ms)
    return answer, 0


@handler(
    68, decoder=decode_consumer_group_heartbeat, hot=hot_consumer_group_heartbeat, flexible_from=0
)
def handle_consumer_group_heartbeat(ctx: RequestContext, req: Fields) -> Fields | bytes:
    owned = req["topic_partitions"]
    names = req["subscribed_topic_names"]
    coordinator = ctx.broker.coordinator
    if (
        owned is None
        and names is None
        and req["subscribed_topic_regex"] is None
        and req["server_assignor"] is None
        and req["rack_id"] is None
        and req["rebalance_timeout_ms"] == -1
        and coordinator.consumer_group_steady_heartbeat(
            req["group_id"], req["member_id"], req["member_epoch"]
        )
    ):  # the common heartbeat: nothing changes, nothing to build
        return encode_consumer_group_heartbeat_response(
            0, None, req["member_id"], req["member_epoch"], coordinator.consumer_heartbeat_ms
        )
    if ctx.broker.is_share_group(req["group_id"]):  # as Kafka: not a consumer group's id
        ctx.error = int(ErrorCode.GROUP_ID_NOT_FOUND)
        return encode_consumer_group_heartbeat_response(
            ctx.error, f"Group {req['group_id']} is not a consumer group.", None, 0, 0
        )
    cmd = ConsumerGroupHeartbeat(
        group_id=req["group_id"],
        member_id=req["member_id"],
        member_epoch=req["member_epoch"],
        instance_id=req["instance_id"],
        rack_id=req["rack_id"],
        rebalance_timeout_ms=req["rebalance_timeout_ms"],
        subscribed_topic_names=None if names is None else tuple(names),
        subscribed_topic_regex=req["subscribed_topic_regex"],
        server_assignor=req["server_assignor"],
        owned_partitions=None
        if owned is None
        else tuple((t["topic_id"], tuple(t["partitions"])) for t in owned),
        client_id=ctx.client_id or "",
        client_host=ctx.client_host,
        client_generates_member_id=ctx.api_version >= 1,
    )
    r = ctx.broker.coordinator.consumer_group_heartbeat(cmd)
    if r.error in _LOGGED:  # a client's mistake: one line saying which
        ctx.log.warning(
            "consumer_group_heartbeat_refused",
            group_id=cmd.group_id,
            member_id=cmd.member_id,
            error=r.error.name,
            message=r.error_message,
        )
    if r.assignment is None:  # almost every heartbeat: encoded by hand
        ctx.error = int(r.error)
        return encode_consumer_group_heartbeat_response(
            int(r.error), r.error_message, r.member_id, r.member_epoch, r.heartbeat_interval_ms
        )
    return {
        "error_code": int(r.error),
        "error_message": r.error_message,
        "member_id": r.member_id,
        "member_epoch": r.member_epoch,
        "heartbeat_interval_ms": r.heartbeat_interval_ms,
        "assignment": None
        if r.assignment is None
        else {
            "topic_partitions": [
                {"topic_id": t, "partitions": list(parts)} for t, parts in r.assignment
            ]
        },
    }


@handler(69)
def handle_consumer_group_describe(ctx: RequestContext, req: Fields) -> Fields:
    ids = req["group_ids"] or []
    refused = {g for g in ids if ctx.denies(GROUP_DESCRIBE, g)}
    result = ctx.broker.coordinator.consumer_group_describe(
        ConsumerGroupDescribe(tuple(g for g in ids if g not in refused))
    )
    wanted = req["include_authorized_operations"]

    def ops(group_id: str) -> int:
        if not wanted:
            return NOT_REQUESTED
        return authorized(ctx, ResourceType.GROUP, group_id, GROUP_OPERATIONS)

    topics = ctx.broker.topics

    def named(parts: tuple[tuple[uuid.UUID, tuple[int, ...]], ...]) -> Fields:
        out = []
        for topic_id, ps in parts:
            topic = topics.by_id(topic_id)
            out.append(
                {
                    "topic_id": topic_id,
                    "topic_name": topic.name if topic else "",
                    "partitions": list(ps),
                }
            )
        return {"topic_partitions": out}

    return {
        "groups": [
            {
                "error_code": int(g.error),
                "error_message": g.error_message,
                "group_id": g.group_id,
                "group_state": g.state,
                "group_epoch": g.group_epoch,
                "assignment_epoch": g.assignment_epoch,
                "assignor_name": g.assignor_name,
                "members": [
                    {
                        "member_id": m.member_id,
                        "instance_id": m.instance_id,
                        "rack_id": m.rack_id,
                        "member_epoch": m.member_epoch,
                        "client_id": m.client_id,
                        "client_host": m.client_host,
                        "subscribed_topic_names": list(m.subscribed_topic_names),
                        "subscribed_topic_regex": m.subscribed_topic_regex,
                        "assignment": named(m.assignment),
                        "target_assignment": named(m.target_assignment),
                        "member_type": m.member_type,
                    }
                    for m in g.members
                ],
                "authorized_operations": ops(g.group_id) if g.error == 0 else NOT_REQUESTED,
            }
            for g in result.groups
        ]
        + [
            {
                "error_code": int(ErrorCode.GROUP_AUTHORIZATION_FAILED),
                "error_message": None,
                "group_id": g,
                "group_state": "",
                "group_epoch": -1,
                "assignment_epoch": -1,
                "assignor_name": "",
                "members": [],
                "authorized_operations": NOT_REQUESTED,
            }
            for g in dict.fromkeys(ids)
            if g in refused
        ]
    }
