"""confluent-kafka (librdkafka) with ``group.protocol=consumer`` (KIP-848) against kgroupd.

Each consumer runs on its own thread and polls; assignment callbacks record what it was given
and what it gave back, and a shared owner table proves no partition is ever owned twice.
Timeouts are lowered on the broker (heartbeat 300 ms, session 3 s) so the scenarios are quick.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

import pytest_asyncio
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from kgroupd.broker.net.server import KafkaServer
from kgroupd.broker.testing import running_server
from tests.support.kafka_wire import WireClient

SESSION_MS, HEARTBEAT_MS = 3000, 300


@pytest_asyncio.fixture
async def server() -> AsyncIterator[KafkaServer]:
    async with running_server(
        log_level="warning",
        group_consumer_min_heartbeat_interval_ms=100,
        group_consumer_heartbeat_interval_ms=HEARTBEAT_MS,
        group_consumer_min_session_timeout_ms=1000,
        group_consumer_session_timeout_ms=SESSION_MS,
    ) as srv:
        yield srv


class Owners:
    """Who owns each partition right now, from the members' own callbacks."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.owner: dict[tuple[str, int], str] = {}
        self.double: list[tuple[tuple[str, int], str, str]] = []

    def take(self, who: str, parts: list[TopicPartition]) -> None:
        with self.lock:
            for tp in parts:
                key = (tp.topic, tp.partition)
                held = self.owner.get(key)
                if held is not None and held != who:
                    self.double.append((key, held, who))
                self.owner[key] = who

    def give(self, who: str, parts: list[TopicPartition]) -> None:
        with self.lock:
            for tp in parts:
                if self.owner.get((tp.topic, tp.partition)) == who:
                    del self.owner[(tp.topic, tp.partition)]


@dataclass
class Member:
    name: str
    bootstrap: str
    group: str
    owners: Owners
    subscription: list[str]
    extra: dict[str, Any] = field(default_factory=dict)
    values: list[bytes] = field(default_factory=list)
    revoked: list[list[tuple[str, int]]] = field(default_factory=list)
    assigned: set[tuple[str, int]] = field(default_factory=set)
    stop: threading.Event = field(default_factory=threading.Event)
    errors: list[str] = field(default_factory=list)
    stale_commits: int = 0
    consumer: Any = None
    thread: threading.Thread | None = None

    def start(self) -> Member:
        self.consumer = Consumer(
            {
                "bootstrap.servers": self.bootstrap,
                "group.id": self.group,
                "group.protocol": "consumer",
                "client.id": self.name,
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
                **self.extra,
            }
        )

        def on_assign(_c: Any, parts: list[TopicPartition]) -> None:
            self.owners.take(self.name, parts)
            self.assigned.update((tp.topic, tp.partition) for tp in parts)

        def on_revoke(_c: Any, parts: list[TopicPartition]) -> None:
            self.revoked.append(sorted((tp.topic, tp.partition) for tp in parts))
            self.assigned.difference_update((tp.topic, tp.partition) for tp in parts)
            self.owners.give(self.name, parts)

        self.consumer.subscribe(self.subscription, on_assign=on_assign, on_revoke=on_revoke)
        self.thread = threading.Thread(target=self._run, name=self.name, daemon=True)
        self.thread.start()
        return self

    def _run(self) -> None:
        while not self.stop.is_set():
            msg = self.consumer.poll(0.1)
            if msg is None:
                continue
            if msg.error():
                self.errors.append(str(msg.error()))
                continue
            self.values.append(msg.value())
            try:
                self.consumer.commit(msg, asynchronous=False)
            except KafkaException as exc:
                # A commit racing the member's own epoch bump: STALE_MEMBER_EPOCH, as Kafka
                # answers it; the record may be read again by its next owner.
                if exc.args[0].code() != KafkaError.STALE_MEMBER_EPOCH:
                    raise
                self.stale_commits += 1

    def close(self) -> None:
        self.stop.set()
        if self.thread is not None:
            self.thread.join(10)
        self.consumer.close()


async def until(check: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.05)


def produce(bootstrap: str, topic: str, count: int, partitions: int, start: int = 0) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i in range(start, start + count):
        p.produce(topic, str(i).encode(), partition=i % partitions)
        if i % 5000 == 0:
            p.poll(0)
    assert p.flush(30) == 0


def create_topics(bootstrap: str, *names: str, partitions: int = 6) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(n, partitions, 1) for n in names]).values():
        future.result(10)


