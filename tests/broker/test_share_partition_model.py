"""The share partition's run-based states (``SharePartition``) against a per-record model of
the same rules, on random operations: acquisitions of random batch ranges (some never
deliverable) by several members with record limits, acknowledgements of random ranges with
one or several types (ACCEPT, RELEASE, REJECT, RENEW, GAP), a member's release, lock expiry
on a manual clock, the delivery count limit and the in-flight bound."""

from __future__ import annotations

from dataclasses import dataclass, field

from hypothesis import given, settings
from hypothesis import strategies as st

from kgroupd.broker.coordinator.timers import ManualTimers
from kgroupd.broker.share.partition import (
    ACCEPT,
    GAP,
    REJECT,
    RELEASE,
    RENEW,
    Acquired,
    Limits,
    RecordState,
    SharePartition,
)
from kgroupd.protocol.errors import ErrorCode

AVAILABLE, ACQUIRED, ACKNOWLEDGED, ARCHIVED = (
    RecordState.AVAILABLE,
    RecordState.ACQUIRED,
    RecordState.ACKNOWLEDGED,
    RecordState.ARCHIVED,
)
LIMITS = Limits(lock_duration_ms=100, delivery_count_limit=3, max_in_flight=12)


@dataclass
class Rec:
    state: RecordState
    count: int
    member: str | None = None
    lock: int = 0


@dataclass
class Model:
    """One record at a time: the rules as the issue states them."""

    start: int = 0
    end: int = 0
    recs: dict[int, Rec] = field(default_factory=dict)
    locks: dict[int, int] = field(default_factory=dict)  # lock -> due time
    nlocks: int = 0
    now: int = 0

    def acquire(self, member: str, ranges: list[tuple[int, int, bool]], limit: int) -> list:
        self.nlocks += 1
        lock = self.nlocks
        out: list[Acquired] = []
        taken = 0
        room = self.start + LIMITS.max_in_flight
        stop = False
        for first, last, deliverable in ranges:
            if stop or taken >= limit:
                break
            for o in range(max(first, self.start), last + 1):
                if deliverable and taken >= limit:
                    stop = True
                    break
                rec = self.recs.get(o)
                if rec is None and o < self.end:
                    continue  # an offset the log has not
                if rec is None:
                    if o >= room:
                        stop = True
                        break
                    rec = self.recs[o] = Rec(AVAILABLE, 0)
                    self.end = o + 1
                if rec.state is not AVAILABLE:
                    continue
                if deliverable:
                    rec.state, rec.member, rec.lock = ACQUIRED, member, lock
                    rec.count += 1
                    taken += 1
                    if out and out[-1].last_offset == o - 1 and out[-1].delivery_count == rec.count:
                        out[-1] = Acquired(out[-1].first_offset, o, rec.count)
                    else:
                        out.append(Acquired(o, o, rec.count))
                else:
                    rec.state = ARCHIVED
        self._advance()
        if out:
            self.locks[lock] = self.now + LIMITS.lock_duration_ms
        return out

    def acknowledge(self, member: str, first: int, last: int, types: list[int]) -> ErrorCode:
        lo = max(first, self.start)
        for o in range(lo, last + 1):
            rec = self.recs.get(o)
            if rec is None or rec.state is not ACQUIRED or rec.member != member:
                return ErrorCode.INVALID_RECORD_STATE
        renew = 0
        for o in range(lo, last + 1):
            rec = self.recs[o]
            kind = types[0] if len(types) == 1 else types[o - first]
            if kind == ACCEPT:
                rec.state, rec.member = ACKNOWLEDGED, None
            elif kind in (REJECT, GAP):
                rec.state, rec.member = ARCHIVED, None
            elif kind == RELEASE:
                self._available(rec)
            else:
                if not renew:
                    self.nlocks += 1
                    renew = self.nlocks
                rec.lock = renew
        if renew:
            self.locks[renew] = self.now + LIMITS.lock_duration_ms
        self._advance()
        return ErrorCode.NONE

    def release_member(self, member: str) -> int:
        n = 0
        for rec in self.recs.values():
            if rec.state is ACQUIRED and rec.member == member:
                self._available(rec)
                n += 1
        self._advance()
        return n

    def advance(self, ms: int) -> None:
        self.now += ms
        for lock, due in sorted(self.locks.items(), key=lambda kv: (kv[1], kv[0])):
            if due <= self.now:
                del self.locks[lock]
                for rec in self.recs.values():
                    if rec.state is ACQUIRED and rec.lock == lock:
                        self._available(rec)
                self._advance()

    def _available(self, rec: Rec) -> None:
        rec.member = None
        rec.state = ARCHIVED if rec.count >= LIMITS.delivery_count_limit else AVAILABLE

    def _advance(self) -> None:
        while self.start < self.end:
            rec = self.recs.get(self.start)
            if rec is not None and rec.state not in (ACKNOWLEDGED, ARCHIVED):
                break
            self.recs.pop(self.start, None)
            self.start += 1

    def counts(self) -> dict[RecordState, int]:
        out = dict.fromkeys(RecordState, 0)
        for rec in self.recs.values():
            out[rec.state] += 1
        return out

    def delivery_counts(self) -> dict[int, int]:
        out: dict[int, int] = {}
        for rec in self.recs.values():
            if rec.count:
                out[rec.count] = out.get(rec.count, 0) + 1
        return out

    def next_fetch_offset(self) -> int:
        free = [o for o, r in self.recs.items() if r.state is AVAILABLE and o < self.end]
        return min(free) if free else self.end


