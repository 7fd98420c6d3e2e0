"""One share partition (KIP-932): the in-flight records of one share group on one topic partition.

Every offset from the share-partition start offset (SPSO) up to the end of what was acquired is
in one of Kafka's states: AVAILABLE (may be delivered), ACQUIRED (delivered to one member, under
an acquisition lock of share.record.lock.duration.ms), ACKNOWLEDGED (accepted: done) or ARCHIVED
(rejected, a gap, or past the delivery count limit: done). Offsets below the SPSO are all done.

- ``acquire`` hands a member the AVAILABLE offsets from the start, then new ones past the
  in-flight end, each delivery raising the record's delivery count; it stops at the fetch's
  record limit and at share.partition.max.record.locks records in flight.
- ``acknowledge`` applies ACCEPT / RELEASE / REJECT / RENEW (and GAP) to offsets the member
  holds; any offset it does not hold fails the whole batch with INVALID_RECORD_STATE.
- A lock that expires, a RELEASE, or a member that goes makes the record AVAILABLE again, unless
  its delivery count reached share.delivery.count.limit: then it is ARCHIVED.
- The SPSO moves past every leading ACKNOWLEDGED / ARCHIVED record.

Pure: timers come from the injected ``Timers``; no I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from enum import IntEnum

from kgroupd.broker.coordinator.timers import Timers
from kgroupd.protocol.errors import ErrorCode

# Kafka's AcknowledgeType ids on the wire
GAP, ACCEPT, RELEASE, REJECT, RENEW = 0, 1, 2, 3, 4


class RecordState(IntEnum):
    AVAILABLE = 0
    ACQUIRED = 1
    ACKNOWLEDGED = 2
    ARCHIVED = 4


@dataclass(slots=True)
class InFlight:
    state: RecordState
    delivery_count: int
    member_id: str | None = None
    lock: int = 0  # the acquisition that holds it (its lock timer's generation)


@dataclass(frozen=True, slots=True)
class Acquired:
    first_offset: int
    last_offset: int
    delivery_count: int


@dataclass(slots=True)
class Limits:
    """The group configs the partition follows (read at each call: they may change)."""

    lock_duration_ms: int = 30000
    delivery_count_limit: int = 5
    max_in_flight: int = 2000


class SharePartition:
    """The in-flight state of (group, topic partition)."""

    def __init__(
        self,
        key: str,
        start_offset: int,
        timers: Timers,
        limits: Callable[[], Limits] = Limits,
    ) -> None:
        self.key = key  # "group/topic-id/partition": the lock timers' key prefix
        self.start_offset = start_offset
        self.end_offset = start_offset  # one past the last offset ever acquired
        self.records: dict[int, InFlight] = {}
        self.timers = timers
        self.limits = limits
        self._locks = 0

    # --- acquiring ---------------------------------------------------------------------------

    def acquire(
        self, member_id: str, ranges: Iterable[tuple[int, int]], max_records: int
    ) -> list[Acquired]:
        """Acquire for ``member_id`` up to ``max_records`` offsets among ``ranges`` (the
        inclusive offset ranges of the batches read from the log, in order): AVAILABLE ones
        already in flight first, then new ones. Returns the acquired runs."""
        limits = self.limits()
        self._locks += 1
        lock = self._locks
        taken: list[int] = []
        for first, last in ranges:
            offset = max(first, self.start_offset)
            while offset <= last and len(taken) < max_records:
                rec = self.records.get(offset)
                if offset >= self.end_offset:
                    if offset - self.start_offset >= limits.max_in_flight:
                        break
                    rec = self.records[offset] = InFlight(RecordState.AVAILABLE, 0)
                    self.end_offset = offset + 1
                if rec is not None and rec.state == RecordState.AVAILABLE:
                    rec.state = RecordState.ACQUIRED
                    rec.delivery_count += 1
                    rec.member_id = member_id
                    rec.lock = lock
                    taken.append(offset)
                offset += 1
        if not taken:
            return []
        self.timers.schedule(
            f"share-lock/{self.key}/{lock}",
            limits.lock_duration_ms,
            lambda: self._lock_expired(lock),
        )
        return _runs(taken, self.records)

    def _lock_expired(self, lock: int) -> None:
        for rec in self.records.values():
            if rec.state == RecordState.ACQUIRED and rec.lock == lock:
                self._make_available(rec)
        self._advance()

    # --- acknowledging -----------------------------------------------------------------------

    def acknowledge(self, member_id: str, first: int, last: int, types: list[int]) -> ErrorCode:
        """One acknowledgement batch: ``types`` has one type for the whole range, or one per
        offset. Nothing changes unless every offset is ACQUIRED by ``member_id``."""
        if last < first or not types or (len(types) != 1 and len(types) != last - first + 1):
            return ErrorCode.INVALID_REQUEST
        if any(t not in (GAP, ACCEPT, RELEASE, REJECT, RENEW) for t in types):
            return ErrorCode.INVALID_REQUEST
        held = []
        for offset in range(first, last + 1):
            rec = self.records.get(offset)
            if rec is None or rec.state != RecordState.ACQUIRED or rec.member_id != member_id:
                return ErrorCode.INVALID_RECORD_STATE
            held.append(rec)
        limits = self.limits()
        renewed: list[InFlight] = []
        for i, rec in enumerate(held):
            kind = types[0] if len(types) == 1 else types[i]
            if kind == ACCEPT:
                self._settle(rec, RecordState.ACKNOWLEDGED)
            elif kind in (REJECT, GAP):
                self._settle(rec, RecordState.ARCHIVED)
            elif kind == RELEASE:
                self._make_available(rec)
            else:
                renewed.append(rec)
        if renewed:  # RENEW: a fresh lock for these records
            self._locks += 1
            lock = self._locks
            for rec in renewed:
                rec.lock = lock
            self.timers.schedule(
                f"share-lock/{self.key}/{lock}",
                limits.lock_duration_ms,
                lambda: self._lock_expired(lock),
            )
        self._advance()
        return ErrorCode.NONE

    def release_member(self, member_id: str) -> int:
        """The member left or its share session closed: what it holds is available again."""
        count = 0
        for rec in self.records.values():
            if rec.state == RecordState.ACQUIRED and rec.member_id == member_id:
                self._make_available(rec)
                count += 1
        self._advance()
        return count

    # --- state -------------------------------------------------------------------------------

    def _settle(self, rec: InFlight, state: RecordState) -> None:
        rec.state = state
        rec.member_id = None

    def _make_available(self, rec: InFlight) -> None:
        if rec.delivery_count >= self.limits().delivery_count_limit:
            self._settle(rec, RecordState.ARCHIVED)
        else:
            rec.state = RecordState.AVAILABLE
            rec.member_id = None

    def _advance(self) -> None:
        """Move the start offset past every settled record at its head."""
        start = self.start_offset
        while start < self.end_offset:
            rec = self.records.get(start)
            if rec is not None:  # no record: an offset the log has not (a gap, a marker)
                if rec.state not in (RecordState.ACKNOWLEDGED, RecordState.ARCHIVED):
                    break
                del self.records[start]
            start += 1
        self.start_offset = start

    def move_start(self, offset: int) -> None:
        """The log's start moved past records never delivered or still in flight (retention,
        DeleteRecords): they are gone."""
        if offset <= self.start_offset:
            return
        for o in [o for o in self.records if o < offset]:
            del self.records[o]
        self.start_offset = offset
        self.end_offset = max(self.end_offset, offset)

    def acquired_count(self) -> int:
        return sum(1 for r in self.records.values() if r.state == RecordState.ACQUIRED)

    def in_flight_count(self) -> int:
        return len(self.records)

    def has_available(self, log_end: int) -> bool:
        """Whether a fetch could acquire anything now (new records or AVAILABLE ones)."""
        if log_end > self.end_offset and self.end_offset - self.start_offset < (
            self.limits().max_in_flight
        ):
            return True
        return any(r.state == RecordState.AVAILABLE for r in self.records.values())


def _runs(offsets: list[int], records: dict[int, InFlight]) -> list[Acquired]:
    """Consecutive offsets with the same delivery count, as one AcquiredRecords each."""
    out: list[Acquired] = []
    for offset in offsets:
        count = records[offset].delivery_count
        if out and out[-1].last_offset == offset - 1 and out[-1].delivery_count == count:
            prev = out[-1]
            out[-1] = Acquired(prev.first_offset, offset, count)
        else:
            out.append(Acquired(offset, offset, count))
    return out
