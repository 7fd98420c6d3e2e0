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
- Offsets a fetch must never deliver (transaction markers; under read_committed the batches
  of aborted transactions) are ARCHIVED as the fetch passes them.
- What Kafka persists in __share_group_state (the SPSO and the state batches: every offset
  that was acknowledged, archived or released with its delivery count) is handed out by
  ``take_changes`` / ``snapshot`` and put back by ``restore``; acquisitions are not
  persisted, so after a restart the records that were only acquired come back.

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
_ACK_NAMES = {GAP: "gap", ACCEPT: "accept", RELEASE: "release", REJECT: "reject", RENEW: "renew"}


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
        counts: dict[str, int] | None = None,
    ) -> None:
        self.key = key  # "group/topic-id/partition": the lock timers' key prefix
        self.start_offset = start_offset
        self.end_offset = start_offset  # one past the last offset ever acquired
        self.records: dict[int, InFlight] = {}
        self.timers = timers
        self.limits = limits
        self._locks = 0
        # offsets whose persisted state changed, and whether the start moved, since the last
        # ``take_changes``; ``changed`` is told after a change made outside a request (a lock
        # that expired, a member that went)
        self.dirty: set[int] = set()
        self.start_moved = False
        self.track = False  # set when a store keeps the changes (else nothing is kept)
        # offsets below ``end_offset`` that are AVAILABLE (released, lock expired)
        self._available: set[int] = set()
        # one past the last offset a restored state knows (offsets from end_offset up to it
        # may have a state already)
        self._restored_end = start_offset
        self.changed: Callable[[SharePartition], None] = lambda _sp: None
        # told when records became AVAILABLE again (a release, a lock that expired, a member
        # gone): a share fetch waiting for records may take them now
        self.freed: Callable[[SharePartition], None] = lambda _sp: None
        self._freed = False
        # what happened to records, for the metrics (shared by a service's partitions)
        self.counts: dict[str, int] = counts if counts is not None else {}

    # --- acquiring ---------------------------------------------------------------------------

    def acquire(
        self,
        member_id: str,
        ranges: Iterable[tuple[int, int] | tuple[int, int, bool]],
        max_records: int,
    ) -> list[Acquired]:
        """Acquire for ``member_id`` up to ``max_records`` offsets among ``ranges`` (the
        inclusive offset ranges of the batches read from the log, in order): AVAILABLE ones
        already in flight first, then new ones. A range whose third item is False (a control
        batch, or under read_committed a batch of an aborted transaction) is never delivered:
        its new offsets are ARCHIVED as the fetch passes them. Returns the acquired runs."""
        limits = self.limits()
        self._locks += 1
        lock = self._locks
        runs: list[Acquired] = []
        taken = 0
        room = self.start_offset + limits.max_in_flight  # new offsets stay below it
        for first, last, *rest in ranges:
            deliverable = not rest or rest[0]
            offset = max(first, self.start_offset)
            if offset < self.end_offset:  # in flight already: the AVAILABLE ones
                stop = min(last, self.end_offset - 1)
                if deliverable and self._available:
                    for o in sorted(a for a in self._available if offset <= a <= stop):
                        if taken >= max_records:
                            break
                        rec = self.records[o]
                        self._available.discard(o)
                        self._take(rec, member_id, lock)
                        taken += 1
                        _add_run(runs, o, o, rec.delivery_count)
                offset = stop + 1
            if taken >= max_records:
                break
            if offset > last:
                continue
            hi = min(last, room - 1)
            if deliverable:
                hi = min(hi, offset + max_records - taken - 1)
            if hi < offset:
                break
            if offset < self._restored_end:
                taken += self._new_restored(member_id, lock, offset, hi, deliverable, runs)
            else:
                taken += self._new(member_id, lock, offset, hi, deliverable, runs)
            self.end_offset = hi + 1
            if hi < last:
                break
        self._advance()
        self._tell()
        if not runs:
            return []
        self._count("delivered", taken)
        self.timers.schedule(
            f"share-lock/{self.key}/{lock}",
            limits.lock_duration_ms,
            lambda: self._lock_expired(lock),
        )
        return runs

    def _new(
        self, member_id: str, lock: int, lo: int, hi: int, deliverable: bool, runs: list[Acquired]
    ) -> int:
        """Offsets lo..hi seen for the first time: acquired, or ARCHIVED if undeliverable."""
        records = self.records
        if deliverable:
            for o in range(lo, hi + 1):
                records[o] = InFlight(RecordState.ACQUIRED, 1, member_id, lock)
            _add_run(runs, lo, hi, 1)
            return hi - lo + 1
        for o in range(lo, hi + 1):
            records[o] = InFlight(RecordState.ARCHIVED, 0)
        if self.track:
            self.dirty.update(range(lo, hi + 1))
        return 0

    def _new_restored(
        self, member_id: str, lock: int, lo: int, hi: int, deliverable: bool, runs: list[Acquired]
    ) -> int:
        """As ``_new``, over offsets a restored state may know already (settled ones stay
        settled; released ones keep their delivery counts)."""
        taken = 0
        for o in range(lo, hi + 1):
            rec = self.records.get(o)
            if rec is None:
                rec = self.records[o] = InFlight(RecordState.AVAILABLE, 0)
            if rec.state is not RecordState.AVAILABLE:
                continue
            if deliverable:
                self._take(rec, member_id, lock)
                taken += 1
                _add_run(runs, o, o, rec.delivery_count)
            else:
                self._settle(rec, RecordState.ARCHIVED, o)
        return taken

    def _take(self, rec: InFlight, member_id: str, lock: int) -> None:
        rec.state = RecordState.ACQUIRED
        rec.delivery_count += 1
        rec.member_id = member_id
        rec.lock = lock

    def _lock_expired(self, lock: int) -> None:
        for offset, rec in self.records.items():
            if rec.state is RecordState.ACQUIRED and rec.lock == lock:
                self._count("lock_expired", 1)
                self._make_available(rec, offset)
        self._advance()
        self._tell()

    # --- acknowledging -----------------------------------------------------------------------

    def acknowledge(self, member_id: str, first: int, last: int, types: list[int]) -> ErrorCode:
        """One acknowledgement batch: ``types`` has one type for the whole range, or one per
        offset. Nothing changes unless every offset is ACQUIRED by ``member_id``."""
        if last < first or not types or (len(types) != 1 and len(types) != last - first + 1):
            return ErrorCode.INVALID_REQUEST
        if any(t not in _ACK_NAMES for t in types):
            return ErrorCode.INVALID_REQUEST
        lo = max(first, self.start_offset)
        get = self.records.get
        found = [get(o) for o in range(lo, last + 1)]
        acquired = RecordState.ACQUIRED
        held: list[InFlight] = []
        for rec in found:
            if rec is None or rec.state is not acquired or rec.member_id != member_id:
                return ErrorCode.INVALID_RECORD_STATE
            held.append(rec)
        if len(types) == 1 and types[0] in (ACCEPT, REJECT, GAP):
            # the common case: one type settles the whole range
            state = RecordState.ACKNOWLEDGED if types[0] == ACCEPT else RecordState.ARCHIVED
            for rec in held:
                rec.state = state
                rec.member_id = None
            if self.track:
                self.dirty.update(range(lo, last + 1))
            self._count(_ACK_NAMES[types[0]], len(held))
        else:
            self._acknowledge_each(held, lo, first, types)
        self._advance()
        self._tell()
        return ErrorCode.NONE

    def _acknowledge_each(
        self, held: list[InFlight], lo: int, first: int, types: list[int]
    ) -> None:
        renewed: list[InFlight] = []
        for i, rec in enumerate(held):
            offset = lo + i
            kind = types[0] if len(types) == 1 else types[offset - first]
            self._count(_ACK_NAMES[kind], 1)
            if kind == ACCEPT:
                self._settle(rec, RecordState.ACKNOWLEDGED, offset)
            elif kind in (REJECT, GAP):
                self._settle(rec, RecordState.ARCHIVED, offset)
            elif kind == RELEASE:
                self._make_available(rec, offset)
            else:
                renewed.append(rec)
        if renewed:  # RENEW: a fresh lock for these records
            self._locks += 1
            lock = self._locks
            for rec in renewed:
                rec.lock = lock
            self.timers.schedule(
                f"share-lock/{self.key}/{lock}",
                self.limits().lock_duration_ms,
                lambda: self._lock_expired(lock),
            )

    def release_member(self, member_id: str) -> int:
        """The member left or its share session closed: what it holds is available again."""
        count = 0
        for offset, rec in self.records.items():
            if rec.state is RecordState.ACQUIRED and rec.member_id == member_id:
                self._make_available(rec, offset)
                count += 1
        self._advance()
        self._tell()
        return count

    # --- state -------------------------------------------------------------------------------

    def _tell(self) -> None:
        if self.dirty or self.start_moved:
            self.changed(self)
        if self._freed:
            self._freed = False
            self.freed(self)

    def _settle(self, rec: InFlight, state: RecordState, offset: int) -> None:
        rec.state = state
        rec.member_id = None
        if self.track:
            self.dirty.add(offset)

    def _count(self, what: str, n: int) -> None:
        self.counts[what] = self.counts.get(what, 0) + n

    def _make_available(self, rec: InFlight, offset: int) -> None:
        if rec.delivery_count >= self.limits().delivery_count_limit:
            self._count("delivery_limit_archived", 1)
            self._settle(rec, RecordState.ARCHIVED, offset)
        else:
            rec.state = RecordState.AVAILABLE
            rec.member_id = None
            if self.track:
                self.dirty.add(offset)
            self._available.add(offset)
            self._freed = True

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
        if start != self.start_offset:
            self.start_moved = True
        self.start_offset = start

    def move_start(self, offset: int) -> None:
        """The log's start moved past records never delivered or still in flight (retention,
        DeleteRecords), or an admin reset the start offset: what is below is gone."""
        if offset <= self.start_offset:
            return
        for o in [o for o in self.records if o < offset]:
            del self.records[o]
        self._available = {o for o in self._available if o >= offset}
        self.start_offset = offset
        self.end_offset = max(self.end_offset, offset)
        self.start_moved = True
        self.changed(self)

    def acquired_count(self) -> int:
        return sum(1 for r in self.records.values() if r.state == RecordState.ACQUIRED)

    def in_flight_count(self) -> int:
        return len(self.records)

    def next_fetch_offset(self) -> int:
        """Where a fetch reads from: the first AVAILABLE offset in flight, else the end of
        what was ever acquired (Kafka's next fetch offset)."""
        return min(self._available) if self._available else self.end_offset

    def has_available(self, log_end: int) -> bool:
        """Whether a fetch could acquire anything now (new records below ``log_end``, the
        high watermark or under read_committed the last stable offset, or AVAILABLE ones)."""
        if self._available:
            return True
        return log_end > self.end_offset and self.end_offset - self.start_offset < (
            self.limits().max_in_flight
        )

    # --- persistence (what Kafka keeps in __share_group_state) -------------------------------

    def take_changes(self) -> tuple[int, list[StateBatch]] | None:
        """What changed since the last call, as Kafka's share-group state update: the start
        offset and the state batches of the offsets whose state changed (ACQUIRED offsets are
        never written: after a restart they are available again). None if nothing did."""
        if not self.dirty and not self.start_moved:
            return None
        offsets = sorted(o for o in self.dirty if o >= self.start_offset)
        self.dirty.clear()
        self.start_moved = False
        return self.start_offset, _state_batches(
            (o, self.records[o]) for o in offsets if o in self.records
        )

    def snapshot(self) -> tuple[int, list[StateBatch]]:
        """The whole persisted state: the start offset and every offset whose state or
        delivery count is worth keeping."""
        return self.start_offset, _state_batches(sorted(self.records.items()))

    def restore(self, start_offset: int, batches: Iterable[StateBatch]) -> None:
        """Start-up: the persisted state back (updates applied in order)."""
        if start_offset > self.start_offset:
            for o in [o for o in self.records if o < start_offset]:
                del self.records[o]
        self.start_offset = start_offset
        self.end_offset = min(self.end_offset, start_offset)
        self._available = {o for o in self._available if o < self.end_offset}
        for first, last, state, count in batches:
            for offset in range(max(first, start_offset), last + 1):
                self.records[offset] = InFlight(RecordState(state), count)
                self._restored_end = max(self._restored_end, offset + 1)


