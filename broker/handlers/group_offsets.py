"""Committed offsets: OffsetCommit v0-v10, OffsetFetch v0-v10, OffsetDelete v0.

OffsetCommit v1 adds the generation and member id, v2-v4 a retention time, v6 the leader
epoch, v7 the group instance id, v8 is flexible, v9 answers GROUP_ID_NOT_FOUND for an unknown
group with a generation, v10 names topics by id (an unknown id: UNKNOWN_TOPIC_ID). OffsetFetch
v2 adds a top-level error and null topics (all), v5 the leader epoch, v6 is flexible, v8 asks
for several groups at once, v9 carries the member id and epoch, v10 names topics by id; v0-v1
carry a group error in every partition instead.
"""

from __future__ import annotations

import asyncio
import struct
import uuid
from itertools import repeat
from operator import itemgetter
from typing import TYPE_CHECKING, Any

from kgroupd.broker.coordinator import (
    OffsetCommit,
    OffsetCommitTopic,
    OffsetDelete,
    OffsetFetch,
    OffsetFetchResult,
    OffsetFetchTopic,
)
from kgroupd.broker.handlers.known_partitions import UNKNOWN as UNKNOWN_TOPIC_OR_PARTITION
from kgroupd.broker.handlers.known_partitions import merge_answers, valid_partitions
from kgroupd.broker.handlers.registry import (
    Fields,
    Held,
    HeldAnswer,
    Reply,
    RequestContext,
    handler,
)
from kgroupd.broker.security.rules import GROUP_DESCRIBE, GROUP_READ, TOPIC_DESCRIBE, TOPIC_READ
from kgroupd.protocol.errors import ErrorCode
from kgroupd.protocol.fast import decode_offset_commit, encode_offset_commit_response
from kgroupd.protocol.fast.commit import (
    FLEXIBLE_FROM,
    CommitShape,
    learn_offset_commit,
    match_offset_commit,
)
from kgroupd.protocol.messages import lookup

if TYPE_CHECKING:
    from kgroupd.broker.security.acls import Access
    from kgroupd.broker.state import Broker

TOPIC_AUTH = ErrorCode.TOPIC_AUTHORIZATION_FAILED
GROUP_AUTH = ErrorCode.GROUP_AUTHORIZATION_FAILED

TOPIC_IDS_FROM = 10


# OffsetCommitTopic and OffsetCommit from tuples, without the named tuples' Python-level
# __new__ (the commit path is hot); called directly, not through functools.partial (cheaper).
_tuple_new = tuple.__new__


def hot_offset_commit(
    broker: Broker, frame: bytes, pos: int, version: int, corr: int, access: Access | None
) -> tuple[bytes | HeldAnswer, int] | None:
    """OffsetCommit on the lane (``kgroupd.broker.net.hot``), as ``handle_offset_commit``;
    under ``--fsync always`` a commit that wrote is answered once its records are on disk
    (a ``HeldAnswer``: the connection goes on with the requests behind it meanwhile)."""
    body = None
    wrote = True
    # a consumer's commit again: its shape's fields, without the decoder
    matched = match_offset_commit(frame, pos, version)
    if matched is not None:
        body = _shaped(broker, access, version, *matched)
    if body is None:
        try:
            req = decode_offset_commit(frame, pos, version)
        except Exception:
            return None  # the general path reads it again, and closes the connection
        learn_offset_commit(frame, pos, version, req)
        body, wrote = _offset_commit(broker, access, req, version)
    if version >= FLEXIBLE_FROM:
        framed = _HEAD1.pack(len(body) + 5, corr, 0) + body
    else:
        framed = _HEAD0.pack(len(body) + 4, corr) + body
    if broker.durability is not None and broker.config.fsync_mode == "always":
        if matched is not None and body is not matched[0].state[2]:  # refused partitions
            wrote = _answered_none(version, body)
        synced = broker.state_synced() if wrote else None
        if synced is not None:  # held until its records are on disk (errors only: not held)
            return HeldAnswer(synced, [framed]), 0
    return framed, 0


def _answered_none(version: int, body: bytes) -> bool:
    """Whether an OffsetCommit answer (rare: with errors) has a partition that committed."""
    spec = lookup(8, version)
    try:
        answer = spec.decode_response(body)  # type: ignore[union-attr]
    except Exception:
        return True  # (not a shaped version's answer) held: the safe side
    return any(p["error_code"] == 0 for t in answer["topics"] for p in t["partitions"])


