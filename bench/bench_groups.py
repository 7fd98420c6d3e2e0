"""The group coordinator under load (issue 3): rebalance rounds, heartbeats/s, commits/s, and
100,000 groups, kgroupd against Tansu.

    python bench/bench_groups.py [--broker kgroupd|tansu|both] [--only CASE,...]

CASE is ``rebalance``, ``heartbeat``, ``commit`` or ``groups`` (default: all four).

The clients are raw asyncio connections (uvloop, ``asyncio.Protocol``) sending frames encoded
before the clock starts (``kgroupd.protocol.messages`` structs plus request header v1; per-round
fields such as the generation are patched into the bytes), so the client's cost stays small:
JoinGroup v1 (no MEMBER_ID_REQUIRED round trip), SyncGroup v1, Heartbeat v1, OffsetCommit v2.
kgroupd runs with ``--initial-rebalance-delay-ms 0``. Tansu cannot be told to skip its own
wait: a round there takes half the rebalance timeout plus ~1 s whatever the group size (16 s
with the default ``--session-ms 30000``, used as both session and rebalance timeout), so its
rounds are few (``--tansu-rounds``) and only up to ``--tansu-max-members`` members.

* rebalance: N members (one connection each, as real consumers) form a Stable group; then, per
  round, all N rejoin at once with a changed subscription (so every rejoin counts, whatever
  order the broker sees them in), the leader syncs the N assignments and the followers sync.
  Time from the first rejoin written to the last SyncGroup answer; median of the rounds.
  Targets: under 50 ms at 100 members, under 500 ms at 1000.
* heartbeat: a Stable group of ``--hb-connections`` members; each member heartbeats over its
  own connection with ``--window`` requests in flight, for ``--seconds`` per round.
  Target: at least 30,000/s.
* commit: OffsetCommit v2 of 8 partitions each, "simple" commits (generation -1, no member:
  the group has no members, as with manual assignment), one group per connection,
  ``--commit-connections`` x ``--window`` in flight. Target: at least 20,000/s in memory.
* groups: ``--groups`` single-member groups, each joined then synced (leader assigns itself),
  pipelined over ``--groups-connections`` connections; groups/s and the broker's RSS at the
  end. Target: RSS under 1 GiB. kgroupd only.

Every answer is checked (error codes, generations, member counts), so a broker that refuses
work cannot look fast. Load averages are printed with each table; the "broker CPU-µs per
request" column (broker CPU time over answers) moves less with background load than the rate.

``--py-spy DIR`` samples kgroupd during each case and prints where its time went.
``--in-process commit-1,commit-8,heartbeat,rebalance-N`` instead drives a KafkaServer in
this process without sockets (as profile_hotpath.py does) and prints the broker's CPU time
per request or per round (with ``--py-spy DIR``, its profile). Figures: BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import struct
import sys
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _harness as h

_SIZE = struct.Struct(">i")
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_HDR = struct.Struct(">ihhih")  # size, api key, version, correlation id, client id length
CLIENT = b"bench"
PROTOCOL = "range"
TOPIC = "bench-groups-topic"

# error codes the set-up state machine understands
NONE, ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID, REBALANCE_IN_PROGRESS, MEMBER_ID_REQUIRED = (
    0,
    22,
    25,
    27,
    79,
)
CASES = ("rebalance", "heartbeat", "commit", "groups")


# ---------------------------------------------------------------------------------------
# frames


def _str(s: str) -> bytes:
    b = s.encode()
    return _I16.pack(len(b)) + b


def subscription(topic: str, tag: bytes) -> bytes:
    """ConsumerProtocolSubscription v0: [topic], user data ``tag`` (changed per round)."""
    return _I16.pack(0) + _I32.pack(1) + _str(topic) + _I32.pack(len(tag)) + tag


def assignment(topic: str, partitions: Sequence[int]) -> bytes:
    """ConsumerProtocolAssignment v0: one topic, these partitions, no user data."""
    parts = b"".join(_I32.pack(p) for p in partitions)
    return (
        _I16.pack(0)
        + _I32.pack(1)
        + _str(topic)
        + _I32.pack(len(partitions))
        + parts
        + (_I32.pack(-1))
    )


def join_frame(group: str, member_id: str, metadata: bytes, session_ms: int) -> bytes:
    return h.request_frame(
        11,
        1,
        1,
        {
            "group_id": group,
            "session_timeout_ms": session_ms,
            "rebalance_timeout_ms": session_ms,
            "member_id": member_id,
            "protocol_type": "consumer",
            "protocols": [{"name": PROTOCOL, "metadata": metadata}],
        },
    )


def sync_frame(
    group: str, generation: int, member_id: str, assignments: Sequence[tuple[str, bytes]]
) -> bytes:
    return h.request_frame(
        14,
        1,
        2,
        {
            "group_id": group,
            "generation_id": generation,
            "member_id": member_id,
            "assignments": [{"member_id": m, "assignment": a} for m, a in assignments],
        },
    )


def sync_frame_fast(
    group: bytes, generation: int, member_id: str, assignments: Sequence[tuple[str, bytes]]
) -> bytes:
    """The same bytes as ``sync_frame`` (checked at start), built with struct: for the many
    groups case, where each sync needs the member id the join just returned."""
    body = [
        _I16.pack(len(group)),
        group,
        _I32.pack(generation),
        _str(member_id),
        _I32.pack(len(assignments)),
    ]
    for m, a in assignments:
        body += [_str(m), _I32.pack(len(a)), a]
    payload = b"".join(body)
    return _HDR.pack(10 + len(CLIENT) + len(payload), 14, 1, 2, len(CLIENT)) + CLIENT + payload


def heartbeat_frame(group: str, generation: int, member_id: str) -> bytes:
    return h.request_frame(
        12, 1, 3, {"group_id": group, "generation_id": generation, "member_id": member_id}
    )


def commit_frame(group: str, topic: str, partitions: int, offset: int) -> bytes:
    return h.request_frame(
        8,
        2,
        4,
        {
            "group_id": group,
            "generation_id_or_member_epoch": -1,
            "member_id": "",
            "retention_time_ms": -1,
            "topics": [
                {
                    "name": topic,
                    "partitions": [
                        {"partition_index": p, "committed_offset": offset + p}
                        for p in range(partitions)
                    ],
                }
            ],
        },
    )


def generation_at(group: str) -> int:
    """Byte offset of the generation in a SyncGroup/Heartbeat v1 frame (after the group)."""
    return 4 + 10 + len(CLIENT) + 2 + len(group.encode())


def with_generation(frame: bytes, at: int, generation: int) -> bytes:
    return frame[:at] + _I32.pack(generation) + frame[at + 4 :]


def _read_str(b: bytes, pos: int) -> tuple[str, int]:
    (n,) = _I16.unpack_from(b, pos)
    if n < 0:
        return "", pos + 2
    return b[pos + 2 : pos + 2 + n].decode(), pos + 2 + n


@dataclass
class JoinAnswer:
    error: int
    generation: int
    leader: str
    member_id: str
    members: int
    member_ids: list[str]


def parse_join(body: bytes, with_members: bool) -> JoinAnswer:
    """JoinGroup v1 response (after the size prefix; correlation id first)."""
    (error,) = _I16.unpack_from(body, 4)
    (generation,) = _I32.unpack_from(body, 6)
    _protocol, pos = _read_str(body, 10)
    leader, pos = _read_str(body, pos)
    member_id, pos = _read_str(body, pos)
    (count,) = _I32.unpack_from(body, pos)
    ids = []
    if with_members:
        pos += 4
        for _ in range(max(count, 0)):
            mid, pos = _read_str(body, pos)
            ids.append(mid)
            (n,) = _I32.unpack_from(body, pos)
            pos += 4 + max(n, 0)
    return JoinAnswer(error, generation, leader, member_id, count, ids)


def sync_error(body: bytes) -> int:
    """SyncGroup v1 / Heartbeat v1 response: correlation id, throttle time, error code."""
    return int(_I16.unpack_from(body, 8)[0])


# ---------------------------------------------------------------------------------------
# connections


class Conn(asyncio.Protocol):
    """Frames responses and hands each body (correlation id first) to ``on_frame``."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.buf = bytearray()
        self.lost: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.closing = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.lost.done():
            self.lost.set_result(None)
        if not self.closing:
            self.on_lost(exc)

    def on_lost(self, exc: Exception | None) -> None:
        pass

    def data_received(self, data: bytes) -> None:
        buf = self.buf
        buf += data
        pos = 0
        end = len(buf)
        while end - pos >= 4:
            (size,) = _SIZE.unpack_from(buf, pos)
            if end - pos - 4 < size:
                break
            self.on_frame(bytes(buf[pos + 4 : pos + 4 + size]))
            pos += 4 + size
        del buf[:pos]

    def on_frame(self, body: bytes) -> None:
        raise NotImplementedError

    def close(self) -> None:
        self.closing = True
        if self.transport is not None:
            self.transport.close()


