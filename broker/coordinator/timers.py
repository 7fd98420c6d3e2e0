"""Keyed timers with an injected clock.

``schedule(key, delay_ms, op)`` replaces any timer under the same key; ``cancel(key)`` drops
it. A timer that fires after its key was rescheduled or cancelled is dropped (the stale-timer
guard), so shard operations never see an outdated expiry.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import time
from collections.abc import Callable
from typing import Protocol

__all__ = ["LoopTimers", "ManualTimers", "Timers"]

Op = Callable[[], None]


class Timers(Protocol):
    def schedule(self, key: str, delay_ms: int, op: Op) -> None: ...

    def cancel(self, key: str) -> None: ...

    def now_ms(self) -> int: ...


class ManualTimers:
    """A manual clock for tests: time moves only through ``advance``."""

    def __init__(self, start_ms: int = 0) -> None:
        self._now = start_ms
        self._seq = itertools.count()
        self._heap: list[tuple[int, int, str]] = []
        self._live: dict[str, tuple[int, Op]] = {}  # key -> (seq, op)

    def now_ms(self) -> int:
        return self._now

    def schedule(self, key: str, delay_ms: int, op: Op) -> None:
        seq = next(self._seq)
        self._live[key] = (seq, op)
        heapq.heappush(self._heap, (self._now + max(delay_ms, 0), seq, key))

    def cancel(self, key: str) -> None:
        self._live.pop(key, None)

    def is_scheduled(self, key: str) -> bool:
        return key in self._live

    def due_at(self, key: str) -> int | None:
        entry = self._live.get(key)
        if entry is None:
            return None
        for due, seq, k in self._heap:
            if k == key and seq == entry[0]:
                return due
        return None  # pragma: no cover

    def keys(self) -> list[str]:
        return sorted(self._live)

    def advance(self, ms: int) -> None:
        """Move the clock by ``ms``, running every due op in time order (ties: schedule order).

        Ops scheduled by ops run too if they fall due within the window.
        """
        target = self._now + ms
        while self._heap and self._heap[0][0] <= target:
            due, seq, key = heapq.heappop(self._heap)
            live = self._live.get(key)
            if live is None or live[0] != seq:
                continue  # stale: rescheduled or cancelled
            del self._live[key]
            self._now = max(self._now, due)
            live[1]()
        self._now = target


class LoopTimers:
    """Production timers on ``loop.call_at``; times in ms from ``loop.time()``.

    Firing only hands the op to ``dispatch`` (default: call it on the loop, which is how the
    shard serializes work); a fired op whose key was rescheduled or cancelled is dropped.
    """

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop | None = None,
        dispatch: Callable[[Op], None] | None = None,
    ) -> None:
        self._loop = loop or asyncio.get_running_loop()
        self._dispatch: Callable[[Op], None] = dispatch or (lambda op: op())
        # key -> _Entry. A heartbeat pushes its member's deadline back thousands of times a
        # second: instead of cancelling and adding a loop timer each time, a later deadline
        # only updates the entry, and the armed handle re-arms itself for the remainder
        # when it fires early. A handle whose entry was replaced or cancelled does nothing.
        self._live: dict[str, _Entry] = {}
        # While the data dir loads on a worker thread: key -> (delay ms, op), armed on the
        # loop by ``release`` (the loop's timer calls are not thread-safe).
        self._held: dict[str, tuple[int, Op]] | None = None
        # The test controls' clock move (``advance``): added to every deadline's clock and to
        # ``now_ms``; 0 unless --test-controls moved it. While ``advance`` runs, the due
        # entries in time order (new ones scheduled by their ops join it).
        self._offset_s = 0.0
        self._seq = itertools.count()
        self._due: list[tuple[float, int, str, _Entry]] | None = None
        self._target = 0.0

    def hold(self) -> None:
        """Keep what is scheduled from now on, unarmed, until ``release``."""
        self._held = {}

    def release(self) -> None:
        """On the loop: arm everything scheduled since ``hold`` (delays count from now)."""
        held, self._held = self._held, None
        for key, (delay_ms, op) in (held or {}).items():
            self.schedule(key, delay_ms, op)

    def now_ms(self) -> int:
        # Wall-clock time, as Kafka's: it stamps commits and group state that are persisted
        # and compared after a restart. Deadlines below use the loop's monotonic clock.
        return int((time.time() + self._offset_s) * 1000)

    @property
    def offset_ms(self) -> int:
        """How far ``advance`` has moved this clock ahead of real time."""
        return round(self._offset_s * 1000)

    def advance(self, ms: int) -> int:
        """Move the clock ``ms`` ahead at once (the test controls): every op that falls due
        runs now, in time order (ties: schedule order), each seeing the clock at its own due
        time; ops scheduled by those ops run too if due within the move. Real time keeps
        running on top. Returns how many ops ran."""
        loop_now = self._loop.time()
        self._target = target = loop_now + self._offset_s + max(ms, 0) / 1000.0
        due = [(e.due, e.seq, k, e) for k, e in self._live.items() if e.due <= target]
        heapq.heapify(due)
        self._due = due
        ran = 0
        try:
            while due:
                at, _seq, key, entry = heapq.heappop(due)
                if self._live.get(key) is not entry:
                    continue  # cancelled or replaced since
                if entry.due != at:  # pushed back since: in order at its new time
                    if entry.due <= target:
                        heapq.heappush(due, (entry.due, entry.seq, key, entry))
                    continue
                self._offset_s = max(self._offset_s, at - self._loop.time())
                del self._live[key]
                entry.handle.cancel()
                self._dispatch(entry.op)
                ran += 1
        finally:
            self._due = None
            self._offset_s = max(self._offset_s, target - self._loop.time())
            # what is still to come fires at its deadline on the moved clock
            for key, entry in self._live.items():
                entry.handle.cancel()
                entry.armed = entry.due - self._offset_s
                entry.handle = self._loop.call_at(entry.armed, self._fire, key, entry)
        return ran

    def schedule(self, key: str, delay_ms: int, op: Op) -> None:
        if self._held is not None:
            self._held[key] = (delay_ms, op)
            return
        offset = self._offset_s
        due = self._loop.time() + offset + (delay_ms / 1000.0 if delay_ms > 0 else 0.0)
        entry = self._live.get(key)
        # ``armed``: when its handle fires (uvloop arms a deadline already due with
        # call_soon, which fires at once: no later than any new deadline either)
        if entry is not None and entry.armed + offset <= due:
            entry.due = due
            entry.op = op
            return
        self.cancel(key)
        entry = _Entry(due, op, next(self._seq))
        entry.armed = due - offset
        entry.handle = self._loop.call_at(entry.armed, self._fire, key, entry)
        self._live[key] = entry
        if self._due is not None and due <= self._target:
            heapq.heappush(self._due, (due, entry.seq, key, entry))

    def cancel(self, key: str) -> None:
        if self._held is not None:
            self._held.pop(key, None)
        entry = self._live.pop(key, None)
        if entry is not None:
            entry.handle.cancel()

    def _fire(self, key: str, entry: _Entry) -> None:
        if self._live.get(key) is not entry:
            return
        if self._loop.time() + self._offset_s < entry.due:
            entry.armed = entry.due - self._offset_s
            entry.handle = self._loop.call_at(entry.armed, self._fire, key, entry)
            return
        del self._live[key]
        self._dispatch(entry.op)

    def is_scheduled(self, key: str) -> bool:
        return key in self._live or (self._held is not None and key in self._held)

    def cancel_all(self) -> None:
        for key in list(self._live):
            self.cancel(key)

    def __len__(self) -> int:
        return len(self._live)


class _Entry:
    __slots__ = ("armed", "due", "handle", "op", "seq")

    def __init__(self, due: float, op: Op, seq: int) -> None:
        self.due = due
        self.op = op
        self.seq = seq
        self.armed = due  # the loop time its handle fires at
        self.handle: asyncio.TimerHandle
