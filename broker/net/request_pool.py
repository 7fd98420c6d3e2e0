"""The memory for requests read but not yet handled, shared by every connection (Kafka's
``queued.max.request.bytes``), and each connection's reading side (``FrameReader``).

A connection claims the bytes it has read of request frames not yet handled, as they arrive:
each queued frame, and what has come of the frame it is reading. A size prefix alone claims
nothing, so connections that announce frames and send nothing more hold no memory (they are
closed by ``--incomplete-request-timeout-ms``, counted from the prefix). A claim that would
pass the limit is refused and the connection stops reading until memory frees (holding at
most the one read it could not refuse).

Claims made as bytes arrive could leave every connection holding part of a frame and none
able to finish it. So a refused connection may instead be admitted past the limit to finish
the frame it is reading: the rest of that frame is promised to it out of an overdraft of one
request (``--max-request-bytes``), as Kafka's pool lets through the request that crosses its
limit. The pool then never holds more than the limit plus one request, a frame larger than
the pool is still served, and a small request is not kept waiting behind large ones that
are read slowly."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Protocol

from kgroupd.protocol.framing import FrameDecoder


class PoolMember(Protocol):
    pool_claim: int
    # While admitted past the limit: the claim it may reach regardless (0: not admitted so).
    pool_ceiling: int

    def pool_retry(self) -> bool:
        """Claim again after memory was freed; False if still refused."""
        ...


class RequestMemoryPool:
    def __init__(self, limit: int | None, overdraft: int = 0) -> None:
        self.limit = limit  # None: unbounded (Kafka's default)
        self.overdraft = overdraft  # what may be promised past the limit (one request)
        self.used = 0
        # Bytes promised to members admitted past the limit and not yet claimed; the pool
        # keeps used + promised <= limit + overdraft.
        self.promised = 0
        self.waiting: dict[PoolMember, None] = {}  # in arrival order
        self._waking = False
        self._wake_again = False

    def claim(self, member: PoolMember, want: int, need: int) -> bool:
        """Make ``member``'s claim ``want`` bytes, what it has read of frames not yet handled;
        ``need`` is the claim that would finish the frame it is reading. False (nothing
        changed) when refused: ``want`` passes the limit and the rest of that frame does
        not fit in the overdraft."""
        have = member.pool_claim
        ceiling = member.pool_ceiling
        if ceiling:
            if have <= want <= ceiling:  # reading on, toward the end of its frame
                self.promised -= want - have
                self.used += want - have
                member.pool_claim = want
                return True
            self._end_promise(member)  # a frame was handled, or it reads past that frame
            if self.waiting:
                self._wake()  # what it was promised is free for others
        if want <= have or self.limit is None or self.used - have + want <= self.limit:
            self.used += want - have
            member.pool_claim = want
            if want < have and self.waiting:
                self._wake()
            return True
        need = max(need, want)
        if self.used - have + need + self.promised > self.limit + self.overdraft:
            return False
        self.used += want - have
        self.promised += need - want
        member.pool_claim = want
        member.pool_ceiling = need
        return True

    def _end_promise(self, member: PoolMember) -> None:
        self.promised -= member.pool_ceiling - member.pool_claim
        member.pool_ceiling = 0

    def wait(self, member: PoolMember) -> None:
        self.waiting[member] = None

    def release(self, member: PoolMember) -> None:
        """A connection closed: its claim and promise are free, and it waits no more."""
        if member.pool_ceiling:
            self._end_promise(member)
        self.used -= member.pool_claim
        member.pool_claim = 0
        self.waiting.pop(member, None)
        if self.waiting:
            self._wake()

    def _wake(self) -> None:
        """Let every waiting member claim again, in arrival order; those refused wait on."""
        if self._waking:  # a retry freed memory in turn: go round again when this is done
            self._wake_again = True
            return
        self._waking = True
        try:
            again = True
            while again and self.waiting:
                self._wake_again = False
                for member in list(self.waiting):
                    if member in self.waiting and member.pool_retry():
                        self.waiting.pop(member, None)
                again = self._wake_again
        finally:
            self._waking = False


class FrameReader:
    """One connection's reading side: frames cut from its bytes, the pool memory they hold
    (a ``PoolMember``), and since when the frame it is reading has been incomplete."""

    def __init__(
        self, pool: RequestMemoryPool, max_frame_bytes: int, resume: Callable[[], None]
    ) -> None:
        self.decoder = FrameDecoder(max_frame_bytes)
        self.pool = pool
        self.queued = 0  # the bytes of complete frames not yet handled
        self.pool_claim = 0
        self.pool_ceiling = 0
        self.paused = False  # refused by the pool: reading stops until it admits us
        self.closed = False
        # Since when a frame has been incomplete, from its first byte (a size prefix alone
        # counts), not counting waits for the pool; None: no frame is.
        self.partial_since: float | None = None
        self._paused_at = 0.0
        self._resume = resume  # called when the pool admits us again: read on

    def feed(self, data: bytes, now: float) -> list[bytes | bytearray]:
        decoder = self.decoder
        frames = decoder.feed(data)
        for frame in frames:
            self.queued += len(frame)
        if decoder.pending:
            if self.partial_since is None:
                self.partial_since = now
        else:
            self.partial_since = None
        return frames

    def taken(self, frame: bytes | bytearray) -> None:
        """A queued frame is being handled: its bytes leave the pool at the next claim."""
        self.queued -= len(frame)

    def account(self) -> int | None:
        """Claim what this connection holds; the claim refused, if that stops its reading."""
        if self.pool.limit is None or self.closed:
            return None
        want = self.queued + self.decoder.buffered
        if want == self.pool_claim:
            return None
        if self.pool.claim(self, want, self.queued + self.decoder.pending):
            self._admitted()
            return None
        if self.paused:
            return None
        self.paused = True
        self._paused_at = time.monotonic()
        self.pool.wait(self)
        return want

    def pool_retry(self) -> bool:
        """The pool freed memory: claim again, and read on if admitted."""
        if self.closed:
            return True  # nothing to admit: its claim is already released
        want = self.queued + self.decoder.buffered
        if not self.pool.claim(self, want, self.queued + self.decoder.pending):
            return False
        self._admitted()
        return True

    def _admitted(self) -> None:
        if not self.paused:
            return
        self.paused = False
        self.pool.waiting.pop(self, None)
        if self.partial_since is not None:  # the wait was ours, not the client's
            self.partial_since += time.monotonic() - self._paused_at
        self._resume()

    def stalled(self, now: float, limit_s: float) -> bool:
        """Whether the frame being read has been incomplete for longer than ``limit_s``."""
        since = self.partial_since
        return since is not None and not self.paused and now - since > limit_s

    def close(self) -> None:
        self.closed = True
        self.pool.release(self)
