"""bench_groups.py's pipelined request streams (heartbeats, commits): a connection that keeps
``window`` requests in flight and checks every answer cheaply, and the rate over a window."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import _harness as h
from groups_wire import _SIZE, Conn, Failure, sync_error

# ---------------------------------------------------------------------------------------
# pipelined request streams (heartbeats, commits)


class Pipe(Conn):
    """Keeps ``window`` requests in flight, cycling through ``frames``, while running.

    The first answer is decoded and checked by ``check``; every later one must then be
    byte-equal to it after the correlation id (same request shape, same all-clear answer),
    so one comparison per answer checks it and the client stays cheap.
    """

    def __init__(self, frames: Sequence[bytes], window: int, check: Callable[[bytes], None]):
        super().__init__()
        self.frames = list(frames)
        self.window = window
        self.check = check
        self.expect: bytes | None = None
        self.sent = 0
        self.received = 0
        self.bad = 0
        self.first_bad: str | None = None
        self.running = False
        self.drained: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def on_lost(self, exc: Exception | None) -> None:
        if not self.drained.done():
            self.drained.set_exception(ConnectionError(f"connection lost: {exc}"))

    def go(self) -> None:
        assert self.transport is not None
        self.running = True
        if self.drained.done():
            self.drained = asyncio.get_running_loop().create_future()
        n = len(self.frames)
        self.transport.writelines([self.frames[(self.sent + i) % n] for i in range(self.window)])
        self.sent += self.window

    def data_received(self, data: bytes) -> None:
        buf = self.buf
        buf += data
        pos = 0
        end = len(buf)
        frames = self.frames
        n = len(frames)
        out = []
        running = self.running
        received = self.received
        expect = self.expect
        sent = self.sent
        while end - pos >= 4:
            (size,) = _SIZE.unpack_from(buf, pos)
            if end - pos - 4 < size:
                break
            if expect is None or buf[pos + 8 : pos + 4 + size] != expect:
                self._check(bytes(buf[pos + 4 : pos + 4 + size]))
                expect = self.expect
            pos += 4 + size
            received += 1
            if running:
                out.append(frames[sent % n])
                sent += 1
        del buf[:pos]
        self.received = received
        self.sent = sent
        if out:
            self.transport.writelines(out)  # type: ignore[union-attr]
        elif received == sent and not running and not self.drained.done():
            self.drained.set_result(None)

    def _check(self, body: bytes) -> None:
        if self.expect is None:
            try:
                self.check(body)
            except Exception as exc:
                self.bad += 1
                self.first_bad = self.first_bad or repr(exc)
                return
            self.expect = body[4:]
        else:
            self.bad += 1
            self.first_bad = self.first_bad or f"answer {body[4:]!r} != {self.expect!r}"


@dataclass
class Rate:
    per_s: float
    broker_cpu: float  # share of one core over the timed window
    client_cpu: float


async def measure(pipes: Sequence[Pipe], pid: int, seconds: float, warmup: float = 0.5) -> Rate:
    """Answers per second over ``seconds`` of steady pipelining (after ``warmup``)."""
    for p in pipes:
        p.go()
    await asyncio.sleep(warmup)
    c0 = sum(p.received for p in pipes)
    b0 = h.cpu_seconds(pid)
    p0 = time.process_time()
    t0 = time.perf_counter()
    await asyncio.sleep(seconds)
    c1 = sum(p.received for p in pipes)
    t1 = time.perf_counter()
    b1 = h.cpu_seconds(pid)
    p1 = time.process_time()
    for p in pipes:
        p.running = False
    await asyncio.wait_for(asyncio.gather(*(p.drained for p in pipes)), timeout=30)
    for p in pipes:
        if p.bad:
            raise Failure(f"{p.bad} bad answers; first: {p.first_bad}")
    span = t1 - t0
    return Rate((c1 - c0) / span, (b1 - b0) / span, (p1 - p0) / span)


def check_heartbeat(body: bytes) -> None:
    error = sync_error(body)
    if error:
        raise Failure(f"Heartbeat error {error}")


def check_commit(body: bytes) -> None:
    resp = h.decode_response(8, 2, body)
    codes = [p["error_code"] for t in resp["topics"] for p in t["partitions"]]
    if len(codes) != COMMIT_PARTITIONS or any(codes):
        raise Failure(f"OffsetCommit answered {resp['topics']}")


COMMIT_PARTITIONS = 8
