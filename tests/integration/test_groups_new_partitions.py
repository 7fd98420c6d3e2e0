"""A subscribed topic gains partitions: every client's group rebalances onto them (issue 3).

"Adding partitions to a subscribed topic makes every client rebalance and pick up the new
partitions." aiokafka is covered in ``test_groups_aiokafka.py``; here the same scenario runs
for confluent-kafka (librdkafka), kafkajs (``tests/js/new_partitions.js``) and the Java
client (``tests/java/KgroupdNewPartitions.java``). kafka-python 3 has its test here too, skipped:
its leader can lose the rebalance it started itself (a client bug, see ``KAFKA_PYTHON_LOST_JOIN``).

1. two members of one group subscribe to a 2-partition topic and split it (Stable);
2. CreatePartitions (aiokafka's admin client) raises the topic to 4 partitions;
3. within the clients' metadata refresh (1000 ms) the group rebalances: the broker's
   generation moves on, the group is Stable again, every one of the 4 partitions is assigned
   to exactly one member, as both the clients (their rebalance callbacks) and the broker
   (DescribeGroups) report;
4. records produced to the new partitions 2 and 3 are consumed, each once, by its owner.

Every member reports the same events, whatever the client: ``assigned`` / ``revoked`` (with
partitions) and ``record`` (partition, value). The blocking Python clients each run on a
thread of their own (the broker runs on the test's event loop); node and java are
subprocesses that print the events as JSON lines and stop on "stop" on stdin. Every wait polls
an observable condition with a deadline.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import shutil
import threading
import time
import warnings
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from aiokafka import AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewPartitions
from confluent_kafka import Consumer

from kgroupd.broker.config.settings import TopicSpec
from kgroupd.broker.coordinator import DescribeGroups
from kgroupd.broker.net.server import KafkaServer
from kgroupd.broker.testing import running_server
from tests.conftest import require
from tests.integration.test_groups_kafkajs import install_kafkajs
from tests.support.groups import decode_assignment
from tests.support.java import JavaClient, java_available, prepare_java_client

# kafka-python 3.0 reads its message schemas with importlib.resources.read_text (deprecated in
# Python 3.11 and 3.12) as its modules load.
_LEGACY_RESOURCES = "(read_text|open_text) is deprecated"
with warnings.catch_warnings():
    warnings.filterwarnings("ignore", _LEGACY_RESOURCES, DeprecationWarning)
    from kafka import KafkaConsumer
    from kafka.consumer.subscription_state import ConsumerRebalanceListener

pytestmark = pytest.mark.filterwarnings(f"ignore:{_LEGACY_RESOURCES}:DeprecationWarning")

REPO = Path(__file__).resolve().parents[2]
JS_SCRIPT = REPO / "tests" / "js" / "new_partitions.js"
JAVA_MAIN = "KgroupdNewPartitions"
CLIENTS = ("confluent", "kafka-python", "kafkajs", "java")
BEFORE, AFTER = 2, 4
MEMBERS = 2
META_AGE_MS = 1000
WAIT_S = 20.0


def topic_of(client: str) -> str:
    return f"grow-{client}"


@pytest_asyncio.fixture
async def server() -> AsyncIterator[KafkaServer]:
    async with running_server(
        log_level="warning",
        initial_rebalance_delay_ms=200,
        group_min_session_timeout_ms=1000,
        create_topics=tuple(TopicSpec(topic_of(c), BEFORE) for c in CLIENTS),
    ) as srv:
        yield srv


@pytest_asyncio.fixture
async def admin(bootstrap: str) -> AsyncIterator[AIOKafkaAdminClient]:
    client = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await client.start()
    try:
        yield client
    finally:
        await client.close()


# --- members: every client reports the same events -------------------------------------------


class Members:
    """A group's members, whatever the client: the events they reported and their health."""

    events: list[dict[str, Any]]  # appended to from other threads (list.append is atomic)

    def failed(self) -> str | None:
        raise NotImplementedError

    async def close(self) -> None:
        raise NotImplementedError

    def owned(self) -> dict[str, frozenset[int]]:
        """Each member's partitions now: its latest ``assigned``, emptied by a ``revoked``."""
        owned: dict[str, frozenset[int]] = {}
        for e in list(self.events):
            parts = frozenset(e.get("partitions", ()))
            if e["event"] == "assigned":
                owned[e["member"]] = parts
            elif e["event"] == "revoked":
                owned[e["member"]] = owned.get(e["member"], frozenset()) - parts
        return owned

    def records(self) -> list[tuple[str, int, str]]:
        return [(e["member"], e["partition"], e["value"]) for e in self.of("record")]

    def of(self, kind: str) -> list[dict[str, Any]]:
        return [e for e in list(self.events) if e["event"] == kind]


