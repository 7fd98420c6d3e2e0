"""confluent-kafka (librdkafka) consumer groups against kgroupd (issue 3).

- Static membership (KIP-345): a member with ``group.instance.id`` closes (librdkafka sends
  no LeaveGroup for a static member) and restarts within its session timeout: it gets the
  same partitions, the generation stays, and the other members' rebalance callbacks are not
  called again.
- Cooperative rebalancing (KIP-429, ``cooperative-sticky``): a fourth member joins three on 8
  partitions; ``on_revoke`` gets exactly the 2 partitions that move, and a replay of the
  shared callback log shows no partition owned by two members at once.
- Commit/fetch: a member commits offsets (with metadata) and leaves; a new member of the group
  reads the commits back and resumes exactly there.

librdkafka blocks and serves its rebalance callbacks from ``poll()``, so each consumer lives
on its own thread (created, polled and closed there); the broker runs on the test's event
loop, which only awaits. Every wait polls an observable condition with a deadline.
"""

from __future__ import annotations

import asyncio
import dataclasses
import queue
import struct
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator
from typing import Any, TypeVar

import pytest
import pytest_asyncio
from aiokafka import AIOKafkaProducer
from confluent_kafka import Consumer, ConsumerGroupState, TopicPartition
from confluent_kafka.admin import AdminClient, ConsumerGroupDescription

from kgroupd.broker.config.settings import TopicSpec
from kgroupd.broker.handlers import HANDLERS
from kgroupd.broker.net.server import KafkaServer
from kgroupd.broker.testing import running_server
from tests.support.rebalance_log import CallbackLog
from tests.support.threads import settle

T = TypeVar("T")

STATIC_TOPIC, STATIC_PARTITIONS = "static", 6
COOP_TOPIC, COOP_PARTITIONS = "coop", 8
RESUME_TOPIC, RESUME_PARTITIONS = "resume", 3
JOIN_GROUP, LEAVE_GROUP = 11, 13
WAIT_S = 20.0


@pytest_asyncio.fixture
async def server() -> AsyncIterator[KafkaServer]:
    topics = (
        TopicSpec(STATIC_TOPIC, STATIC_PARTITIONS),
        TopicSpec(COOP_TOPIC, COOP_PARTITIONS),
        TopicSpec(RESUME_TOPIC, RESUME_PARTITIONS),
    )
    async with running_server(
        log_level="warning", initial_rebalance_delay_ms=200, create_topics=topics
    ) as srv:
        yield srv


@pytest.fixture
def group_requests(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, dict[str, Any]]]:
    """Every JoinGroup and LeaveGroup the broker receives, as (api key, request fields)."""
    seen: list[tuple[int, dict[str, Any]]] = []
    for key in (JOIN_GROUP, LEAVE_GROUP):
        entry = HANDLERS[key]

        def tap(ctx: Any, req: dict[str, Any], _fn: Any = entry.fn) -> Any:
            seen.append((ctx.api_key, req))
            return _fn(ctx, req)

        monkeypatch.setitem(HANDLERS, key, dataclasses.replace(entry, fn=tap))
    return seen


class Admin:
    """confluent's ``AdminClient`` has no ``close()``: dropping the last reference destroys it,
    which ``close`` does here, before the broker stops (else it keeps reconnecting)."""

    def __init__(self, bootstrap: str) -> None:
        self.client: AdminClient | None = AdminClient({"bootstrap.servers": bootstrap})

    def describe(self, group: str) -> ConsumerGroupDescription:
        assert self.client is not None
        futures = self.client.describe_consumer_groups([group], request_timeout=10)
        return futures[group].result(timeout=WAIT_S)

    def close(self) -> None:
        self.client = None


@pytest.fixture
def admin(bootstrap: str) -> Iterator[Admin]:
    client = Admin(bootstrap)
    yield client
    client.close()


# --- the shared callback log -------------------------------------------------------------------


# --- one consumer on its own thread ------------------------------------------------------------