# (first offset, last offset, state, delivery count): Kafka's PersisterStateBatch
StateBatch = tuple[int, int, int, int]


def _state_batches(items: Iterable[tuple[int, InFlight]]) -> list[StateBatch]:
    """Runs of consecutive offsets with one state and delivery count; an ACQUIRED record is
    written as the AVAILABLE one it was before this delivery."""
    out: list[StateBatch] = []
    for offset, rec in items:
        state, count = rec.state, rec.delivery_count
        if state == RecordState.ACQUIRED:
            state, count = RecordState.AVAILABLE, count - 1
        if state == RecordState.AVAILABLE and count <= 0:
            continue
        if out and out[-1][1] == offset - 1 and out[-1][2:] == (int(state), count):
            out[-1] = (out[-1][0], offset, int(state), count)
        else:
            out.append((offset, offset, int(state), count))
    return out


def _add_run(runs: list[Acquired], first: int, last: int, count: int) -> None:
    """Append first..last with ``count`` to ``runs``, joined to the last run when it
    continues it with the same delivery count (one AcquiredRecords each)."""
    if runs and runs[-1].last_offset == first - 1 and runs[-1].delivery_count == count:
        runs[-1] = Acquired(runs[-1].first_offset, last, count)
    else:
        runs.append(Acquired(first, last, count))
