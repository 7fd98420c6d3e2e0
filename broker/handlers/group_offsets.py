"""Committed offsets: OffsetCommit v0-v7, OffsetFetch v0-v5, OffsetDelete v0.

OffsetCommit v1 adds the generation and member id, v2-v4 a retention time, v6 the leader
epoch, v7 the group instance id. OffsetFetch v2 adds a top-level error and null topics
(all), v5 the leader epoch; v0-v1 carry a group error in every partition instead.
"""

from __future__ import annotations

import asyncio

from broker.coordinator import (
    OffsetCommit,
    OffsetCommitTopic,
    OffsetDelete,
    OffsetFetch,
    OffsetFetchTopic,
)
from broker.handlers.registry import Fields, Held, Reply, RequestContext, handler
from protocol.errors import ErrorCode
from protocol.fast import decode_offset_commit, encode_offset_commit_response


@handler(8, 0, 7, decoder=decode_offset_commit)
def handle_offset_commit(ctx: RequestContext, req: Fields) -> Reply:
    cmd = OffsetCommit(
        group_id=req["consumer_group"],
        # The decoder's (partition, offset, leader_epoch, metadata) tuples, as they are.
        topics=tuple(OffsetCommitTopic(name, parts) for name, parts in req["topics"]),
        generation_id=req.get("consumer_group_generation_id", -1),
        member_id=req.get("consumer_id") or "",
        group_instance_id=req.get("group_instance_id"),
        retention_time_ms=req.get("retention_time", -1),
    )
    result = ctx.broker.coordinator.commit_offsets(cmd)
    body = encode_offset_commit_response(ctx.api_version, result.topics)
    # Under --fsync always the commit is answered only once its records are on disk.
    return when_durable(ctx.broker.state_synced(), body)


def when_durable(synced: asyncio.Future[None] | None, reply: Fields | bytes) -> Reply:
    """``reply`` now, or held until ``synced`` (the fsync of what the request wrote)."""
    if synced is None:
        return reply
    return Held(synced, reply)


@handler(9, 0, 5)
def handle_offset_fetch(ctx: RequestContext, req: Fields) -> Fields:
    topics = req["topics"]
    cmd = OffsetFetch(
        group_id=req["consumer_group"],
        topics=None
        if topics is None
        else tuple(OffsetFetchTopic(t["topic"], tuple(t["partitions"])) for t in topics),
    )
    result = ctx.broker.coordinator.fetch_offsets(cmd)
    # v0-v1 have no top-level error: a group error goes into every partition.
    group_error = result.error if ctx.api_version < 2 else ErrorCode.NONE
    if result.error and ctx.api_version < 2 and topics is not None:
        out_topics = [
            {
                "topic": t["topic"],
                "partitions": [
                    {
                        "partition": p,
                        "offset": -1,
                        "leader_epoch": -1,
                        "metadata": "",
                        "error_code": int(group_error),
                    }
                    for p in t["partitions"]
                ],
            }
            for t in topics
        ]
    else:
        out_topics = [
            {
                "topic": name,
                "partitions": [
                    {
                        "partition": p.partition,
                        "offset": p.offset,
                        "leader_epoch": p.leader_epoch,
                        "metadata": p.metadata,
                        "error_code": int(p.error),
                    }
                    for p in parts
                ],
            }
            for name, parts in result.topics
        ]
    return {"topics": out_topics, "error_code": int(result.error)}


@handler(47, 0, 0)
def handle_offset_delete(ctx: RequestContext, req: Fields) -> Reply:
    cmd = OffsetDelete(
        req["group_id"], tuple((t["topic"], tuple(t["partitions"])) for t in req["topics"])
    )
    result = ctx.broker.coordinator.delete_offsets(cmd)
    return when_durable(
        ctx.broker.state_synced(),
        {
            "error_code": int(result.error),
            "topics": [
                {
                    "topic": name,
                    "partitions": [{"partition": p, "error_code": int(code)} for p, code in parts],
                }
                for name, parts in result.topics
            ],
        },
    )
