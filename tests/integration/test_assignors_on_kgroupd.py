"""The aiokafka adapters of ``assignors`` in real consumer groups on a real in-process kgroupd.

Every consumer uses ``metadata_max_age_ms=1000`` and heartbeats every 100 ms. The broker
runs with a 200 ms initial rebalance delay and a 500 ms minimum session timeout, so the
member the failover test kills can have a 1 s session; every other member has a 10 s one,
so partitions move only when a member leaves (LeaveGroup) or the killed one's session expires.

A consumer's assignment is recorded, with the generation it belongs to, by its rebalance
listener; conditions no client offers an event for (an assignment, the group as
DescribeGroups shows it, records consumed) are polled with a bounded deadline.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest_asyncio
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, ConsumerRebalanceListener
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.coordinator.protocol import ConsumerProtocol
from aiokafka.errors import KafkaError
from aiokafka.structs import OffsetAndMetadata

from kgroupd.assignors import FailoverAssignor, StickyAssignor
from kgroupd.broker.net.server import KafkaServer
from kgroupd.broker.testing import running_server
from tests.support.groups import struct_to_dict

REPO = Path(__file__).resolve().parents[2]
META_AGE_MS = 1000
HEARTBEAT_MS = 100
MIN_SESSION_MS = 500
VICTIM_SESSION_MS = 1000  # the member that is killed: its session expires quickly
SESSION_MS = 10_000  # every other member: long, so only a LeaveGroup or a kill moves anything


@pytest_asyncio.fixture
async def server() -> AsyncIterator[KafkaServer]:
    async with running_server(
        log_level="warning",
        initial_rebalance_delay_ms=200,
        group_min_session_timeout_ms=MIN_SESSION_MS,
    ) as srv:
        yield srv


@pytest_asyncio.fixture
async def bootstrap(server: KafkaServer) -> str:
    return f"127.0.0.1:{server.port}"


@pytest_asyncio.fixture
async def admin(bootstrap: str) -> AsyncIterator[AIOKafkaAdminClient]:
    client = AIOKafkaAdminClient(bootstrap_servers=bootstrap, metadata_max_age_ms=META_AGE_MS)
    await client.start()
    try:
        yield client
    finally:
        await client.close()


async def wait_until(
    condition: Callable[[], bool | Awaitable[bool]], timeout: float, what: str
) -> None:
    """Poll ``condition`` every 50 ms until it holds; fail after ``timeout`` seconds."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        result = condition()
        if inspect.isawaitable(result):
            result = await result
        if result:
            return
        if loop.time() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        await asyncio.sleep(0.05)


async def group_view(
    admin: AIOKafkaAdminClient, group: str, topic: str
) -> tuple[str, str, dict[str, list[int]]]:
    """(state, protocol, member id -> partitions of ``topic``) as DescribeGroups reports."""
    (resp,) = await admin.describe_consumer_groups([group])
    (found,) = struct_to_dict(resp)["groups"]
    members: dict[str, list[int]] = {}
    for m in found["members"]:
        raw = m["member_assignment"]
        decoded = ConsumerProtocol.ASSIGNMENT.decode(raw).assignment if raw else []
        members[m["member_id"]] = sorted(p for t, ps in decoded if t == topic for p in ps)
    return found["state"], found["protocol"], members


