"""ListOffsets v0-v11.

v0 answers a list of offsets; v1 a single offset and its timestamp; v2 isolation level;
v4 the current leader epoch (request) and leader epoch (response); v6 is flexible; v7 adds
-3, the offset of the record with the largest timestamp (KIP-734); v8 -4, the earliest
local offset, and v9 -5, the latest tiered offset (KIP-1005: without tiered storage, the
log start offset and -1); v10 a timeout; v11 -6, the earliest offset pending upload to tiered
storage (none here: -1). -2 is the earliest offset, -1 the latest (the offset after the last
record of the last batch); any other timestamp finds the first record whose own timestamp is
at least it.
"""

from __future__ import annotations

from kgroupd.broker.handlers.fetch import LEADER_EPOCH, check_leader_epoch
from kgroupd.broker.handlers.registry import Fields, RequestContext, handler
from kgroupd.broker.log.partition import PartitionLog
from kgroupd.broker.security.rules import TOPIC_DESCRIBE
from kgroupd.protocol.errors import ErrorCode

EARLIEST = -2
LATEST = -1
MAX_TIMESTAMP = -3
EARLIEST_LOCAL = -4
LATEST_TIERED = -5
EARLIEST_PENDING_UPLOAD = -6


def lookup_offset(
    log: PartitionLog, timestamp: int, read_committed: bool = False
) -> tuple[int, int]:
    """(offset, timestamp) for a ListOffsets query; (-1, -1) when nothing matches. Under
    read_committed the latest offset is the last stable offset, and a timestamp lookup
    finds only offsets below it (Kafka's lastFetchableOffset)."""
    if timestamp == LATEST:
        return (log.last_stable_offset if read_committed else log.high_watermark), -1
    found = _lookup(log, timestamp)
    if (
        read_committed
        and timestamp not in (EARLIEST, EARLIEST_LOCAL)
        and found[0] >= log.last_stable_offset
    ):
        return -1, -1
    return found


def _lookup(log: PartitionLog, timestamp: int) -> tuple[int, int]:
    if timestamp in (EARLIEST, EARLIEST_LOCAL):
        return log.log_start_offset, -1
    if timestamp in (LATEST_TIERED, EARLIEST_PENDING_UPLOAD):
        return -1, -1
    if timestamp == MAX_TIMESTAMP:
        return max_timestamp_offset(log)
    from aiokafka.record.default_records import DefaultRecordBatch  # all of aiokafka: 0.1 s

    start = log.log_start_offset
    while True:  # as Kafka's FileRecords.searchForTimestamp: batch after batch
        stored = log.batch_at_timestamp(timestamp, start)
        if stored is None:
            return -1, -1
        batch = DefaultRecordBatch(bytearray(stored.data))
        if batch.timestamp_type == 1:  # LogAppendTime: every record carries the batch time
            return max(stored.base_offset, start), stored.max_timestamp
        for record in batch:
            if record.timestamp >= timestamp and record.offset >= start:
                return record.offset, record.timestamp
        # its records that reach the target are all below the log start
        start = stored.last_offset + 1


def max_timestamp_offset(log: PartitionLog) -> tuple[int, int]:
    """ListOffsets -3: the offset and timestamp of the record with the largest timestamp
    (the first such record); (-1, -1) for an empty log."""
    from aiokafka.record.default_records import DefaultRecordBatch

    best: tuple[int, int] = (-1, -1)
    for stored in log.max_timestamp_batches():
        if stored.max_timestamp <= best[1] and best[0] >= 0:
            continue
        batch = DefaultRecordBatch(bytearray(stored.data))
        for record in batch:
            if record.offset < log.log_start_offset:
                continue
            ts = stored.max_timestamp if batch.timestamp_type == 1 else record.timestamp
            if ts > best[1] or best[0] < 0:
                best = (record.offset, ts)
    return best


@handler(2)
def handle_list_offsets(ctx: RequestContext, req: Fields) -> Fields:
    topics_mgr = ctx.broker.topics
    committed = req["isolation_level"] == 1  # READ_COMMITTED (v2+)
    out = []
    for t in req["topics"]:
        name = t["name"]
        parts = []
        denied = ctx.denies(TOPIC_DESCRIBE, name)
        for p in t["partitions"]:
            index = p["partition_index"]
            log = None if denied else topics_mgr.partition(name, index)
            offset, ts = -1, -1
            if denied:
                code = ErrorCode.TOPIC_AUTHORIZATION_FAILED
            elif log is None:
                code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            else:
                code = check_leader_epoch(p["current_leader_epoch"])
                if code == ErrorCode.NONE:
                    offset, ts = lookup_offset(log, p["timestamp"], committed)
            parts.append(
                {
                    "partition_index": index,
                    "error_code": int(code),
                    "old_style_offsets": [offset] if offset >= 0 else [],
                    "timestamp": ts,
                    "offset": offset,
                    "leader_epoch": LEADER_EPOCH if offset >= 0 else -1,
                }
            )
        out.append({"name": name, "partitions": parts})
    return {"topics": out}
