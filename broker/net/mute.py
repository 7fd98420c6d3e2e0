"""A connection muted by a quota (KIP-219): after an answer that earned a throttle time, the
broker reads no further request from the client until that time is over, as Kafka mutes the
channel. The answer itself goes out at once, carrying the time in ``throttle_time_ms``."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable


class Mute:
    __slots__ = ("handle", "resume", "until")

    def __init__(self, resume: Callable[[], None]) -> None:
        self.until = 0.0  # monotonic seconds; 0: not muted
        self.handle: asyncio.TimerHandle | None = None
        self.resume = resume  # called when the time is over

    def throttle(self, ms: int) -> None:
        """Read no request for ``ms`` from now (a longer mute already running stands)."""
        until = time.monotonic() + ms / 1000
        if until > self.until:
            self.until = until
            if self.handle is not None:
                self.handle.cancel()
                self.handle = None

    def active(self) -> bool:
        """Muted now? If so, ``resume`` is called once the time is over."""
        wait = self.until - time.monotonic()
        if wait <= 0:
            self.until = 0.0
            return False
        if self.handle is None:
            self.handle = asyncio.get_running_loop().call_later(wait, self._over)
        return True

    def _over(self) -> None:
        self.handle = None
        self.resume()

    def cancel(self) -> None:
        if self.handle is not None:
            self.handle.cancel()
            self.handle = None
