"""Record timestamps at produce time, as Kafka's LogValidator checks them (KIP-937).

On a CreateTime topic every record's timestamp (but -1: none) must lie within
``[now - message.timestamp.before.max.ms, now + message.timestamp.after.max.ms]`` (Kafka 4's
defaults: any time before, at most one hour ahead); a batch marked LogAppendTime is refused on
a LogAppendTime topic, or where its records carry no timestamp. Out-of-range records are
INVALID_TIMESTAMP for the whole batch, each named in the record errors.

The header's first and max timestamps decide whether records need reading: they bound every
record's timestamp from above (max) and, for the first record, from below, so records are read
(decompressed if need be) only when a before bound is set (a later record may be older than
the first) or the header shows a record out of range (to name each one); produce passes the
records ``validate_batch`` decompressed (on a worker thread past its inline bound), so a
batch is decompressed once. Like the rest of kgroupd, a header whose max timestamp understates
its records is believed.
"""

from __future__ import annotations

from kgroupd.broker.log.compaction import EXPANDED_LIMIT, expand, records
from kgroupd.broker.log.topics import Topic
from kgroupd.protocol.records import (
    COMPRESSION_MASK,
    HEADER_SIZE,
    TIMESTAMP_TYPE_BIT,
    BatchHeader,
)

LONG_MAX = 2**63 - 1
NO_TIMESTAMP = -1
INVALID_TIMESTAMP_MESSAGE = "One or more records have been rejected due to invalid timestamp"


def _long(value: int) -> int:
    """Java's long arithmetic: wrapped to 64 bits."""
    return (value + 2**63) % 2**64 - 2**63


def _out_of_range(ts: int, now: int, before: int, after: int) -> bool:
    diff = _long(now - ts)  # LogValidator.recordHasInvalidTimestamp
    return diff > before or _long(-diff) > after


_NORMAL = 2**62  # timestamps and bounds below this never wrap Java's long arithmetic


def timestamp_errors(
    topic: Topic,
    data: bytes | memoryview,
    header: BatchHeader,
    now: int,
    body: bytes | None = None,
) -> list[tuple[int, str]] | None:
    """(record index, message) for each refused record; None if the batch may be appended.
    ``body``: a compressed batch's records already decompressed (by ``validate_batch``: the
    batch is not decompressed again). ``InvalidBatch`` if its records must be read and cannot
    be."""
    append_time, before, after = topic.timestamp_rules()
    append_time_batch = header.attributes & TIMESTAMP_TYPE_BIT
    if append_time:
        if not append_time_batch:
            return None
        return [(i, _type_message(header, i)) for i in range(header.record_count)]
    first, last = header.base_timestamp, header.max_timestamp
    if (  # the common case: no bound before, so the header's timestamps tell (-1: none)
        before == LONG_MAX
        and not append_time_batch
        and -_NORMAL < first <= now + after < _NORMAL
        and -_NORMAL < last <= now + after
    ):
        return None
    if append_time_batch:  # every record's timestamp is the batch's max
        if last == NO_TIMESTAMP:
            return [(i, _type_message(header, i)) for i in range(header.record_count)]
        if not _out_of_range(last, now, before, after):
            return None
        return [
            (i, _range_message(last, header, i, now, before, after))
            for i in range(header.record_count)
        ]
    suspect = any(t != NO_TIMESTAMP and _out_of_range(t, now, before, after) for t in (first, last))
    if not suspect and before == LONG_MAX:
        return None
    if body is not None:
        found = records(bytes(data[:HEADER_SIZE]) + body)
    elif header.attributes & COMPRESSION_MASK:
        found = expand(data, header, EXPANDED_LIMIT)[1]
    else:
        found = records(bytes(data))  # a view of a large frame: copied only here
    errors = []
    for i, (_attrs, ts_delta, offset_delta, *_rest) in enumerate(found):
        ts = _long(first + ts_delta)
        if ts != NO_TIMESTAMP and _out_of_range(ts, now, before, after):
            errors.append((i, _range_message(ts, header, offset_delta, now, before, after)))
    return errors or None


def _range_message(
    ts: int, header: BatchHeader, offset_delta: int, now: int, before: int, after: int
) -> str:
    return (
        f"Timestamp {ts} of message with offset {header.base_offset + offset_delta} is out of "
        f"range. The timestamp should be within [{_long(now - before)}, {_long(now + after)}]"
    )


def _type_message(header: BatchHeader, index: int) -> str:
    return (
        f"Invalid timestamp type in message DefaultRecord(offset="
        f"{header.base_offset + index}, timestamp={header.max_timestamp}). Producer should not "
        "set timestamp type to LogAppendTime."
    )