class Member:
    """A confluent ``Consumer`` created, subscribed, polled and closed on a thread of its own.

    Its rebalance callbacks log to the shared ``CallbackLog`` and apply the change themselves
    (``incremental_(un)assign`` under the cooperative protocol, ``(un)assign`` under eager), so
    a partition is logged as assigned before the consumer takes it and as revoked only after
    the consumer let it go: the logged ownership covers the real one.
    """

    def __init__(
        self,
        name: str,
        config: dict[str, Any],
        topic: str,
        log: CallbackLog,
        cooperative: bool = False,
    ) -> None:
        self.name = name
        self.config = {"client.id": name, **config}
        self.topic = topic
        self.log = log
        self.cooperative = cooperative
        self.records: list[tuple[int, int, bytes]] = []  # (partition, offset, value)
        self.errors: list[str] = []
        self._loop = asyncio.get_running_loop()
        self._calls: queue.SimpleQueue[tuple[Callable[[Consumer], Any], asyncio.Future[Any]]]
        self._calls = queue.SimpleQueue()
        self._stop = threading.Event()
        self._failure: BaseException | None = None
        self._started: asyncio.Future[None] = self._loop.create_future()
        self._finished: asyncio.Future[None] = self._loop.create_future()
        self._thread = threading.Thread(target=self._run, name=f"consumer-{name}", daemon=True)

    async def start(self) -> Member:
        self._thread.start()
        await asyncio.wait_for(self._started, WAIT_S)
        return self

    async def call(self, fn: Callable[[Consumer], T]) -> T:
        """Run ``fn(consumer)`` on the member's thread between two polls."""
        assert not self._stop.is_set(), f"{self.name} is closed"
        fut: asyncio.Future[T] = self._loop.create_future()
        self._calls.put((fn, fut))
        return await asyncio.wait_for(fut, WAIT_S)

    async def close(self) -> None:
        """``Consumer.close()`` on the member's thread; re-raises anything the thread hit."""
        self._stop.set()
        if self._thread.is_alive() or not self._finished.done():
            await asyncio.wait_for(asyncio.shield(self._finished), WAIT_S)
        if self._failure is not None:
            raise self._failure

    # on the member's thread
    def _resolve(
        self, fut: asyncio.Future[Any], value: Any = None, exc: BaseException | None = None
    ):
        settle(self._loop, fut, value, exc)

    def _on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self.log.record(self.name, "assigned", partitions)
        if self.cooperative:
            consumer.incremental_assign(partitions)
        else:
            consumer.assign(partitions)

    def _on_revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        if self.cooperative:
            consumer.incremental_unassign(partitions)
        else:
            consumer.unassign()
        self.log.record(self.name, "revoked", partitions)

    def _run_calls(self, consumer: Consumer) -> None:
        while True:
            try:
                fn, fut = self._calls.get_nowait()
            except queue.Empty:
                return
            try:
                result = fn(consumer)
            except Exception as exc:
                self._resolve(fut, exc=exc)
            else:
                self._resolve(fut, result)

    def _run(self) -> None:
        try:
            consumer = Consumer(self.config)
            consumer.subscribe([self.topic], on_assign=self._on_assign, on_revoke=self._on_revoke)
        except BaseException as exc:
            self._failure = exc
            self._resolve(self._started, exc=exc)
            self._resolve(self._finished)
            return
        self._resolve(self._started)
        try:
            while not self._stop.is_set():
                self._run_calls(consumer)
                msg = consumer.poll(0.05)
                if msg is None:
                    continue
                if msg.error():
                    self.errors.append(str(msg.error()))
                    continue
                self.records.append((msg.partition(), msg.offset(), msg.value()))
            self._run_calls(consumer)
        except BaseException as exc:
            self._failure = exc
        finally:
            try:
                consumer.close()
            except BaseException as exc:
                self._failure = self._failure or exc
            self._resolve(self._finished)


@pytest_asyncio.fixture
async def members() -> AsyncIterator[list[Member]]:
    """Members started by a test; the ones it did not close are closed at teardown."""
    started: list[Member] = []
    yield started
    failures = []
    for m in started:
        try:
            await m.close()
        except BaseException as exc:
            failures.append(exc)
    if failures:
        raise failures[0]


def consumer_config(bootstrap: str, group: str, **extra: Any) -> dict[str, Any]:
    return {
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "session.timeout.ms": 6000,
        "heartbeat.interval.ms": 250,
        "topic.metadata.refresh.interval.ms": 1000,
        "metadata.max.age.ms": 1000,
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
        **extra,
    }


# --- helpers -----------------------------------------------------------------------------------


async def wait_until(
    check: Callable[[], Awaitable[T | None]], what: str, timeout: float = WAIT_S
) -> T:
    """Poll ``check`` until it returns something other than None (or False); fail at timeout."""
    deadline = time.monotonic() + timeout
    while True:
        result = await check()
        if result is not None and result is not False:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        await asyncio.sleep(0.05)