class ThreadMembers(Members):
    """Blocking consumers (confluent, kafka-python), each created, polled and closed on a
    thread of its own; ``make(name, events)`` returns (poll once, close)."""

    def __init__(
        self,
        make: Callable[[str, list[dict[str, Any]]], tuple[Callable[[], None], Callable[[], None]]],
        prefix: str,
    ) -> None:
        self.events = []
        self.errors: list[str] = []
        self._make = make
        self._stop = threading.Event()
        self._threads = [
            threading.Thread(
                target=self._run, args=(f"{prefix}{i}",), name=f"member-{prefix}{i}", daemon=True
            )
            for i in range(MEMBERS)
        ]
        for t in self._threads:
            t.start()

    def _run(self, name: str) -> None:
        try:
            poll, close = self._make(name, self.events)
        except Exception as exc:
            self.errors.append(f"{name}: {exc!r}")
            return
        try:
            while not self._stop.is_set():
                poll()
        except Exception as exc:
            self.errors.append(f"{name}: {exc!r}")
        finally:
            try:
                close()
            except Exception as exc:
                self.errors.append(f"{name} close: {exc!r}")

    def failed(self) -> str | None:
        return f"consumer threads failed: {self.errors}" if self.errors else None

    async def close(self) -> None:
        self._stop.set()
        for t in self._threads:
            await asyncio.to_thread(t.join, WAIT_S)
        assert not any(t.is_alive() for t in self._threads), "a consumer did not close"
        assert self.failed() is None, self.failed()


def confluent_member(
    bootstrap: str, group: str, topic: str
) -> Callable[[str, list[dict[str, Any]]], tuple[Callable[[], None], Callable[[], None]]]:
    def make(name: str, events: list[dict[str, Any]]) -> tuple[Callable[[], None], Any]:
        consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": group,
                "client.id": name,
                "session.timeout.ms": 6000,
                "heartbeat.interval.ms": 250,
                "topic.metadata.refresh.interval.ms": META_AGE_MS,
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
            }
        )

        def on_assign(c: Consumer, tps: list[Any]) -> None:
            parts = sorted(tp.partition for tp in tps)
            events.append({"event": "assigned", "member": name, "partitions": parts})

        def on_revoke(c: Consumer, tps: list[Any]) -> None:
            parts = sorted(tp.partition for tp in tps)
            events.append({"event": "revoked", "member": name, "partitions": parts})

        consumer.subscribe([topic], on_assign=on_assign, on_revoke=on_revoke)

        def poll() -> None:
            msg = consumer.poll(0.05)
            if msg is None:
                return
            if msg.error():
                raise RuntimeError(f"consumer error: {msg.error()}")
            value = (msg.value() or b"").decode()
            events.append(
                {"event": "record", "member": name, "partition": msg.partition(), "value": value}
            )

        return poll, consumer.close

    return make


