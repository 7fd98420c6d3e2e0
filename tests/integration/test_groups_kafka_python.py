"""kafka-python 3 consumer groups against kgroupd (issue 3).

- Cooperative rebalancing (KIP-429): kafka-python 3 ships
  ``kafka.coordinator.assignors.cooperative_sticky.CooperativeStickyAssignor`` (protocol name
  ``cooperative-sticky``, ``RebalanceProtocol.COOPERATIVE``). A fourth member joins three on
  8 partitions: ``on_partitions_revoked`` gets exactly the 2 partitions that move, and a
  replay of the shared callback log shows no partition owned by two members at once.
- Commit/fetch: a member commits offsets (with metadata) and leaves; a new member of the group
  reads the commits back (and the admin client agrees) and resumes exactly there.

``KafkaConsumer`` is blocking (its network loop runs on a thread of its own, which also calls
the rebalance listener); each consumer is created, polled and closed on a dedicated thread.
The broker runs on the test's event loop, which only awaits. Every wait polls an observable
condition with a deadline.
"""

from __future__ import annotations

import asyncio
import queue
import threading
import time
import warnings
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

import pytest
import pytest_asyncio
from aiokafka import AIOKafkaProducer

from kgroupd.broker.config.settings import TopicSpec
from kgroupd.broker.net.server import KafkaServer
from kgroupd.broker.testing import running_server
from tests.support.rebalance_log import CallbackLog
from tests.support.threads import settle

# kafka-python 3.0 reads its message schemas with importlib.resources.read_text (which calls
# open_text), deprecated in Python 3.11 and 3.12 (un-deprecated in 3.13), as its modules load.
_LEGACY_RESOURCES = "(read_text|open_text) is deprecated"
with warnings.catch_warnings():
    warnings.filterwarnings("ignore", _LEGACY_RESOURCES, DeprecationWarning)
    from kafka import KafkaAdminClient, KafkaConsumer, TopicPartition
    from kafka.consumer.subscription_state import ConsumerRebalanceListener
    from kafka.coordinator.assignors.abstract import RebalanceProtocol
    from kafka.coordinator.assignors.cooperative_sticky import CooperativeStickyAssignor
    from kafka.structs import OffsetAndMetadata

pytestmark = pytest.mark.filterwarnings(f"ignore:{_LEGACY_RESOURCES}:DeprecationWarning")

T = TypeVar("T")

COOP_TOPIC, COOP_PARTITIONS = "coop", 8
RESUME_TOPIC, RESUME_PARTITIONS = "resume", 3
WAIT_S = 20.0


@pytest_asyncio.fixture
async def server() -> AsyncIterator[KafkaServer]:
    topics = (TopicSpec(COOP_TOPIC, COOP_PARTITIONS), TopicSpec(RESUME_TOPIC, RESUME_PARTITIONS))
    async with running_server(
        log_level="warning", initial_rebalance_delay_ms=200, create_topics=topics
    ) as srv:
        yield srv


@pytest_asyncio.fixture
async def admin(bootstrap: str) -> AsyncIterator[KafkaAdminClient]:
    client = await asyncio.to_thread(KafkaAdminClient, bootstrap_servers=bootstrap)
    try:
        yield client
    finally:
        await asyncio.to_thread(client.close)


# --- the shared callback log -------------------------------------------------------------------


class LoggingListener(ConsumerRebalanceListener):
    """kafka-python calls it after it changed the assignment: the member stopped fetching a
    revoked partition before the call, and the new owner starts on one only after the old
    owner's call returned and it rejoined (the second cooperative round)."""

    def __init__(self, name: str, log: CallbackLog) -> None:
        self.name = name
        self.log = log

    def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        self.log.record(self.name, "revoked", revoked)

    def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        self.log.record(self.name, "assigned", assigned)


# --- one consumer on its own thread ------------------------------------------------------------


