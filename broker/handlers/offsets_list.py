"""ListOffsets v0-v5.

v0 answers a list of offsets; v1 a single offset and its timestamp; v2 isolation level;
v4 the current leader epoch (request) and leader epoch (response). -2 is the earliest
offset, -1 the latest (the offset after the last record of the last batch); any other
timestamp finds the first record whose own timestamp is at least it.
"""

from __future__ import annotations

from aiokafka.record.default_records import DefaultRecordBatch

from broker.handlers.fetch import LEADER_EPOCH, check_leader_epoch
from broker.handlers.registry import Fields, RequestContext, handler
from broker.log.partition import PartitionLog
from protocol.errors import ErrorCode

EARLIEST = -2
LATEST = -1


def lookup_offset(log: PartitionLog, timestamp: int) -> tuple[int, int]:
    """(offset, timestamp) for a ListOffsets query; (-1, -1) when nothing matches."""
    if timestamp == LATEST:
        return log.high_watermark, -1
    if timestamp == EARLIEST:
        return log.log_start_offset, -1
    found = log.offset_for_timestamp(timestamp)
    if found is None:
        return -1, -1
    _, i = found
    stored = log.batches[i]
    batch = DefaultRecordBatch(bytearray(stored.data))
    if batch.timestamp_type == 1:  # LogAppendTime: every record carries the batch time
        return max(stored.base_offset, log.log_start_offset), stored.max_timestamp
    for record in batch:
        if record.timestamp >= timestamp and record.offset >= log.log_start_offset:
            return record.offset, record.timestamp
    return stored.base_offset, stored.max_timestamp


@handler(2, 0, 5)
def handle_list_offsets(ctx: RequestContext, req: Fields) -> Fields:
    topics_mgr = ctx.broker.topics
    out = []
    for t in req["topics"]:
        name = t["topic"]
        parts = []
        for p in t["partitions"]:
            index = p["partition"]
            log = topics_mgr.partition(name, index)
            offset, ts = -1, -1
            if log is None:
                code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            else:
                code = check_leader_epoch(p.get("current_leader_epoch"))
                if code == ErrorCode.NONE:
                    offset, ts = lookup_offset(log, p["timestamp"])
            parts.append(
                {
                    "partition": index,
                    "partition_index": index,
                    "error_code": int(code),
                    "offsets": [offset] if offset >= 0 else [],
                    "old_style_offsets": [offset] if offset >= 0 else [],
                    "timestamp": ts,
                    "offset": offset,
                    "leader_epoch": LEADER_EPOCH if offset >= 0 else -1,
                }
            )
        out.append({"topic": name, "name": name, "partitions": parts})
    return {"topics": out}
