"""Replication APIs as a Kafka 4.3 cluster of one broker answers them: OffsetForLeaderEpoch
v2-v4, ElectLeaders v0-v2, AlterPartitionReassignments v0-v1, ListPartitionReassignments v0.

Every partition is led here at leader epoch 0, its one replica this broker, so:

- OffsetForLeaderEpoch (a consumer checking its position after a leader change, KIP-320):
  epoch 0 ends at the log end offset; an epoch below 0 (but -1) is answered with the start of
  epoch 0 (the log start offset); a later or undefined epoch with -1/-1, as Kafka's leader
  epoch cache does. A current leader epoch other than 0 (or -1: none) is FENCED_LEADER_EPOCH
  or UNKNOWN_LEADER_EPOCH. CLUSTER_ACTION on the cluster, or DESCRIBE on each topic.
- ElectLeaders: the preferred leader already leads (PREFERRED) and a leader exists (UNCLEAN),
  so each partition named is ELECTION_NOT_NEEDED; no partitions named (all) lists every topic
  with no results, as Kafka's controller leaves out partitions that need no election.
- AlterPartitionReassignments: a target of this broker alone is done at once; any other is
  INVALID_REPLICA_ASSIGNMENT with Kafka's message; cancelling (null replicas) is
  NO_REASSIGNMENT_IN_PROGRESS. ListPartitionReassignments: nothing is ever in progress.
"""

from __future__ import annotations

from kgroupd.broker.handlers.metadata import TRANSACTION_STATE
from kgroupd.broker.handlers.registry import Fields, RequestContext, handler
from kgroupd.broker.security.acls import CLUSTER_NAME
from kgroupd.broker.security.rules import (
    CLUSTER_ACTION,
    CLUSTER_ALTER,
    CLUSTER_DESCRIBE,
    TOPIC_DESCRIBE,
)
from kgroupd.protocol.errors import ErrorCode

LEADER_EPOCH = 0
NO_EPOCH = -1
PREFERRED, UNCLEAN = 0, 1


# OffsetForLeaderEpoch ---------------------------------------------------------------------


@handler(23)
def handle_offset_for_leader_epoch(ctx: RequestContext, req: Fields) -> Fields:
    cluster_action = not ctx.denies(CLUSTER_ACTION, CLUSTER_NAME)
    out = []
    for t in req["topics"]:
        name = t["topic"]
        refused = not cluster_action and ctx.denies(TOPIC_DESCRIBE, name)
        out.append(
            {
                "topic": name,
                "partitions": [_epoch_end(ctx, name, p, refused) for p in t["partitions"]],
            }
        )
    return {"topics": out}


