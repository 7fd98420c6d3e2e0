"""The transaction APIs: InitProducerId v0-v5, AddPartitionsToTxn v0-v5, AddOffsetsToTxn
v0-v4, EndTxn v0-v5, TxnOffsetCommit v0-v5, DescribeTransactions v0, ListTransactions v0-v2,
DescribeProducers v0.

InitProducerId without a transactional id serves an idempotent producer (v3+ may ask for an
epoch bump, KIP-360); with one, the transaction coordinator fences the previous producer of
that id. Version rules are set here: PRODUCER_FENCED is answered INVALID_PRODUCER_EPOCH to
InitProducerId v0-v3 and to the other APIs below v2, as Kafka does; EndTxn v5+ comes from a
transaction-version-2 client (every transaction bumps the epoch; the answer carries the
producer id and epoch to go on with); TxnOffsetCommit v5+ adds the group's offsets partition
to the transaction itself when ``transaction.version`` 2 is finalized (KIP-890 part 2);
AddPartitionsToTxn v4+ (broker-to-broker in Kafka) batches transactions and may only verify.
Answers that wrote coordinator records wait for them to be durable under ``--fsync always``.
"""

from __future__ import annotations

from typing import Any

from kgroupd.broker.coordinator import OffsetCommitPartition, OffsetCommitTopic, TxnOffsetCommit
from kgroupd.broker.coordinator.txn import (
    AddOffsets,
    AddPartitions,
    EndTxn,
    InitProducerId,
    ListTransactions,
)
from kgroupd.broker.handlers.known_partitions import UNKNOWN as UNKNOWN_TOPIC_OR_PARTITION
from kgroupd.broker.handlers.known_partitions import merge_answers, valid_partitions
from kgroupd.broker.handlers.registry import Fields, Held, Reply, RequestContext, handler
from kgroupd.broker.security.rules import (
    GROUP_READ,
    TOPIC_AUTH,
    TOPIC_DESCRIBE,
    TOPIC_READ,
    TOPIC_WRITE,
    TXN_AUTH,
    TXN_DESCRIBE,
    TXN_WRITE,
)
from kgroupd.protocol.errors import ErrorCode

MAX_EPOCH = 32767


def _held(ctx: RequestContext, reply: Fields) -> Reply:
    synced = ctx.broker.state_synced()
    return reply if synced is None else Held(synced, reply)


def _fenced(ctx: RequestContext, error: ErrorCode, fenced_from: int) -> int:
    """PRODUCER_FENCED for clients that know it, INVALID_PRODUCER_EPOCH for older ones."""
    if error is ErrorCode.PRODUCER_FENCED and ctx.api_version < fenced_from:
        return int(ErrorCode.INVALID_PRODUCER_EPOCH)
    return int(error)


def transaction_version_2(ctx: RequestContext) -> bool:
    return ctx.broker.config.transaction_version >= 2


# --- InitProducerId ----------------------------------------------------------------------
@handler(22)
def handle_init_producer_id(ctx: RequestContext, req: Fields) -> Reply:
    txn_id = req["transactional_id"]
    producer_id, epoch = req["producer_id"], req["producer_epoch"]
    if txn_id is None:
        # KIP-360: an idempotent producer that lost track of its sequences asks for its
        # epoch to be bumped; past the largest epoch it gets a new producer id, as Kafka does.
        if producer_id >= 0 and 0 <= epoch < MAX_EPOCH:
            return {"error_code": 0, "producer_id": producer_id, "producer_epoch": epoch + 1}
        pid = ctx.broker.producers.allocate()
        return {"error_code": 0, "producer_id": pid, "producer_epoch": 0}
    result = ctx.broker.transactions.init_producer_id(
        InitProducerId(txn_id, req["transaction_timeout_ms"], producer_id, epoch)
    )
    if result.error is not ErrorCode.NONE:
        ctx.log.info("init_producer_id_refused", transactional_id=txn_id, error=result.error.name)
    return _held(
        ctx,
        {
            "error_code": _fenced(ctx, result.error, 4),
            "producer_id": result.producer_id,
            "producer_epoch": result.producer_epoch,
        },
    )