async def produce(bootstrap: str, topic: str, wave: str, partitions: int, per: int) -> set[str]:
    """``per`` records to each partition, valued ``{wave}-{partition}-{i}``; returns the values."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, metadata_max_age_ms=META_AGE_MS)
    await producer.start()
    values = set()
    try:
        for p in range(partitions):
            for i in range(per):
                value = f"{wave}-{p}-{i}"
                await producer.send(topic, value.encode(), partition=p)
                values.add(value)
        await producer.flush()
    finally:
        await producer.stop()
    return values


def partition_of(value: str) -> int:
    return int(value.split("-")[1])


def consumer_config(bootstrap: str, group: str, name: str, assignor: Any) -> dict[str, Any]:
    return {
        "bootstrap_servers": bootstrap,
        "group_id": group,
        "client_id": name,
        "partition_assignment_strategy": (assignor,),
        "metadata_max_age_ms": META_AGE_MS,
        "heartbeat_interval_ms": HEARTBEAT_MS,
        "session_timeout_ms": SESSION_MS,
        "rebalance_timeout_ms": 10_000,
        "enable_auto_commit": False,
        "auto_offset_reset": "earliest",
        "retry_backoff_ms": 50,
    }


class Member(ConsumerRebalanceListener):
    """One in-process group member: records each assignment (with its generation), consumes
    and commits after every batch."""

    def __init__(self, name: str, bootstrap: str, group: str, topic: str, assignor: Any) -> None:
        self.name = name
        self.topic = topic
        self.consumer = AIOKafkaConsumer(**consumer_config(bootstrap, group, name, assignor))
        self.assigned: list[tuple[int, list[int]]] = []  # (generation, partitions)
        self.consumed: list[str] = []
        self.committed: set[str] = set()
        self.commit_errors: list[str] = []
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    async def on_partitions_revoked(self, revoked: Any) -> None:
        return None

    async def on_partitions_assigned(self, assigned: Any) -> None:
        # aiokafka sets the generation at JoinGroup, before calling the listener.
        generation = int(self.consumer._coordinator.generation)
        self.assigned.append((generation, sorted(tp.partition for tp in assigned)))

    @property
    def last(self) -> tuple[int, list[int]] | None:
        return self.assigned[-1] if self.assigned else None

    @property
    def member_id(self) -> str:
        return str(self.consumer._coordinator.member_id)

    async def start(self) -> Member:
        await self.consumer.start()
        self.consumer.subscribe([self.topic], listener=self)
        self._task = asyncio.create_task(self._run(), name=f"member-{self.name}")
        return self

    async def _run(self) -> None:
        while not self._stop.is_set():
            data = await self.consumer.getmany(timeout_ms=100)
            if not data:
                continue
            batch = [m.value.decode() for msgs in data.values() for m in msgs if m.value]
            self.consumed.extend(batch)
            offsets = {tp: OffsetAndMetadata(msgs[-1].offset + 1, "") for tp, msgs in data.items()}
            try:
                await self.consumer.commit(offsets)
            except KafkaError as exc:
                self.commit_errors.append(repr(exc))
            else:
                self.committed.update(batch)

    async def stop(self) -> None:
        """Stop consuming and close (a dynamic member sends LeaveGroup)."""
        self._stop.set()
        try:
            if self._task is not None:
                task, self._task = self._task, None
                await task
        finally:
            await self.consumer.stop()


async def start_members(members: list[Member]) -> list[Member]:
    await asyncio.gather(*(m.start() for m in members))
    return members


async def stop_members(members: list[Member]) -> None:
    results = await asyncio.gather(*(m.stop() for m in members), return_exceptions=True)
    errors = [r for r in results if isinstance(r, BaseException)]
    if errors:
        raise errors[0]


# --------------------------------------------------------------------------------------------
# failover


VICTIM = """
import asyncio, json, sys
from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener
from aiokafka.errors import KafkaError
from aiokafka.structs import OffsetAndMetadata
from kgroupd.assignors import FailoverAssignor

def emit(**event):
    print(json.dumps(event), flush=True)

class Report(ConsumerRebalanceListener):
    def __init__(self, consumer):
        self.consumer = consumer
    async def on_partitions_revoked(self, revoked):
        pass
    async def on_partitions_assigned(self, assigned):
        c = self.consumer._coordinator
        emit(event="assigned", member_id=c.member_id, generation=c.generation,
             partitions=sorted(tp.partition for tp in assigned))

async def main(bootstrap, group, topic, priority, session_ms, heartbeat_ms):
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap, group_id=group, client_id="victim",
        partition_assignment_strategy=(FailoverAssignor(priority=priority),),
        metadata_max_age_ms=1000, heartbeat_interval_ms=heartbeat_ms,
        session_timeout_ms=session_ms, rebalance_timeout_ms=10000,
        enable_auto_commit=False, auto_offset_reset="earliest", retry_backoff_ms=50,
    )
    await consumer.start()
    consumer.subscribe([topic], listener=Report(consumer))
    while True:
        data = await consumer.getmany(timeout_ms=100)
        if not data:
            continue
        batch = [m.value.decode() for msgs in data.values() for m in msgs]
        offsets = {tp: OffsetAndMetadata(msgs[-1].offset + 1, "") for tp, msgs in data.items()}
        try:
            await consumer.commit(offsets)
        except KafkaError as exc:
            emit(event="commit_failed", error=repr(exc), records=batch)
        else:
            emit(event="committed", records=batch)

asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3], *map(int, sys.argv[4:7])))
"""


class Victim:
    """The priority-10 member, in a subprocess so it can be SIGKILLed (no LeaveGroup)."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc
        self.events: list[dict[str, Any]] = []
        self.stderr: list[str] = []
        assert proc.stdout is not None and proc.stderr is not None
        self._tasks = [
            asyncio.create_task(self._follow(proc.stdout, self._event)),
            asyncio.create_task(self._follow(proc.stderr, self.stderr.append)),
        ]

    @classmethod
    async def spawn(cls, bootstrap: str, group: str, topic: str, priority: int) -> Victim:
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-c",
            VICTIM,
            bootstrap,
            group,
            topic,
            str(priority),
            str(VICTIM_SESSION_MS),
            str(HEARTBEAT_MS),
            cwd=REPO,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        return cls(proc)

    def _event(self, line: str) -> None:
        self.events.append(json.loads(line))

    @staticmethod
    async def _follow(stream: asyncio.StreamReader, sink: Callable[[str], None]) -> None:
        while line := await stream.readline():
            sink(line.decode())

    def last(self, event: str) -> dict[str, Any] | None:
        return next((e for e in reversed(self.events) if e["event"] == event), None)

    def records(self, event: str) -> list[str]:
        return [r for e in self.events if e["event"] == event for r in e["records"]]

    def alive(self) -> None:
        assert self.proc.returncode is None, "the victim died:\n" + "".join(self.stderr)

    async def kill(self) -> None:
        if self.proc.returncode is None:
            self.proc.kill()
        await self.proc.wait()
        await asyncio.gather(*self._tasks)  # both pipes reach EOF once it is dead


async def test_failover_all_to_the_highest_priority_then_to_the_next_when_it_is_killed(
    bootstrap: str, admin: AIOKafkaAdminClient
) -> None:
    """Priorities 10 (a subprocess), 5 and 1: every partition goes to the priority-10 member,
    which consumes and commits them. SIGKILLed (no LeaveGroup), it stays a member until its
    session times out; then every partition goes to the priority-5 member, which goes on
    from the offsets the dead member committed. The priority-1 member never owns or reads
    anything."""
    topic, group, n = "failover-events", "failover", 6
    everything = list(range(n))
    await admin.create_topics([NewTopic(topic, n, 1)])

    victim = await Victim.spawn(bootstrap, group, topic, 10)
    members: list[Member] = []
    try:
        # The priority-10 member, alone, takes everything (and leads the group).
        async def victim_alone() -> bool:
            victim.alive()
            got = victim.last("assigned")
            return got is not None and got["partitions"] == everything

        await wait_until(victim_alone, 20, "the priority-10 member to own every partition")

        # Priorities 5 and 1 join: the priority-10 member keeps everything.
        members = await start_members(
            [Member(f"p{p}", bootstrap, group, topic, FailoverAssignor(priority=p)) for p in (5, 1)]
        )
        p5, p1 = members
        settled: dict[str, Any] = {}

        async def three_settled() -> bool:
            victim.alive()
            got = victim.last("assigned")
            if got is None or got["partitions"] != everything:
                return False
            generation = got["generation"]
            if p5.last != (generation, []) or p1.last != (generation, []):
                return False
            view = await group_view(admin, group, topic)
            expected = {got["member_id"]: everything, p5.member_id: [], p1.member_id: []}
            settled.update(got)
            return view == ("Stable", "failover", expected)

        await wait_until(three_settled, 15, "three members, all partitions on priority 10")
        generation = settled["generation"]

        # It consumes (and commits) what is produced; the others read nothing.
        first = await produce(bootstrap, topic, "w1", n, 5)
        await wait_until(
            lambda: set(victim.records("committed")) >= first,
            10,
            "the priority-10 member to consume and commit every record",
        )
        assert sorted(victim.records("committed")) == sorted(first)
        assert victim.records("commit_failed") == []
        assert p5.consumed == [] and p1.consumed == []

        # Kill it: no LeaveGroup; the group moves on only when its session expires.
        loop = asyncio.get_running_loop()
        killed_at = loop.time()
        await victim.kill()

        async def moved_to_p5() -> bool:
            if p5.last is None or p5.last[0] <= generation or p5.last[1] != everything:
                return False
            if p1.last != (p5.last[0], []):
                return False
            view = await group_view(admin, group, topic)
            return view == ("Stable", "failover", {p5.member_id: everything, p1.member_id: []})

        await wait_until(moved_to_p5, 10, "every partition to move to the priority-5 member")
        moved_after = loop.time() - killed_at
        # Its last heartbeat came at most one interval before the kill.
        assert moved_after >= (VICTIM_SESSION_MS - HEARTBEAT_MS - 100) / 1000, moved_after
        # Both survivors went through exactly one rebalance on the way: no churn.
        assert [a for a in p5.assigned if a[0] > generation] == [(generation + 1, everything)]
        assert [a for a in p1.assigned if a[0] > generation] == [(generation + 1, [])]

        # The priority-5 member consumes new records, from where the dead one committed.
        second = await produce(bootstrap, topic, "w2", n, 5)
        await wait_until(
            lambda: p5.committed >= second, 10, "the priority-5 member to consume the new records"
        )
        assert sorted(p5.consumed) == sorted(second)
        assert p1.consumed == []
        assert p5.commit_errors == [] and p1.commit_errors == []
    finally:
        await victim.kill()
        await stop_members(members)


# --------------------------------------------------------------------------------------------
# sticky