class Member:
    """A ``KafkaConsumer`` created, subscribed, polled and closed on a thread of its own."""

    def __init__(self, name: str, config: dict[str, Any], topic: str, log: CallbackLog) -> None:
        self.name = name
        self.config = {"client_id": name, **config}
        self.topic = topic
        self.log = log
        self.records: list[tuple[int, int, bytes]] = []  # (partition, offset, value)
        self._loop = asyncio.get_running_loop()
        self._calls: queue.SimpleQueue[
            tuple[Callable[[KafkaConsumer], Any], asyncio.Future[Any]]
        ] = queue.SimpleQueue()
        self._stop = threading.Event()
        self._failure: BaseException | None = None
        self._started: asyncio.Future[None] = self._loop.create_future()
        self._finished: asyncio.Future[None] = self._loop.create_future()
        self._thread = threading.Thread(target=self._run, name=f"consumer-{name}", daemon=True)

    async def start(self) -> Member:
        self._thread.start()
        await asyncio.wait_for(self._started, WAIT_S)
        return self

    async def call(self, fn: Callable[[KafkaConsumer], T]) -> T:
        """Run ``fn(consumer)`` on the member's thread between two polls."""
        assert not self._stop.is_set(), f"{self.name} is closed"
        fut: asyncio.Future[T] = self._loop.create_future()
        self._calls.put((fn, fut))
        return await asyncio.wait_for(fut, WAIT_S)

    async def close(self) -> None:
        """``KafkaConsumer.close()`` (LeaveGroup) on the member's thread; re-raises anything
        the thread hit."""
        self._stop.set()
        if self._thread.is_alive() or not self._finished.done():
            await asyncio.wait_for(asyncio.shield(self._finished), WAIT_S)
        if self._failure is not None:
            raise self._failure

    # on the member's thread
    def _resolve(
        self, fut: asyncio.Future[Any], value: Any = None, exc: BaseException | None = None
    ) -> None:
        settle(self._loop, fut, value, exc)

    def _run_calls(self, consumer: KafkaConsumer) -> None:
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
            consumer = KafkaConsumer(**self.config)
            consumer.subscribe([self.topic], listener=LoggingListener(self.name, self.log))
        except BaseException as exc:
            self._failure = exc
            self._resolve(self._started, exc=exc)
            self._resolve(self._finished)
            return
        self._resolve(self._started)
        try:
            while not self._stop.is_set():
                self._run_calls(consumer)
                for tp, batch in consumer.poll(timeout_ms=50).items():
                    self.records.extend((tp.partition, r.offset, r.value) for r in batch)
            self._run_calls(consumer)
        except BaseException as exc:
            self._failure = exc
        finally:
            try:
                consumer.close(autocommit=False, timeout_ms=10000)
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
        "bootstrap_servers": bootstrap,
        "group_id": group,
        "session_timeout_ms": 6000,
        "heartbeat_interval_ms": 250,
        "metadata_max_age_ms": 1000,
        "auto_offset_reset": "earliest",
        "enable_auto_commit": False,
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


async def describe(admin: KafkaAdminClient, group: str) -> dict[str, Any]:
    return (await asyncio.to_thread(admin.describe_groups, [group]))[group]


def held(desc: dict[str, Any], topic: str) -> dict[str, frozenset[int]]:
    """The broker's assignment per member (by client id), decoded by kafka-python."""
    out = {}
    for m in desc["members"]:
        assignment = m["member_assignment"] or {"assigned_partitions": []}
        parts = [
            p
            for t in assignment["assigned_partitions"]
            if t["topic"] == topic
            for p in t["partitions"]
        ]
        out[m["client_id"]] = frozenset(parts)
    return out


async def wait_settled(
    admin: KafkaAdminClient,
    group: str,
    log: CallbackLog,
    names: list[str],
    topic: str,
    partitions: int,
) -> dict[str, Any]:
    """Until the broker reports the group Stable with exactly ``names`` as members, each
    holding what its own callbacks say it owns, and every partition held once."""

    async def check() -> dict[str, Any] | None:
        desc = await describe(admin, group)
        if desc["group_state"] != "Stable" or len(desc["members"]) != len(names):
            return None
        by_member = held(desc, topic)
        owned = log.owned()
        if sorted(by_member) != sorted(names):
            return None
        if any(owned.get(n, frozenset()) != by_member[n] for n in names):
            return None
        if sorted(p for ps in by_member.values() for p in ps) != list(range(partitions)):
            return None
        return desc

    return await wait_until(check, f"group {group} to settle with members {names}")