async def test_three_members_share_six_partitions_commit_and_resume(server: KafkaServer) -> None:
    bootstrap = f"127.0.0.1:{server.port}"
    await asyncio.to_thread(create_topics, bootstrap, "cp")
    await asyncio.to_thread(produce, bootstrap, "cp", 30_000, 6)
    owners = Owners()
    members = [Member(f"m{i}", bootstrap, "cp-g", owners, ["cp"]).start() for i in range(3)]
    try:
        await until(lambda: sum(len(m.values) for m in members) >= 30_000, 90, "30,000 records")
        assert all(len(m.assigned) == 2 for m in members)  # 6 partitions, 2 each
        seen = [v for m in members for v in m.values]
        assert len(seen) == len(set(seen)) == 30_000
        assert not owners.double and not any(m.errors for m in members)
    finally:
        for m in members:
            await asyncio.to_thread(m.close)
    # A new set of members resumes at the commits: nothing is read twice.
    await asyncio.to_thread(produce, bootstrap, "cp", 600, 6, 30_000)
    again = [Member(f"n{i}", bootstrap, "cp-g", Owners(), ["cp"]).start() for i in range(3)]
    try:
        await until(lambda: sum(len(m.values) for m in again) >= 600, 60, "600 new records")
        await asyncio.sleep(0.5)
        # nothing from before is read again (records of the new batch may be, when a commit
        # races a rebalance of the new members)
        assert {int(v) for m in again for v in m.values} == set(range(30_000, 30_600))
    finally:
        for m in again:
            await asyncio.to_thread(m.close)


async def test_a_fourth_member_takes_only_what_moves_and_a_silent_member_is_fenced(
    server: KafkaServer,
) -> None:
    bootstrap = f"127.0.0.1:{server.port}"
    await asyncio.to_thread(create_topics, bootstrap, "mv", partitions=8)
    owners = Owners()
    members = [Member(f"m{i}", bootstrap, "mv-g", owners, ["mv"]).start() for i in range(3)]
    try:
        await until(lambda: sum(len(m.assigned) for m in members) == 8, 30, "8 partitions owned")
        await settled(server.port, "mv-g", members)
        before = {m.name: set(m.assigned) for m in members}
        for m in members:
            m.revoked.clear()
        fourth = Member("m3", bootstrap, "mv-g", owners, ["mv"]).start()
        members.append(fourth)
        await until(lambda: len(fourth.assigned) == 2, 30, "the fourth member's partitions")
        await settled(server.port, "mv-g", members)
        # Exactly the partitions that moved were revoked, each by its previous owner.
        # Exactly the partitions that moved were revoked, each by its previous owner.
        for m in members[:3]:
            revoked = {tp for batch in m.revoked for tp in batch}
            assert revoked == before[m.name] - m.assigned, m.name
        assert not owners.double, owners.double
        assert fourth.assigned == set().union(*(before[m.name] - m.assigned for m in members[:3]))
        # A member that dies without leaving (a raw-wire member that stops heartbeating)
        # loses its partitions after the session timeout, and they go back to the others.
        async with await WireClient.connect(server.port) as wire:
            ghost = await join_and_hold(wire, "mv-g", "mv")
        died = time.monotonic()
        assert ghost, "the raw member got partitions"
        await until(
            lambda: sum(len(m.assigned) for m in members) == 8,
            SESSION_MS / 1000 + 15,
            "the dead member's partitions reassigned",
        )
        assert time.monotonic() - died >= SESSION_MS / 1000 - 1
        assert not owners.double
    finally:
        for m in members:
            await asyncio.to_thread(m.close)


async def settled(port: int, group: str, members: list[Member]) -> None:
    """Until the group is Stable and every member's own view (its callbacks, which librdkafka
    runs in poll(), after it acknowledged) is what the broker assigned it."""
    async with await WireClient.connect(port) as wire:
        deadline = time.monotonic() + 30
        while True:
            (g,) = (await wire.request(69, 1, {"group_ids": [group]}))["groups"]
            broker_view = {
                m["client_id"]: {
                    (t["topic_name"], p)
                    for t in m["assignment"]["topic_partitions"]
                    for p in t["partitions"]
                }
                for m in g["members"]
            }
            client_view = {m.name: set(m.assigned) for m in members}
            if g["group_state"] == "Stable" and broker_view == client_view:
                return
            assert time.monotonic() < deadline, f"not settled: {g} {client_view}"
            await asyncio.sleep(0.05)