async def describe(admin: Admin, group: str) -> ConsumerGroupDescription:
    return await asyncio.to_thread(admin.describe, group)


def held(desc: ConsumerGroupDescription, key: str) -> dict[str, frozenset[int]]:
    """The broker's assignment per member, keyed by ``client_id`` or ``group_instance_id``."""
    return {
        getattr(m, key): frozenset(tp.partition for tp in m.assignment.topic_partitions)
        for m in desc.members
    }


async def wait_settled(
    admin: Admin,
    group: str,
    log: CallbackLog,
    names: list[str],
    partitions: int,
    key: str = "client_id",
    member_ids: Callable[[], Awaitable[dict[str, str]]] | None = None,
) -> ConsumerGroupDescription:
    """Until the broker reports the group Stable with exactly ``names`` as members, each
    holding what its own callbacks say it owns, and every partition held once; and, given
    ``member_ids`` (name -> member id, as the consumers see them), under those ids."""

    async def check() -> ConsumerGroupDescription | None:
        expected_ids = None if member_ids is None else await member_ids()
        desc = await describe(admin, group)
        if desc.state != ConsumerGroupState.STABLE or len(desc.members) != len(names):
            return None
        if expected_ids is not None and expected_ids != {
            m.client_id: m.member_id for m in desc.members
        }:
            return None
        by_member = held(desc, key)
        owned = log.owned()
        if sorted(by_member) != sorted(names):
            return None
        if any(owned.get(n, frozenset()) != by_member[n] for n in names):
            return None
        if sorted(p for ps in by_member.values() for p in ps) != list(range(partitions)):
            return None
        return desc

    return await wait_until(check, f"group {group} to settle with members {names}")


def client_generation(group_metadata: bytes, group: str, member_id: str) -> int:
    """The generation inside librdkafka's serialized ``consumer_group_metadata()``.

    Layout (librdkafka's rd_kafka_consumer_group_metadata_write): b"CGMDv2:", the generation
    as a native int32, then the NUL-terminated group id and member id, ...
    """
    magic = b"CGMDv2:"
    assert group_metadata.startswith(magic), group_metadata
    (generation,) = struct.unpack_from("=i", group_metadata, len(magic))
    rest = group_metadata[len(magic) + 4 :]
    assert rest.startswith(f"{group}\0{member_id}\0".encode()), group_metadata
    return int(generation)


async def member_generation(member: Member, group: str) -> tuple[str, int]:
    """(member id, generation) as the member's librdkafka sees them."""
    member_id, meta = await member.call(lambda c: (c.memberid(), c.consumer_group_metadata()))
    return member_id, client_generation(meta, group, member_id)


def broker_group(server: KafkaServer, group: str) -> Any:
    """The coordinator's own group object (in-process): DescribeGroups has no generation."""
    return server.broker.coordinator.shard_for(group).groups[group]


async def produce(bootstrap: str, topic: str, values: dict[int, list[bytes]]) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap)
    await producer.start()
    try:
        for partition, vals in values.items():
            for v in vals:
                await producer.send_and_wait(topic, v, partition=partition)
    finally:
        await producer.stop()


def no_errors(members: Iterable[Member]) -> None:
    for m in members:
        assert not m.errors, f"{m.name} got errors from poll(): {m.errors}"


# --- static membership -------------------------------------------------------------------------