async def produce(bootstrap: str, topic: str, values: dict[int, list[bytes]]) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap)
    await producer.start()
    try:
        for partition, vals in values.items():
            for v in vals:
                await producer.send_and_wait(topic, v, partition=partition)
    finally:
        await producer.stop()


# --- cooperative rebalancing -------------------------------------------------------------------


async def test_cooperative_sticky_fourth_member_moves_two_partitions(
    bootstrap: str, admin: KafkaAdminClient, members: list[Member]
) -> None:
    assert RebalanceProtocol.COOPERATIVE in CooperativeStickyAssignor().supported_protocols()
    group = "coop"
    log = CallbackLog()
    config = consumer_config(
        bootstrap, group, partition_assignment_strategy=[CooperativeStickyAssignor]
    )
    for name in ["a", "b", "c"]:
        members.append(await Member(name, config, COOP_TOPIC, log).start())
    desc = await wait_settled(admin, group, log, ["a", "b", "c"], COOP_TOPIC, COOP_PARTITIONS)
    assert desc["protocol_data"] == "cooperative-sticky"
    three = held(desc, COOP_TOPIC)
    assert sorted(len(ps) for ps in three.values()) == [2, 3, 3]

    mark = len(log.events())
    members.append(await Member("d", config, COOP_TOPIC, log).start())
    desc = await wait_settled(admin, group, log, ["a", "b", "c", "d"], COOP_TOPIC, COOP_PARTITIONS)
    four = held(desc, COOP_TOPIC)
    assert sorted(len(ps) for ps in four.values()) == [2, 2, 2, 2]

    moved = four["d"]
    events = log.events()[mark:]
    revoked = sorted(p for e in events if e.kind == "revoked" for p in e.partitions)
    assert revoked == sorted(moved), events  # on_partitions_revoked got exactly the 2 that moved
    assert len(moved) == 2
    for name in ["a", "b", "c"]:  # sticky: nobody else lost or gained anything
        assert four[name] == three[name] - moved, (name, three[name], four[name])
        gained = {
            p for e in events if e.member == name and e.kind == "assigned" for p in e.partitions
        }
        assert not gained, (name, gained)
    d_assigned = {
        p for e in events if e.member == "d" and e.kind == "assigned" for p in e.partitions
    }
    assert d_assigned == moved

    for m in list(members):
        await m.close()
        members.remove(m)
    assert log.owned() == {}  # the replay, closes included, never saw two owners


# --- commit and resume -------------------------------------------------------------------------


async def test_commit_then_new_member_resumes_from_committed_offsets(
    bootstrap: str, admin: KafkaAdminClient, members: list[Member]
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
    tps = [TopicPartition(RESUME_TOPIC, p) for p in range(RESUME_PARTITIONS)]
    commits = {tp: OffsetAndMetadata(10, f"meta-{tp.partition}", -1) for tp in tps}
    await first.call(lambda c: c.commit(offsets=commits, timeout_ms=10000))
    await first.close()  # LeaveGroup
    members.remove(first)

    second_batch = {
        p: [b"second-%d-%d" % (p, i) for i in range(5)] for p in range(RESUME_PARTITIONS)
    }
    await produce(bootstrap, RESUME_TOPIC, second_batch)

    listed = await asyncio.to_thread(admin.list_group_offsets, group)
    assert {tp: (om.offset, om.metadata) for tp, om in listed[group].items()} == {
        tp: (10, f"meta-{tp.partition}") for tp in tps
    }

    second = await Member("second", config, RESUME_TOPIC, log).start()
    members.append(second)
    fetched = await second.call(
        lambda c: [c.committed(tp, metadata=True, timeout_ms=10000) for tp in tps]
    )
    assert [(om.offset, om.metadata) for om in fetched] == [
        (10, f"meta-{p}") for p in range(RESUME_PARTITIONS)
    ]

    async def read_second() -> bool:
        return len(second.records) >= 5 * RESUME_PARTITIONS

    await wait_until(read_second, "the second member to read the 15 new records")
    assert sorted(second.records) == sorted(
        (p, 10 + i, v) for p, vs in second_batch.items() for i, v in enumerate(vs)
    )