async def connect_all(port: int, factories: Sequence[Callable[[], Conn]], limit: int = 64) -> list:
    """Open many connections, at most ``limit`` connects at a time (the listen backlog)."""
    loop = asyncio.get_running_loop()
    sem = asyncio.Semaphore(limit)

    async def one(factory: Callable[[], Conn]) -> Conn:
        async with sem:
            _, proto = await loop.create_connection(factory, "127.0.0.1", port)
            return proto

    return list(await asyncio.gather(*(one(f) for f in factories)))


class Failure(Exception):
    pass


# ---------------------------------------------------------------------------------------
# a group of N members, one connection each


class Member(Conn):
    def __init__(self, group: GroupRun, idx: int) -> None:
        super().__init__()
        self.group = group
        self.idx = idx
        self.member_id = ""
        self.generation = -1
        self.synced = -1  # generation of the last successful SyncGroup
        self.pending: deque[str] = deque()
        # per round (built before the clock starts)
        self.rejoin: bytes = b""
        self.sync: bytes = b""

    def on_lost(self, exc: Exception | None) -> None:
        self.group.fail(f"member {self.idx}: connection lost ({exc})")

    def send(self, kind: str, frame: bytes) -> None:
        assert self.transport is not None
        self.pending.append(kind)
        self.transport.write(frame)

    def join(self) -> None:
        g = self.group
        self.send("join", join_frame(g.name, self.member_id, g.metadata(), g.session_ms))

    def on_frame(self, body: bytes) -> None:
        kind = self.pending.popleft()
        if self.group.timing:
            self.timed_frame(kind, body)
            return
        if kind == "join":
            self.on_join(parse_join(body, with_members=True))
        elif kind == "sync":
            self.on_sync(sync_error(body))
        else:
            self.on_heartbeat(sync_error(body))

    # set-up: a small client state machine until every member is in one generation
    def on_join(self, a: JoinAnswer) -> None:
        if a.error == NONE:
            self.member_id = a.member_id
            self.generation = a.generation
            g = self.group
            if a.member_id == a.leader:
                g.leaders[a.generation] = (a.member_id, a.member_ids)
                frame = sync_frame(g.name, a.generation, a.member_id, g.assignments(a.member_ids))
            else:
                frame = sync_frame(g.name, a.generation, a.member_id, ())
            self.send("sync", frame)
        elif a.error == MEMBER_ID_REQUIRED:
            self.member_id = a.member_id
            self.join()
        elif a.error == UNKNOWN_MEMBER_ID:
            self.member_id = ""
            self.join()
        elif a.error == REBALANCE_IN_PROGRESS:
            self.join()
        else:
            self.group.fail(f"member {self.idx}: JoinGroup error {a.error}")

    def on_sync(self, error: int) -> None:
        if error == NONE:
            self.synced = self.generation
        elif error == UNKNOWN_MEMBER_ID:
            self.member_id = ""
            self.join()
        elif error in (REBALANCE_IN_PROGRESS, ILLEGAL_GENERATION):
            self.join()
        else:
            self.group.fail(f"member {self.idx}: SyncGroup error {error}")

    def on_heartbeat(self, error: int) -> None:
        if error == NONE or self.pending:
            return
        if error == UNKNOWN_MEMBER_ID:
            self.member_id = ""
            self.synced = -1
            self.join()
        elif error in (REBALANCE_IN_PROGRESS, ILLEGAL_GENERATION):
            self.synced = -1
            self.join()
        else:
            self.group.fail(f"member {self.idx}: Heartbeat error {error}")

    # a timed round: rejoin -> (patched) sync -> done
    def timed_frame(self, kind: str, body: bytes) -> None:
        g = self.group
        if kind == "join":
            a = parse_join(body, with_members=False)
            if a.error != NONE:
                g.fail(f"member {self.idx}: JoinGroup error {a.error} in a timed round")
                return
            self.generation = a.generation
            if a.member_id == a.leader:
                if a.members != len(g.members):
                    g.fail(f"leader got {a.members} members, not {len(g.members)}")
                    return
                if a.member_id != g.leader_id:  # the leader changed: build its sync now
                    g.leader_id = a.member_id
                    frame = sync_frame(
                        g.name, a.generation, a.member_id, g.assignments(g.member_ids)
                    )
                else:
                    frame = with_generation(g.leader_sync, g.gen_at, a.generation)
            else:
                frame = with_generation(self.sync, g.gen_at, a.generation)
            self.send("sync", frame)
        else:
            error = sync_error(body)
            if error != NONE:
                g.fail(f"member {self.idx}: SyncGroup error {error} in a timed round")
                return
            self.synced = self.generation
            g.synced += 1
            if g.synced == len(g.members):
                g.last_answer = time.perf_counter()
                if g.round_done is not None and not g.round_done.done():
                    g.round_done.set_result(None)