def _epoch_end(ctx: RequestContext, name: str, p: Fields, refused: bool) -> Fields:
    index = p["partition"]
    answer = {"partition": index, "error_code": 0, "leader_epoch": NO_EPOCH, "end_offset": -1}
    if refused:
        answer["error_code"] = int(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
        return answer
    log = ctx.broker.topics.partition(name, index)
    if log is None:
        answer["error_code"] = int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        return answer
    current = p["current_leader_epoch"]
    if current != NO_EPOCH and current < LEADER_EPOCH:
        answer["error_code"] = int(ErrorCode.FENCED_LEADER_EPOCH)
    elif current > LEADER_EPOCH:
        answer["error_code"] = int(ErrorCode.UNKNOWN_LEADER_EPOCH)
    else:
        epoch = p["leader_epoch"]
        if epoch == LEADER_EPOCH:  # the current epoch ends at the log end
            answer["leader_epoch"], answer["end_offset"] = epoch, log.high_watermark
        elif NO_EPOCH != epoch < LEADER_EPOCH:  # before every known epoch: where 0 starts
            answer["leader_epoch"], answer["end_offset"] = epoch, log.log_start_offset
    return answer


# ElectLeaders -----------------------------------------------------------------------------


def _partition_count(ctx: RequestContext, name: str) -> int | None:
    topics = ctx.broker.topics
    topic = topics.get(name) or topics.internal.get(name)
    if topic is not None:
        return len(topic.partitions)
    if name == TRANSACTION_STATE and ctx.broker.transactions.used:
        return ctx.broker.config.transaction_partitions
    return None


@handler(43)
def handle_elect_leaders(ctx: RequestContext, req: Fields) -> Fields:
    asked = req["topic_partitions"]
    code, message = ErrorCode.NONE, None
    if ctx.denies(CLUSTER_ALTER, CLUSTER_NAME):
        code, message = ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "Cluster authorization failed."
    elif req["election_type"] not in (PREFERRED, UNCLEAN):
        code = ErrorCode.INVALID_REQUEST
        message = f"Unknown election type {req['election_type']}"
    if code is not ErrorCode.NONE:  # Kafka's error response: every partition asked for
        results = [
            {
                "topic": t["topic"],
                "partition_result": [
                    {"partition_id": i, "error_code": int(code), "error_message": message}
                    for i in t["partitions"]
                ],
            }
            for t in asked or ()
        ]
        return {"error_code": int(code), "replica_election_results": results}
    if asked is None:  # every partition: those needing no election are left out
        names = [*ctx.broker.topics.topics, *ctx.broker.topics.internal]
        if ctx.broker.transactions.used:
            names.append(TRANSACTION_STATE)
        results = [{"topic": n, "partition_result": []} for n in names]
        return {"error_code": 0, "replica_election_results": results}
    results = []
    for t in asked:
        name = t["topic"]
        count = _partition_count(ctx, name)
        parts = []
        for i in t["partitions"]:
            if count is None:
                error, text = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"No such topic as {name}"
            elif not 0 <= i < count:
                error = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                text = f"No such partition as {name}-{i}"
            else:
                error, text = (
                    ErrorCode.ELECTION_NOT_NEEDED,
                    "Leader election not needed for topic partition.",
                )
            parts.append({"partition_id": i, "error_code": int(error), "error_message": text})
        results.append({"topic": name, "partition_result": parts})
    return {"error_code": 0, "replica_election_results": results}


# Partition reassignments ------------------------------------------------------------------


@handler(45)
def handle_alter_partition_reassignments(ctx: RequestContext, req: Fields) -> Fields:
    if ctx.denies(CLUSTER_ALTER, CLUSTER_NAME):
        code = ErrorCode.CLUSTER_AUTHORIZATION_FAILED
        return _reassignment_error(req, code, "Cluster authorization failed.")
    responses = []
    for t in req["topics"]:
        name = t["name"]
        count = _partition_count(ctx, name)
        parts = []
        for p in t["partitions"]:
            error, text = _reassign(ctx, name, count, p["partition_index"], p["replicas"])
            parts.append(
                {
                    "partition_index": p["partition_index"],
                    "error_code": int(error),
                    "error_message": text,
                }
            )
        responses.append({"name": name, "partitions": parts})
    return {
        "allow_replication_factor_change": req["allow_replication_factor_change"],
        "error_code": 0,
        "error_message": None,
        "responses": responses,
    }


def _reassign(
    ctx: RequestContext, name: str, count: int | None, index: int, replicas: list[int] | None
) -> tuple[ErrorCode, str | None]:
    missing = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    if count is None:
        return missing, f"Unable to find a topic named {name}."
    if not 0 <= index < count:
        return missing, f"Unable to find partition {name}:{index}."
    if replicas is None:
        return ErrorCode.NO_REASSIGNMENT_IN_PROGRESS, "No partition reassignment is in progress."
    invalid = ErrorCode.INVALID_REPLICA_ASSIGNMENT
    if not replicas:
        return invalid, "The manual partition assignment includes an empty replica list."
    previous = None
    for broker_id in sorted(replicas):
        if broker_id != ctx.broker.node_id:
            return invalid, (
                f"The manual partition assignment includes broker {broker_id}, but no such "
                "broker is registered."
            )
        if broker_id == previous:
            return invalid, (
                f"The manual partition assignment includes the broker {broker_id} more than once."
            )
        previous = broker_id
    ctx.log.info("partition_reassigned", topic=name, partition=index, replicas=replicas)
    return ErrorCode.NONE, None


def _reassignment_error(req: Fields, code: ErrorCode, message: str) -> Fields:
    return {
        "allow_replication_factor_change": req["allow_replication_factor_change"],
        "error_code": int(code),
        "error_message": message,
        "responses": [
            {
                "name": t["name"],
                "partitions": [
                    {
                        "partition_index": p["partition_index"],
                        "error_code": int(code),
                        "error_message": message,
                    }
                    for p in t["partitions"]
                ],
            }
            for t in req["topics"]
        ],
    }


@handler(46)
def handle_list_partition_reassignments(ctx: RequestContext, req: Fields) -> Fields:
    """Nothing is ever being reassigned: one broker holds every replica."""
    if ctx.denies(CLUSTER_DESCRIBE, CLUSTER_NAME):
        code = int(ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
        return {"error_code": code, "error_message": "Cluster authorization failed.", "topics": []}
    return {"error_code": 0, "error_message": None, "topics": []}