def _shaped(
    broker: Broker,
    access: Access | None,
    version: int,
    shape: CommitShape,
    offsets: tuple[int, ...],
    epochs: tuple[int, ...],
) -> bytes | None:
    """``_offset_commit``'s answer to a request of a known shape, or None: the topic is
    unknown or lacks a partition asked, or the authorizer refuses (the general path
    answers)."""
    topic = broker.topics.topics.get(shape.name)
    state = shape.state
    if state is None or state[0] is not topic:  # what _offset_commit checks, once per topic
        indexes = shape.indexes
        if topic is None or min(indexes) < 0 or max(indexes) >= len(topic.partitions):
            return None
        fields = shape.fields
        answer = ((shape.name, tuple((p, _NONE) for p in indexes)),)
        state = shape.state = [
            topic,
            max(indexes),
            encode_offset_commit_response(version, answer),
            fields["group_id"],
            fields["generation_id_or_member_epoch"],
            fields["member_id"],
            fields["group_instance_id"],
            fields["retention_time_ms"],
            version >= 9,  # group_id_not_found
            broker.coordinator.shard_for(fields["group_id"]),  # this broker's (as the topic)
            None,  # the connection's Access last allowed, under this authorizer version:
            -1,
        ]
    elif state[1] >= len(topic.partitions):
        return None
    if access is not None and (state[10] is not access or state[11] != access.authorizer.version):
        # READ on the group, then on the topic, as _offset_commit asks (a new principal or new
        # ACLs ask again; a connection's principal and host are its Access's, fixed)
        acls = access.authorizer.version
        if GROUP_READ.denies(access, state[3]) or TOPIC_READ.denies(access, shape.name):
            return None
        state[10], state[11] = access, acls
    entries = list(zip(shape.indexes, offsets, epochs, repeat(shape.metadata)))
    cmd = _tuple_new(  # OffsetCommit's fields in order
        OffsetCommit,
        (
            state[3],
            (_tuple_new(OffsetCommitTopic, (shape.name, entries)),),
            state[4],
            state[5],
            state[6],
            state[7],
            state[8],
        ),
    )
    result = state[9].commit_offsets_errors(cmd)
    if result is None:  # every partition committed
        return state[2]
    return encode_offset_commit_response(version, result.topics)


_HEAD0 = struct.Struct(">ii")  # size, correlation id (response header v0)
_HEAD1 = struct.Struct(">iib")  # ..., no tags (response header v1)


@handler(8, decoder=decode_offset_commit, hot=hot_offset_commit, flexible_from=FLEXIBLE_FROM)
def handle_offset_commit(ctx: RequestContext, req: Fields) -> Reply:
    """Partitions of unknown topics (by name or, from v10, by id) or beyond a topic's
    partitions are refused before the coordinator sees the commit, as KafkaApis refuses them;
    a commit refused entirely never reaches it (no group is created)."""
    body, wrote = _offset_commit(ctx.broker, ctx.access, req, ctx.api_version)
    # Under --fsync always the commit is answered only once its records are on disk.
    return when_durable(ctx.broker.state_synced(), body) if wrote else body


