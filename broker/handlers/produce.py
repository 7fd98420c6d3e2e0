"""Produce v0-v13.

Produce v0-v2 (message formats v0/v1) are advertised but every partition is refused with
UNSUPPORTED_VERSION, as Kafka 4 does (KAFKA-18659: older librdkafka compresses only when
the broker lists Produce v0). Produce v3 is the first magic-2 version; v5 adds
log_start_offset, v8 record errors and an error message per partition, v9 is flexible, v10
adds the current leader and node endpoints (tagged; left at their defaults: the leader never
moves), v13 names topics by id (an unknown id: UNKNOWN_TOPIC_ID).
Transactional batches (a transactional id in the request) must belong to a partition of the
producer's ongoing transaction: Produce v12+ under ``transaction.version`` 2 adds it (KIP-890
part 2); older requests are verified (KIP-890 part 1), answering INVALID_TXN_STATE (v11:
TRANSACTION_ABORTABLE) when it was not added, INVALID_PRODUCER_EPOCH when fenced, and
NOT_ENOUGH_REPLICAS (retriable) while the coordinator cannot tell yet.
Batches stay bytes: the header, CRC-32C and records are checked as Kafka's LogValidator
does (``kgroupd.broker.log.validate``: a batch that lies is refused, never stored), the base
offset (and partition leader epoch) rewritten, and LogAppendTime topics get their timestamp
fields and CRC rewritten.
Idempotent batches are de-duplicated over the last five per (producer, partition).
acks=0 gets no response at all, but if any partition failed the connection is closed once
the partitions that succeeded are appended (Kafka's KafkaApis.handleProduceRequest: so that
the producer notices and refreshes its metadata); under ``--fsync always`` acks=1/-1 are
answered once the batches are on disk.
"""

from __future__ import annotations

import asyncio
import struct
from collections.abc import Awaitable
from typing import cast

from kgroupd.broker.coordinator.txn import AddPartitions
from kgroupd.broker.handlers.registry import (
    CloseConnection,
    Fields,
    Held,
    Reply,
    RequestContext,
    handler,
)
from kgroupd.broker.handlers.throttling import charge
from kgroupd.broker.log.partition import now_ms
from kgroupd.broker.log.timestamps import INVALID_TIMESTAMP_MESSAGE, timestamp_errors
from kgroupd.broker.log.topics import Topic
from kgroupd.broker.log.validate import INLINE_EXPANDED, OffLoop, Refused, validate_batch
from kgroupd.broker.quotas import PRODUCE as PRODUCE_QUOTA
from kgroupd.broker.security.rules import TOPIC_WRITE, TXN_AUTH, TXN_WRITE
from kgroupd.protocol.errors import ErrorCode
from kgroupd.protocol.records import (
    BatchHeader,
    InvalidBatch,
    parse_header,
    split_batches,
    stamp_log_append_time,
)

_OFFSET_AND_EPOCH = struct.Struct(">q")
_LEADER_EPOCH = struct.Struct(">i")
_NO_EPOCH = _LEADER_EPOCH.pack(0)
TOPIC_IDS_FROM = 13
MAX_EPOCH = 32767
# append_partition's answer for a compressed batch too big to decompress on the event loop
# (``validate.INLINE_EXPANDED``): it is validated on a worker thread, then appended
LATER: Fields = {}


def _part(
    index: int,
    code: ErrorCode,
    offset: int = -1,
    timestamp: int = -1,
    log_start: int = -1,
    message: str | None = None,
) -> Fields:
    return {
        "index": index,
        "error_code": int(code),
        "base_offset": offset,
        "log_append_time_ms": timestamp,
        "log_start_offset": log_start,
        "record_errors": [],
        "error_message": message,
    }


def _refused(
    ctx: RequestContext,
    topic: Topic,
    index: int,
    code: ErrorCode,
    message: str,
    log_start: int = -1,
) -> Fields:
    """A batch the log does not take: one warning line, and the answer."""
    ctx.log.warning(
        "produce_refused", topic=topic.name, partition=index, error=code.name, reason=message
    )
    return _part(index, code, log_start=log_start, message=message)


