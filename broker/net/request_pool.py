"""The memory for requests read but not yet handled, shared by every connection (Kafka's
``queued.max.request.bytes``).

A connection claims the bytes of the request frames it holds: each queued frame, and the
whole announced size of the frame it is reading (so a frame once admitted can always be
read to its end, and a connection waiting for memory holds at most one read's bytes of a
frame it was not admitted for). A claim that would pass the limit is refused: the
connection stops reading and waits its turn, first come first served, until others' frames
are handled or their connections close. One connection alone is always admitted, so a
frame larger than the pool (up to ``--max-request-bytes``) is still served."""

from __future__ import annotations

from collections import deque
from typing import Protocol


class PoolMember(Protocol):
    pool_claim: int

    def pool_retry(self) -> bool:
        """Claim again after memory was freed; False if still refused."""
        ...


class RequestMemoryPool:
    def __init__(self, limit: int | None) -> None:
        self.limit = limit  # None: unbounded (Kafka's default)
        self.used = 0
        self.waiting: deque[PoolMember] = deque()

    def claim(self, member: PoolMember, want: int) -> bool:
        """Make ``member``'s claim ``want`` bytes; False (nothing changed) when that would
        pass the limit while others hold memory."""
        have = member.pool_claim
        used = self.used - have + want
        if want > have and self.limit is not None and used > self.limit and self.used > have:
            return False
        self.used = used
        member.pool_claim = want
        if want < have and self.waiting:
            self._wake()
        return True

    def wait(self, member: PoolMember) -> None:
        if member not in self.waiting:
            self.waiting.append(member)

    def release(self, member: PoolMember) -> None:
        """A connection closed: its claim is free, and it waits no more."""
        self.used -= member.pool_claim
        member.pool_claim = 0
        if member in self.waiting:
            self.waiting.remove(member)
        if self.waiting:
            self._wake()

    def _wake(self) -> None:
        while self.waiting:
            if not self.waiting[0].pool_retry():
                return
            self.waiting.popleft()