def _offset_commit(
    broker: Broker, access: Access | None, req: Fields, version: int
) -> tuple[bytes, bool]:
    """The answer's body, and whether the coordinator committed a partition (wrote a record
    to hold the answer for: an answer of errors only is not held); ``access``: the
    connection's under ``--authorizer acl`` (None: no authorizer)."""
    ids: list[bytes] | None = None  # v10: the decoder gives each id's 16 bytes
    refused: dict[Any, list[tuple[int, ErrorCode]]] = {}
    named = []
    if access is not None and GROUP_READ.denies(access, req["group_id"]):
        # READ on the group first (KafkaApis): every partition is refused
        for key, parts in req["topics"]:
            refused[key] = [(p[0], GROUP_AUTH) for p in parts]
    elif version >= TOPIC_IDS_FROM:  # offsets are kept by name
        ids = []
        by_id = broker.topics.ids_by_bytes.get
        for topic_id, parts in req["topics"]:
            topic = by_id(topic_id)
            if topic is None:
                refused[topic_id] = [(p[0], ErrorCode.UNKNOWN_TOPIC_ID) for p in parts]
                continue
            if access is not None and TOPIC_READ.denies(access, topic.name):
                refused[topic_id] = [(p[0], TOPIC_AUTH) for p in parts]
                continue
            good, bad = valid_partitions(topic, parts)
            if bad:
                refused[topic_id] = bad
            if good:
                named.append(_tuple_new(OffsetCommitTopic, (topic.name, good)))
                ids.append(topic_id)
    else:
        by_name = broker.topics.topics.get
        for name, parts in req["topics"]:
            topic = by_name(name)
            if access is not None and TOPIC_READ.denies(access, name):
                refused[name] = [(p[0], TOPIC_AUTH) for p in parts]
                continue
            if topic is None:
                refused[name] = [(p[0], UNKNOWN_TOPIC_OR_PARTITION) for p in parts]
                continue
            good, bad = valid_partitions(topic, parts)
            if bad:
                refused[name] = bad
            if good:
                named.append(_tuple_new(OffsetCommitTopic, (name, good)))
    cmd_topics = tuple(named)
    cmd = _tuple_new(  # OffsetCommit's fields in order
        OffsetCommit,
        (
            req["group_id"],
            # The decoder's (partition, offset, leader_epoch, metadata) tuples, as they are.
            cmd_topics,
            req["generation_id_or_member_epoch"],
            req["member_id"],
            req["group_instance_id"],
            req["retention_time_ms"],
            version >= 9,  # group_id_not_found
        ),
    )
    # None: every partition answered NONE (no answer pair built per partition)
    result = broker.coordinator.commit_offsets_errors(cmd) if cmd_topics else None
    if result is None and not refused and ids is None:  # the usual answer: the same bytes
        # keyed by what was asked (ints and names: no ErrorCode hashed)
        key = (version, *[(t[0], tuple(map(_first, t[1]))) for t in cmd_topics])
        body = _answers.get(key)
        if body is None:
            body = encode_offset_commit_response(version, _all_clear(cmd_topics))
            if len(_answers) >= _ANSWERS_CACHED:
                _answers.clear()
            _answers[key] = body
        return body, bool(cmd_topics)
    if result is not None:  # a partition committed: its records are to be held for
        wrote = any(e == 0 for _name, parts in result.topics for _p, e in parts)
    else:
        wrote = bool(cmd_topics)
    answered: Any = result.topics if result is not None else _all_clear(cmd_topics)
    if refused:  # rare: merged per topic, as Kafka's response builder does
        if ids is not None:
            answered = [(ids[i], parts) for i, (_name, parts) in enumerate(answered)]
            ids = None
        answered = merge_answers(answered, refused)
    # The coordinator answers topics in the order asked: v10 names them by the ids asked.
    return encode_offset_commit_response(version, answered, ids), wrote


def _all_clear(topics: tuple[OffsetCommitTopic, ...]) -> tuple[Any, ...]:
    """Every partition of ``topics`` answered NONE."""
    return tuple((name, tuple((p[0], _NONE) for p in parts)) for name, parts in topics)


_NONE = ErrorCode.NONE
_first = itemgetter(0)
# (version, (topic, partitions asked), ...) -> the encoded all-clear answer: a consumer commits
# the same partitions over and over, and gets the same answer (all clear) each time
_answers: dict[tuple[Any, ...], bytes] = {}
_ANSWERS_CACHED = 1024


def when_durable(synced: asyncio.Future[None] | None, reply: Fields | bytes) -> Reply:
    """``reply`` now, or held until ``synced`` (the fsync of what the request wrote)."""
    if synced is None:
        return reply
    return Held(synced, reply)


@handler(9)
def handle_offset_fetch(ctx: RequestContext, req: Fields) -> Fields:
    if ctx.api_version >= 8:
        return {"groups": [_fetch_group(ctx, g) for g in req["groups"]]}
    topics = req["topics"]
    result = _fetch(ctx, req["group_id"], topics)
    # v0-v1 have no top-level error: a group error goes into every partition.
    if result.error and ctx.api_version < 2 and topics is not None:
        code = int(result.error)
        out_topics = [
            {
                "name": t["name"],
                "partitions": [
                    {"partition_index": p, "committed_offset": -1, "error_code": code}
                    for p in t["partition_indexes"]
                ],
            }
            for t in topics
        ]
    else:
        out_topics = [
            {"name": name, "partitions": parts} for name, parts in _parts(ctx, result, topics)
        ]
    return {"topics": out_topics, "error_code": int(result.error)}