async def join_and_hold(wire: WireClient, group: str, topic: str) -> set[tuple[Any, int]]:
    """Join as a raw KIP-848 member (v1) and heartbeat until it owns partitions; returns them."""
    member_id, epoch, owned = "raw-member-0001", 0, []
    body: dict[str, Any] = {
        "group_id": group,
        "member_id": member_id,
        "member_epoch": 0,
        "rebalance_timeout_ms": 10_000,
        "subscribed_topic_names": [topic],
        "topic_partitions": [],
    }
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        resp = await wire.request(68, 1, body)
        assert resp["error_code"] == 0, resp
        epoch = resp["member_epoch"]
        if resp["assignment"] is not None:
            owned = resp["assignment"]["topic_partitions"]
        held = {(t["topic_id"], p) for t in owned for p in t["partitions"]}
        if held:
            return held
        body = {
            "group_id": group,
            "member_id": member_id,
            "member_epoch": epoch,
            "topic_partitions": owned,
        }
        await asyncio.sleep(HEARTBEAT_MS / 1000)
    return set()


async def test_a_regex_subscription_picks_up_a_new_topic_and_describe_shows_the_group(
    server: KafkaServer,
) -> None:
    bootstrap = f"127.0.0.1:{server.port}"
    await asyncio.to_thread(create_topics, bootstrap, "rx-a", partitions=2)
    member = Member("r0", bootstrap, "rx-g", Owners(), ["^rx-.*"]).start()
    try:
        await until(lambda: len(member.assigned) == 2, 30, "rx-a assigned")
        await asyncio.to_thread(create_topics, bootstrap, "rx-b", "other", partitions=2)
        await until(lambda: len(member.assigned) == 4, 30, "rx-b assigned too")
        assert {t for t, _ in member.assigned} == {"rx-a", "rx-b"}
        async with await WireClient.connect(server.port) as wire:
            resp = await wire.request(69, 1, {"group_ids": ["rx-g", "nope"]})
        group, missing = resp["groups"]
        assert (group["error_code"], group["group_state"]) == (0, "Stable")
        assert group["group_epoch"] == group["assignment_epoch"] >= 2
        assert group["assignor_name"] == "uniform"
        (m,) = group["members"]
        assert "^rx-.*" in m["subscribed_topic_regex"]  # librdkafka sends "(^rx-.*)"
        assert m["member_epoch"] == group["group_epoch"]
        assigned = m["assignment"]["topic_partitions"]
        names = sorted((t["topic_name"], p) for t in assigned for p in t["partitions"])
        assert names == sorted(member.assigned)
        assert missing["error_code"] == 69  # GROUP_ID_NOT_FOUND
    finally:
        await asyncio.to_thread(member.close)


def resubscribe_with_regex(bootstrap: str, regex: str, literal: str) -> list[set[tuple[str, int]]]:
    """librdkafka's 0045 ``do_test_resubscribe_with_regex``, on one thread: the regex alone,
    then unsubscribe, then the regex plus a literal topic. Returns the assignments handed to
    ``on_assign`` after the resubscription, in order."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "rx45-g",
            "group.protocol": "consumer",
            "auto.offset.reset": "earliest",
        }
    )
    owned: set[tuple[str, int]] = set()
    given: list[set[tuple[str, int]]] = []

    def on_assign(_c: Any, parts: list[TopicPartition]) -> None:
        got = {(tp.topic, tp.partition) for tp in parts}
        owned.update(got)
        given.append(got)

    def on_revoke(_c: Any, parts: list[TopicPartition]) -> None:
        owned.difference_update((tp.topic, tp.partition) for tp in parts)

    def poll_until(check: Callable[[], bool], what: str) -> None:
        deadline = time.monotonic() + 30
        while not check():
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out waiting for {what}: {given}")
            consumer.poll(0.1)

    try:
        consumer.subscribe([regex], on_assign=on_assign, on_revoke=on_revoke)
        poll_until(lambda: len(owned) == 8, "the regex's 8 partitions")
        consumer.unsubscribe()
        poll_until(lambda: not owned, "everything revoked")
        given.clear()
        consumer.subscribe([regex, literal], on_assign=on_assign, on_revoke=on_revoke)
        poll_until(lambda: len(owned) == 10, "all 10 partitions")
        return given
    finally:
        consumer.close()


async def test_a_new_regex_is_resolved_after_the_first_assignment(server: KafkaServer) -> None:
    """KIP-848 resolves a newly subscribed regex in the background: the heartbeat that brings
    it is answered with the literal topic's partitions only; the regex's come later."""
    bootstrap = f"127.0.0.1:{server.port}"
    await asyncio.to_thread(create_topics, bootstrap, "rx45-1", "rx45-2", partitions=4)
    await asyncio.to_thread(create_topics, bootstrap, "lit45", partitions=2)
    given = await asyncio.to_thread(resubscribe_with_regex, bootstrap, "^rx45-.*", "lit45")
    assert given[0] == {("lit45", 0), ("lit45", 1)}, given
    assert set().union(*given[1:]) == {(t, p) for t in ("rx45-1", "rx45-2") for p in range(4)}
