"""Share-group administration (KIP-932): ShareGroupDescribe v1, DescribeShareGroupOffsets v0-v1,
AlterShareGroupOffsets v0, DeleteShareGroupOffsets v0 (``kgroupd.broker.share.admin``).

ShareGroupDescribe answers each group in request order: a group the principal may not
DESCRIBE gets GROUP_AUTHORIZATION_FAILED, one using topics it may not DESCRIBE
TOPIC_AUTHORIZATION_FAILED; the members' assignments name their topics. DescribeShareGroupOffsets
v1 adds each partition's lag (KIP-1226). Under ``--fsync always`` the offset changes are on
disk before the answer.
"""

from __future__ import annotations

from typing import Any

from kgroupd.broker.handlers.authorized import GROUP_OPERATIONS, NOT_REQUESTED, authorized
from kgroupd.broker.handlers.group_offsets import when_durable
from kgroupd.broker.handlers.registry import Fields, RequestContext, handler
from kgroupd.broker.security.acls import ResourceType
from kgroupd.broker.security.rules import (
    GROUP_DESCRIBE,
    TOPIC_DESCRIBE,
    TOPIC_READ,
)
from kgroupd.broker.share import admin
from kgroupd.protocol.errors import ErrorCode

TOPICS_REFUSED = "The described group uses topics that the client is not authorized to describe."


@handler(77)
def handle_share_group_describe(ctx: RequestContext, req: Fields) -> Fields:
    share = ctx.broker.share
    topics = ctx.broker.topics
    out = []
    for group_id in req["group_ids"] or []:
        if ctx.denies(GROUP_DESCRIBE, group_id):
            out.append(_described_error(group_id, ErrorCode.GROUP_AUTHORIZATION_FAILED, None))
            continue
        g = share.coordinator.describe(group_id)
        if g.error:
            out.append(_described_error(group_id, g.error, g.error_message))
            continue
        used = {n for m in g.members for n in m.subscribed_topic_names}
        used |= {name for m in g.members for _tid, name, _ps in m.assignment}
        if any(ctx.denies(TOPIC_DESCRIBE, n) for n in used):
            out.append(
                _described_error(group_id, ErrorCode.TOPIC_AUTHORIZATION_FAILED, TOPICS_REFUSED)
            )
            continue
        ops = NOT_REQUESTED
        if req["include_authorized_operations"]:
            ops = authorized(ctx, ResourceType.GROUP, group_id, GROUP_OPERATIONS)
        out.append(
            {
                "error_code": 0,
                "error_message": None,
                "group_id": g.group_id,
                "group_state": g.state,
                "group_epoch": g.group_epoch,
                "assignment_epoch": g.assignment_epoch,
                "assignor_name": g.assignor_name,
                "members": [
                    {
                        "member_id": m.member_id,
                        "rack_id": m.rack_id,
                        "member_epoch": m.member_epoch,
                        "client_id": m.client_id,
                        "client_host": m.client_host,
                        "subscribed_topic_names": list(m.subscribed_topic_names),
                        "assignment": {
                            "topic_partitions": [
                                {
                                    "topic_id": tid,
                                    "topic_name": name or _name(topics, tid),
                                    "partitions": list(ps),
                                }
                                for tid, name, ps in m.assignment
                            ]
                        },
                    }
                    for m in g.members
                ],
                "authorized_operations": ops,
            }
        )
    return {"throttle_time_ms": 0, "groups": out}


def _name(topics: Any, topic_id: Any) -> str:
    topic = topics.by_id(topic_id)
    return topic.name if topic is not None else ""


def _described_error(group_id: str, code: ErrorCode, message: str | None) -> Fields:
    return {
        "error_code": int(code),
        "error_message": message,
        "group_id": group_id,
        "group_state": "",
        "group_epoch": -1,
        "assignment_epoch": -1,
        "assignor_name": "",
        "members": [],
        "authorized_operations": NOT_REQUESTED,
    }


