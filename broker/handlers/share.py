"""Share groups (KIP-932): ShareGroupHeartbeat v1, ShareFetch v1-v2, ShareAcknowledge v1-v2.

ShareFetch works in the member's share session (``kgroupd.broker.share.service``): it applies
the acknowledgements it carries first (each partition's outcome in its acknowledge error), adds
its partitions to the session and drops the forgotten ones, then acquires records for the member
from every session partition and answers the whole batches holding them with the acquired
ranges and their delivery counts (the client keeps only the acquired records). With nothing to
acquire it waits up to MaxWaitMs for new records. v2 adds RENEW acknowledgements (IsRenewAck: a
renewing fetch must ask for nothing, and the group's share.renew.acknowledge.enable must allow
them) and ShareAcquireMode (batch-optimized by default: whole batches are acquired).
ShareAcknowledge applies acknowledgements only; epoch 0 is INVALID_SHARE_SESSION_EPOCH there.
A session closed with epoch -1 releases what the member still holds. The reads
(``kgroupd.broker.share.reader``) come from the cached tail or the segment files, up to the last
stable offset under share.isolation.level=read_committed, whose aborted records are archived.

As in Kafka, a share fetch does not ask the group coordinator whether its member belongs to
the group (in Kafka the partition leader serving it is not the coordinator; ShareFetch has no
UNKNOWN_MEMBER_ID): a member the coordinator removes loses its share sessions and what it holds.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import Coroutine, Iterable
from typing import Any

from kgroupd.broker.coordinator.share.commands import ShareGroupHeartbeat
from kgroupd.broker.handlers.group_offsets import when_durable
from kgroupd.broker.handlers.registry import Fields, Reply, RequestContext, handler
from kgroupd.broker.log.partition import PartitionLog
from kgroupd.broker.share.partition import RENEW
from kgroupd.broker.share.reader import Fetched, Outcome, acquire_for
from kgroupd.broker.share.service import FINAL_EPOCH, INITIAL_EPOCH, ShareService, ShareSession
from kgroupd.protocol.errors import ErrorCode
from kgroupd.protocol.fast.common import Chunks
from kgroupd.protocol.fast.share import SharePartition as SharePartitionAnswer
from kgroupd.protocol.fast.share import decode_share_fetch, encode_share_fetch_response

DEFAULT_MAX_RECORDS = 500
RECORD_LIMIT = 1  # ShareAcquireMode record-limit (0: batch-optimized)


@handler(76)
def handle_share_group_heartbeat(ctx: RequestContext, req: Fields) -> Fields:
    names = req["subscribed_topic_names"]
    result = ctx.broker.share.coordinator.heartbeat(
        ShareGroupHeartbeat(
            req["group_id"],
            req["member_id"],
            req["member_epoch"],
            req["rack_id"],
            tuple(names) if names is not None else None,
            ctx.client_id or "",
            "/" + ctx.client_host,
        )
    )
    assignment = None
    if result.assignment is not None:
        assignment = {
            "topic_partitions": [
                {"topic_id": tid, "partitions": list(parts)} for tid, parts in result.assignment
            ]
        }
    return {
        "error_code": int(result.error),
        "error_message": result.error_message,
        "member_id": result.member_id,
        "member_epoch": result.member_epoch,
        "heartbeat_interval_ms": result.heartbeat_interval_ms,
        "assignment": assignment,
    }


def _top_error(code: ErrorCode, message: str | None = None) -> Fields:
    return {"error_code": int(code), "error_message": message, "responses": []}


def _open(ctx: RequestContext, req: Fields, fetching: bool) -> ShareSession | Fields:
    group_id, member_id, epoch = req["group_id"], req["member_id"], req["share_session_epoch"]
    if not group_id:
        return _top_error(ErrorCode.INVALID_GROUP_ID)
    if not member_id:
        return _top_error(ErrorCode.INVALID_REQUEST, "Member id must not be empty.")
    if epoch == INITIAL_EPOCH:
        if not fetching:
            return _top_error(ErrorCode.INVALID_SHARE_SESSION_EPOCH)
        if any(p["acknowledgement_batches"] for t in req["topics"] for p in t["partitions"]):
            return _top_error(
                ErrorCode.INVALID_REQUEST, "Acknowledge data is not allowed in the initial fetch."
            )
    found = ctx.broker.share.session(group_id, member_id, epoch, ctx.closers)
    if isinstance(found, ErrorCode):
        return _top_error(found)
    return found


def _acknowledge(
    ctx: RequestContext, session: ShareSession, topics: list[Fields], renew_allowed: bool | None
) -> dict[tuple[uuid.UUID, int], ErrorCode]:
    """Each partition's acknowledgements applied: its first error. RENEW needs IsRenewAck
    (else INVALID_REQUEST) and the group's share.renew.acknowledge.enable (else, as Kafka,
    INVALID_RECORD_STATE: the batch changes nothing)."""
    share = ctx.broker.share
    out: dict[tuple[uuid.UUID, int], ErrorCode] = {}
    if renew_allowed and not share.configs.bool_value(
        session.group_id, "share.renew.acknowledge.enable"
    ):
        renew_allowed = None  # the group refuses renewals: INVALID_RECORD_STATE
    for t in topics:
        topic = ctx.broker.topics.by_id(t["topic_id"])
        for p in t["partitions"]:
            batches = p["acknowledgement_batches"]
            if not batches:
                continue
            key = (t["topic_id"], p["partition_index"])
            sp = share.partitions.get((session.group_id, *key))
            if topic is None:
                out[key] = ErrorCode.UNKNOWN_TOPIC_ID
                continue
            if sp is None:  # nothing was ever acquired there
                out[key] = ErrorCode.INVALID_RECORD_STATE
                continue
            code = ErrorCode.NONE
            for b in batches:
                types = list(b["acknowledge_types"])
                if RENEW in types and not renew_allowed:
                    got = (
                        ErrorCode.INVALID_REQUEST
                        if renew_allowed is False
                        else ErrorCode.INVALID_RECORD_STATE
                    )
                else:
                    got = sp.acknowledge(
                        session.member_id, b["first_offset"], b["last_offset"], types
                    )
                if code == ErrorCode.NONE:
                    code = got
            out[key] = code
    return out


@handler(79)
def handle_share_acknowledge(ctx: RequestContext, req: Fields) -> Reply:
    session = _open(ctx, req, fetching=False)
    if not isinstance(session, ShareSession):
        return session
    acks = _acknowledge(ctx, session, req["topics"], req["is_renew_ack"])
    ctx.broker.share.advance(session, req["share_session_epoch"])
    reply = {
        "error_code": 0,
        "acquisition_lock_timeout_ms": ctx.broker.share.lock_duration_ms(session.group_id),
        "responses": _group(
            {k: {"error_code": int(c), **_leader(ctx, k)} for k, c in acks.items()}
        ),
    }
    # the acknowledgements are on disk before the answer (--fsync always)
    return when_durable(ctx.broker.share_synced() if acks else None, reply)


@handler(78, decoder=decode_share_fetch)
def handle_share_fetch(ctx: RequestContext, req: Fields) -> Fields | Any:
    session = _open(ctx, req, fetching=True)
    if not isinstance(session, ShareSession):
        return session
    epoch = req["share_session_epoch"]
    if (
        epoch == FINAL_EPOCH
        and req["topics"]
        and any(not p["acknowledgement_batches"] for t in req["topics"] for p in t["partitions"])
    ):
        return _top_error(ErrorCode.INVALID_REQUEST, "Fetching is not allowed in a final fetch.")
    if req["is_renew_ack"] and (
        req["max_wait_ms"] or req["min_bytes"] or req["max_bytes"] or req["max_records"]
    ):  # as Kafka: a renewing fetch fetches nothing
        return _top_error(
            ErrorCode.INVALID_REQUEST,
            "MaxWaitMs, MinBytes, MaxBytes and MaxRecords must be 0 when IsRenewAck is set.",
        )
    acks = _acknowledge(ctx, session, req["topics"], req["is_renew_ack"])
    synced = ctx.broker.share_synced() if acks else None
    for t in req["topics"]:
        for p in t["partitions"]:
            session.partitions.add((t["topic_id"], p["partition_index"]))
    for t in req["forgotten_topics_data"]:
        for index in t["partitions"]:
            session.partitions.discard((t["topic_id"], index))
    ctx.broker.share.advance(session, epoch)
    if epoch == FINAL_EPOCH or req["is_renew_ack"]:
        return _durable(synced, _fetch_response(ctx, session, acks, {}, {}))
    max_records = req["max_records"] if req["max_records"] > 0 else DEFAULT_MAX_RECORDS
    session.whole_batches = req.get("share_acquire_mode", 0) != RECORD_LIMIT
    ran = acquire_for(
        ctx.broker.share, ctx.broker.topics.by_id, session, max_records, req["max_bytes"]
    )
    if not isinstance(ran, tuple):
        return _after_reads(ctx, session, req, acks, ran, max_records, synced)
    fetched, errors, logs = ran
    if fetched or acks or errors or req["max_wait_ms"] <= 0 or not logs:
        return _durable(synced, _fetch_response(ctx, session, acks, fetched, errors))
    return _long_poll(ctx, session, max_records, req["max_bytes"], req["max_wait_ms"], logs)


async def _after_reads(
    ctx: RequestContext,
    session: ShareSession,
    req: Fields,
    acks: dict[tuple[uuid.UUID, int], ErrorCode],
    reads: Coroutine[Any, Any, Outcome],
    max_records: int,
    synced: asyncio.Future[None] | None,
) -> Chunks:
    """A fetch whose reads went to the segment files: answered once they are made (and its
    acknowledgements are on disk)."""
    fetched, errors, logs = await reads
    if synced is not None:
        await synced
    if fetched or acks or errors or req["max_wait_ms"] <= 0 or not logs:
        return _fetch_response(ctx, session, acks, fetched, errors)
    return await _long_poll(ctx, session, max_records, req["max_bytes"], req["max_wait_ms"], logs)


async def _long_poll(
    ctx: RequestContext,
    session: ShareSession,
    max_records: int,
    max_bytes: int,
    max_wait_ms: int,
    logs: list[PartitionLog],
) -> Chunks:
    """Wait up to ``max_wait_ms`` for records to acquire: new ones in the logs, or ones made
    available again (released, their lock expired); a wake-up that finds nothing to take
    (another member took them first) waits on."""
    share = ctx.broker.share
    loop = asyncio.get_running_loop()
    deadline = loop.time() + max_wait_ms / 1000.0
    while True:
        await _wait(share, session, logs, deadline - loop.time())
        if (session.group_id, session.member_id) not in share.sessions:
            return _fetch_response(ctx, session, {}, {}, {})  # closed meanwhile
        ran = acquire_for(share, ctx.broker.topics.by_id, session, max_records, max_bytes)
        fetched, errors, logs = ran if isinstance(ran, tuple) else await ran
        if fetched or errors or not logs or loop.time() >= deadline:
            return _fetch_response(ctx, session, {}, fetched, errors)


async def _wait(
    share: ShareService, session: ShareSession, logs: list[PartitionLog], timeout: float
) -> None:
    futures = [log.wait_for_data() for log in logs]
    keys = [(session.group_id, *tp) for tp in sorted(session.partitions)]
    freed = [share.wait_for_available(k) for k in keys]
    try:
        await asyncio.wait(
            [*futures, *freed], timeout=max(timeout, 0), return_when=asyncio.FIRST_COMPLETED
        )
    finally:
        for log, fut in zip(logs, futures, strict=True):
            if not fut.done():
                fut.cancel()
                with contextlib.suppress(ValueError):
                    log.waiters.remove(fut)
        for key, fut in zip(keys, freed, strict=True):
            if not fut.done():
                fut.cancel()
                with contextlib.suppress(ValueError, KeyError):
                    share.waiters[key].remove(fut)
                if not share.waiters.get(key, True):
                    del share.waiters[key]


def _leader(ctx: RequestContext, key: tuple[uuid.UUID, int]) -> Fields:
    """A served partition's current leader: the node answering, at the partition's leader
    epoch (with simulated nodes, ``--nodes N``, the connection's node and the epoch the
    leadership moves gave it; else this broker at epoch 0)."""
    nodes = ctx.broker.nodes
    if nodes is None:
        return {"current_leader": {"leader_id": ctx.broker.node_id, "leader_epoch": 0}}
    leader, epochs = _node_leader(ctx, (key,))
    return {"current_leader": {"leader_id": leader, "leader_epoch": epochs.get(key, 0)}}


def _node_leader(
    ctx: RequestContext, keys: Iterable[tuple[uuid.UUID, int]]
) -> tuple[int, dict[tuple[uuid.UUID, int], int]]:
    """With simulated nodes: the node this connection is to, and the leader epoch of each
    partition of ``keys`` (those not at epoch 0)."""
    broker = ctx.broker
    nodes = broker.nodes
    assert nodes is not None
    node = nodes.at.get(ctx.advertised, ("", broker.node_id))[1]
    epochs = {}
    for key in keys:
        topic = broker.topics.by_id(key[0])
        if topic is not None:
            epoch = nodes.epoch(topic.name, key[1])
            if epoch:
                epochs[key] = epoch
    return node, epochs


def _durable(synced: asyncio.Future[None] | None, reply: Chunks) -> Chunks | Reply:
    """``reply`` now, or (joined) held until ``synced``: the fsync of its acknowledgements."""
    return reply if synced is None else when_durable(synced, b"".join(reply))


def _fetch_response(
    ctx: RequestContext,
    session: ShareSession,
    acks: dict[tuple[uuid.UUID, int], ErrorCode],
    fetched: Fetched,
    errors: dict[tuple[uuid.UUID, int], ErrorCode],
) -> Chunks:
    """The answer, encoded by hand: the record batches go out as they are stored."""
    by_topic: dict[uuid.UUID, list[SharePartitionAnswer]] = {}
    for key in sorted({*acks, *fetched, *errors}):
        batches, acquired = fetched.get(key, ((), []))
        by_topic.setdefault(key[0], []).append(
            (
                key[1],
                int(errors.get(key, ErrorCode.NONE)),
                int(acks.get(key, ErrorCode.NONE)),
                batches,
                [(a.first_offset, a.last_offset, a.delivery_count) for a in acquired],
            )
        )
    leader, epochs = ctx.broker.node_id, None
    if ctx.broker.nodes is not None:
        leader, epochs = _node_leader(ctx, {*acks, *fetched, *errors})
    return encode_share_fetch_response(
        0,
        None,
        ctx.broker.share.lock_duration_ms(session.group_id),
        list(by_topic.items()),
        leader,
        0,
        epochs=epochs,
    )


def _group(partitions: dict[tuple[uuid.UUID, int], Fields]) -> list[Fields]:
    by_topic: dict[uuid.UUID, list[Fields]] = {}
    for (topic_id, index), fields in sorted(partitions.items()):
        by_topic.setdefault(topic_id, []).append({"partition_index": index, **fields})
    return [{"topic_id": t, "partitions": ps} for t, ps in by_topic.items()]
