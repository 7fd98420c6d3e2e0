"""Fetch v4-v18.

v4 adds isolation level, last stable offset and aborted transactions (read_committed reads
only below the last stable offset and lists the aborted transactions its batches may hold;
the batches, control batches included, go out unchanged: clients filter); v5 log start offset;
v7 fetch sessions (we answer session id 0: sessionless, which every client accepts); v9 the
current leader epoch; v11 rack id and preferred read replica; v12 is flexible (the tagged
fields: cluster id, diverging epoch, current leader, snapshot id, all at their defaults);
v13 names topics by id (an unknown id: UNKNOWN_TOPIC_ID); v15-v18 add fields for replicas
(replica state, directory id, high watermark) that a consumer leaves at their defaults.
Long polling: a fetch that has fewer than min_bytes waits up to max_wait_ms, woken by any
produce to its partitions. Under --data-dir a partition's read of the segment files that the
page cache cannot answer at once (or a large one) is made on a reader thread
(``ReadWouldBlock``): the partitions are still read one after the other in request order, so
the answer is the one the loop would have made. Whole batches are returned; the first batch
found is returned even when it is larger than the limits, so large batches always make
progress.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import Coroutine, Generator, Sequence
from typing import Any

from kgroupd.broker.handlers.registry import Fields, RequestContext, handler
from kgroupd.broker.handlers.throttling import charge, quota_cap
from kgroupd.broker.log.partition import PartitionLog, ReadWouldBlock
from kgroupd.broker.quotas import FETCH as FETCH_QUOTA
from kgroupd.broker.security.rules import TOPIC_READ
from kgroupd.protocol.errors import ErrorCode
from kgroupd.protocol.fast import Chunks, FetchPartition, encode_fetch_response
from kgroupd.protocol.records import parse_header

LEADER_EPOCH = 0


TOPIC_IDS_FROM = 13
READ_COMMITTED = 1

# (topic responses, bytes returned, whether any partition errored)
Outcome = tuple[list[tuple[str | uuid.UUID, list[FetchPartition]]], int, bool]
# A read of a partition's files to make off the event loop: (log, offset, max bytes, at least
# one batch, below), and what it returns (the batches and their size).
FileRead = tuple[PartitionLog, int, int, bool, int]
ReadResult = tuple[Sequence[bytes | memoryview], int]


def check_leader_epoch(current: int | None) -> ErrorCode:
    if current is None or current < 0:
        return ErrorCode.NONE
    if current > LEADER_EPOCH:
        return ErrorCode.UNKNOWN_LEADER_EPOCH
    if current < LEADER_EPOCH:
        return ErrorCode.FENCED_LEADER_EPOCH
    return ErrorCode.NONE


class FetchPlan:
    def __init__(self, ctx: RequestContext, req: Fields) -> None:
        self.ctx = ctx
        self.max_bytes = req["max_bytes"]
        cap = quota_cap(ctx, FETCH_QUOTA)
        if cap is not None:  # Kafka's: at most what the quota lets through in its window
            self.max_bytes = min(self.max_bytes, int(cap))
        self.read_committed = req["isolation_level"] == READ_COMMITTED
        by_id = ctx.api_version >= TOPIC_IDS_FROM
        # (key on the wire: name, or id from v13; the topic's name or None for an unknown id)
        self.items: list[tuple[str | uuid.UUID, str | None, list[tuple[int, int, int, int]]]] = []
        for t in req["topics"]:
            parts = [
                (
                    p["partition"],
                    p["fetch_offset"],
                    p["partition_max_bytes"],
                    p["current_leader_epoch"],
                )
                for p in t["partitions"]
            ]
            if by_id:
                found = ctx.broker.topics.by_id(t["topic_id"])
                self.items.append((t["topic_id"], found.name if found else None, parts))
            else:
                self.items.append((t["topic"], t["topic"], parts))
        # topics the principal may not READ (--authorizer acl): TOPIC_AUTHORIZATION_FAILED
        self.denied: set[str] = set()
        if ctx.access is not None:
            self.denied = {
                n for _, n, _ in self.items if n is not None and ctx.denies(TOPIC_READ, n)
            }

    def run(self) -> Outcome | Coroutine[Any, Any, Outcome]:
        """Read once: (topic responses, bytes returned, whether any partition errored); or,
        when a partition's read must be made off the event loop (``ReadWouldBlock``: the page
        cache does not hold it, or it is large), a coroutine that makes the reads that must
        be on a reader thread and answers the same."""
        steps = self._steps()
        try:
            wanted = next(steps)
        except StopIteration as done:
            return done.value
        return _finish(steps, wanted)

    def _steps(self) -> Generator[FileRead, ReadResult, Outcome]:
        """The reads in request order; yields each file read to make off the loop and is sent
        its result (the partitions after it see the bytes it took)."""
        topics_mgr = self.ctx.broker.topics
        remaining = self.max_bytes
        total = 0
        errored = False
        out = []
        stats = self.ctx.broker.stats
        for key, name, parts in self.items:
            entries: list[FetchPartition] = []
            denied = name in self.denied
            for index, offset, part_max, epoch in parts:
                log = None if name is None or denied else topics_mgr.partition(name, index)
                code = ErrorCode.NONE
                records: Sequence[bytes | memoryview] = []
                aborted: list[tuple[int, int]] | None = None
                if denied:
                    code = ErrorCode.TOPIC_AUTHORIZATION_FAILED
                elif name is None:
                    code = ErrorCode.UNKNOWN_TOPIC_ID
                elif log is None:
                    code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                else:
                    code = check_leader_epoch(epoch)
                    if code == ErrorCode.NONE and not (
                        log.log_start_offset <= offset <= log.high_watermark
                    ):
                        code = ErrorCode.OFFSET_OUT_OF_RANGE
                    # read_committed reads only below the last stable offset
                    upper = log.last_stable_offset if self.read_committed else log.high_watermark
                    if code == ErrorCode.NONE and offset < upper:
                        limit = min(part_max, remaining)
                        try:
                            records, size = log.read_chunks(
                                offset, limit, total == 0, below=upper, nowait=True
                            )
                        except ReadWouldBlock:
                            records, size = yield log, offset, limit, total == 0, upper
                        total += size
                        if stats is not None and size:
                            stats.fetched(name, size)
                        remaining = max(0, remaining - size)
                    if self.read_committed and code == ErrorCode.NONE:
                        end = offset + 1 if not records else _next_offset(records[-1])
                        aborted = log.txn.aborted_between(offset, end) if records else []
                if code:
                    errored = True
                if log is None:
                    entries.append((index, int(code), -1, -1, -1, records, None))
                else:
                    hw, lso = log.high_watermark, log.last_stable_offset
                    entries.append(
                        (index, int(code), hw, lso, log.log_start_offset, records, aborted)
                    )
            out.append((key, entries))
        return out, total, errored

    def logs(self) -> list[PartitionLog]:
        found = []
        topics_mgr = self.ctx.broker.topics
        for _key, name, parts in self.items:
            if name is None or name in self.denied:
                continue
            for index, *_ in parts:
                log = topics_mgr.partition(name, index)
                if log is not None:
                    found.append(log)
        return found


async def _finish(steps: Generator[FileRead, ReadResult, Outcome], wanted: FileRead) -> Outcome:
    """The rest of ``FetchPlan.run`` once a read must be made off the loop."""
    while True:
        log, offset, limit, at_least_one, below = wanted
        got = await log.read_files(offset, limit, at_least_one, below)
        try:
            wanted = steps.send(got)
        except StopIteration as done:
            return done.value


async def run_plan(plan: FetchPlan) -> Outcome:
    ran = plan.run()
    return ran if isinstance(ran, tuple) else await ran


def _next_offset(batch: bytes | memoryview) -> int:
    header = parse_header(batch)
    return header.base_offset + header.last_offset_delta + 1


def _response(
    ctx: RequestContext,
    topics: list[tuple[str | uuid.UUID, list[FetchPartition]]],
    code: ErrorCode = ErrorCode.NONE,
) -> Chunks:
    # Encoded by hand (kgroupd.protocol.fast): the stored batches go out without being copied.
    chunks = encode_fetch_response(ctx.api_version, int(code), 0, topics)
    if ctx.broker.throttle.enabled(FETCH_QUOTA):
        size = 0
        for chunk in chunks:
            size += len(chunk)
        throttle_ms = charge(ctx, FETCH_QUOTA, size, keep=False)
        if throttle_ms:  # over the quota: an empty answer, as Kafka's
            return encode_fetch_response(ctx.api_version, int(code), 0, [], throttle_ms)
    return chunks


@handler(1)
def handle_fetch(ctx: RequestContext, req: Fields) -> Fields | Any:
    session_id = req["session_id"]
    if session_id:
        # We never hand out sessions, so any non-zero id is one we do not know.
        return _response(ctx, [], ErrorCode.FETCH_SESSION_ID_NOT_FOUND)
    plan = FetchPlan(ctx, req)
    ran = plan.run()
    if not isinstance(ran, tuple):
        return _after_files(plan, req, ran)
    topics, total, errored = ran
    max_wait = req["max_wait_ms"]
    if errored or total >= req["min_bytes"] or max_wait <= 0:
        return _response(ctx, topics)
    # Wait for data from now: the long poll task starts later, and a produce handled before
    # it runs would otherwise wake no one (the fetch would sleep its whole max wait).
    logs = plan.logs()
    first = (logs, [log.wait_for_data() for log in logs])
    return _long_poll(plan, req["min_bytes"], max_wait / 1000.0, first)


async def _after_files(
    plan: FetchPlan, req: Fields, reading: Coroutine[Any, Any, Outcome]
) -> Chunks:
    """A first read that went to a reader thread: then as ``handle_fetch``."""
    topics, total, errored = await reading
    max_wait = req["max_wait_ms"]
    if errored or total >= req["min_bytes"] or max_wait <= 0:
        return _response(plan.ctx, topics)
    logs = plan.logs()
    first = (logs, [log.wait_for_data() for log in logs])
    return await _long_poll(plan, req["min_bytes"], max_wait / 1000.0, first)


async def _long_poll(
    plan: FetchPlan,
    min_bytes: int,
    max_wait_s: float,
    first: tuple[list[PartitionLog], list[asyncio.Future[None]]],
) -> Chunks:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + max_wait_s
    registered: tuple[list[PartitionLog], list[asyncio.Future[None]]] | None = first
    while True:
        remaining = deadline - loop.time()
        if remaining <= 0:
            if registered is not None:  # never waited on: let the logs forget these
                _forget(*registered)
            break
        if registered is not None:
            logs, futures = registered
            registered = None
        else:
            logs = plan.logs()
            futures = [log.wait_for_data() for log in logs]
        try:
            if futures:
                await asyncio.wait(futures, timeout=remaining, return_when=asyncio.FIRST_COMPLETED)
            else:
                await asyncio.sleep(remaining)
        finally:
            _forget(logs, futures)
        topics, total, errored = await run_plan(plan)
        if errored or total >= min_bytes:
            return _response(plan.ctx, topics)
    topics, _, _ = await run_plan(plan)
    return _response(plan.ctx, topics)


def _forget(logs: list[PartitionLog], futures: list[asyncio.Future[None]]) -> None:
    for log, fut in zip(logs, futures, strict=True):
        if not fut.done():
            fut.cancel()
            with contextlib.suppress(ValueError):
                log.waiters.remove(fut)