@pytest.mark.parametrize("restart", ["leader", "follower"])
async def test_static_member_restart_keeps_partitions_and_generation(
    server: KafkaServer,
    bootstrap: str,
    admin: Admin,
    members: list[Member],
    group_requests: list[tuple[int, dict[str, Any]]],
    restart: str,
) -> None:
    group = f"static-{restart}"
    log = CallbackLog()
    names = ["a", "b", "c"]

    def config(name: str) -> dict[str, Any]:
        return consumer_config(bootstrap, group, **{"group.instance.id": f"instance-{name}"})

    by_name = {}
    for name in names:
        m = await Member(name, config(name), STATIC_TOPIC, log).start()
        members.append(m)
        by_name[name] = m
    desc = await wait_settled(admin, group, log, names, STATIC_PARTITIONS)
    before = held(desc, "group_instance_id")
    ids_before = {m.group_instance_id: m.member_id for m in desc.members}
    generation = broker_group(server, group).generation_id
    for m in by_name.values():
        assert (await member_generation(m, group))[1] == generation

    state = broker_group(server, group)
    leader_instance = state.members[state.leader_id].group_instance_id
    if restart == "leader":
        name = leader_instance.removeprefix("instance-")
    else:
        name = next(n for n in names if f"instance-{n}" != leader_instance)
    instance = f"instance-{name}"
    survivors = [by_name[n] for n in names if n != name]

    # librdkafka closes a static member without LeaveGroup: the broker keeps it, Stable.
    mark = len(log.events())
    requests_mark = len(group_requests)
    await by_name[name].close()
    members.remove(by_name[name])
    assert [e.kind for e in log.events()[mark:]] == ["revoked"]  # its own close only
    assert [k for k, _ in group_requests[requests_mark:]] == [], "close sent a group request"
    desc = await describe(admin, group)
    assert desc.state == ConsumerGroupState.STABLE
    assert {m.group_instance_id: m.member_id for m in desc.members} == ids_before

    # Restart within the session timeout (6 s): same partitions, no rebalance.
    mark = len(log.events())
    restarted = await Member(name, config(name), STATIC_TOPIC, log).start()
    members.append(restarted)
    everyone = [*survivors, restarted]

    async def member_ids() -> dict[str, str]:
        return {m.name: await m.call(lambda c: c.memberid()) for m in everyone}

    # The broker keeps the assignment, so the member ids tell the replacement from the old one.
    desc = await wait_settled(admin, group, log, names, STATIC_PARTITIONS, member_ids=member_ids)
    assert held(desc, "group_instance_id") == before
    ids_after = {m.group_instance_id: m.member_id for m in desc.members}
    assert ids_after[instance] != ids_before[instance]  # replaced under a new member id
    assert {i: v for i, v in ids_after.items() if i != instance} == {
        i: v for i, v in ids_before.items() if i != instance
    }
    joins = [req for key, req in group_requests[requests_mark:] if key == JOIN_GROUP]
    assert [r["group_instance_id"] for r in joins] == [instance], joins
    assert not [req for key, req in group_requests[requests_mark:] if key == LEAVE_GROUP]

    # The group still works: a record on every partition reaches that partition's owner ...
    values = {p: [b"after-restart-%d" % p] for p in range(STATIC_PARTITIONS)}
    await produce(bootstrap, STATIC_TOPIC, values)
    owner = {p: m for m in everyone for p in before[f"instance-{m.name}"]}

    async def all_consumed() -> bool:
        return all(
            (p, b"after-restart-%d" % p) in {(r[0], r[2]) for r in owner[p].records}
            for p in range(STATIC_PARTITIONS)
        )

    await wait_until(all_consumed, "every partition's record at its owner")
    # ... and the survivors' generation is still the broker's: their commits are accepted.
    for m in survivors:
        committed = await m.call(
            lambda c: c.commit(offsets=c.position(c.assignment()), asynchronous=False)
        )
        assert committed and all(tp.error is None for tp in committed), committed

    assert broker_group(server, group).generation_id == generation
    for m in everyone:
        member_id, gen = await member_generation(m, group)
        assert gen == generation, f"{m.name} is at generation {gen}, not {generation}"
        assert member_id == ids_after[f"instance-{m.name}"]
    survivor_names = {m.name for m in survivors}
    assert [e for e in log.events()[mark:] if e.member in survivor_names] == [], (
        "a survivor's rebalance callback ran"
    )
    assert [(e.member, e.kind, e.partitions) for e in log.events()[mark:]] == [
        (name, "assigned", before[instance])
    ]
    desc = await describe(admin, group)
    assert desc.state == ConsumerGroupState.STABLE
    assert held(desc, "group_instance_id") == before
    no_errors(everyone)


# --- cooperative rebalancing -------------------------------------------------------------------


