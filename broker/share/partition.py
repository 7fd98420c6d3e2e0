"""One share partition (KIP-932): the in-flight records of one share group on one topic partition.

Every offset from the share-partition start offset (SPSO) up to the end of what was acquired is
in one of Kafka's states: AVAILABLE (may be delivered), ACQUIRED (delivered to one member, under
an acquisition lock of share.record.lock.duration.ms), ACKNOWLEDGED (accepted: done) or ARCHIVED
(rejected, a gap, or past the delivery count limit: done). Offsets below the SPSO are all done.

The states are kept per run of offsets, as Kafka keeps them per in-flight batch: an acquisition
makes one run of each batch range it takes, and a run is split only where an acknowledgement,
a release or a renewal covers part of it. Every operation costs O(runs), not O(records).

- ``acquire`` hands a member the AVAILABLE offsets from the start, then new ones past the
  in-flight end, each delivery raising the record's delivery count; it stops at the fetch's
  record limit (in Kafka's batch-optimized mode, at the end of the batch that reaches it) and
  at share.partition.max.record.locks records in flight.
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

from bisect import bisect_right
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from enum import IntEnum
from operator import attrgetter

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


_AVAILABLE, _ACQUIRED = RecordState.AVAILABLE, RecordState.ACQUIRED
_SETTLED = (RecordState.ACKNOWLEDGED, RecordState.ARCHIVED)


class Run:
    """Offsets first..last (inclusive) in one state with one delivery count (and, ACQUIRED,
    one holder and lock): Kafka's InFlightBatch."""

    __slots__ = ("count", "first", "last", "lock", "member_id", "state")

    def __init__(
        self,
        first: int,
        last: int,
        state: RecordState,
        count: int,
        member_id: str | None = None,
        lock: int = 0,
    ) -> None:
        self.first = first
        self.last = last
        self.state = state
        self.count = count  # the delivery count
        self.member_id = member_id
        self.lock = lock  # the acquisition holding it (its lock timer's generation)

    def __repr__(self) -> str:  # pragma: no cover (debugging)
        return f"Run({self.first}-{self.last} {self.state.name} x{self.count} {self.member_id})"