def kafka_python_member(
    bootstrap: str, group: str, topic: str
) -> Callable[[str, list[dict[str, Any]]], tuple[Callable[[], None], Callable[[], None]]]:
    def make(name: str, events: list[dict[str, Any]]) -> tuple[Callable[[], None], Any]:
        consumer = KafkaConsumer(
            bootstrap_servers=bootstrap,
            group_id=group,
            client_id=name,
            session_timeout_ms=6000,
            heartbeat_interval_ms=250,
            metadata_max_age_ms=META_AGE_MS,
            auto_offset_reset="earliest",
            enable_auto_commit=False,
        )

        class Listener(ConsumerRebalanceListener):
            def on_partitions_revoked(self, revoked: set[Any]) -> None:
                parts = sorted(tp.partition for tp in revoked)
                events.append({"event": "revoked", "member": name, "partitions": parts})

            def on_partitions_assigned(self, assigned: set[Any]) -> None:
                parts = sorted(tp.partition for tp in assigned)
                events.append({"event": "assigned", "member": name, "partitions": parts})

        consumer.subscribe([topic], listener=Listener())

        def poll() -> None:
            for tp, batch in consumer.poll(timeout_ms=50).items():
                for rec in batch:
                    value = (rec.value or b"").decode()
                    events.append(
                        {
                            "event": "record",
                            "member": name,
                            "partition": tp.partition,
                            "value": value,
                        }
                    )

        return poll, consumer.close

    return make


class ProcessMembers(Members):
    """A node or java subprocess running the group's members; it prints the events as JSON
    lines and, on "stop" on stdin, closes its consumers and exits 0."""

    def __init__(self, proc: asyncio.subprocess.Process, what: str) -> None:
        self.proc = proc
        self.what = what
        self.events = []
        self.stderr = b""
        self._readers = [
            asyncio.create_task(self._read_stdout()),
            asyncio.create_task(self._read_stderr()),
        ]

    @classmethod
    async def start(
        cls, what: str, *command: str, env: dict[str, str] | None = None
    ) -> ProcessMembers:
        proc = await asyncio.create_subprocess_exec(
            *command,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=env,
        )
        return cls(proc, what)

    async def _read_stdout(self) -> None:
        assert self.proc.stdout is not None
        async for line in self.proc.stdout:
            self.events.append(json.loads(line))

    async def _read_stderr(self) -> None:
        assert self.proc.stderr is not None
        self.stderr = await self.proc.stderr.read()

    def failed(self) -> str | None:
        if self.of("error") or self.proc.returncode not in (None, 0):
            return (
                f"{self.what} failed (exit {self.proc.returncode}): {self.of('error')}\n"
                f"{self.stderr.decode(errors='replace')[-20_000:]}"
            )
        return None

    async def close(self) -> None:
        """ "stop": the members leave and the process exits 0; killed if it does not."""
        try:
            if self.proc.returncode is None:
                assert self.proc.stdin is not None
                self.proc.stdin.write(b"stop\n")
                with contextlib.suppress(ConnectionError):
                    await self.proc.stdin.drain()
                await asyncio.wait_for(self.proc.wait(), WAIT_S)
                await asyncio.wait_for(asyncio.gather(*self._readers), WAIT_S)
                assert self.proc.returncode == 0 and self.of("done"), self.failed()
        finally:
            if self.proc.returncode is None:
                self.proc.kill()
                await self.proc.wait()
            for t in self._readers:
                t.cancel()
            for t in self._readers:
                with contextlib.suppress(asyncio.CancelledError):
                    await t
            if self.proc.stdin is not None:
                self.proc.stdin.close()


@pytest_asyncio.fixture
async def started() -> AsyncIterator[list[Members]]:
    """Groups of members a test started; the ones it did not close are closed at teardown."""
    groups: list[Members] = []
    yield groups
    failures = []
    for g in groups:
        try:
            await g.close()
        except BaseException as exc:
            failures.append(exc)
    if failures:
        raise failures[0]


# --- the scenario --------------------------------------------------------------------------


def broker_view(server: KafkaServer, group: str, topic: str) -> tuple[str, int, list[list[int]]]:
    """(state, generation, each member's partitions of ``topic``, sorted) as the broker has
    them: DescribeGroups' state and assignments, the group's generation id."""
    (described,) = server.broker.coordinator.describe_groups(DescribeGroups((group,))).groups
    parts = sorted(decode_assignment(m.assignment).get(topic, []) for m in described.members)
    found = server.broker.coordinator.shard_for(group).groups.get(group)
    return described.state, found.generation_id if found is not None else -1, parts


