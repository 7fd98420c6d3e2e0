"""ListOffsets v0-v11.

v0 answers a list of offsets; v1 a single offset and its timestamp; v2 isolation level;
v4 the current leader epoch (request) and leader epoch (response); v6 is flexible; v7 adds
-3, the offset of the record with the largest timestamp (KIP-734); v8 -4, the earliest
local offset, and v9 -5, the latest tiered offset (KIP-1005: without tiered storage, the
log start offset and -1); v10 a timeout; v11 -6, the earliest offset pending upload to tiered
storage (none here: -1). -2 is the earliest offset, -1 the latest (the offset after the last
record of the last batch); any other timestamp finds the first record whose own timestamp is
at least it.

A lookup that must read the records of a batch it cannot (one stored by an older version
that took batches whose records lie, or damaged on disk) answers that partition
CORRUPT_MESSAGE, as Kafka answers the exception its record iterator throws.
"""

from __future__ import annotations

from kgroupd.broker.handlers.fetch import LEADER_EPOCH, check_leader_epoch
from kgroupd.broker.handlers.registry import Fields, RequestContext, handler
from kgroupd.broker.log.compaction import EXPANDED_LIMIT, expand, records
from kgroupd.broker.log.partition import PartitionLog, StoredBatch
from kgroupd.broker.security.rules import TOPIC_DESCRIBE
from kgroupd.protocol.errors import ErrorCode
from kgroupd.protocol.records import (
    COMPRESSION_MASK,
    TIMESTAMP_TYPE_BIT,
    InvalidBatch,
    parse_header,
)

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

    start = log.log_start_offset
    while True:  # as Kafka's FileRecords.searchForTimestamp: batch after batch
        stored = log.batch_at_timestamp(timestamp, start)
        if stored is None:
            return -1, -1
        if _log_append_time(stored):  # every record carries the batch time
            return max(stored.base_offset, start), stored.max_timestamp
        for offset, ts in record_times(stored):
            if ts >= timestamp and offset >= start:
                return offset, ts
        # its records that reach the target are all below the log start
        start = stored.last_offset + 1


def max_timestamp_offset(log: PartitionLog) -> tuple[int, int]:
    """ListOffsets -3: the offset and timestamp of the record with the largest timestamp
    (the first such record); (-1, -1) for an empty log."""

    best: tuple[int, int] = (-1, -1)
    for stored in log.max_timestamp_batches():
        if stored.max_timestamp <= best[1] and best[0] >= 0:
            continue
        append_time = _log_append_time(stored)
        for offset, ts in record_times(stored):
            if offset < log.log_start_offset:
                continue
            if append_time:
                ts = stored.max_timestamp
            if ts > best[1] or best[0] < 0:
                best = (offset, ts)
    return best


class UnreadableBatch(Exception):
    """A stored batch whose records cannot be read (CORRUPT_MESSAGE)."""


def _log_append_time(stored: StoredBatch) -> bool:
    return bool(stored.data[22] & TIMESTAMP_TYPE_BIT)  # the attributes' low byte


def record_times(stored: StoredBatch) -> list[tuple[int, int]]:
    """(offset, timestamp) of each record of a stored batch (a compressed one decompressed,
    within the cleaner's bound); ``UnreadableBatch`` if they cannot be read."""
    try:
        header = parse_header(stored.data)
        if header.attributes & COMPRESSION_MASK:
            found = expand(stored.data, header, EXPANDED_LIMIT)[1]
        else:
            found = records(stored.data)
    except InvalidBatch as exc:
        raise UnreadableBatch(
            f"the batch at offset {stored.base_offset} cannot be read: {exc}"
        ) from None
    base, base_ts = header.base_offset, header.base_timestamp
    return [(base + r[2], base_ts + r[1]) for r in found]


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
                    try:
                        offset, ts = lookup_offset(log, p["timestamp"], committed)
                    except UnreadableBatch as exc:
                        code = ErrorCode.CORRUPT_MESSAGE
                        ctx.log.warning(
                            "list_offsets_unreadable_batch",
                            topic=name,
                            partition=index,
                            error=str(exc),
                        )
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