@dataclass
class GroupRun:
    name: str
    size: int
    session_ms: int
    members: list[Member] = field(default_factory=list)
    variant: int = 0
    timing: bool = False
    error: str | None = None
    leaders: dict[int, tuple[str, list[str]]] = field(default_factory=dict)  # per generation
    leader_id: str = ""
    member_ids: list[str] = field(default_factory=list)
    generation: int = -1
    gen_at: int = 0
    leader_sync: bytes = b""
    synced: int = 0
    last_answer: float = 0.0
    round_done: asyncio.Future[None] | None = None
    problem: asyncio.Future[str] | None = None

    def metadata(self) -> bytes:
        return subscription(TOPIC, b"round-%d" % self.variant)

    def assignments(self, member_ids: Sequence[str]) -> list[tuple[str, bytes]]:
        return [(m, assignment(TOPIC, [i])) for i, m in enumerate(member_ids)]

    def fail(self, why: str) -> None:
        if self.error is None:
            self.error = why
        if self.problem is not None and not self.problem.done():
            self.problem.set_result(why)

    async def setup(self, port: int, heartbeat_s: float, timeout: float) -> None:
        """Connect the members and run the join/sync/heartbeat state machine until all are
        synced in one generation (the group is then Stable with every member)."""
        loop = asyncio.get_running_loop()
        self.problem = loop.create_future()
        self.gen_at = generation_at(self.name)
        self.members = await connect_all(
            port, [lambda i=i: Member(self, i) for i in range(self.size)]
        )
        for m in self.members:
            m.join()
        deadline = time.monotonic() + timeout
        while True:
            await asyncio.sleep(heartbeat_s)
            if self.error:
                raise Failure(f"{self.name}: {self.error}")
            gens = {m.synced for m in self.members}
            idle = all(not m.pending for m in self.members)
            if idle and len(gens) == 1 and -1 not in gens:
                break
            if time.monotonic() > deadline:
                raise Failure(f"{self.name}: no common generation after {timeout:.0f} s: {gens}")
            for m in self.members:
                if not m.pending and m.synced >= 0:
                    m.send("heartbeat", heartbeat_frame(self.name, m.generation, m.member_id))
        self.generation = self.members[0].synced
        self.leader_id, self.member_ids = self.leaders[self.generation]
        if sorted(self.member_ids) != sorted(m.member_id for m in self.members):
            raise Failure(f"{self.name}: the leader's member list is not the group")

    def prepare_round(self) -> None:
        """Frames for the next round: rejoin with the other subscription, syncs to patch."""
        self.variant ^= 1
        meta = self.metadata()
        for m in self.members:
            m.rejoin = join_frame(self.name, m.member_id, meta, self.session_ms)
            m.sync = sync_frame(self.name, 0, m.member_id, ())
        self.leader_sync = sync_frame(
            self.name, 0, self.leader_id, self.assignments(self.member_ids)
        )
        self.synced = 0
        self.round_done = asyncio.get_running_loop().create_future()

    async def round(self, timeout: float) -> float:
        """One timed rebalance: seconds from the first rejoin written to the last answer."""
        self.prepare_round()
        assert self.round_done is not None and self.problem is not None
        self.timing = True
        t0 = time.perf_counter()
        for m in self.members:
            m.pending.append("join")
            m.transport.write(m.rejoin)  # type: ignore[union-attr]
        done, _ = await asyncio.wait(
            [self.round_done, self.problem], timeout=timeout, return_when="FIRST_COMPLETED"
        )
        self.timing = False
        if self.error:
            raise Failure(f"{self.name}: {self.error}")
        if self.round_done not in done:
            raise Failure(f"{self.name}: round not done in {timeout:.0f} s ({self.synced} synced)")
        gens = {m.synced for m in self.members}
        if len(gens) != 1:
            raise Failure(f"{self.name}: members ended in generations {gens}")
        new = gens.pop()
        if new <= self.generation:
            raise Failure(f"{self.name}: generation did not move ({self.generation} -> {new})")
        self.generation = new
        return self.last_answer - t0

    def close(self) -> None:
        for m in self.members:
            m.close()


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


