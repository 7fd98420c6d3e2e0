"""What the aiokafka consumer-group tests share (test_groups_aiokafka*.py): a broker and its
clients as fixtures, and ``Worker``, a group member that records everything it processes.

Every client uses ``metadata_max_age_ms=1000`` so topic changes are seen within a second,
and consumers heartbeat every 200 ms so a rebalance the broker starts is noticed promptly.
The broker runs with a 200 ms initial rebalance delay and a 1000 ms minimum session
timeout, so session expiry can be exercised in a couple of seconds.

The fixtures are not registered for every test: a test module binds them by name
(``server, bootstrap, admin, raw = aiokafka_groups.FIXTURES``).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import pytest_asyncio
from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import KafkaError
from aiokafka.structs import OffsetAndMetadata

from kgroupd.broker.net.server import KafkaServer
from kgroupd.broker.testing import running_server
from tests.support.groups import (
    GroupView,
    RawConnection,
    describe_group,
    wait_until,
)

META_AGE_MS = 1000
HEARTBEAT_MS = 200
MIN_SESSION_MS = 1000


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


@pytest_asyncio.fixture
async def raw(bootstrap: str) -> AsyncIterator[RawConnection]:
    async with await RawConnection.open(bootstrap) as conn:
        yield conn


FIXTURES = (server, bootstrap, admin, raw)


async def create_topic(admin: AIOKafkaAdminClient, name: str, partitions: int) -> None:
    await admin.create_topics([NewTopic(name, partitions, 1)])


def parts(tps: set[TopicPartition] | frozenset[TopicPartition], topic: str) -> list[int]:
    return sorted(tp.partition for tp in tps if tp.topic == topic)


# --------------------------------------------------------------------------------------------
# A consumer that records everything it processes


class Tracker(ConsumerRebalanceListener):
    """Counts the rebalance callbacks a consumer gets and keeps its assignments in order."""

    def __init__(self) -> None:
        self.revoked: list[frozenset[TopicPartition]] = []
        self.assigned: list[frozenset[TopicPartition]] = []

    async def on_partitions_revoked(self, revoked: Any) -> None:
        self.revoked.append(frozenset(revoked))

    async def on_partitions_assigned(self, assigned: Any) -> None:
        self.assigned.append(frozenset(assigned))

    @property
    def calls(self) -> int:
        return len(self.revoked) + len(self.assigned)


@dataclass
class Batch:
    """Records one consumer processed from one partition in one ``getmany``."""

    worker: str
    phase: int
    partition: int
    offsets: list[int]
    values: list[bytes]
    committed: bool | None = None  # None: never committed (the consumer stopped first)
    final: bool = False  # the last batch before a clean stop, deliberately left uncommitted


@dataclass
class Ledger:
    """Everything every consumer of a test processed, in processing order."""

    batches: list[Batch] = field(default_factory=list)
    commit_errors: list[str] = field(default_factory=list)

    def seen(self, phase: int | None = None) -> set[tuple[int, int]]:
        return {
            (b.partition, o)
            for b in self.batches
            if phase is None or b.phase == phase
            for o in b.offsets
        }


def consumer_config(bootstrap: str, group: str, name: str, **overrides: Any) -> dict[str, Any]:
    config: dict[str, Any] = {
        "bootstrap_servers": bootstrap,
        "group_id": group,
        "client_id": name,
        "metadata_max_age_ms": META_AGE_MS,
        "heartbeat_interval_ms": HEARTBEAT_MS,
        "session_timeout_ms": 6000,
        "enable_auto_commit": False,
        "auto_offset_reset": "earliest",
        "retry_backoff_ms": 50,
    }
    config.update(overrides)
    return config


class Worker:
    """One group member: subscribes, and (when ``run`` is started) processes and commits."""

    def __init__(
        self,
        name: str,
        bootstrap: str,
        group: str,
        topics: tuple[str, ...] = (),
        pattern: str | None = None,
        ledger: Ledger | None = None,
        phase: int = 0,
        leave_last_uncommitted: bool = False,
        **overrides: Any,
    ) -> None:
        self.name = name
        self.topics = topics
        self.pattern = pattern
        self.ledger = ledger if ledger is not None else Ledger()
        self.phase = phase
        self.leave_last_uncommitted = leave_last_uncommitted
        self.tracker = Tracker()
        self.consumer = AIOKafkaConsumer(**consumer_config(bootstrap, group, name, **overrides))
        self._task: asyncio.Task[None] | None = None
        self._stop = asyncio.Event()

    async def start(self, run: bool = True) -> Worker:
        await self.consumer.start()
        if self.pattern is not None:
            self.consumer.subscribe(pattern=self.pattern, listener=self.tracker)
        else:
            self.consumer.subscribe(topics=list(self.topics), listener=self.tracker)
        if run:
            self._task = asyncio.create_task(self._run(), name=f"worker-{self.name}")
        else:
            # Without a processing loop, nothing drives the first join: ask for it.
            self._task = asyncio.create_task(self._idle(), name=f"idle-{self.name}")
        return self

    def assignment(self, topic: str | None = None) -> set[TopicPartition]:
        got = set(self.consumer.assignment())
        return got if topic is None else {tp for tp in got if tp.topic == topic}

    @property
    def generation(self) -> int:
        # aiokafka exposes the generation only on its coordinator object.
        return int(self.consumer._coordinator.generation)

    @property
    def is_leader(self) -> bool:
        # aiokafka keeps the group's subscription only on the member that assigned.
        return self.consumer._coordinator._group_subscription is not None

    @property
    def member_id(self) -> str:
        return str(self.consumer._coordinator.member_id)

    async def _idle(self) -> None:
        while not self._stop.is_set():
            await self.consumer.getmany(timeout_ms=100, max_records=1)

    async def _run(self) -> None:
        """Process a batch, then commit exactly what was processed, until asked to stop.

        With ``leave_last_uncommitted``, when asked to stop, the next non-empty fetch (waited
        for up to 2 s) is recorded but deliberately not committed (``final``): the restarted
        group must re-read exactly those records and no others.
        """
        loop = asyncio.get_running_loop()
        give_up: float | None = None
        while True:
            if self._stop.is_set() and not self.leave_last_uncommitted:
                return
            data = await self.consumer.getmany(timeout_ms=100, max_records=300)
            stopping = self._stop.is_set()
            if stopping and give_up is None:
                give_up = loop.time() + 2.0
            batches = []
            for tp, msgs in data.items():
                batch = Batch(
                    self.name,
                    self.phase,
                    tp.partition,
                    [m.offset for m in msgs],
                    [m.value or b"" for m in msgs],
                    final=stopping,
                )
                self.ledger.batches.append(batch)
                batches.append((tp, batch))
            if stopping and (batches or (give_up is not None and loop.time() > give_up)):
                return
            if stopping or not batches:
                continue
            offsets = {tp: OffsetAndMetadata(b.offsets[-1] + 1, "") for tp, b in batches}
            try:
                await self.consumer.commit(offsets)
            except KafkaError as exc:  # the group moved on: this batch stays uncommitted
                self.ledger.commit_errors.append(f"{self.name}: {exc!r}")
                ok = False
            else:
                ok = True
            for _, b in batches:
                b.committed = ok

    async def finish(self) -> None:
        """Stop processing (after one last, uncommitted batch); the consumer stays a member."""
        self._stop.set()
        if self._task is not None:
            task, self._task = self._task, None
            await task

    async def stop(self) -> None:
        """``finish``, then close the consumer (a dynamic member sends LeaveGroup)."""
        try:
            await self.finish()
        finally:
            await self.consumer.stop()


async def start_workers(workers: list[Worker], run: bool = True) -> list[Worker]:
    await asyncio.gather(*(w.start(run) for w in workers))
    return workers


async def stop_workers(workers: list[Worker]) -> None:
    """Every worker finishes processing first, and only then do they all close: no member
    leaves (and so moves partitions) while another is still processing."""
    finished = await asyncio.gather(*(w.finish() for w in workers), return_exceptions=True)
    results = await asyncio.gather(*(w.consumer.stop() for w in workers), return_exceptions=True)
    results += finished
    errors = [r for r in results if isinstance(r, BaseException)]
    if errors:
        raise errors[0]


def partitions_settled(workers: list[Worker], topic: str, count: int) -> bool:
    """Every partition of ``topic`` owned by exactly one worker, each worker owning some."""
    owned = [p for w in workers for p in parts(w.assignment(topic), topic)]
    return sorted(owned) == list(range(count)) and all(w.assignment(topic) for w in workers)


async def wait_settled(
    workers: list[Worker],
    topic: str,
    count: int,
    raw: RawConnection,
    group: str,
    timeout: float = 15.0,
) -> GroupView:
    """Wait until the consumers' own assignments split ``topic`` and the broker agrees."""
    view: GroupView | None = None

    async def settled() -> bool:
        nonlocal view
        if not partitions_settled(workers, topic, count):
            return False
        view = await describe_group(raw, group)
        if view.state != "Stable" or set(view.members) != {w.member_id for w in workers}:
            return False
        by_member = {mid: m.assignment.get(topic, []) for mid, m in view.members.items()}
        return by_member == {w.member_id: parts(w.assignment(topic), topic) for w in workers}

    await wait_until(settled, timeout, f"{len(workers)} members to share {topic}")
    assert view is not None
    return view
