"""The request pool's accounting, driven through ``FrameReader`` as a connection drives it,
without sockets: clients send size-prefixed frames in pieces of random sizes, and queued
frames are handled at random moments (as answers that wait do). Whatever the order, the pool
holds at most its limit plus one request, its books match the readers', every frame is
read and handled in the end (no set of half-read frames can wait on each other for ever),
and a size prefix alone claims nothing."""

from __future__ import annotations

import random
import struct

import pytest

from kgroupd.broker.net.request_pool import FrameReader, RequestMemoryPool


class Client:
    def __init__(self, pool: RequestMemoryPool, max_frame: int, frames: list[bytes]) -> None:
        self.reader = FrameReader(pool, max_frame, lambda: None)
        self.stream = b"".join(struct.pack(">i", len(f)) + f for f in frames)
        self.sent = 0
        self.queue: list[bytes] = []
        self.handled: list[bytes] = []
        self.frames = frames

    def send(self, size: int) -> None:
        data = self.stream[self.sent : self.sent + size]
        self.sent += len(data)
        self.queue += self.reader.feed(data, 0.0)
        self.reader.account()

    def handle(self) -> None:
        frame = self.queue.pop(0)
        self.reader.taken(frame)
        self.handled.append(frame)
        self.reader.account()


def check_books(pool: RequestMemoryPool, clients: list[Client], max_frame: int) -> None:
    readers = [c.reader for c in clients]
    assert pool.limit is not None
    assert pool.used == sum(r.pool_claim for r in readers)
    assert pool.promised == sum(r.pool_ceiling - r.pool_claim for r in readers if r.pool_ceiling)
    assert pool.used + pool.promised <= pool.limit + max_frame
    for client in clients:
        reader = client.reader
        if not reader.paused:  # what it read is claimed (a paused one holds one read more)
            assert reader.pool_claim == reader.queued + reader.decoder.buffered


@pytest.mark.parametrize("seed", range(40))
def test_every_frame_finishes_within_the_limit_plus_one_request(seed: int) -> None:
    rng = random.Random(seed)
    max_frame = rng.choice([2_000, 20_000, 100_000])
    limit = rng.randrange(1, 3 * max_frame)
    pool = RequestMemoryPool(limit, max_frame)
    clients = [
        Client(pool, max_frame, [rng.randbytes(rng.randrange(max_frame + 1)) for _ in range(3)])
        for _ in range(rng.randrange(1, 12))
    ]
    while True:
        senders = [c for c in clients if c.sent < len(c.stream) and not c.reader.paused]
        handlers = [c for c in clients if c.queue]
        if not senders and not handlers:
            break
        if senders and (not handlers or rng.random() < 0.7):
            rng.choice(senders).send(rng.randrange(1, 8_192))
        else:
            rng.choice(handlers).handle()
        check_books(pool, clients, max_frame)
    for client in clients:
        assert client.sent == len(client.stream), "a client was never read to its end"
        assert client.handled == client.frames
    assert (pool.used, pool.promised, pool.waiting) == (0, 0, {})


def test_a_size_prefix_claims_nothing_and_counts_as_incomplete() -> None:
    pool = RequestMemoryPool(1_000, 10_000)
    reader = FrameReader(pool, 10_000, lambda: None)
    assert reader.feed(struct.pack(">i", 10_000), 5.0) == []
    reader.account()
    assert (pool.used, reader.partial_since) == (0, 5.0)
    assert reader.stalled(5.6, 0.5) and not reader.stalled(5.4, 0.5)
    reader.close()
    assert pool.used == 0


def test_a_frame_larger_than_the_pool_is_read_alone() -> None:
    pool = RequestMemoryPool(1_000, 10_000)
    reader = FrameReader(pool, 10_000, lambda: None)
    frames = reader.feed(struct.pack(">i", 8_000) + bytes(3_000), 0.0)
    reader.account()
    assert not reader.paused and (pool.used, pool.promised) == (3_000, 5_000)
    frames += reader.feed(bytes(5_000), 0.0)
    reader.account()
    assert [len(f) for f in frames] == [8_000] and (pool.used, pool.promised) == (8_000, 0)
    reader.taken(frames[0])
    reader.account()
    assert (pool.used, pool.promised, reader.pool_ceiling) == (0, 0, 0)