def split(members: Members, count: int) -> dict[str, frozenset[int]] | None:
    """The members' partitions once the 2 of them own ``count`` partitions, each exactly once."""
    owned = members.owned()
    if len(owned) != MEMBERS or not all(owned.values()):
        return None
    if sorted(p for ps in owned.values() for p in ps) != list(range(count)):
        return None
    return owned


async def wait_for(members: Members, check: Callable[[], Any], what: str) -> Any:
    deadline = time.monotonic() + WAIT_S
    while True:
        result = check()
        if result is not None and result is not False:
            return result
        assert members.failed() is None, members.failed()
        if time.monotonic() > deadline:
            raise AssertionError(
                f"timed out after {WAIT_S} s waiting for {what}; events: {members.events}"
            )
        await asyncio.sleep(0.05)


async def grow_and_consume(
    server: KafkaServer,
    bootstrap: str,
    admin: AIOKafkaAdminClient,
    members: Members,
    group: str,
    topic: str,
) -> None:
    def settled(count: int, after_generation: int = -1) -> dict[str, frozenset[int]] | None:
        owned = split(members, count)
        if owned is None:
            return None
        state, generation, parts = broker_view(server, group, topic)
        if state != "Stable" or generation <= after_generation:
            return None
        # the broker's assignments are the ones the clients took
        return owned if parts == sorted(sorted(ps) for ps in owned.values()) else None

    await wait_for(members, lambda: settled(BEFORE), f"the {MEMBERS} members to split {BEFORE}")
    _, generation, _ = broker_view(server, group, topic)

    await admin.create_partitions({topic: NewPartitions(total_count=AFTER)})
    owners = await wait_for(
        members,
        lambda: settled(AFTER, generation),
        f"a rebalance onto the {AFTER} partitions (past generation {generation})",
    )

    values = {p: [f"new-{p}-{i}" for i in range(5)] for p in range(BEFORE, AFTER)}
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap)
    await producer.start()
    try:
        for p, vs in values.items():
            for v in vs:
                await producer.send_and_wait(topic, v.encode(), partition=p)
    finally:
        await producer.stop()
    wanted = sorted((p, v) for p, vs in values.items() for v in vs)

    def consumed() -> list[tuple[str, int, str]]:
        return [r for r in members.records() if r[1] >= BEFORE]

    await wait_for(
        members,
        lambda: len(consumed()) >= len(wanted),
        "the records of the new partitions to be consumed",
    )
    got = consumed()
    assert sorted((p, v) for _, p, v in got) == wanted, got  # each record exactly once
    for member, p, v in got:
        assert p in owners[member], f"{v} consumed by {member}, which owns {owners[member]}"
    assert members.owned() == owners, "no further rebalance expected"
    assert broker_view(server, group, topic)[1] > generation


# --- one test per client -------------------------------------------------------------------


async def test_confluent_group_picks_up_new_partitions(
    server: KafkaServer, bootstrap: str, admin: AIOKafkaAdminClient, started: list[Members]
) -> None:
    group, topic = "grow-confluent", topic_of("confluent")
    members = ThreadMembers(confluent_member(bootstrap, group, topic), "c")
    started.append(members)
    await grow_and_consume(server, bootstrap, admin, members, group, topic)
    await members.close()