# ---------------------------------------------------------------------------------------
# many single-member groups


class ManyGroups(Conn):
    """Joins then syncs its share of the groups, ``window`` requests in flight."""

    def __init__(self, run: ManyRun, indexes: Sequence[int], window: int) -> None:
        super().__init__()
        self.run = run
        self.indexes = list(indexes)
        self.window = window
        self.next = 0
        self.pending: deque[tuple[bool, int]] = deque()  # (is join, group index)
        self.out: list[bytes] = []

    def on_lost(self, exc: Exception | None) -> None:
        self.run.fail(f"connection lost ({exc})")

    def _join_next(self) -> None:
        if self.next < len(self.indexes):
            i = self.indexes[self.next]
            self.next += 1
            self.pending.append((True, i))
            self.out.append(self.run.join_for(i))

    def go(self) -> None:
        for _ in range(self.window):
            self._join_next()
        self._flush()

    def _flush(self) -> None:
        if self.out:
            self.transport.writelines(self.out)  # type: ignore[union-attr]
            self.out = []

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        self._flush()

    def on_frame(self, body: bytes) -> None:
        is_join, i = self.pending.popleft()
        run = self.run
        if is_join:
            a = parse_join(body, with_members=False)
            if a.error != NONE or a.leader != a.member_id or a.members != 1:
                run.fail(f"group {i}: JoinGroup {a}")
                return
            self.pending.append((False, i))
            mid = a.member_id
            self.out.append(
                sync_frame_fast(run.group_name(i), a.generation, mid, [(mid, run.assignment)])
            )
        else:
            error = sync_error(body)
            if error != NONE:
                run.fail(f"group {i}: SyncGroup error {error}")
                return
            run.done += 1
            if run.done == run.count:
                run.finished.set_result(time.perf_counter())
            self._join_next()


@dataclass
class ManyRun:
    count: int
    session_ms: int
    prefix: str = "bench-many-"
    done: int = 0
    error: str | None = None
    template: bytes = b""
    name_at: int = 0
    assignment: bytes = b""
    finished: asyncio.Future[float] = None  # type: ignore[assignment]

    def __post_init__(self) -> None:
        self.finished = asyncio.get_running_loop().create_future()
        self.template = join_frame(self.name(0), "", subscription(TOPIC, b""), self.session_ms)
        self.name_at = 4 + 10 + len(CLIENT) + 2
        self.assignment = assignment(TOPIC, [0])
        # the patched and the struct-built frames are the codec's bytes
        for i in (1, self.count - 1):
            want = join_frame(self.name(i), "", subscription(TOPIC, b""), self.session_ms)
            assert self.join_for(i) == want
            mid = "bench-00000000-0000-0000-0000-000000000000"
            assert sync_frame_fast(self.group_name(i), 7, mid, [(mid, self.assignment)]) == (
                sync_frame(self.name(i), 7, mid, [(mid, self.assignment)])
            )

    def name(self, i: int) -> str:
        return f"{self.prefix}{i:07d}"

    def group_name(self, i: int) -> bytes:
        return self.name(i).encode()

    def join_for(self, i: int) -> bytes:
        name = self.group_name(i)
        t = self.template
        return t[: self.name_at] + name + t[self.name_at + len(name) :]

    def fail(self, why: str) -> None:
        if self.error is None:
            self.error = why
            if not self.finished.done():
                self.finished.set_exception(Failure(why))


# ---------------------------------------------------------------------------------------
# the cases


def load() -> float:
    return os.getloadavg()[0]


def kgroupd_args() -> list[str]:
    return ["--initial-rebalance-delay-ms", "0"]


@dataclass
class Report:
    lines: list[str] = field(default_factory=list)

    def add(self, *lines: str) -> None:
        self.lines.extend(lines)
        for line in lines:
            print(line, file=sys.stderr)


def spread(values: Sequence[float], fmt: str = "{:.0f}") -> str:
    return f"{fmt.format(h.median(values))} ({fmt.format(min(values))}-{fmt.format(max(values))})"


