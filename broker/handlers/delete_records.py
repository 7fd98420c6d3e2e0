"""DeleteRecords v0-v2 (the Admin's deleteRecords, kafka-delete-records).

Moves each partition's log start offset up to the offset asked for (-1: the high watermark),
as Kafka's ReplicaManager.deleteRecords does on its only replica: batches wholly below it go,
ListOffsets earliest answers it and a fetch below it gets OFFSET_OUT_OF_RANGE. Under
``--data-dir`` the new start is checkpointed before the answer, so it survives a restart.
Errors are Kafka's: UNKNOWN_TOPIC_OR_PARTITION, OFFSET_OUT_OF_RANGE for an offset beyond the
high watermark (or below -1), POLICY_VIOLATION for a topic whose cleanup.policy lacks delete,
INVALID_TOPIC_EXCEPTION for internal topics; a failed partition's low watermark is -1.
"""

from __future__ import annotations

from kgroupd.broker.handlers.registry import Fields, RequestContext, handler
from kgroupd.broker.security.rules import TOPIC_DELETE
from kgroupd.protocol.errors import ErrorCode

HIGH_WATERMARK = -1
INVALID_LOW_WATERMARK = -1
INTERNAL_TOPICS = ("__consumer_offsets", "__transaction_state", "__share_group_state")


@handler(21)
def handle_delete_records(ctx: RequestContext, req: Fields) -> Fields:
    # Kafka keys the request by topic-partition: a repeated one is answered once (last wins).
    wanted: dict[str, dict[int, int]] = {}
    for topic in req["topics"]:
        parts = wanted.setdefault(topic["name"], {})
        for p in topic["partitions"]:
            parts[p["partition_index"]] = p["offset"]
    return {
        "topics": [
            {
                "name": name,
                "partitions": [
                    _delete(ctx, name, index, offset) for index, offset in parts.items()
                ],
            }
            for name, parts in wanted.items()
        ]
    }


def _delete(ctx: RequestContext, name: str, index: int, offset: int) -> Fields:
    code, low = _delete_records(ctx, name, index, offset)
    return {"partition_index": index, "low_watermark": low, "error_code": int(code)}


def _delete_records(ctx: RequestContext, name: str, index: int, offset: int) -> tuple[int, int]:
    if ctx.denies(TOPIC_DELETE, name):
        return ErrorCode.TOPIC_AUTHORIZATION_FAILED, INVALID_LOW_WATERMARK
    if name in INTERNAL_TOPICS:
        return ErrorCode.INVALID_TOPIC_EXCEPTION, INVALID_LOW_WATERMARK
    topic = ctx.broker.topics.get(name)
    log = ctx.broker.topics.partition(name, index)
    if topic is None or log is None:
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, INVALID_LOW_WATERMARK
    if "delete" not in topic.config("cleanup.policy").replace(" ", "").split(","):
        return ErrorCode.POLICY_VIOLATION, INVALID_LOW_WATERMARK
    target = log.high_watermark if offset == HIGH_WATERMARK else offset
    if target < 0 or target > log.high_watermark:
        return ErrorCode.OFFSET_OUT_OF_RANGE, INVALID_LOW_WATERMARK
    try:
        low = log.delete_records(target)
    except OSError as exc:  # the checkpoint could not be written (a full disk)
        ctx.log.error("delete_records_failed", topic=name, partition=index, error=str(exc))
        return ErrorCode.KAFKA_STORAGE_ERROR, INVALID_LOW_WATERMARK
    ctx.log.info("records_deleted", topic=name, partition=index, log_start_offset=low)
    return ErrorCode.NONE, low