async def test_cooperative_sticky_fourth_member_moves_two_partitions(
    bootstrap: str, admin: Admin, members: list[Member]
) -> None:
    group = "coop"
    log = CallbackLog()
    config = consumer_config(
        bootstrap, group, **{"partition.assignment.strategy": "cooperative-sticky"}
    )
    for name in ["a", "b", "c"]:
        members.append(await Member(name, config, COOP_TOPIC, log, cooperative=True).start())
    desc = await wait_settled(admin, group, log, ["a", "b", "c"], COOP_PARTITIONS)
    three = held(desc, "client_id")
    assert sorted(len(ps) for ps in three.values()) == [2, 3, 3]

    mark = len(log.events())
    members.append(await Member("d", config, COOP_TOPIC, log, cooperative=True).start())
    desc = await wait_settled(admin, group, log, ["a", "b", "c", "d"], COOP_PARTITIONS)
    four = held(desc, "client_id")
    assert sorted(len(ps) for ps in four.values()) == [2, 2, 2, 2]

    moved = four["d"]
    events = log.events()[mark:]
    revoked = sorted(p for e in events if e.kind == "revoked" for p in e.partitions)
    assert revoked == sorted(moved), events  # on_revoke got exactly the 2 that moved
    assert len(moved) == 2
    for name in ["a", "b", "c"]:  # sticky: nobody else lost or gained anything
        assert four[name] == three[name] - moved, (name, three[name], four[name])
        gained = {
            p for e in events if e.member == name and e.kind == "assigned" for p in e.partitions
        }
        assert not gained, (name, gained)
    assert {
        p for e in events if e.member == "d" and e.kind == "assigned" for p in e.partitions
    } == moved

    no_errors(members)
    for m in list(members):
        await m.close()
        members.remove(m)
    assert log.owned() == {}  # the replay, closes included, never saw two owners


# --- commit and resume -------------------------------------------------------------------------


async def test_commit_then_new_member_resumes_from_committed_offsets(
    bootstrap: str, members: list[Member]
) -> None:
    group = "resume"
    log = CallbackLog()
    config = consumer_config(bootstrap, group)
    first_batch = {
        p: [b"first-%d-%d" % (p, i) for i in range(10)] for p in range(RESUME_PARTITIONS)
    }
    await produce(bootstrap, RESUME_TOPIC, first_batch)

    first = await Member("first", config, RESUME_TOPIC, log).start()
    members.append(first)

    async def read_all_first() -> bool:
        return len(first.records) >= 10 * RESUME_PARTITIONS

    await wait_until(read_all_first, "the first member to read 30 records")
    assert sorted((p, v) for p, _, v in first.records) == sorted(
        (p, v) for p, vs in first_batch.items() for v in vs
    )
    commits = [
        TopicPartition(RESUME_TOPIC, p, 10, metadata=f"meta-{p}") for p in range(RESUME_PARTITIONS)
    ]
    result = await first.call(lambda c: c.commit(offsets=commits, asynchronous=False))
    assert [(tp.partition, tp.offset, tp.error) for tp in result] == [
        (p, 10, None) for p in range(RESUME_PARTITIONS)
    ]
    await first.close()  # a dynamic member: LeaveGroup
    members.remove(first)

    second_batch = {
        p: [b"second-%d-%d" % (p, i) for i in range(5)] for p in range(RESUME_PARTITIONS)
    }
    await produce(bootstrap, RESUME_TOPIC, second_batch)

    second = await Member("second", config, RESUME_TOPIC, log).start()
    members.append(second)
    wanted = [TopicPartition(RESUME_TOPIC, p) for p in range(RESUME_PARTITIONS)]
    fetched = await second.call(lambda c: c.committed(wanted, timeout=10))
    assert [(tp.partition, tp.offset, tp.metadata) for tp in fetched] == [
        (p, 10, f"meta-{p}") for p in range(RESUME_PARTITIONS)
    ]

    async def read_second() -> bool:
        return len(second.records) >= 5 * RESUME_PARTITIONS

    await wait_until(read_second, "the second member to read the 15 new records")
    assert sorted((p, o, v) for p, o, v in second.records) == sorted(
        (p, 10 + i, v) for p, vs in second_batch.items() for i, v in enumerate(vs)
    )
    no_errors([first, second])


def test_callback_log_replay_rejects_overlap() -> None:
    """The replay the cooperative test relies on fails on a partition with two owners."""
    log = CallbackLog()
    log.record("a", "assigned", [TopicPartition("t", 0), TopicPartition("t", 1)])
    log.record("b", "assigned", [TopicPartition("t", 2)])
    log.record("a", "revoked", [TopicPartition("t", 1)])
    log.record("b", "assigned", [TopicPartition("t", 1)])
    assert log.owned() == {"a": frozenset({0}), "b": frozenset({1, 2})}
    log.record("b", "assigned", [TopicPartition("t", 0)])
    with pytest.raises(AssertionError, match="partition 0 assigned to b while a owns it"):
        log.owned()
    other = CallbackLog()
    other.record("a", "revoked", [TopicPartition("t", 3)])
    with pytest.raises(AssertionError, match="a revoked partition 3 it does not own"):
        other.owned()
