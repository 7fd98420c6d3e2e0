"""Keyed timers with an injected clock.

``schedule(key, delay_ms, op)`` replaces any timer under the same key; ``cancel(key)`` drops
it. A timer that fires after its key was rescheduled or cancelled is dropped (the stale-timer
guard), so shard operations never see an outdated expiry.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
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
        self._seq = itertools.count()
        self._live: dict[str, tuple[int, asyncio.TimerHandle]] = {}

    def now_ms(self) -> int:
        return int(self._loop.time() * 1000)

    def schedule(self, key: str, delay_ms: int, op: Op) -> None:
        self.cancel(key)
        seq = next(self._seq)
        when = self._loop.time() + max(delay_ms, 0) / 1000.0
        handle = self._loop.call_at(when, self._fire, key, seq, op)
        self._live[key] = (seq, handle)

    def cancel(self, key: str) -> None:
        entry = self._live.pop(key, None)
        if entry is not None:
            entry[1].cancel()

    def _fire(self, key: str, seq: int, op: Op) -> None:
        entry = self._live.get(key)
        if entry is None or entry[0] != seq:
            return
        del self._live[key]
        self._dispatch(op)

    def cancel_all(self) -> None:
        for key in list(self._live):
            self.cancel(key)

    def __len__(self) -> int:
        return len(self._live)