async def case_rebalance(
    args: argparse.Namespace, started: dict[str, h.BrokerProcess], rep: Report
) -> None:
    sizes = [int(s) for s in args.members.split(",")]
    results: dict[tuple[str, int], list[float]] = {}
    load0 = load()
    for size in sizes:
        for kind, b in started.items():
            if kind == "tansu" and size > args.tansu_max_members:
                continue
            tansu = kind == "tansu"
            rounds = args.tansu_rounds if tansu else args.rounds
            warmup = 0 if tansu else 1
            g = GroupRun(f"bench-rebalance-{size}", size, args.session_ms)
            t0 = time.perf_counter()
            await g.setup(b.port, 1.0 if tansu else 0.1, timeout=180 if tansu else 60)
            print(
                f"  {kind} {size} members: Stable at generation {g.generation} after"
                f" {time.perf_counter() - t0:.1f} s",
                file=sys.stderr,
            )
            times = []
            for r in range(warmup + rounds):
                secs = await g.round(timeout=120 if tansu else 30)
                tag = "warm-up" if r < warmup else f"round {r - warmup + 1}"
                print(
                    f"  {kind:8} {size:5} members {tag:8} {secs * 1000:9.1f} ms"
                    f" (generation {g.generation}, load {load():.2f})",
                    file=sys.stderr,
                )
                if r >= warmup:
                    times.append(secs * 1000)
            results[(kind, size)] = times
            g.close()
    targets = {100: 50.0, 1000: 500.0}
    kinds = list(started)
    head = ["members"] + [f"{k} ms, median (min-max)" for k in kinds]
    both = len(kinds) == 2
    if both:
        head.append("kgroupd/tansu time")
    head += ["target", "met?"]
    rep.add(
        "",
        f"Rebalance round (load {load0:.2f} at the start, {load():.2f} at the end; kgroupd "
        f"{args.rounds} rounds after 1 warm-up, Tansu {args.tansu_rounds} rounds):",
        "",
        "| " + " | ".join(head) + " |",
        "|" + "---|" * len(head),
    )
    for size in sizes:
        row = [str(size)]
        for k in kinds:
            vals = results.get((k, size))
            row.append(spread(vals, "{:.1f}") if vals else "not run")
        if both:
            kv, tv = results.get(("kgroupd", size)), results.get(("tansu", size))
            row.append(f"{h.median(kv) / h.median(tv):.4f}" if kv and tv else "—")
        target = targets.get(size)
        row.append(f"< {target:.0f} ms" if target else "—")
        kv = results.get(("kgroupd", size))
        row.append(("**yes**" if h.median(kv) < target else "**no**") if target and kv else "—")
        rep.add("| " + " | ".join(row) + " |")


async def case_heartbeat(
    args: argparse.Namespace, started: dict[str, h.BrokerProcess], rep: Report
) -> None:
    await pipelined_case(
        args,
        started,
        rep,
        "heartbeat",
        f"Heartbeats/s, {args.hb_connections} members x {args.window} in flight",
        30_000,
    )


async def case_commit(
    args: argparse.Namespace, started: dict[str, h.BrokerProcess], rep: Report
) -> None:
    await pipelined_case(
        args,
        started,
        rep,
        "commit",
        f"OffsetCommit/s ({COMMIT_PARTITIONS} partitions each), {args.commit_connections}"
        f" connections x {args.window} in flight",
        20_000,
    )


async def open_pipes(
    kind: str, b: h.BrokerProcess, case: str, args: argparse.Namespace
) -> tuple[list[Pipe], GroupRun | None]:
    loop = asyncio.get_running_loop()
    pipes: list[Pipe] = []
    if case == "heartbeat":
        g = GroupRun("bench-heartbeat", args.hb_connections, args.session_ms)
        await g.setup(b.port, 1.0 if kind == "tansu" else 0.1, timeout=180)
        for m in g.members:
            frame = heartbeat_frame(g.name, g.generation, m.member_id)
            _, p = await loop.create_connection(
                lambda frame=frame: Pipe([frame], args.window, check_heartbeat),
                "127.0.0.1",
                b.port,
            )
            pipes.append(p)
        return pipes, g
    topic = "bench-commits"
    h.create_topic(b.port, topic, COMMIT_PARTITIONS)
    h.wait_topic_ready(b.port, topic, COMMIT_PARTITIONS)
    for c in range(args.commit_connections):
        frames = [
            commit_frame(f"bench-commit-{c}", topic, COMMIT_PARTITIONS, k * 1000) for k in range(16)
        ]
        _, p = await loop.create_connection(
            lambda frames=frames: Pipe(frames, args.window, check_commit), "127.0.0.1", b.port
        )
        pipes.append(p)
    return pipes, None


async def pipelined_case(
    args: argparse.Namespace,
    started: dict[str, h.BrokerProcess],
    rep: Report,
    case: str,
    title: str,
    target: float,
) -> None:
    opened = {kind: await open_pipes(kind, b, case, args) for kind, b in started.items()}
    kinds = list(started)
    rates: dict[str, list[Rate]] = {k: [] for k in kinds}
    load0 = load()
    loads = []
    for r in range(args.warmup + args.pipe_rounds):
        order = kinds if r % 2 == 0 else kinds[::-1]
        for kind in order:
            rate = await measure(opened[kind][0], started[kind].pid, args.seconds)
            tag = "warm-up" if r < args.warmup else f"round {r - args.warmup + 1}"
            loads.append(load())
            print(
                f"  {kind:8} {case:9} {tag:8} {rate.per_s:9.0f}/s (cpu broker"
                f" {rate.broker_cpu:4.0%} client {rate.client_cpu:4.0%}, load {loads[-1]:.2f})",
                file=sys.stderr,
            )
            if r >= args.warmup:
                rates[kind].append(rate)
    for pipes, g in opened.values():
        for p in pipes:
            p.close()
        if g is not None:
            g.close()
    head = [
        "broker",
        "per second, median (min-max)",
        "broker CPU",
        "broker CPU-µs per request",
        "client CPU",
    ]
    rep.add(
        "",
        f"{title}, {args.pipe_rounds} rounds of {args.seconds:g} s after {args.warmup} warm-up"
        f" (load {load0:.2f} at the start, {load():.2f} at the end, max {max(loads):.2f}):",
        "",
        "| " + " | ".join(head) + " |",
        "|" + "---|" * len(head),
    )
    for k in kinds:
        vals = [x.per_s for x in rates[k]]
        per_request = h.median([x.broker_cpu / x.per_s * 1e6 for x in rates[k]])
        rep.add(
            f"| {k} | **{spread(vals)}** | {h.median([x.broker_cpu for x in rates[k]]):.0%}"
            f" | {per_request:.0f} | {h.median([x.client_cpu for x in rates[k]]):.0%} |"
        )
    kv = h.median([x.per_s for x in rates["kgroupd"]]) if "kgroupd" in rates else None
    line = []
    if "tansu" in rates and kv is not None:
        tv = h.median([x.per_s for x in rates["tansu"]])
        line.append(f"kgroupd/tansu: **{h.ratio(kv, tv)}**.")
    if kv is not None:
        met = "met" if kv >= target else "**missed**"
        line.append(f"Target >= {target:,.0f}/s: {met}.")
    rep.add("", " ".join(line))


