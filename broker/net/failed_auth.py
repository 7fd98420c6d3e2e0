"""Kafka's ``connection.failed.authentication.delay.ms``: a connection whose SASL
authentication failed is answered (when the failure has an answer) that much later, then
closed, as Kafka's Selector delays the close of such a channel. The connection is not read from
meanwhile, and every other connection is served as usual: nothing blocks, so a client guessing
passwords gets one guess per delay and per connection.

One queue and one loop timer serve every failed connection: the delay is the same for all, so
the order they failed in is the order they are due. Thousands failing at once cost a queue
entry each (the transport and the answer's few bytes), no task and no timer each.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque


class FailedAuthDelay:
    def __init__(self, delay_ms: int) -> None:
        self.delay_s = delay_ms / 1000
        # (when it is due, the transport, the answer to write before closing it)
        self._due: deque[tuple[float, asyncio.Transport, list[bytes | memoryview]]] = deque()
        self._timer: asyncio.TimerHandle | None = None

    def __len__(self) -> int:
        """Connections waiting for their delay to end."""
        return len(self._due)

    def close_later(
        self, transport: asyncio.Transport | None, answer: list[bytes | memoryview]
    ) -> None:
        """Stop reading from ``transport``; once the delay is over write ``answer`` (may be
        empty) and close it."""
        if transport is None or transport.is_closing():
            return
        with contextlib.suppress(RuntimeError):  # already paused, on some loops
            transport.pause_reading()
        loop = asyncio.get_running_loop()
        self._due.append((loop.time() + self.delay_s, transport, answer))
        if self._timer is None:
            self._timer = loop.call_at(self._due[0][0], self._fire)

    def _fire(self) -> None:
        self._timer = None
        loop = asyncio.get_running_loop()
        now = loop.time()
        due = self._due
        while due and due[0][0] <= now:
            _, transport, answer = due.popleft()
            if transport.is_closing():  # the client hung up meanwhile
                continue
            if answer:
                transport.writelines(answer)
            transport.close()  # after what is buffered has been written
        if due:
            self._timer = loop.call_at(due[0][0], self._fire)
