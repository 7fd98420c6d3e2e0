"""A share fetch's reads: records acquired for one member from every partition of its share
session, read from the cached tail or, under --data-dir, the segment files.

Each partition is read from its share partition's next fetch offset (the first AVAILABLE
offset in flight, else past what was ever acquired) up to the high watermark, or under
``share.isolation.level=read_committed`` up to the last stable offset. The batches read are
handed to ``SharePartition.acquire`` as offset ranges, each marked deliverable or not: a
control batch (a transaction marker) is never delivered, nor under read_committed a batch of
an aborted transaction (Kafka's ``SharePartition`` archives those offsets; a ShareFetch
answer has no aborted-transactions list for the client to filter with). The whole batches
holding acquired offsets are returned with the acquired runs.

A read the page cache cannot answer at once (``ReadWouldBlock``) is yielded to the caller,
which makes it on a reader thread and sends back the batches (as ``FetchPlan`` does).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Coroutine, Generator, Iterator, Sequence
from typing import Any

from kgroupd.broker.log.partition import PartitionLog, ReadWouldBlock
from kgroupd.broker.log.topics import Topic
from kgroupd.broker.log.txn import AbortedTxn
from kgroupd.broker.share.partition import Acquired
from kgroupd.broker.share.service import ShareService, ShareSession
from kgroupd.protocol.errors import ErrorCode
from kgroupd.protocol.records import (
    CONTROL_BIT,
    HEADER_SIZE,
    TRANSACTIONAL_BIT,
    BatchHeader,
    parse_header,
)

# a partition is read max records x 1 KiB (1 MiB at least) at a time, within the fetch's bytes
READ_MIN_BYTES, READ_BYTES_PER_RECORD = 1 << 20, 1024

TopicPartition = tuple[uuid.UUID, int]
# the batches holding acquired records (as stored: never copied) and the acquired runs
Fetched = dict[TopicPartition, tuple[list[bytes | memoryview], list[Acquired]]]
Errors = dict[TopicPartition, ErrorCode]
# (fetched, per-partition errors, the logs read: a long poll waits on them)
Outcome = tuple[Fetched, Errors, list[PartitionLog]]
# a read to make off the loop: (log, offset, max bytes, below)
FileRead = tuple[PartitionLog, int, int, int]
ReadResult = tuple[Sequence[bytes | memoryview], int]


def acquire_for(
    share: ShareService,
    topics_by_id: Callable[[uuid.UUID], Topic | None],
    session: ShareSession,
    max_records: int,
    max_bytes: int,
) -> Outcome | Coroutine[Any, Any, Outcome]:
    """Acquire for the session's member: the outcome at once, or a coroutine when a read must
    be made off the loop. In the session's batch-optimized acquire mode (Kafka's default) the
    record limit may be passed to end at a batch's boundary."""
    steps = _steps(share, topics_by_id, session, max_records, max_bytes)
    try:
        wanted = next(steps)
    except StopIteration as done:
        return done.value
    return _finish(steps, wanted)


async def _finish(steps: Generator[FileRead, ReadResult, Outcome], wanted: FileRead) -> Outcome:
    while True:
        log, offset, limit, below = wanted
        got = await log.read_files(offset, limit, True, below)
        try:
            wanted = steps.send(got)
        except StopIteration as done:
            return done.value