async def case_groups(
    args: argparse.Namespace, started: dict[str, h.BrokerProcess], rep: Report
) -> None:
    b = started.get("kgroupd")
    if b is None:
        return
    load0 = load()
    rss0 = b.rss_mib()
    run = ManyRun(args.groups, args.session_ms)
    conns = args.groups_connections
    per = [range(c, args.groups, conns) for c in range(conns)]
    pipes = await connect_all(
        b.port, [lambda idx=idx: ManyGroups(run, idx, args.groups_window) for idx in per]
    )
    b0 = h.cpu_seconds(b.pid)
    c0 = time.process_time()
    t0 = time.perf_counter()
    for p in pipes:
        p.go()
    t1 = await asyncio.wait_for(run.finished, timeout=args.groups_timeout)
    elapsed = t1 - t0
    broker_cpu = (h.cpu_seconds(b.pid) - b0) / elapsed
    client_cpu = (time.process_time() - c0) / elapsed
    rss_done = b.rss_mib()
    await asyncio.sleep(1.0)
    rss_idle = b.rss_mib()
    listed = await asyncio.to_thread(h.call, b.port, 16, 0, {})
    ours = sum(1 for g in listed.groups if g[0].startswith(run.prefix))
    if listed.error_code or ours != args.groups:
        raise Failure(f"ListGroups: error {listed.error_code}, {ours} of {args.groups} groups")
    for p in pipes:
        p.close()
    rate = args.groups / elapsed
    rep.add(
        "",
        f"Many groups: {args.groups:,} single-member groups joined and synced over {conns}"
        f" connections x {args.groups_window} in flight (load {load0:.2f} at the start,"
        f" {load():.2f} at the end); ListGroups lists all {ours:,}:",
        "",
        "| broker | groups/s | time | broker CPU | client CPU | RSS before | RSS after (1 s idle)"
        " | per group | target RSS < 1 GiB |",
        "|---|---|---|---|---|---|---|---|---|",
        f"| kgroupd | **{rate:,.0f}** | {elapsed:.1f} s | {broker_cpu:.0%} | {client_cpu:.0%}"
        f" | {rss0:.0f} MiB | **{rss_idle:.0f} MiB** ({rss_done:.0f} at the last answer)"
        f" | {(rss_idle - rss0) * 1024 * 1024 / args.groups:,.0f} bytes"
        f" | {'met' if rss_idle < 1024 else '**missed**'} |",
    )


# ---------------------------------------------------------------------------------------
# in process: the broker's own cost per request, without sockets or a client


def in_process_main(args: argparse.Namespace) -> None:
    """``--in-process``: a real KafkaServer and KafkaConnections driven through their
    ``asyncio.Protocol`` callbacks with fake transports (as profile_hotpath.py does), the
    same frames as the socket cases; prints this process's CPU time (the broker's: nothing
    else runs in it while timed, and it does not wait on I/O) per request or per rebalance
    round, which background load does not inflate as it does wall time; optionally under
    py-spy."""
    from kgroupd.broker.config.logging import configure_logging

    configure_logging("json", "warning")
    print(f"# {h.kgroupd_revision()}; load avg {load():.2f}")
    h.uvloop_run(in_process_async(args))


def _transport_class() -> Any:
    import profile_hotpath as ph

    class Capture(ph.FakeTransport):
        """Counts like profile_hotpath's fake transport; keeps the bytes when ``keep``."""

        def __init__(self, protocol: Any) -> None:
            super().__init__(protocol)
            self.keep = True
            self.data = bytearray()

        def write(self, data: bytes) -> None:
            self.bytes_out += len(data)
            if self.keep:
                self.data += data

        def writelines(self, parts: Any) -> None:
            for p in parts:
                self.write(p)

        def answers(self) -> list[bytes]:
            out = []
            buf = self.data
            pos = 0
            while len(buf) - pos >= 4:
                (size,) = _SIZE.unpack_from(buf, pos)
                out.append(bytes(buf[pos + 4 : pos + 4 + size]))
                pos += 4 + size
            del buf[:pos]
            return out

    return Capture


