"""Consumer groups with the real aiokafka client against a real in-process broker.

Every client uses ``metadata_max_age_ms=1000`` so topic changes are seen within a second,
and consumers heartbeat every 200 ms so a rebalance the broker starts is noticed promptly.
The broker runs with a 200 ms initial rebalance delay and a 1000 ms minimum session
timeout, so session expiry can be exercised in a couple of seconds.

Conditions the client signals with no event (a consumer's assignment, a group's state as
DescribeGroups reports it) are polled with a bounded deadline (``wait_until``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
from collections import Counter, defaultdict
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import pytest
import pytest_asyncio
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, ConsumerRebalanceListener, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewPartitions, NewTopic
from aiokafka.errors import KafkaError
from aiokafka.structs import OffsetAndMetadata

from kgroupd.broker.net.server import KafkaServer
from kgroupd.broker.testing import running_server
from kgroupd.protocol.errors import ErrorCode
from tests.support.groups import (
    DELETE_GROUPS,
    GroupView,
    RawConnection,
    decode_assignment,
    describe_group,
    struct_to_dict,
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


# --------------------------------------------------------------------------------------------
# Three consumers, 30,000 records, a clean restart


async def produce(
    bootstrap: str, topic: str, count: int, produced: dict[tuple[int, int], bytes]
) -> None:
    """Send ``count`` records in paced chunks, recording where each one landed."""
    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap, metadata_max_age_ms=META_AGE_MS, linger_ms=5
    )
    await producer.start()
    try:
        for start in range(0, count, 1000):
            values = [b"%d" % i for i in range(start, min(start + 1000, count))]
            futures = [await producer.send(topic, v) for v in values]
            for v, meta in zip(values, await asyncio.gather(*futures), strict=True):
                produced[(meta.partition, meta.offset)] = v
            await asyncio.sleep(0.02)  # pacing: consumption and commits interleave
    finally:
        await producer.stop()


async def committed_offsets(admin: AIOKafkaAdminClient, group: str) -> dict[int, int]:
    return {
        tp.partition: om.offset
        for tp, om in (await admin.list_consumer_group_offsets(group)).items()
    }


async def test_three_consumers_share_six_partitions_and_process_30000_records(
    bootstrap: str, admin: AIOKafkaAdminClient, raw: RawConnection
) -> None:
    """Accounting rule asserted (at-least-once with committed progress never re-read):

    * every produced record (partition, offset) is processed, with the value produced there;
    * while the group is stable nothing is processed twice and every commit succeeds;
    * a record processed more than once was, at every sighting but its last, in a batch whose
      commit did not succeed (failed because the group had moved on, or never made because
      the consumer stopped first): no record of a successfully committed batch is re-read;
    * after all members stop cleanly and start again, each partition resumes exactly at the
      offset the group committed, and the records read again are exactly those of the last
      batches the stopped members processed without committing.
    """
    topic, group, total = "g3-events", "g3", 30_000
    await create_topic(admin, topic, 6)
    ledger = Ledger()
    produced: dict[tuple[int, int], bytes] = {}

    # Phase 1: three members settle, then records flow while they consume and commit.
    first = await start_workers(
        [
            Worker(
                f"c{i}",
                bootstrap,
                group,
                (topic,),
                ledger=ledger,
                phase=1,
                leave_last_uncommitted=True,
            )
            for i in range(3)
        ]
    )
    producing = None
    try:
        await wait_settled(first, topic, 6, raw, group)
        calls_when_settled = [w.tracker.calls for w in first]
        producing = asyncio.create_task(produce(bootstrap, topic, total, produced))
        await wait_until(
            lambda: len(ledger.seen(1)) >= total // 3, 30, "a third of the records processed"
        )
        # No rebalance while the group is stable: no callbacks, no failed commits.
        assert [w.tracker.calls for w in first] == calls_when_settled
        assert ledger.commit_errors == []
    finally:
        await stop_workers(first)
    seen1 = [(b.partition, o) for b in ledger.batches if b.phase == 1 for o in b.offsets]
    assert len(seen1) == len(set(seen1)), "a record was processed twice in a stable group"
    assert ledger.commit_errors == []

    # The group is down: its committed offsets are exactly what the members committed.
    assert producing is not None
    committed = await committed_offsets(admin, group)
    expected: dict[int, int] = {}
    for b in ledger.batches:
        if b.committed:
            expected[b.partition] = max(expected.get(b.partition, 0), b.offsets[-1] + 1)
    assert committed == expected
    uncommitted = {(b.partition, o) for b in ledger.batches if b.final for o in b.offsets}
    assert uncommitted, "no member stopped with a batch uncommitted: nothing to check"
    assert all(o >= committed.get(p, 0) for p, o in uncommitted)

    # Phase 2: the same group starts again while the producer is still running.
    second = await start_workers(
        [Worker(f"d{i}", bootstrap, group, (topic,), ledger=ledger, phase=2) for i in range(3)]
    )
    try:
        await wait_settled(second, topic, 6, raw, group)
        await producing
        assert len(produced) == total
        await wait_until(
            lambda: ledger.seen() >= produced.keys(), 30, "every produced record processed"
        )
    finally:
        await stop_workers(second)

    # Everything produced was processed, with the value produced at that offset.
    for b in ledger.batches:
        for o, v in zip(b.offsets, b.values, strict=True):
            assert produced[(b.partition, o)] == v
    assert ledger.seen() == produced.keys()
    assert {v for b in ledger.batches for v in b.values} == {b"%d" % i for i in range(total)}

    # Only records of batches that were never committed are ever processed again.
    sightings: dict[tuple[int, int], list[Batch]] = defaultdict(list)
    for b in ledger.batches:
        for o in b.offsets:
            sightings[(b.partition, o)].append(b)
    for key, seen_in in sightings.items():
        for earlier in seen_in[:-1]:
            assert earlier.committed is not True, f"{key} re-read after its batch was committed"

    # After the restart each partition resumed exactly at the committed offset, and the
    # records read again are exactly the uncommitted last batches of the stopped members.
    first_in_phase2: dict[int, int] = {}
    for b in ledger.batches:
        if b.phase == 2:
            first_in_phase2.setdefault(b.partition, b.offsets[0])
    for p in range(6):
        assert first_in_phase2[p] == committed.get(p, 0), f"partition {p} did not resume"
    reread = ledger.seen(1) & ledger.seen(2)
    assert reread == uncommitted

    # The last members committed everything they processed: the group is at the end.
    ends = Counter(p for p, _ in produced)
    assert await committed_offsets(admin, group) == dict(ends)


# --------------------------------------------------------------------------------------------
# Members leaving and dying


async def test_member_that_closes_hands_its_partitions_over_at_once(
    bootstrap: str, admin: AIOKafkaAdminClient, raw: RawConnection
) -> None:
    """A closing consumer sends LeaveGroup: the others take over long before its session
    (30 s here) could have expired."""
    topic, group = "leave-events", "leave"
    await create_topic(admin, topic, 6)
    workers = await start_workers(
        [Worker(f"l{i}", bootstrap, group, (topic,), session_timeout_ms=30_000) for i in range(3)],
        run=False,
    )
    try:
        await wait_settled(workers, topic, 6, raw, group)
        leaving, staying = workers[0], workers[1:]
        gone_id, gone_parts = leaving.member_id, parts(leaving.assignment(topic), topic)
        generation = staying[0].generation
        calls = [w.tracker.calls for w in staying]
        await leaving.stop()
        took = await wait_settled(staying, topic, 6, raw, group, timeout=5.0)
        assert gone_id not in took.members
        # Each partition of the member that left went to one of the others.
        taken = sorted(p for w in staying for p in parts(w.assignment(topic), topic))
        assert set(gone_parts) <= set(taken)
        assert all(w.generation > generation for w in staying)
        assert all(w.tracker.calls > c for w, c in zip(staying, calls, strict=True))
    finally:
        await stop_workers(workers)  # stopping a stopped consumer does nothing


VICTIM = """
import asyncio, json, sys
from aiokafka import AIOKafkaConsumer