# --- AddPartitionsToTxn ------------------------------------------------------------------
def _add_partitions(
    ctx: RequestContext,
    txn_id: str,
    producer_id: int,
    epoch: int,
    topics: list[Fields],
    verify_only: bool,
) -> list[Fields]:
    """Per topic and partition: unknown ones UNKNOWN_TOPIC_OR_PARTITION (the others then
    OPERATION_NOT_ATTEMPTED), else the coordinator's answer for all."""
    wanted = [(t["name"], p) for t in topics for p in t["partitions"]]
    unknown = {
        (t, p) for t, p in wanted if ctx.broker.topics.partition(t, p) is None or t.startswith("__")
    }
    errors: dict[tuple[str, int], ErrorCode] = {}
    if ctx.denies(TXN_WRITE, txn_id or ""):
        errors = dict.fromkeys(wanted, TXN_AUTH)
    elif ctx.access is not None and any(ctx.denies(TOPIC_WRITE, t) for t, _ in wanted):
        for tp in wanted:  # as Kafka: the refused ones, the others not attempted
            refused = ctx.denies(TOPIC_WRITE, tp[0])
            errors[tp] = TOPIC_AUTH if refused else ErrorCode.OPERATION_NOT_ATTEMPTED
    elif unknown:
        for tp in wanted:
            errors[tp] = (
                ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                if tp in unknown
                else ErrorCode.OPERATION_NOT_ATTEMPTED
            )
    else:
        cmd = AddPartitions(txn_id, producer_id, epoch, frozenset(wanted))
        if verify_only:
            errors = dict(ctx.broker.transactions.verify_partitions(cmd).errors)
        else:
            error = ctx.broker.transactions.add_partitions(cmd)
            errors = dict.fromkeys(wanted, error)
    by_topic: dict[str, list[Fields]] = {}
    for (topic, p), error in errors.items():
        by_topic.setdefault(topic, []).append(
            {"partition_index": p, "partition_error_code": _fenced(ctx, error, 2)}
        )
    return [{"name": t, "results_by_partition": parts} for t, parts in by_topic.items()]


@handler(24)
def handle_add_partitions_to_txn(ctx: RequestContext, req: Fields) -> Reply:
    if ctx.api_version < 4:
        results = _add_partitions(
            ctx,
            req["v3_and_below_transactional_id"],
            req["v3_and_below_producer_id"],
            req["v3_and_below_producer_epoch"],
            req["v3_and_below_topics"],
            verify_only=False,
        )
        return _held(ctx, {"results_by_topic_v3_and_below": results})
    by_txn = [
        {
            "transactional_id": t["transactional_id"],
            "topic_results": _add_partitions(
                ctx,
                t["transactional_id"],
                t["producer_id"],
                t["producer_epoch"],
                t["topics"],
                t["verify_only"],
            ),
        }
        for t in req["transactions"]
    ]
    return _held(ctx, {"error_code": 0, "results_by_transaction": by_txn})


# --- AddOffsetsToTxn, EndTxn ---------------------------------------------------------------
@handler(25)
def handle_add_offsets_to_txn(ctx: RequestContext, req: Fields) -> Reply:
    error = ctx.broker.transactions.add_offsets(
        AddOffsets(
            req["transactional_id"], req["producer_id"], req["producer_epoch"], req["group_id"]
        )
    )
    return _held(ctx, {"error_code": _fenced(ctx, error, 2)})


@handler(26)
def handle_end_txn(ctx: RequestContext, req: Fields) -> Reply:
    result = ctx.broker.transactions.end_txn(
        EndTxn(
            req["transactional_id"],
            req["producer_id"],
            req["producer_epoch"],
            req["committed"],
            transaction_version_2=ctx.api_version >= 5,
        )
    )
    if result.error is not ErrorCode.NONE:
        ctx.log.info(
            "end_txn_refused", transactional_id=req["transactional_id"], error=result.error.name
        )
    reply = {
        "error_code": _fenced(ctx, result.error, 2),
        "producer_id": result.producer_id,
        "producer_epoch": result.producer_epoch,
    }
    synced = ctx.broker.state_synced()
    data = ctx.broker.data_synced()  # the markers, in the data logs
    if synced is None and data is None:
        return reply
    return _wait_both(synced, data, reply)


async def _wait_both(a: object, b: object, reply: Fields) -> Fields:
    for fut in (a, b):
        if fut is not None:
            await fut  # type: ignore[misc]
    return reply