def append_partition(
    ctx: RequestContext,
    topic: Topic,
    index: int,
    data: bytes | memoryview | None,
    txn_id: str | None = None,
    verdict: Refused | bool = False,
) -> Fields:
    """Append one partition's batch (``verdict``: False to validate it here, True if it was
    found valid off the loop, or why it was refused there); its answer, or ``LATER``."""
    if not 0 <= index < len(topic.partitions):
        return _part(index, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
    log = topic.partitions[index]
    if not data:
        return _part(index, ErrorCode.INVALID_RECORD, message="empty record set")
    try:
        # as Kafka's ProduceRequest.validateRecords, which reads two batches at most
        batches = split_batches(data, most=2)
    except InvalidBatch as exc:
        return _refused(ctx, topic, index, ErrorCode.CORRUPT_MESSAGE, str(exc))
    if len(batches) != 1:
        return _part(
            index,
            ErrorCode.INVALID_RECORD,
            message="Produce requests with version 3 and above must have exactly "
            "one record batch per partition",
        )
    _, header = batches[0]
    # Kafka's order (UnifiedLog.analyzeAndValidateRecords): the base offset (validate_batch's
    # first check), then the size, then the CRC and the records: a batch refused on its size
    # costs no pass over its bytes.
    limit = min(int(topic.config("max.message.bytes")), ctx.broker.config.message_max_bytes)
    if header.length > limit and header.base_offset == 0:
        return _part(
            index,
            ErrorCode.MESSAGE_TOO_LARGE,
            message=f"The record batch size in the append to {topic.name}-{index} is "
            f"{header.length} bytes which exceeds the maximum configured value of {limit}.",
        )
    try:
        if verdict is False:
            body = validate_batch(
                data, header, topic.name, index, topic.compacted, inline=INLINE_EXPANDED
            )
            _check_timestamps(topic, data, header, body)
        elif verdict is not True:
            raise verdict
    except OffLoop:
        return LATER
    except Refused as exc:
        # Kafka answers the log start offset with INVALID_RECORD only (its other faults are
        # refused before the log is asked)
        start = log.log_start_offset if exc.code is ErrorCode.INVALID_RECORD else -1
        fields = _refused(ctx, topic, index, exc.code, exc.message, start)
        fields["record_errors"] = [
            {"batch_index": i, "batch_index_error_message": m} for i, m in exc.record_errors
        ]
        return fields
    if header.is_transactional != (txn_id is not None) or (
        header.is_transactional and header.producer_id < 0
    ):
        return _part(
            index,
            ErrorCode.INVALID_RECORD,
            message="transactional batches need a transactional id and a producer id, and a "
            "transactional id needs transactional batches",
        )
    if txn_id is not None:
        code = verify_transaction(
            ctx, txn_id, header.producer_id, header.producer_epoch, topic, index
        )
        if code is not ErrorCode.NONE:
            return _part(index, code, log_start=log.log_start_offset)
    producers = ctx.broker.producers
    idempotent = header.producer_id >= 0
    if idempotent:
        code, duplicate = producers.check(
            header.producer_id,
            header.producer_epoch,
            topic.name,
            index,
            header.base_sequence,
            header.last_sequence,
        )
        if code:
            return _part(index, code, log_start=log.log_start_offset)
        if duplicate is not None:
            return _part(index, ErrorCode.NONE, duplicate, -1, log.log_start_offset)
    now = now_ms()
    append_time = -1
    if topic.log_append_time:
        batch = bytearray(data)
        _OFFSET_AND_EPOCH.pack_into(batch, 0, log.high_watermark)
        _LEADER_EPOCH.pack_into(batch, 12, 0)
        stamp_log_append_time(batch, now)
        header.max_timestamp = now
        append_time = now
        stored = bytes(batch)
    else:  # the base offset and leader epoch rewritten in the one copy the log keeps
        view = memoryview(data)
        offset = _OFFSET_AND_EPOCH.pack(log.high_watermark)
        stored = b"".join((offset, view[8:12], _NO_EPOCH, view[16:]))
    try:
        base = log.append(stored, header, now)
    except OSError as exc:
        # The segment file took nothing of it (a full disk, an I/O error): nothing is kept,
        # the offsets do not move, and the next produce tries again, as a partition whose
        # log dir Kafka marked offline answers KAFKA_STORAGE_ERROR.
        ctx.log.error("produce_write_failed", topic=topic.name, partition=index, error=str(exc))
        return _part(
            index,
            ErrorCode.KAFKA_STORAGE_ERROR,
            log_start=log.log_start_offset,
            message=f"the batch could not be written to disk: {exc.strerror or exc}",
        )
    if idempotent:
        producers.record(
            header.producer_id,
            header.producer_epoch,
            topic.name,
            index,
            header.base_sequence,
            header.last_sequence,
            base,
        )
    stats = ctx.broker.stats
    if stats is not None:
        stats.produced(topic.name, len(stored))
    return _part(index, ErrorCode.NONE, base, append_time, log.log_start_offset)


def _check_timestamps(
    topic: Topic, data: bytes | memoryview, header: BatchHeader, body: bytes | None
) -> None:
    """``Refused`` with INVALID_TIMESTAMP for records outside the topic's
    message.timestamp.before.max.ms / after.max.ms (KIP-937, ``kgroupd.broker.log.timestamps``),
    each named; ``body``: the records ``validate_batch`` decompressed, read again as they are."""
    errors = timestamp_errors(topic, data, header, now_ms(), body)
    if errors is not None:
        raise Refused(ErrorCode.INVALID_TIMESTAMP, INVALID_TIMESTAMP_MESSAGE, errors)


# Errors the coordinator gives while it cannot decide, answered as a retriable error (Kafka's
# NotEnoughReplicasException: no metadata refresh) so every client retries the produce.
_RETRY = {
    ErrorCode.CONCURRENT_TRANSACTIONS,
    ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
    ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_COORDINATOR,
}


def verify_transaction(
    ctx: RequestContext, txn_id: str, producer_id: int, epoch: int, topic: Topic, index: int
) -> ErrorCode:
    """The partition is in the producer's ongoing transaction (added here for a
    transaction-version-2 producer)."""
    transactions = ctx.broker.transactions
    tp = frozenset({(topic.name, index)})
    if ctx.api_version >= 12 and ctx.broker.config.transaction_version >= 2:
        cmd = AddPartitions(txn_id, producer_id, epoch, tp, transaction_version=2)
        error = transactions.add_partitions(cmd)
    else:
        result = transactions.verify_partitions(AddPartitions(txn_id, producer_id, epoch, tp))
        error = result.errors.get((topic.name, index), ErrorCode.NONE)
        if error is ErrorCode.TRANSACTION_ABORTABLE and ctx.api_version != 11:
            error = ErrorCode.INVALID_TXN_STATE  # older clients know only this one
    if error is ErrorCode.PRODUCER_FENCED:
        return ErrorCode.INVALID_PRODUCER_EPOCH
    if error in _RETRY:
        return ErrorCode.NOT_ENOUGH_REPLICAS
    return error


@handler(0)
def handle_produce(ctx: RequestContext, req: Fields) -> Reply:
    acks = req["acks"]
    txn_id = req["transactional_id"]
    topics_mgr = ctx.broker.topics
    by_id = ctx.api_version >= TOPIC_IDS_FROM
    out = []
    appended = False
    later: list[tuple[list[Fields], int, Topic, int, bytes | memoryview]] = []
    refused_all = txn_id is not None and ctx.denies(TXN_WRITE, txn_id)
    for t in req["topic_data"]:
        topic = topics_mgr.by_id(t["topic_id"]) if by_id else topics_mgr.get(t["name"])
        refused = refused_all or (
            ctx.access is not None
            and (topic is not None or not by_id)
            and ctx.denies(TOPIC_WRITE, topic.name if topic is not None else t["name"])
        )
        parts = []
        for p in t["partition_data"]:
            index = p["index"]
            if refused:
                code = TXN_AUTH if refused_all else ErrorCode.TOPIC_AUTHORIZATION_FAILED
                parts.append(_part(index, code))
            elif ctx.api_version < 3:
                parts.append(
                    _part(
                        index,
                        ErrorCode.UNSUPPORTED_VERSION,
                        message="Produce v0-v2 (message format v0/v1) is not supported",
                    )
                )
            elif acks not in (0, 1, -1):
                parts.append(_part(index, ErrorCode.INVALID_REQUIRED_ACKS))
            elif (topic.name if topic is not None else t["name"]) in topics_mgr.internal:
                name = topic.name if topic is not None else t["name"]
                message = f"Cannot append to internal topic {name}"  # Kafka's ReplicaManager
                parts.append(_part(index, ErrorCode.INVALID_TOPIC_EXCEPTION, message=message))
            elif topic is None:
                code = ErrorCode.UNKNOWN_TOPIC_ID if by_id else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                parts.append(_part(index, code))
            else:
                part = append_partition(ctx, topic, index, p["records"], txn_id)
                if part is LATER:
                    later.append((parts, len(parts), topic, index, p["records"]))
                else:
                    appended = appended or part["error_code"] == 0
                parts.append(part)
        out.append({"name": t["name"], "topic_id": t["topic_id"], "partition_responses": parts})
    throttle_ms = charge(ctx, PRODUCE_QUOTA, ctx.size)  # the request's size, as Kafka's
    if later:
        # an awaitable of None is no answer (acks=0), as the connection reads it
        return cast(
            Awaitable[Fields], _produce_later(ctx, out, later, acks, throttle_ms, txn_id, appended)
        )
    if acks == 0:
        _close_if_failed(ctx, out)
        return None
    reply = {"responses": out, "throttle_time_ms": throttle_ms}
    # Under --fsync always, acks=1/-1 are answered once the batches are on disk.
    synced = ctx.broker.data_synced() if appended else None
    if synced is None:
        return reply
    return Held(synced, reply)


def _close_if_failed(ctx: RequestContext, out: list[Fields]) -> None:
    """acks=0 answers nothing, but a partition that failed closes the connection (raises
    CloseConnection) so that the producer notices and refreshes its metadata, as Kafka's
    handleProduceRequest does; what the other partitions appended stays."""
    errors = {
        f"{t['name'] or t['topic_id']}-{p['index']}": ErrorCode(p["error_code"]).name
        for t in out
        for p in t["partition_responses"]
        if p["error_code"]
    }
    if not errors:
        return
    ctx.log.info(
        "produce_acks0_failed_closing",
        reason="an acks=0 Produce failed: closing the connection so the producer notices",
        correlation_id=ctx.correlation_id,
        errors=errors,
    )
    first = next(p["error_code"] for t in out for p in t["partition_responses"] if p["error_code"])
    raise CloseConnection("an acks=0 Produce failed", int(first))


def _validated(data: bytes | memoryview, topic: Topic, index: int) -> Refused | None:
    """On a worker thread: what validating the batch and checking its timestamps find, the
    batch decompressed once (within ``EXPANDED_LIMIT``, releasing the GIL; the record walk is
    mostly C)."""
    try:
        header = parse_header(data)
        body = validate_batch(data, header, topic.name, index, topic.compacted)
        _check_timestamps(topic, data, header, body)
    except Refused as exc:
        return exc
    return None


async def _produce_later(
    ctx: RequestContext,
    out: list[Fields],
    later: list[tuple[list[Fields], int, Topic, int, bytes | memoryview]],
    acks: int,
    throttle_ms: int,
    txn_id: str | None,
    appended: bool,
) -> Fields | None:
    """The request's answer once its big compressed batches are validated off the loop and
    appended (the connection handles its next request after this one, as Kafka's)."""
    for parts, at, topic, index, data in later:
        verdict = await asyncio.to_thread(_validated, data, topic, index)
        parts[at] = append_partition(ctx, topic, index, data, txn_id, verdict or True)
        appended = appended or parts[at]["error_code"] == 0
    if acks == 0:
        _close_if_failed(ctx, out)
        return None
    synced = ctx.broker.data_synced() if appended else None
    if synced is not None:
        try:
            await synced
        except Exception as exc:  # the fsync failed: nothing of it is acknowledged
            ctx.log.error("produce_sync_failed", error=str(exc))
            for topic_answer in out:
                for part in topic_answer["partition_responses"]:
                    if part["error_code"] == 0:
                        part["error_code"] = int(ErrorCode.KAFKA_STORAGE_ERROR)
    return {"responses": out, "throttle_time_ms": throttle_ms}