async def main(bootstrap, group, topic, session_ms, heartbeat_ms):
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap, group_id=group, client_id="victim",
        metadata_max_age_ms=1000, heartbeat_interval_ms=heartbeat_ms,
        session_timeout_ms=session_ms, enable_auto_commit=False,
    )
    await consumer.start()
    consumer.subscribe([topic])
    last = None
    while True:
        await consumer.getmany(timeout_ms=50)
        now = sorted(tp.partition for tp in consumer.assignment())
        if now != last:
            last = now
            print(json.dumps({"member_id": consumer._coordinator.member_id,
                              "partitions": now}), flush=True)

asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])))
"""


async def test_member_killed_without_leaving_loses_its_partitions_after_session_timeout(
    bootstrap: str, admin: AIOKafkaAdminClient, raw: RawConnection
) -> None:
    """A consumer process killed with SIGKILL sends no LeaveGroup and its sockets just drop:
    the broker keeps it a member until its session timeout has passed, then the others take
    its partitions."""
    topic, group, session_ms = "kill-events", "kill", 2000
    await create_topic(admin, topic, 6)
    loop = asyncio.get_running_loop()
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        VICTIM,
        bootstrap,
        group,
        topic,
        str(session_ms),
        str(HEARTBEAT_MS),
        stdout=asyncio.subprocess.PIPE,
    )
    victim: dict[str, Any] = {}  # the victim's member id and partitions, as it prints them

    async def follow_victim() -> None:
        assert proc.stdout is not None
        while line := await proc.stdout.readline():
            victim.update(json.loads(line))

    following = asyncio.create_task(follow_victim())
    survivors: list[Worker] = []
    try:
        survivors = await start_workers(
            [
                Worker(f"k{i}", bootstrap, group, (topic,), session_timeout_ms=session_ms)
                for i in range(2)
            ],
            run=False,
        )

        async def victim_settled() -> bool:
            if not all(w.assignment(topic) for w in survivors):
                return False
            view = await describe_group(raw, group)
            if view.state != "Stable" or view.partitions(topic) != list(range(6)):
                return False
            vid = victim.get("member_id")
            return (
                vid in view.members
                and set(view.members) == {vid} | {w.member_id for w in survivors}
                and view.members[vid].assignment.get(topic) == victim["partitions"]
                and all(
                    view.members[w.member_id].assignment.get(topic)
                    == parts(w.assignment(topic), topic)
                    for w in survivors
                )
            )

        await wait_until(victim_settled, 20, "three members, the victim owning partitions")
        victim_parts = victim["partitions"]
        generation = survivors[0].generation

        proc.kill()
        killed_at = loop.time()
        await proc.wait()

        # Half the session later the broker still counts it a member: its connections closed,
        # but Kafka removes a member on session expiry only. (A sleep: absence is observed.)
        await asyncio.sleep(session_ms / 2000)
        view = await describe_group(raw, group)
        assert victim["member_id"] in view.members and view.state == "Stable"
        assert all(w.generation == generation for w in survivors)

        await wait_until(
            lambda: partitions_settled(survivors, topic, 6), 10, "the survivors to take over"
        )
        moved_after = loop.time() - killed_at
        # The last heartbeat came about one interval before the kill (three, to allow for a
        # loaded machine): the move waited for the session, not for the disconnect.
        assert moved_after >= (session_ms - 3 * HEARTBEAT_MS) / 1000, moved_after
        assert moved_after < (session_ms + 4000) / 1000, moved_after
        view = await wait_settled(survivors, topic, 6, raw, group)
        assert victim["member_id"] not in view.members
        owned = sorted(p for w in survivors for p in parts(w.assignment(topic), topic))
        assert set(victim_parts) <= set(owned)
        assert all(w.generation > generation for w in survivors)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
        following.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await following
        await stop_workers(survivors)


# --------------------------------------------------------------------------------------------
# Static membership


@pytest.mark.parametrize("who", ["leader", "follower"])
async def test_static_member_restart_keeps_partitions_without_rebalance(
    bootstrap: str, admin: AIOKafkaAdminClient, raw: RawConnection, who: str
) -> None:
    """A static member (group_instance_id) that restarts within its session timeout gets its
    partitions back at once: same generation, and the others see no rebalance at all, not
    even after the old instance's session timeout has passed. Restarting the leader is the
    harder case: the broker names the old leader id, so the new instance acts as a follower
    and takes the stored assignment instead of computing one."""
    topic, group, session_ms = f"static-{who}-events", f"static-{who}", 3000
    await create_topic(admin, topic, 6)

    def static(instance: str) -> Worker:
        return Worker(
            instance,
            bootstrap,
            group,
            (topic,),
            group_instance_id=instance,
            session_timeout_ms=session_ms,
        )

    workers = await start_workers([static(n) for n in ("sa", "sb", "sc")], run=False)
    started = list(workers)  # everything to stop at the end
    try:
        before = await wait_settled(workers, topic, 6, raw, group)
        assert {m.group_instance_id for m in before.members.values()} == {"sa", "sb", "sc"}
        generation = workers[0].generation
        assert all(w.generation == generation for w in workers)
        assert sum(w.is_leader for w in workers) == 1
        old = next(w for w in workers if w.is_leader == (who == "leader"))
        others = [w for w in workers if w is not old]
        old_parts = parts(old.assignment(topic), topic)
        old_id = old.member_id
        calls = [w.tracker.calls for w in others]
        others_ids = {w.member_id for w in others}

        await old.stop()  # a static member sends no LeaveGroup
        loop = asyncio.get_running_loop()
        stopped_at = loop.time()
        view = await describe_group(raw, group)
        assert old_id in view.members and view.state == "Stable"

        restarted = static(old.name)
        started.append(restarted)
        await restarted.start(run=False)
        await wait_until(lambda: bool(restarted.assignment(topic)), 5, "the restarted member")
        assert loop.time() - stopped_at < session_ms / 1000, "restart took too long for the test"
        assert parts(restarted.assignment(topic), topic) == old_parts
        assert restarted.generation == generation
        assert restarted.member_id != old_id
        assert not restarted.is_leader  # it took the stored assignment, computed none
        assert [parts(a, topic) for a in restarted.tracker.assigned] == [old_parts]

        view = await wait_settled([*others, restarted], topic, 6, raw, group)
        assert old_id not in view.members
        assert {m.group_instance_id for m in view.members.values()} == {"sa", "sb", "sc"}
        assert others_ids < set(view.members)
        assert view.members[restarted.member_id].assignment == {topic: old_parts}

        # Absence of a rebalance can only be observed by waiting: past the old instance's
        # session timeout, with the others heartbeating every 200 ms all along.
        await asyncio.sleep(max(0.0, stopped_at + session_ms / 1000 + 0.5 - loop.time()))
        assert [w.tracker.calls for w in others] == calls
        assert all(w.generation == generation for w in [*others, restarted])
        after = await describe_group(raw, group)
        assert after == view
    finally:
        await stop_workers(started)


# --------------------------------------------------------------------------------------------
# Topic changes a subscription sees


async def test_new_partitions_of_a_subscribed_topic_are_assigned(
    bootstrap: str, admin: AIOKafkaAdminClient, raw: RawConnection
) -> None:
    topic, group = "grow-events", "grow"
    await create_topic(admin, topic, 2)
    workers = await start_workers([Worker(f"g{i}", bootstrap, group, (topic,)) for i in range(2)])
    try:
        await wait_settled(workers, topic, 2, raw, group)
        generation = workers[0].generation
        await admin.create_partitions({topic: NewPartitions(total_count=5)})
        await wait_settled(workers, topic, 5, raw, group, timeout=10)
        assert all(w.generation > generation for w in workers)

        # The new partitions are really consumed: a record sent to each arrives.
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, metadata_max_age_ms=META_AGE_MS)
        await producer.start()
        try:
            for p in (2, 3, 4):
                await producer.send_and_wait(topic, b"new-%d" % p, partition=p)
        finally:
            await producer.stop()
        await wait_until(
            lambda: {b.partition for w in workers for b in w.ledger.batches} >= {2, 3, 4},
            10,
            "records of the new partitions consumed",
        )
    finally:
        await stop_workers(workers)


async def test_pattern_subscription_picks_up_a_new_matching_topic(
    bootstrap: str, admin: AIOKafkaAdminClient, raw: RawConnection
) -> None:
    group = "pattern"
    await create_topic(admin, "pat-a", 2)
    await create_topic(admin, "other-a", 2)
    workers = await start_workers(
        [Worker(f"p{i}", bootstrap, group, pattern=r"^pat-.*") for i in range(2)], run=False
    )
    try:
        await wait_settled(workers, "pat-a", 2, raw, group)
        assert all(not w.assignment("other-a") for w in workers)
        generation = workers[0].generation
        await create_topic(admin, "pat-b", 3)
        await create_topic(admin, "other-b", 3)
        await wait_settled(workers, "pat-b", 3, raw, group, timeout=10)
        assert partitions_settled(workers, "pat-a", 2)
        assert all(w.generation > generation for w in workers)
        view = await describe_group(raw, group)
        assert view.partitions("pat-a") == [0, 1] and view.partitions("pat-b") == [0, 1, 2]
        assert view.partitions("other-a") == [] and view.partitions("other-b") == []
    finally:
        await stop_workers(workers)


# --------------------------------------------------------------------------------------------
# Offsets as users see them


async def admin_describe(admin: AIOKafkaAdminClient, group: str) -> dict[str, Any]:
    """``describe_consumer_groups`` of one group, as a dict (whatever version was used)."""
    (resp,) = await admin.describe_consumer_groups([group])
    (found,) = struct_to_dict(resp)["groups"]
    assert found["group"] == group
    return found


async def test_committed_offsets_as_users_and_admins_see_them(
    bootstrap: str, admin: AIOKafkaAdminClient, raw: RawConnection
) -> None:
    topic, group = "offsets-events", "offsets"
    await create_topic(admin, topic, 2)
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, metadata_max_age_ms=META_AGE_MS)
    await producer.start()
    try:
        for i in range(10):
            for p in (0, 1):
                await producer.send(topic, b"%d-%d" % (p, i), partition=p)
        await producer.flush()
    finally:
        await producer.stop()
    tp0, tp1 = TopicPartition(topic, 0), TopicPartition(topic, 1)

    first = await Worker("o1", bootstrap, group, (topic,)).start(run=False)
    try:
        await wait_settled([first], topic, 2, raw, group)
        await first.consumer.commit(
            {tp0: OffsetAndMetadata(3, "three"), tp1: OffsetAndMetadata(7, "seven")}
        )
        assert await first.consumer.committed(tp0) == 3
        assert await first.consumer.committed(tp1) == 7

        # The admin client agrees while the group is active ...
        offsets = await admin.list_consumer_group_offsets(group)
        assert offsets == {tp0: OffsetAndMetadata(3, "three"), tp1: OffsetAndMetadata(7, "seven")}
        described = await admin_describe(admin, group)
        assert (described["error_code"], described["state"]) == (0, "Stable")
        assert (described["group"], described["protocol_type"]) == (group, "consumer")
        assert described["protocol"] in ("range", "roundrobin")
        assert [(m["member_id"], m["client_id"]) for m in described["members"]] == [
            (first.member_id, "o1")
        ]
        (member,) = described["members"]
        assert decode_assignment(member["member_assignment"]) == {topic: [0, 1]}
        assert (group, "consumer") in await admin.list_consumer_groups()

        # ... and a member cannot be deleted from under it.
        resp = await raw.call(DELETE_GROUPS, 1, groups_names=[group])
        assert resp["results"] == [{"group_id": group, "error_code": ErrorCode.NON_EMPTY_GROUP}]
    finally:
        await first.stop()

    # A fresh consumer of the same group starts from the committed offsets.
    fresh = await Worker("o2", bootstrap, group, (topic,)).start()
    try:
        await wait_until(
            lambda: sum(len(b.offsets) for b in fresh.ledger.batches) >= 10,
            10,
            "the fresh consumer to read the rest",
        )
        firsts: dict[int, int] = {}
        for b in fresh.ledger.batches:
            firsts.setdefault(b.partition, b.offsets[0])
        assert firsts == {0: 3, 1: 7}
        assert sorted((b.partition, o) for b in fresh.ledger.batches for o in b.offsets) == [
            (p, o) for p in (0, 1) for o in range(3 if p == 0 else 7, 10)
        ]
    finally:
        await fresh.stop()

    # Empty now: described as such, listed, and its offsets are what the fresh one committed.
    described = await admin_describe(admin, group)
    assert (described["state"], described["members"]) == ("Empty", [])
    offsets = await admin.list_consumer_group_offsets(group)
    assert {tp: om.offset for tp, om in offsets.items()} == {tp0: 10, tp1: 10}
    assert (group, "consumer") in await admin.list_consumer_groups()

    # Deleting it removes it from every view; deleting it again: GROUP_ID_NOT_FOUND.
    resp = await raw.call(DELETE_GROUPS, 1, groups_names=[group])
    assert resp["results"] == [{"group_id": group, "error_code": 0}]
    assert group not in [g for g, _ in await admin.list_consumer_groups()]
    assert await admin.list_consumer_group_offsets(group) == {}
    described = await admin_describe(admin, group)
    assert (described["error_code"], described["state"]) == (0, "Dead")
    resp = await raw.call(DELETE_GROUPS, 1, groups_names=[group])
    assert resp["results"] == [{"group_id": group, "error_code": ErrorCode.GROUP_ID_NOT_FOUND}]