# kafka-python 3.0.12 (the newest release) loses a join that finishes while no poll() awaits
# it, in kafka/coordinator/base.py BaseCoordinator.join_group_async and
# kafka/coordinator/consumer.py ConsumerCoordinator.need_rejoin:
# - poll(timeout_ms=N) hands its remaining time to join_group_async, which on timeout leaves
#   the JoinGroup -> SyncGroup task (_join_task) running on the IO thread and returns False;
# - the partition change is noticed by the leader alone, as _assignment_snapshot !=
#   _metadata_snapshot in need_rejoin(); rejoin_needed stays False;
# - if the JoinGroup answer arrives before the next poll() checks need_rejoin(), the task's
#   _perform_assignment sets _assignment_snapshot = _metadata_snapshot, so need_rejoin() is
#   False from then on (a pending _join_task is not counted, unlike Java's
#   rejoinNeededOrPending) and join_group_async never runs again: the finished task's
#   assignment is never applied, state stays REBALANCING, heartbeats stay disabled (they were
#   disabled for the join), and the broker expires the leader after session_timeout_ms. The
#   leader then sends only Metadata, forever.
# - when rejoin_needed is True instead (first join, a REBALANCE_IN_PROGRESS heartbeat),
#   join_group_async replaces a finished task by a new one (``_join_task.is_done``), so it
#   drops a completed join and sends another JoinGroup: an extra rebalance, not a hang.
# No setting avoids it: any finite poll timeout can end during a join, and the broker must hold
# the leader's JoinGroup until the other member rejoins (Kafka's rule). Reproduced 3 runs in 20
# with poll(timeout_ms=50); every broker answer in those runs is Kafka's. With the join
# collected as Java does (pending task counted in need_rejoin, a finished one awaited, not
# replaced; tried as an out-of-tree patch) it passed 20 of 20.
KAFKA_PYTHON_LOST_JOIN = (
    "kafka-python 3.0.12 loses a leader join that completes after poll()'s timeout "
    "(BaseCoordinator.join_group_async / ConsumerCoordinator.need_rejoin): the leader stops "
    "heartbeating and is expired; see the comment above this test"
)


@pytest.mark.skip(reason=KAFKA_PYTHON_LOST_JOIN)
async def test_kafka_python_group_picks_up_new_partitions(
    server: KafkaServer, bootstrap: str, admin: AIOKafkaAdminClient, started: list[Members]
) -> None:
    group, topic = "grow-kafka-python", topic_of("kafka-python")
    members = ThreadMembers(kafka_python_member(bootstrap, group, topic), "k")
    started.append(members)
    await grow_and_consume(server, bootstrap, admin, members, group, topic)
    await members.close()


@pytest.fixture
def node_modules() -> Path:
    require(
        shutil.which("node") is not None and shutil.which("npm") is not None,
        "node and npm are needed for the kafkajs tests",
    )
    return install_kafkajs()


async def test_kafkajs_group_picks_up_new_partitions(
    server: KafkaServer,
    bootstrap: str,
    admin: AIOKafkaAdminClient,
    node_modules: Path,
    started: list[Members],
) -> None:
    group, topic = "grow-kafkajs", topic_of("kafkajs")
    node = shutil.which("node")
    assert node is not None
    opts = {"brokers": [bootstrap], "topic": topic, "group": group, "members": MEMBERS}
    members = await ProcessMembers.start(
        "kafkajs",
        node,
        str(JS_SCRIPT),
        json.dumps(opts),
        env={**os.environ, "NODE_PATH": str(node_modules)},
    )
    started.append(members)
    await grow_and_consume(server, bootstrap, admin, members, group, topic)
    await members.close()


@pytest.fixture(scope="module")
def java_client() -> JavaClient:
    require(java_available(), "java and javac (JDK 17) are not on PATH; the Java client needs them")
    return prepare_java_client()


@pytest.mark.java
async def test_java_group_picks_up_new_partitions(
    server: KafkaServer,
    bootstrap: str,
    admin: AIOKafkaAdminClient,
    java_client: JavaClient,
    started: list[Members],
) -> None:
    group, topic = "grow-java", topic_of("java")
    command = java_client.command(JAVA_MAIN, bootstrap, topic, group, str(MEMBERS))
    members = await ProcessMembers.start("java", *command)
    started.append(members)
    await grow_and_consume(server, bootstrap, admin, members, group, topic)
    await members.close()
    # the Java client reports the generation it joined: it moved on with the rebalance
    generations = [e["generation"] for e in members.of("assigned")]
    assert generations == sorted(generations) and generations[-1] > generations[0], generations
    # and logged no warning or error (our SLF4J provider: "HH:MM:SS.nnn LEVEL [thread] ...")
    log = members.stderr.decode(errors="replace")
    assert not re.search(r"^\S+ (WARN|ERROR) ", log, re.MULTILINE), log