MEMBERS = ["a", "b", "c"]
TYPES = [ACCEPT, RELEASE, REJECT, RENEW, GAP]


def ranges_of(spec: list[tuple[int, int, bool]]) -> list[tuple[int, int, bool]]:
    """Consecutive batch ranges from (gap before, length, deliverable) triples."""
    out, at = [], 0
    for gap, length, deliverable in spec:
        at += gap
        out.append((at, at + length - 1, deliverable))
        at += length
    return out


@settings(max_examples=200, deadline=None)
@given(data=st.data())
def test_runs_behave_as_records(data: st.DataObject) -> None:
    timers = ManualTimers()
    sp = SharePartition("g/t/0", 0, timers, lambda: LIMITS)
    model = Model()
    for _ in range(data.draw(st.integers(1, 40))):
        kind = data.draw(st.sampled_from(["acquire", "acquire", "ack", "ack", "release", "time"]))
        member = data.draw(st.sampled_from(MEMBERS))
        if kind == "acquire":
            batch = st.tuples(st.integers(0, 2), st.integers(1, 4), st.booleans() | st.just(True))
            ranges = ranges_of(data.draw(st.lists(batch, max_size=5)))
            limit = data.draw(st.integers(1, 9))
            op: tuple = (kind, member, ranges, limit)  # type: ignore[type-arg]
            assert sp.acquire(member, ranges, limit) == model.acquire(member, ranges, limit), op
        elif kind == "ack":
            held = sorted(o for o, r in model.recs.items() if r.member == member)
            if held and data.draw(st.booleans() | st.just(True)):
                first = data.draw(st.sampled_from(held))
                last = first + data.draw(st.integers(0, 4))
            else:  # anything: mostly refused
                first = data.draw(st.integers(0, 20))
                last = first + data.draw(st.integers(0, 4))
            if data.draw(st.booleans()):
                types = [data.draw(st.sampled_from(TYPES))]
            else:
                types = [data.draw(st.sampled_from(TYPES)) for _ in range(first, last + 1)]
            op = (kind, member, first, last, types)
            got = sp.acknowledge(member, first, last, types)
            assert got == model.acknowledge(member, first, last, types), op
        elif kind == "release":
            op = (kind, member)
            assert sp.release_member(member) == model.release_member(member), op
        else:
            ms = data.draw(st.integers(1, 120))
            op = (kind, ms)
            timers.advance(ms)
            model.advance(ms)
        assert (sp.start_offset, sp.end_offset) == (model.start, model.end), op
        assert sp.state_counts() == model.counts(), op
        assert sp.next_fetch_offset() == model.next_fetch_offset(), op
        assert sp.acquired_count() == model.counts()[ACQUIRED], op
        assert sp.delivery_counts() == model.delivery_counts(), op