_FIRST = attrgetter("first")


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
        # one past the last offset ever acquired: below it, an offset in no run is one the log
        # has not (a gap, a compacted batch); from it on, one never seen (or, restored, one
        # whose state a run beyond it holds)
        self.end_offset = start_offset
        self.runs: list[Run] = []  # sorted, never overlapping
        self.timers = timers
        self.limits = limits
        self._locks = 0
        self._held: dict[int, int] = {}  # lock -> offsets it still holds
        # the offset ranges whose persisted state changed, and whether the start moved, since
        # the last ``take_changes``; ``changed`` is told after a change made outside a request
        # (a lock that expired, a member that went)
        self.dirty: list[tuple[int, int]] = []
        self.start_moved = False
        self.track = False  # set when a store keeps the changes (else nothing is kept)
        self.changed: Callable[[SharePartition], None] = lambda _sp: None
        # told when a fetch may acquire what it could not before (records AVAILABLE again
        # after a release, a lock that expired or a member gone; the start offset moved)
        self.freed: Callable[[SharePartition], None] = lambda _sp: None
        self._freed = False
        # what happened to records, for the metrics (shared by a service's partitions)
        self.counts: dict[str, int] = counts if counts is not None else {}

    # --- runs --------------------------------------------------------------------------------

    def _index(self, offset: int) -> int:
        """The index of the first run ending at or after ``offset``."""
        runs = self.runs
        i = bisect_right(runs, offset, key=_FIRST)
        if i and runs[i - 1].last >= offset:
            return i - 1
        return i

    def _split(self, i: int, at: int) -> None:
        """Split runs[i] (first < at <= last) into first..at-1 and at..last."""
        r = self.runs[i]
        self.runs.insert(i + 1, Run(at, r.last, r.state, r.count, r.member_id, r.lock))
        r.last = at - 1

    def _carve(self, lo: int, hi: int) -> tuple[int, int]:
        """Split the runs at ``lo`` and ``hi + 1``: the index range of the runs within."""
        i = self._index(lo)
        runs = self.runs
        if i < len(runs) and runs[i].first < lo <= runs[i].last:
            self._split(i, lo)
            i += 1
        j = i
        while j < len(runs) and runs[j].first <= hi:
            if runs[j].last > hi:
                self._split(j, hi + 1)
            j += 1
        return i, j

    def _mark(self, lo: int, hi: int) -> None:
        if self.track:
            d = self.dirty
            if d and d[-1][1] >= lo - 1 and d[-1][0] <= hi + 1:
                d[-1] = (min(d[-1][0], lo), max(d[-1][1], hi))
            else:
                d.append((lo, hi))

    # --- acquiring ---------------------------------------------------------------------------

    def acquire(
        self,
        member_id: str,
        ranges: Iterable[tuple[int, int] | tuple[int, int, bool]],
        max_records: int,
        whole_batches: bool = False,
    ) -> list[Acquired]:
        """Acquire for ``member_id`` up to ``max_records`` offsets among ``ranges`` (the
        inclusive offset ranges of the batches read from the log, in order): AVAILABLE ones
        already in flight first, then new ones. A range whose third item is False (a control
        batch, or under read_committed a batch of an aborted transaction) is never delivered:
        its new offsets are ARCHIVED as the fetch passes them. ``whole_batches`` (Kafka's
        batch-optimized acquire mode) takes the rest of a range past the record limit rather
        than split it. Returns the acquired runs."""
        limits = self.limits()
        self._locks += 1
        lock = self._locks
        out: list[Acquired] = []
        taken = 0
        room = self.start_offset + limits.max_in_flight  # new offsets stay below it
        runs = self.runs
        stop = False
        for first, last, *rest in ranges:
            if stop or taken >= max_records:
                break
            deliverable = not rest or rest[0]
            cursor = max(first, self.start_offset)
            i = self._index(cursor)
            while cursor <= last:
                if deliverable and taken >= max_records:
                    stop = True
                    break
                cap = last if whole_batches else cursor + max_records - taken - 1
                run = runs[i] if i < len(runs) else None
                if run is not None and run.first <= cursor:  # known: take it if AVAILABLE
                    end = min(run.last, last)
                    if run.state is _AVAILABLE:
                        if run.first < cursor:
                            self._split(i, cursor)
                            i += 1
                            run = runs[i]
                        if deliverable:
                            end = min(end, cap)
                        if end < run.last:
                            self._split(i, end + 1)
                        if deliverable:
                            taken += self._take(run, member_id, lock, out)
                        else:
                            self._settle(run, RecordState.ARCHIVED)
                    cursor = end + 1
                    if run.last < cursor:
                        i += 1
                    self.end_offset = max(self.end_offset, cursor)
                    continue
                gap_end = last if run is None else min(last, run.first - 1)
                if cursor < self.end_offset:  # offsets the log has not: nothing to do
                    cursor = min(gap_end, self.end_offset - 1) + 1
                    continue
                hi = min(gap_end, room - 1)
                if deliverable:
                    hi = min(hi, cap)
                if hi < cursor:
                    stop = True
                    break
                if deliverable:
                    new = Run(cursor, hi, _ACQUIRED, 1, member_id, lock)
                    runs.insert(i, new)
                    self._held[lock] = self._held.get(lock, 0) + hi - cursor + 1
                    _add_run(out, cursor, hi, 1)
                    taken += hi - cursor + 1
                else:
                    runs.insert(i, Run(cursor, hi, RecordState.ARCHIVED, 0))
                    self._mark(cursor, hi)
                i += 1
                cursor = hi + 1
                self.end_offset = max(self.end_offset, cursor)
                if hi < gap_end:  # cut by the record limit or the in-flight bound
                    stop = True
                    break
        self._advance()
        self._tell()
        if not out:
            return []
        self._count("delivered", taken)
        self.timers.schedule(
            f"share-lock/{self.key}/{lock}",
            limits.lock_duration_ms,
            lambda: self._lock_expired(lock),
        )
        return out

    def _take(self, run: Run, member_id: str, lock: int, out: list[Acquired]) -> int:
        run.state = _ACQUIRED
        run.count += 1
        run.member_id = member_id
        run.lock = lock
        n = run.last - run.first + 1
        self._held[lock] = self._held.get(lock, 0) + n
        _add_run(out, run.first, run.last, run.count)
        return n

    def _unhold(self, run: Run) -> None:
        """``run`` no longer holds its lock: the lock's timer goes once nothing holds it."""
        lock = run.lock
        left = self._held.get(lock, 0) - (run.last - run.first + 1)
        if left > 0:
            self._held[lock] = left
        elif self._held.pop(lock, None) is not None:
            self.timers.cancel(f"share-lock/{self.key}/{lock}")

    def _lock_expired(self, lock: int) -> None:
        self._held.pop(lock, None)
        for run in list(self.runs):
            if run.state is _ACQUIRED and run.lock == lock:
                self._count("lock_expired", run.last - run.first + 1)
                self._make_available(run)
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
        if lo <= last and not self._holds(member_id, lo, last):
            return ErrorCode.INVALID_RECORD_STATE
        renew = 0
        if len(types) == 1:
            segments = [(lo, last, types[0])] if lo <= last else []
        else:
            segments = []
            for offset in range(lo, last + 1):
                kind = types[offset - first]
                if segments and segments[-1][2] == kind:
                    segments[-1] = (segments[-1][0], offset, kind)
                else:
                    segments.append((offset, offset, kind))
        for a, b, kind in segments:
            self._count(_ACK_NAMES[kind], b - a + 1)
            i, j = self._carve(a, b)
            if kind == RENEW:
                if not renew:
                    self._locks += 1
                    renew = self._locks
                for run in self.runs[i:j]:
                    self._unhold(run)
                    run.lock = renew
                    self._held[renew] = self._held.get(renew, 0) + run.last - run.first + 1
                continue
            for run in self.runs[i:j]:
                if kind == ACCEPT:
                    self._settle(run, RecordState.ACKNOWLEDGED)
                elif kind == RELEASE:
                    self._make_available(run)
                else:  # REJECT, GAP
                    self._settle(run, RecordState.ARCHIVED)
        if renew:  # a fresh lock for the renewed records
            self.timers.schedule(
                f"share-lock/{self.key}/{renew}",
                self.limits().lock_duration_ms,
                lambda: self._lock_expired(renew),
            )
        self._advance()
        self._tell()
        return ErrorCode.NONE

    def _holds(self, member_id: str, lo: int, hi: int) -> bool:
        """Is every offset of lo..hi ACQUIRED by ``member_id``?"""
        runs = self.runs
        i = self._index(lo)
        cursor = lo
        while cursor <= hi:
            if i >= len(runs):
                return False
            r = runs[i]
            if r.first > cursor or r.state is not _ACQUIRED or r.member_id != member_id:
                return False
            cursor = r.last + 1
            i += 1
        return True

    def release_member(self, member_id: str) -> int:
        """The member left or its share session closed: what it holds is available again."""
        count = 0
        for run in list(self.runs):
            if run.state is _ACQUIRED and run.member_id == member_id:
                count += run.last - run.first + 1
                self._make_available(run)
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

    def _settle(self, run: Run, state: RecordState) -> None:
        if run.state is _ACQUIRED:
            self._unhold(run)
        run.state = state
        run.member_id = None
        self._mark(run.first, run.last)

    def _count(self, what: str, n: int) -> None:
        self.counts[what] = self.counts.get(what, 0) + n

    def _make_available(self, run: Run) -> None:
        if run.count >= self.limits().delivery_count_limit:
            self._count("delivery_limit_archived", run.last - run.first + 1)
            self._settle(run, RecordState.ARCHIVED)
        else:
            if run.state is _ACQUIRED:
                self._unhold(run)
            run.state = _AVAILABLE
            run.member_id = None
            self._mark(run.first, run.last)
            self._freed = True

    def _advance(self) -> None:
        """Move the start offset past every settled record at its head (and past offsets
        below the in-flight end that the log has not)."""
        runs = self.runs
        start = self.start_offset
        end = self.end_offset
        k = 0
        while True:
            nxt = runs[k].first if k < len(runs) else None
            if start < end:
                start = max(start, end if nxt is None else min(nxt, end))
            if nxt is None or nxt > start or runs[k].state not in _SETTLED:
                break
            start = runs[k].last + 1
            k += 1
        if k:
            del runs[:k]
        # (restored runs may have carried the start past what was ever acquired)
        self.end_offset = max(self.end_offset, start)
        if start != self.start_offset:
            self.start_moved = True
            # the in-flight window moved: a fetch held back by the record lock limit may
            # acquire new records now
            self._freed = True
        self.start_offset = start

    def move_start(self, offset: int) -> None:
        """The log's start moved past records never delivered or still in flight (retention,
        DeleteRecords), or an admin reset the start offset: what is below is gone."""
        if offset <= self.start_offset:
            return
        runs = self.runs
        k = 0
        while k < len(runs) and runs[k].last < offset:
            if runs[k].state is _ACQUIRED:
                self._unhold(runs[k])
            k += 1
        del runs[:k]
        if runs and runs[0].first < offset:
            self._split(0, offset)
            if runs[0].state is _ACQUIRED:
                self._unhold(runs[0])
            del runs[0]
        self.start_offset = offset
        self.end_offset = max(self.end_offset, offset)
        self.start_moved = True
        self.changed(self)

    def state_counts(self) -> dict[RecordState, int]:
        """Offsets in flight by state."""
        out = dict.fromkeys(RecordState, 0)
        for r in self.runs:
            out[r.state] += r.last - r.first + 1
        return out

    def delivery_counts(self) -> dict[int, int]:
        """Offsets in flight by delivery count (those delivered at least once)."""
        out: dict[int, int] = {}
        for r in self.runs:
            if r.count:
                out[r.count] = out.get(r.count, 0) + r.last - r.first + 1
        return out

    def acquired_count(self) -> int:
        return sum(r.last - r.first + 1 for r in self.runs if r.state is _ACQUIRED)

    def in_flight_count(self) -> int:
        return sum(r.last - r.first + 1 for r in self.runs)

    def next_fetch_offset(self) -> int:
        """Where a fetch reads from: the first AVAILABLE offset in flight, else the end of
        what was ever acquired (Kafka's next fetch offset)."""
        end = self.end_offset
        for r in self.runs:
            if r.first >= end:
                break
            if r.state is _AVAILABLE:
                return r.first
        return end

    def has_available(self, log_end: int) -> bool:
        """Whether a fetch could acquire anything now (new records below ``log_end``, the
        high watermark or under read_committed the last stable offset, or AVAILABLE ones)."""
        if self.next_fetch_offset() < self.end_offset:
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
        ranges = sorted(self.dirty)
        self.dirty = []
        self.start_moved = False
        out: list[StateBatch] = []
        runs = self.runs
        for lo, hi in _merged(ranges):
            lo = max(lo, self.start_offset)
            i = self._index(lo)
            while i < len(runs) and runs[i].first <= hi:
                r = runs[i]
                _add_state(out, max(r.first, lo), min(r.last, hi), r)
                i += 1
        return self.start_offset, out

    def snapshot(self) -> tuple[int, list[StateBatch]]:
        """The whole persisted state: the start offset and every offset whose state or
        delivery count is worth keeping."""
        out: list[StateBatch] = []
        for r in self.runs:
            _add_state(out, r.first, r.last, r)
        return self.start_offset, out

    def restore(self, start_offset: int, batches: Iterable[StateBatch]) -> None:
        """Start-up: the persisted state back (updates applied in order)."""
        self.runs = [r for r in self.runs if r.last >= start_offset]
        if self.runs and self.runs[0].first < start_offset:
            self._split(0, start_offset)
            del self.runs[0]
        self.start_offset = start_offset
        self.end_offset = min(self.end_offset, start_offset)
        for first, last, state, count in batches:
            first = max(first, start_offset)
            if first > last:
                continue
            i, j = self._carve(first, last)
            self.runs[i:j] = [Run(first, last, RecordState(state), count)]