def _steps(
    share: ShareService,
    topics_by_id: Callable[[uuid.UUID], Topic | None],
    session: ShareSession,
    max_records: int,
    max_bytes: int,
) -> Generator[FileRead, ReadResult, Outcome]:
    fetched: Fetched = {}
    errors: Errors = {}
    logs: list[PartitionLog] = []
    budget = max_bytes
    read_committed = share.read_committed(session.group_id)
    for topic_id, index in sorted(session.partitions):
        topic = topics_by_id(topic_id)
        if topic is None:
            errors[(topic_id, index)] = ErrorCode.UNKNOWN_TOPIC_ID
            continue
        if not 0 <= index < len(topic.partitions):
            errors[(topic_id, index)] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            continue
        log = topic.partitions[index]
        logs.append(log)
        sp = share.partition(session.group_id, topic_id, index, log)
        upper = log.last_stable_offset if read_committed else log.high_watermark
        if max_records <= 0 or budget <= 0 or not sp.has_available(upper):
            continue
        offset = sp.next_fetch_offset()
        data: list[bytes | memoryview] = []
        acquired: list[Acquired] = []
        scanned = 0  # bytes read: at most the fetch's max bytes, as one read of old
        while offset < upper and max_records > 0 and budget > 0 and scanned < max_bytes:
            # what the record limit could take, not the whole tail; read on while the limit
            # is not reached (large records, or a window with nothing to take)
            want = min(budget, max(READ_MIN_BYTES, max_records * READ_BYTES_PER_RECORD))
            try:
                parts, size = log.read_chunks(offset, want, True, below=upper, nowait=True)
            except ReadWouldBlock:
                parts, size = yield log, offset, want, upper
            scanned += size
            seen: list[tuple[int, int, bytes | memoryview]] = []
            ranges = _ranges(parts, seen, log, read_committed, offset, upper)
            got = sp.acquire(session.member_id, ranges, max_records, session.whole_batches)
            if not seen:
                break
            offset = seen[-1][1] + 1
            if not got:
                if sp.end_offset < offset:  # held back (the record lock limit)
                    break
                continue
            if acquired and _continues(acquired[-1], got[0]):  # one run
                first = acquired.pop()
                got[0] = Acquired(first.first_offset, got[0].last_offset, first.delivery_count)
            acquired += got
            max_records -= sum(a.last_offset - a.first_offset + 1 for a in got)
            held = list(_holding(seen, got))
            budget -= sum(len(d) for d in held)
            data += held
        if acquired:
            fetched[(topic_id, index)] = (data, acquired)
    return fetched, errors, logs


def _continues(a: Acquired, b: Acquired) -> bool:
    return a.last_offset + 1 == b.first_offset and a.delivery_count == b.delivery_count


def _ranges(
    parts: Sequence[bytes | memoryview],
    seen: list[tuple[int, int, bytes | memoryview]],
    log: PartitionLog,
    read_committed: bool,
    start: int,
    upper: int,
) -> Iterator[tuple[int, int, bool]]:
    """The offset ranges of the batches read, each marked deliverable or not, parsed only as
    far as the acquisition goes (it stops at its record limit); each batch parsed is put in
    ``seen`` as (first offset, last offset, its bytes)."""
    aborted: list[AbortedTxn] = []
    if read_committed:
        aborted = [a for a in log.txn.aborted if a.last_offset >= start and a.first_offset < upper]
    for part in parts:
        pos, size = 0, len(part)
        while size - pos >= HEADER_SIZE:
            header = parse_header(part, pos)
            if pos + header.length > size:
                break
            base = header.base_offset
            end = base + header.last_offset_delta
            seen.append((base, end, part[pos : pos + header.length]))
            pos += header.length
            deliverable = not header.attributes & CONTROL_BIT
            if deliverable and aborted and header.attributes & TRANSACTIONAL_BIT:
                deliverable = not _aborted(header, aborted)
            yield base, end, deliverable


def _aborted(header: BatchHeader, aborted: list[AbortedTxn]) -> bool:
    pid, base = header.producer_id, header.base_offset
    return any(a.producer_id == pid and a.first_offset <= base < a.last_offset for a in aborted)


def _holding(
    seen: list[tuple[int, int, bytes | memoryview]], acquired: list[Acquired]
) -> Iterator[bytes | memoryview]:
    """The batches holding acquired offsets (both lists in offset order)."""
    k = 0
    for first, last, data in seen:
        while k < len(acquired) and acquired[k].last_offset < first:
            k += 1
        if k == len(acquired):
            return
        if acquired[k].first_offset <= last:
            yield data