@handler(90)
def handle_describe_share_group_offsets(ctx: RequestContext, req: Fields) -> Fields:
    topics = ctx.broker.topics
    groups = []
    for g in req["groups"] or []:
        group_id = g["group_id"]
        if ctx.denies(GROUP_DESCRIBE, group_id):
            groups.append(
                {
                    "group_id": group_id,
                    "topics": [],
                    "error_code": int(ErrorCode.GROUP_AUTHORIZATION_FAILED),
                    "error_message": None,
                }
            )
            continue
        asked = None
        if g["topics"] is not None:
            asked = [(t["topic_name"], list(t["partitions"])) for t in g["topics"]]
        result = admin.describe_offsets(
            ctx.broker.share, group_id, asked, topics.get, lambda tid: _name(topics, tid) or None
        )
        groups.append(
            {
                "group_id": group_id,
                "topics": [
                    {
                        "topic_name": t.name,
                        "topic_id": t.topic_id,
                        "partitions": [_partition(ctx, t.name, p) for p in t.partitions],
                    }
                    for t in result.topics
                ],
                "error_code": int(result.error),
                "error_message": result.error_message,
            }
        )
    return {"throttle_time_ms": 0, "groups": groups}


def _partition(ctx: RequestContext, topic: str, p: admin.PartitionOffset) -> Fields:
    if ctx.denies(TOPIC_DESCRIBE, topic):
        return {
            "partition_index": p.partition,
            "start_offset": -1,
            "leader_epoch": -1,
            "lag": -1,
            "error_code": int(ErrorCode.TOPIC_AUTHORIZATION_FAILED),
            "error_message": None,
        }
    return {
        "partition_index": p.partition,
        "start_offset": p.start_offset,
        "leader_epoch": p.leader_epoch,
        "lag": p.lag,
        "error_code": int(p.error),
        "error_message": p.error_message,
    }


@handler(91)
def handle_alter_share_group_offsets(ctx: RequestContext, req: Fields) -> Fields | Any:
    refused = [t for t in req["topics"] or [] if ctx.denies(TOPIC_READ, t["topic_name"])]
    allowed = [t for t in req["topics"] or [] if t not in refused]
    error, message, done = admin.alter_offsets(
        ctx.broker.share,
        req["group_id"],
        [
            (t["topic_name"], [(p["partition_index"], p["start_offset"]) for p in t["partitions"]])
            for t in allowed
        ],
        ctx.broker.topics.get,
    )
    if error:
        return {
            "throttle_time_ms": 0,
            "error_code": int(error),
            "error_message": message,
            "responses": [],
        }
    responses = [
        {
            "topic_name": name,
            "topic_id": tid,
            "partitions": [
                {"partition_index": i, "error_code": int(c), "error_message": m}
                for i, c, m in parts
            ],
        }
        for name, tid, parts in done
    ]
    for t in refused:
        responses.append(
            {
                "topic_name": t["topic_name"],
                "topic_id": admin.NO_TOPIC,
                "partitions": [
                    {
                        "partition_index": p["partition_index"],
                        "error_code": int(ErrorCode.TOPIC_AUTHORIZATION_FAILED),
                        "error_message": None,
                    }
                    for p in t["partitions"]
                ],
            }
        )
    reply = {"throttle_time_ms": 0, "error_code": 0, "error_message": None, "responses": responses}
    return when_durable(ctx.broker.share_synced(), reply)


@handler(92)
def handle_delete_share_group_offsets(ctx: RequestContext, req: Fields) -> Fields | Any:
    names = [t["topic_name"] for t in req["topics"] or []]
    refused = [n for n in names if ctx.denies(TOPIC_READ, n)]
    error, message, done = admin.delete_offsets(
        ctx.broker.share,
        req["group_id"],
        [n for n in names if n not in refused],
        ctx.broker.topics.get,
    )
    if error:
        return {
            "throttle_time_ms": 0,
            "error_code": int(error),
            "error_message": message,
            "responses": [],
        }
    responses = [
        {"topic_name": n, "topic_id": tid, "error_code": int(c), "error_message": m}
        for n, tid, c, m in done
    ] + [
        {
            "topic_name": n,
            "topic_id": admin.NO_TOPIC,
            "error_code": int(ErrorCode.TOPIC_AUTHORIZATION_FAILED),
            "error_message": None,
        }
        for n in refused
    ]
    reply = {"throttle_time_ms": 0, "error_code": 0, "error_message": None, "responses": responses}
    return when_durable(ctx.broker.share_synced(), reply)