# (first offset, last offset, state, delivery count): Kafka's PersisterStateBatch
StateBatch = tuple[int, int, int, int]


def _merged(ranges: list[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for lo, hi in ranges:
        if out and lo <= out[-1][1] + 1:
            out[-1] = (out[-1][0], max(out[-1][1], hi))
        else:
            out.append((lo, hi))
    return out


def _add_state(out: list[StateBatch], lo: int, hi: int, run: Run) -> None:
    """Append lo..hi in ``run``'s state to ``out`` (joined to the last batch when it continues
    it); an ACQUIRED record is written as the AVAILABLE one it was before this delivery, and
    an AVAILABLE one never delivered not at all."""
    if lo > hi:
        return
    state, count = run.state, run.count
    if state is _ACQUIRED:
        state, count = _AVAILABLE, count - 1
    if state is _AVAILABLE and count <= 0:
        return
    if out and out[-1][1] == lo - 1 and out[-1][2:] == (int(state), count):
        out[-1] = (out[-1][0], hi, int(state), count)
    else:
        out.append((lo, hi, int(state), count))


def _add_run(runs: list[Acquired], first: int, last: int, count: int) -> None:
    """Append first..last with ``count`` to ``runs``, joined to the last run when it
    continues it with the same delivery count (one AcquiredRecords each)."""
    if runs and runs[-1].last_offset == first - 1 and runs[-1].delivery_count == count:
        runs[-1] = Acquired(runs[-1].first_offset, last, count)
    else:
        runs.append(Acquired(first, last, count))
