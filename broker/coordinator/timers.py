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
        return int(time.time() * 1000)

    def schedule(self, key: str, delay_ms: int, op: Op) -> None:
        if self._held is not None:
            self._held[key] = (delay_ms, op)
            return
        due = self._loop.time() + max(delay_ms, 0) / 1000.0
        entry = self._live.get(key)
        if entry is not None and entry.handle.when() <= due:
            entry.due = due
            entry.op = op
            return
        self.cancel(key)
        entry = _Entry(due, op)
        entry.handle = self._loop.call_at(due, self._fire, key, entry)
        self._live[key] = entry

    def cancel(self, key: str) -> None:
        if self._held is not None:
            self._held.pop(key, None)
        entry = self._live.pop(key, None)
        if entry is not None:
            entry.handle.cancel()

    def _fire(self, key: str, entry: _Entry) -> None:
        if self._live.get(key) is not entry:
            return
        if self._loop.time() < entry.due:
            entry.handle = self._loop.call_at(entry.due, self._fire, key, entry)
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
    __slots__ = ("due", "handle", "op")

    def __init__(self, due: float, op: Op) -> None:
        self.due = due
        self.op = op
        self.handle: asyncio.TimerHandle