def _fetch_group(ctx: RequestContext, group: Fields) -> Fields:
    """One group of an OffsetFetch v8+ (v10: topics by id)."""
    topics = group["topics"]
    by_id = ctx.api_version >= TOPIC_IDS_FROM
    unknown: list[Fields] = []
    names: dict[str, uuid.UUID] = {}
    if by_id and topics is not None:
        known = []
        for t in topics:
            topic = ctx.broker.topics.by_id(t["topic_id"])
            if topic is None:
                code = int(ErrorCode.UNKNOWN_TOPIC_ID)
                unknown.append(
                    {
                        "topic_id": t["topic_id"],
                        "partitions": [
                            {"partition_index": p, "committed_offset": -1, "error_code": code}
                            for p in t["partition_indexes"]
                        ],
                    }
                )
            else:
                names[topic.name] = t["topic_id"]
                known.append({"name": topic.name, "partition_indexes": t["partition_indexes"]})
        topics = known
    result = _fetch(ctx, group["group_id"], topics)
    out: list[Fields] = []
    for name, parts in _parts(ctx, result, topics):
        entry: Fields = {"name": name, "partitions": parts}
        if by_id:
            topic_id = names.get(name)
            if topic_id is None:  # all topics (null): named by the topic's current id
                found = ctx.broker.topics.get(name)
                if found is None:
                    continue
                topic_id = found.topic_id
            entry["topic_id"] = topic_id
        out.append(entry)
    return {"group_id": group["group_id"], "topics": out + unknown, "error_code": int(result.error)}


def _fetch(ctx: RequestContext, group_id: str, topics: list[Fields] | None) -> OffsetFetchResult:
    if ctx.denies(GROUP_DESCRIBE, group_id):
        return OffsetFetchResult(GROUP_AUTH)
    cmd = OffsetFetch(
        group_id=group_id,
        topics=None
        if topics is None
        else tuple(OffsetFetchTopic(t["name"], tuple(t["partition_indexes"])) for t in topics),
    )
    return ctx.broker.coordinator.fetch_offsets(cmd)


def _parts(
    ctx: RequestContext, result: OffsetFetchResult, asked: list[Fields] | None
) -> list[tuple[str, list[Fields]]]:
    """Each topic's partitions; under ``--authorizer acl`` topics the principal may not
    DESCRIBE are left out of an all-topics answer and refused when asked for by name."""
    if ctx.access is not None:
        if result.error == GROUP_AUTH:
            return []
        hidden = {name for name, _ in result.topics if ctx.denies(TOPIC_DESCRIBE, name)}
        if hidden:
            kept = [(n, parts) for n, parts in _parts_of(result) if n not in hidden]
            if asked is None:
                return kept
            code = int(TOPIC_AUTH)
            refused = [
                (
                    n,
                    [
                        {"partition_index": p.partition, "committed_offset": -1, "error_code": code}
                        for p in parts
                    ],
                )
                for n, parts in result.topics
                if n in hidden
            ]
            return kept + refused
    return _parts_of(result)


def _parts_of(result: OffsetFetchResult) -> list[tuple[str, list[Fields]]]:
    return [
        (
            name,
            [
                {
                    "partition_index": p.partition,
                    "committed_offset": p.offset,
                    "committed_leader_epoch": p.leader_epoch,
                    "metadata": p.metadata,
                    "error_code": int(p.error),
                }
                for p in parts
            ],
        )
        for name, parts in result.topics
    ]


@handler(47)
def handle_offset_delete(ctx: RequestContext, req: Fields) -> Reply:
    """Unknown topics and partitions are answered UNKNOWN_TOPIC_OR_PARTITION before the
    coordinator, which still sees the request (its group errors come first), as Kafka."""
    refused: dict[Any, list[tuple[int, ErrorCode]]] = {}
    valid = []
    for t in req["topics"]:
        indexes = [p["partition_index"] for p in t["partitions"]]
        topic = ctx.broker.topics.get(t["name"])
        if topic is None:
            refused[t["name"]] = [(i, UNKNOWN_TOPIC_OR_PARTITION) for i in indexes]
            continue
        good, bad = valid_partitions(topic, indexes, int)
        if bad:
            refused[t["name"]] = bad
        if good:
            valid.append((t["name"], tuple(good)))
    result = ctx.broker.coordinator.delete_offsets(OffsetDelete(req["group_id"], tuple(valid)))
    answered = merge_answers(result.topics, refused) if not result.error else []
    return when_durable(
        ctx.broker.state_synced(),
        {
            "error_code": int(result.error),
            "topics": [
                {
                    "name": name,
                    "partitions": [
                        {"partition_index": p, "error_code": int(code)} for p, code in parts
                    ],
                }
                for name, parts in answered
            ],
        },
    )
