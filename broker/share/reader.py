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
from collections.abc import Callable, Coroutine, Generator, Sequence
from typing import Any

from kgroupd.broker.log.partition import PartitionLog, ReadWouldBlock
from kgroupd.broker.log.topics import Topic
from kgroupd.broker.log.txn import AbortedTxn
from kgroupd.broker.share.partition import Acquired, SharePartition
from kgroupd.broker.share.service import ShareService, ShareSession
from kgroupd.protocol.errors import ErrorCode
from kgroupd.protocol.records import (
    CONTROL_BIT,
    HEADER_SIZE,
    TRANSACTIONAL_BIT,
    BatchHeader,
    parse_header,
)

TopicPartition = tuple[uuid.UUID, int]
Fetched = dict[TopicPartition, tuple[bytes, list[Acquired]]]
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
    be made off the loop."""
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
        start = sp.next_fetch_offset()
        if start >= upper:
            continue
        try:
            parts, _size = log.read_chunks(start, budget, True, below=upper, nowait=True)
        except ReadWouldBlock:
            parts, _size = yield log, start, budget, upper
        batches = _batches(parts)
        acquired = _acquire(sp, session.member_id, batches, log, read_committed, max_records)
        if not acquired:
            continue
        max_records -= sum(a.last_offset - a.first_offset + 1 for a in acquired)
        data = b"".join(bytes(d) for h, d in batches if _holds_any(h, acquired))
        budget -= len(data)
        fetched[(topic_id, index)] = (data, acquired)
    return fetched, errors, logs


def _batches(parts: Sequence[bytes | memoryview]) -> list[tuple[BatchHeader, bytes | memoryview]]:
    """Every batch of what was read (a view read from the files may hold many)."""
    out = []
    for part in parts:
        pos, end = 0, len(part)
        while end - pos >= HEADER_SIZE:
            header = parse_header(part, pos)
            if pos + header.length > end:
                break
            out.append((header, part[pos : pos + header.length]))
            pos += header.length
    return out


def _acquire(
    sp: SharePartition,
    member_id: str,
    batches: list[tuple[BatchHeader, bytes | memoryview]],
    log: PartitionLog,
    read_committed: bool,
    max_records: int,
) -> list[Acquired]:
    aborted: list[AbortedTxn] = []
    if read_committed and batches:
        first = batches[0][0].base_offset
        last = batches[-1][0].base_offset + batches[-1][0].last_offset_delta
        aborted = [a for a in log.txn.aborted if a.last_offset >= first and a.first_offset <= last]
    ranges: list[tuple[int, int, bool]] = []
    for header, _data in batches:
        base = header.base_offset
        end = base + header.last_offset_delta
        deliverable = not header.attributes & CONTROL_BIT
        if deliverable and aborted and header.attributes & TRANSACTIONAL_BIT:
            pid = header.producer_id
            deliverable = not any(
                a.producer_id == pid and a.first_offset <= base < a.last_offset for a in aborted
            )
        ranges.append((base, end, deliverable))
    return sp.acquire(member_id, ranges, max_records)


def _holds_any(header: BatchHeader, acquired: list[Acquired]) -> bool:
    first, last = header.base_offset, header.base_offset + header.last_offset_delta
    return any(a.first_offset <= last and a.last_offset >= first for a in acquired)