async def _answers(transports: Sequence[Any], want: int, timeout: float = 30.0) -> list[bytes]:
    """Yield to the loop until every transport holds ``want`` answers; the first of each."""
    got: list[list[bytes]] = [[] for _ in transports]
    deadline = time.monotonic() + timeout
    while True:
        for i, t in enumerate(transports):
            got[i] += t.answers()
        if all(len(g) >= want for g in got):
            return [g[0] for g in got]
        if time.monotonic() > deadline:
            raise Failure(f"in-process: answers missing ({[len(g) for g in got]})")
        await asyncio.sleep(0)


async def in_process_async(args: argparse.Namespace) -> None:
    import dataclasses

    import profile_hotpath as ph

    from kgroupd.broker.config.settings import BrokerConfig, TopicSpec
    from kgroupd.broker.net.connection import KafkaConnection
    from kgroupd.broker.net.server import KafkaServer

    capture = _transport_class()
    config = dataclasses.replace(
        BrokerConfig(),
        host="127.0.0.1",
        port=0,
        log_level="warning",
        initial_rebalance_delay_ms=0,
        # commits name a topic that exists (unknown ones are refused, as Kafka refuses them)
        create_topics=(TopicSpec("bench-commits", 64),),
    )
    if args.no_metrics:  # (a field older trees, run with --kgroupd-rev, do not have)
        config = dataclasses.replace(config, metrics=False)
    server = KafkaServer(config)
    await server.start()

    def connect() -> tuple[Any, Any]:
        conn = KafkaConnection(server)
        t = capture(conn)
        conn.connection_made(t)
        return conn, t

    async def group(name: str, size: int) -> tuple[list[Any], list[Any], list[str], int, str]:
        conns = [connect() for _ in range(size)]
        meta = subscription(TOPIC, b"")
        for c, _t in conns:
            c.data_received(join_frame(name, "", meta, args.session_ms))
        joins = [parse_join(a, True) for a in await _answers([t for _c, t in conns], 1)]
        if any(a.error for a in joins) or len({a.generation for a in joins}) != 1:
            raise Failure(f"in-process join: {joins[:3]}")
        leader = joins[0].leader
        ids = next(a.member_ids for a in joins if a.member_id == leader)
        gen = joins[0].generation
        for (c, _t), a in zip(conns, joins, strict=True):
            assigned = [(m, assignment(TOPIC, [i])) for i, m in enumerate(ids)]
            c.data_received(
                sync_frame(name, gen, a.member_id, assigned if a.member_id == leader else ())
            )
        syncs = await _answers([t for _c, t in conns], 1)
        if any(sync_error(b) for b in syncs):
            raise Failure("in-process sync failed")
        return (
            [c for c, _t in conns],
            [t for _c, t in conns],
            [a.member_id for a in joins],
            gen,
            leader,
        )

    def timed(label: str, run: Callable[[], Any], count: int, unit: str) -> Any:
        return label, run, count, unit

    spy_out = Path(args.py_spy) / "groups-in-process.txt" if args.py_spy else None
    if spy_out is not None:
        spy_out.parent.mkdir(parents=True, exist_ok=True)
    results = []
    try:
        for case in args.in_process.split(","):
            if case.startswith("commit"):
                parts = int(case.split("-")[1]) if "-" in case else COMMIT_PARTITIONS
                conn, t = connect()
                frames = [
                    commit_frame("inproc", "bench-commits", parts, k * 1000) for k in range(16)
                ]
                blob = b"".join(frames)
                conn.data_received(blob)
                for a in t.answers():
                    resp = h.decode_response(8, 2, a)
                    if any(p["error_code"] for t in resp["topics"] for p in t["partitions"]):
                        raise Failure(f"in-process commit: {resp['topics']}")
                t.keep = False
                n = args.in_process_requests
                spy = ph.start_py_spy(str(spy_out)) if spy_out else None
                t0 = time.process_time()
                for _ in range(n // 16):
                    conn.data_received(blob)
                elapsed = time.process_time() - t0
                ph.stop_py_spy(spy)
                results.append(
                    (
                        f"OffsetCommit v2, {parts} partitions",
                        elapsed / (n // 16 * 16) * 1e6,
                        "CPU-µs/request",
                    )
                )
            elif case == "heartbeat":
                conns, ts, ids, gen, _leader = await group("inproc-hb", 10)
                blobs = [b"".join([heartbeat_frame("inproc-hb", gen, m)] * 16) for m in ids]
                for c, b in zip(conns, blobs, strict=True):
                    c.data_received(b)
                for t in ts:
                    if any(sync_error(a) for a in t.answers()):
                        raise Failure("in-process heartbeat failed")
                    t.keep = False
                n = args.in_process_requests
                rounds = n // (16 * len(conns))
                spy = ph.start_py_spy(str(spy_out)) if spy_out else None
                t0 = time.process_time()
                for _ in range(rounds):
                    for c, b in zip(conns, blobs, strict=True):
                        c.data_received(b)
                elapsed = time.process_time() - t0
                ph.stop_py_spy(spy)
                results.append(
                    ("Heartbeat v1", elapsed / (rounds * 16 * len(conns)) * 1e6, "CPU-µs/request")
                )
            elif case.startswith("rebalance"):
                size = int(case.split("-")[1])
                name = f"inproc-rebalance-{size}"
                conns, ts, ids, gen, leader = await group(name, size)
                times = []
                spy = None
                assigned = [(m, assignment(TOPIC, [i])) for i, m in enumerate(ids)]
                syncs_out = [sync_frame(name, 0, m, assigned if m == leader else ()) for m in ids]
                at = generation_at(name)
                metas = [subscription(TOPIC, b"round-%d" % (r % 2)) for r in range(2)]
                rejoin_frames = [
                    [join_frame(name, m, meta, args.session_ms) for m in ids] for meta in metas
                ]
                for r in range(args.in_process_rounds + 1):
                    if r == 1 and spy_out:
                        spy = ph.start_py_spy(str(spy_out))
                    rejoins = rejoin_frames[r % 2]
                    t0 = time.process_time()
                    for c, f in zip(conns, rejoins, strict=True):
                        c.data_received(f)
                    joins = [parse_join(a, False) for a in await _answers(ts, 1)]
                    gen = joins[0].generation
                    for c, f in zip(conns, syncs_out, strict=True):
                        c.data_received(with_generation(f, at, gen))
                    syncs = await _answers(ts, 1)
                    secs = time.process_time() - t0
                    if any(a.error for a in joins) or any(sync_error(b) for b in syncs):
                        raise Failure("in-process rebalance failed")
                    if r:
                        times.append(secs)
                ph.stop_py_spy(spy)
                results.append(
                    (
                        f"rebalance round, {size} members",
                        h.median(times) * 1000,
                        "CPU-ms/round",
                    )
                )
            else:
                raise Failure(f"unknown in-process case {case!r}")
            if spy_out:
                print(f"{case}: py-spy ({spy_out})")
                print("\n".join(f"    {line}" for line in h.py_spy_summary(spy_out, top=30)))
    finally:
        await server.stop()
    for label, value, unit in results:
        print(f"| {label} | {value:.1f} {unit} |")


CASE_FUNCS = {
    "rebalance": case_rebalance,
    "heartbeat": case_heartbeat,
    "commit": case_commit,
    "groups": case_groups,
}


async def main_async(
    args: argparse.Namespace, started: dict[str, h.BrokerProcess], rep: Report
) -> None:
    for case in args.only.split(","):
        print(f"# {case}", file=sys.stderr)
        spy = None
        if args.py_spy and "kgroupd" in started:
            out = Path(args.py_spy) / f"groups-{case}.txt"
            out.parent.mkdir(parents=True, exist_ok=True)
            spy = h.py_spy_start(started["kgroupd"].pid, out)
        try:
            await CASE_FUNCS[case](args, started, rep)
        finally:
            h.py_spy_stop(spy)
        if spy is not None:
            rep.add("", f"py-spy profile of kgroupd during {case} ({out}):", "")
            rep.add(*(f"    {line}" for line in h.py_spy_summary(out)))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    h.add_common_args(ap)
    ap.add_argument("--only", default=",".join(CASES), help="comma-separated cases to run")
    ap.add_argument("--members", default="10,100,1000", help="rebalance group sizes")
    ap.add_argument("--rounds", type=int, default=7, help="kgroupd rebalance rounds")
    ap.add_argument("--tansu-rounds", type=int, default=3, help="Tansu rebalance rounds")
    ap.add_argument(
        "--tansu-max-members", type=int, default=100, help="larger groups are kgroupd only"
    )
    ap.add_argument(
        "--session-ms",
        type=int,
        default=30000,
        help="session and rebalance timeout (Tansu's round takes half the rebalance timeout)",
    )
    ap.add_argument("--hb-connections", type=int, default=10)
    ap.add_argument("--commit-connections", type=int, default=10)
    ap.add_argument("--window", type=int, default=16, help="requests in flight per connection")
    ap.add_argument("--seconds", type=float, default=2.0, help="timed seconds per round")
    ap.add_argument("--pipe-rounds", type=int, default=5, help="heartbeat/commit rounds")
    ap.add_argument("--warmup", type=int, default=1, help="untimed heartbeat/commit rounds")
    ap.add_argument("--groups", type=int, default=100_000)
    ap.add_argument("--groups-connections", type=int, default=20)
    ap.add_argument("--groups-window", type=int, default=32)
    ap.add_argument("--groups-timeout", type=float, default=300.0)
    ap.add_argument(
        "--py-spy",
        metavar="DIR",
        help="profile kgroupd with py-spy during each case (raw stacks in DIR; slows it down)",
    )
    ap.add_argument(
        "--in-process",
        metavar="CASES",
        help="instead: drive the broker in this process without sockets and print its cost per"
        " request; comma-separated commit-1, commit-8, heartbeat, rebalance-N",
    )
    ap.add_argument("--in-process-requests", type=int, default=20000)
    ap.add_argument(
        "--no-metrics", action="store_true", help="--in-process: the broker with --no-metrics"
    )
    ap.add_argument("--in-process-rounds", type=int, default=15)
    args = ap.parse_args()
    if args.in_process:
        if args.kgroupd_rev and not os.environ.get(h.SRC_ENV):
            h.use_kgroupd_rev(args.kgroupd_rev)
            env = {**os.environ, h.SRC_ENV: str(h.KGROUPD_SRC)}
            os.execve(sys.executable, [sys.executable, *sys.argv], env)
        in_process_main(args)
        return 0
    for case in args.only.split(","):
        if case not in CASES:
            ap.error(f"unknown case {case!r}; choose from {', '.join(CASES)}")
    h.apply_common_args(args)
    kinds = h.kinds_for(args.broker)
    machine = h.machine()
    rep = Report()
    started: dict[str, h.BrokerProcess] = {}
    ok = False
    try:
        for kind in kinds:
            b = h.BrokerProcess(kind, extra=kgroupd_args() if kind == "kgroupd" else [])
            started[kind] = b.start()
        h.uvloop_run(main_async(args, started, rep))
        ok = True
    finally:
        for b in started.values():
            b.stop()
            if ok:
                b.cleanup_log()
    print(f"\n{h.command_line()}")
    print(f"{h.stamp()}; {machine}, {load():.2f} at the end; {h.kgroupd_revision()}")
    print("\n".join(rep.lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