# --- TxnOffsetCommit -----------------------------------------------------------------------
@handler(28)
def handle_txn_offset_commit(ctx: RequestContext, req: Fields) -> Reply:
    """Unknown topics and partitions are answered UNKNOWN_TOPIC_OR_PARTITION before the
    transaction or the coordinator sees anything; nothing valid: answered at once."""
    refused: dict[Any, list[tuple[int, ErrorCode]]] = {}
    valid = []
    whole = None  # the transactional id, then the group (KafkaApis' order)
    if ctx.denies(TXN_WRITE, req["transactional_id"] or ""):
        whole = TXN_AUTH
    elif ctx.denies(GROUP_READ, req["group_id"] or ""):
        whole = ErrorCode.GROUP_AUTHORIZATION_FAILED
    for t in req["topics"]:
        parts = [
            OffsetCommitPartition(
                p["partition_index"],
                p["committed_offset"],
                p["committed_leader_epoch"],
                p["committed_metadata"],
            )
            for p in t["partitions"]
        ]
        topic = ctx.broker.topics.get(t["name"])
        if whole is not None or ctx.denies(TOPIC_READ, t["name"]):
            code = TOPIC_AUTH if whole is None else whole
            refused[t["name"]] = [(p.partition, code) for p in parts]
            continue
        if topic is None:
            refused[t["name"]] = [(p.partition, UNKNOWN_TOPIC_OR_PARTITION) for p in parts]
            continue
        good, bad = valid_partitions(topic, parts)
        if bad:
            refused[t["name"]] = bad
        if good:
            valid.append(OffsetCommitTopic(t["name"], tuple(good)))
    topics = tuple(valid)
    group_id = req["group_id"]
    error = ErrorCode.NONE
    answers: Any = ()
    if topics and ctx.api_version >= 5 and transaction_version_2(ctx):
        # KIP-890 part 2: the group's offsets partition joins the transaction here
        error = ctx.broker.transactions.add_offsets(
            AddOffsets(
                req["transactional_id"],
                req["producer_id"],
                req["producer_epoch"],
                group_id,
                transaction_version=2,
            )
        )
    if not topics:
        pass
    elif error is ErrorCode.NONE:
        result = ctx.broker.coordinator.txn_commit_offsets(
            TxnOffsetCommit(
                req["transactional_id"],
                group_id,
                req["producer_id"],
                req["producer_epoch"],
                topics,
                req["generation_id"],
                req["member_id"],
                req["group_instance_id"],
            )
        )
        answers = result.topics
    else:
        code = ErrorCode.INVALID_PRODUCER_EPOCH if error is ErrorCode.PRODUCER_FENCED else error
        answers = tuple((t.name, tuple((p[0], code) for p in t.partitions)) for t in topics)
    body = {
        "topics": [
            {
                "name": name,
                "partitions": [{"partition_index": p, "error_code": int(e)} for p, e in parts],
            }
            for name, parts in merge_answers(answers, refused)
        ]
    }
    return _held(ctx, body) if topics else body


# --- DescribeTransactions, ListTransactions, DescribeProducers ------------------------------
@handler(65)
def handle_describe_transactions(ctx: RequestContext, req: Fields) -> Fields:
    states = []
    for txn_id in req["transactional_ids"]:
        if ctx.denies(TXN_DESCRIBE, txn_id):
            states.append(
                {
                    "error_code": int(TXN_AUTH),
                    "transactional_id": txn_id,
                    "transaction_state": "",
                    "transaction_timeout_ms": 0,
                    "transaction_start_time_ms": -1,
                    "producer_id": -1,
                    "producer_epoch": -1,
                    "topics": [],
                }
            )
            continue
        d = ctx.broker.transactions.describe(txn_id)
        states.append(
            {
                "error_code": int(d.error),
                "transactional_id": txn_id,
                "transaction_state": d.state,
                "transaction_timeout_ms": d.timeout_ms,
                "transaction_start_time_ms": d.start_ms,
                "producer_id": d.producer_id,
                "producer_epoch": d.producer_epoch,
                "topics": [
                    {"topic": t, "partitions": list(ps)}
                    for t, ps in d.topics
                    if not ctx.denies(TOPIC_DESCRIBE, t)
                ],
            }
        )
    return {"transaction_states": states}


@handler(66)
def handle_list_transactions(ctx: RequestContext, req: Fields) -> Fields:
    result = ctx.broker.transactions.list_transactions(
        ListTransactions(
            frozenset(req["state_filters"]),
            frozenset(req["producer_id_filters"]),
            req["duration_filter"],
            req["transactional_id_pattern"],
        )
    )
    return {
        "error_code": int(result.error),
        "unknown_state_filters": list(result.unknown_state_filters),
        "transaction_states": [
            {
                "transactional_id": t.transactional_id,
                "producer_id": t.producer_id,
                "transaction_state": t.state,
            }
            for t in result.transactions
            if not ctx.denies(TXN_DESCRIBE, t.transactional_id)
        ],
    }


@handler(61)
def handle_describe_producers(ctx: RequestContext, req: Fields) -> Fields:
    """The producers with state in each partition: their epoch and last sequence, and the
    first offset of their open transaction (-1 if none)."""
    topics = []
    for t in req["topics"]:
        parts = []
        denied = ctx.denies(TOPIC_READ, t["name"])
        for index in t["partition_indexes"]:
            log = None if denied else ctx.broker.topics.partition(t["name"], index)
            if log is None:
                code = TOPIC_AUTH if denied else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                parts.append(
                    {"partition_index": index, "error_code": int(code), "active_producers": []}
                )
                continue
            producers = ctx.broker.producers.active(t["name"], index)
            parts.append(
                {
                    "partition_index": index,
                    "error_code": 0,
                    "active_producers": [
                        {
                            "producer_id": pid,
                            "producer_epoch": epoch,
                            "last_sequence": last_seq,
                            "last_timestamp": -1,
                            "coordinator_epoch": 0 if log.txn.is_open(pid) else -1,
                            "current_txn_start_offset": log.txn.ongoing.get(pid, -1),
                        }
                        for pid, epoch, last_seq in producers
                    ],
                }
            )
        topics.append({"name": t["name"], "partitions": parts})
    return {"topics": topics}
