"""bench_groups.py's group members: a group of N members, one connection each, driven to a
Stable generation and then through timed rebalance rounds (``GroupRun``); and many
single-member groups joined and synced over a few pipelined connections (``ManyRun``)."""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field

from groups_wire import (
    CLIENT,
    ILLEGAL_GENERATION,
    MEMBER_ID_REQUIRED,
    NONE,
    REBALANCE_IN_PROGRESS,
    TOPIC,
    UNKNOWN_MEMBER_ID,
    Conn,
    Failure,
    JoinAnswer,
    assignment,
    connect_all,
    generation_at,
    heartbeat_frame,
    join_frame,
    parse_join,
    subscription,
    sync_error,
    sync_frame,
    sync_frame_fast,
    with_generation,
)

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