def owners(members: list[Member]) -> dict[int, Member]:
    return {p: m for m in members if m.last for p in m.last[1]}


def settled_at(members: list[Member], partitions: int, after: int) -> int | None:
    """The generation at which every member's last assignment was made, when that is later
    than ``after`` and the assignments split every partition; otherwise None."""
    lasts = [m.last for m in members]
    if any(last is None for last in lasts):
        return None
    generations = {last[0] for last in lasts if last is not None}
    if len(generations) != 1 or (generation := generations.pop()) <= after:
        return None
    owned = sorted(p for last in lasts if last is not None for p in last[1])
    return generation if owned == list(range(partitions)) else None


async def wait_sticky_settled(
    admin: AIOKafkaAdminClient,
    group: str,
    topic: str,
    members: list[Member],
    after: int,
    n: int,
    timeout: float = 15.0,
) -> int:
    found: list[int] = []

    async def settled() -> bool:
        generation = settled_at(members, n, after)
        if generation is None:
            return False
        view = await group_view(admin, group, topic)
        found[:] = [generation]
        expected = {m.member_id: m.last[1] for m in members if m.last}
        return view == ("Stable", "sticky", expected)

    await wait_until(settled, timeout, f"{len(members)} members to share {topic}")
    return found[0]


async def consume_by_owner(bootstrap: str, topic: str, wave: str, members: list[Member]) -> None:
    """Records produced to every partition are consumed (and committed) by its owner only."""
    n = sum(len(m.last[1]) for m in members if m.last)
    before = {m.name: len(m.consumed) for m in members}
    values = await produce(bootstrap, topic, wave, n, 3)
    await wait_until(
        lambda: set().union(*(m.committed for m in members)) >= values,
        10,
        f"the {wave} records to be consumed",
    )
    owner = owners(members)
    for m in members:
        new = m.consumed[before[m.name] :]
        assert sorted(new) == sorted(v for v in values if owner[partition_of(v)] is m), m.name
        assert m.commit_errors == []


async def test_sticky_moves_only_the_departed_members_partitions(
    bootstrap: str, admin: AIOKafkaAdminClient
) -> None:
    """Three sticky members on 9 partitions get 3 each. One leaves (a clean close, so
    LeaveGroup): the two survivors keep every partition they had, and only the 3 of the
    member that left move (split 2 and 1 between them). A new member then joins: it takes
    3, and the survivors give up exactly those 3 and keep the rest. Records are consumed by
    their partition's owner all along, and never re-read after a handover."""
    topic, group, n = "sticky-events", "sticky", 9
    await admin.create_topics([NewTopic(topic, n, 1)])

    def member(name: str) -> Member:
        return Member(name, bootstrap, group, topic, StickyAssignor())

    members = await start_members([member(f"s{i}") for i in range(3)])
    newcomer: Member | None = None
    try:
        generation = await wait_sticky_settled(admin, group, topic, members, 0, n)
        assert sorted(len(m.last[1]) for m in members if m.last) == [3, 3, 3]
        await consume_by_owner(bootstrap, topic, "w1", members)

        # The member with the smallest member id leaves: with range or roundrobin the
        # survivors would lose partitions; sticky keeps each survivor's three.
        members.sort(key=lambda m: m.member_id)
        leaving, survivors = members[0], members[1:]
        before = {m.name: set(m.last[1]) for m in survivors if m.last}
        gone = set(leaving.last[1]) if leaving.last else set()
        await leaving.stop()
        # Well within the 10 s session: the LeaveGroup, not an expiry, moved them.
        generation = await wait_sticky_settled(admin, group, topic, survivors, generation, n, 5)
        after = {m.name: set(m.last[1]) for m in survivors if m.last}
        for m in survivors:
            assert before[m.name] <= after[m.name], (m.name, before, after)
        assert sorted(len(a) for a in after.values()) == [4, 5]
        assert set().union(*(a - before[name] for name, a in after.items())) == gone
        await consume_by_owner(bootstrap, topic, "w2", survivors)
        assert not set(leaving.consumed) & set().union(*(m.consumed for m in survivors))

        # A new member joins: exactly three partitions move, all to it.
        newcomer = await member("s3").start()
        grown = [*survivors, newcomer]
        await wait_sticky_settled(admin, group, topic, grown, generation, n)
        now = {m.name: set(m.last[1]) for m in grown if m.last}
        assert len(now["s3"]) == 3
        for m in survivors:
            assert now[m.name] <= after[m.name], (m.name, after, now)
            assert len(now[m.name]) == 3
        await consume_by_owner(bootstrap, topic, "w3", grown)
        assert newcomer.consumed and all(v.startswith("w3-") for v in newcomer.consumed)
    finally:
        await stop_members([*members, *([newcomer] if newcomer else [])])
