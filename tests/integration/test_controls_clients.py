"""The test controls with real clients (issue 28), on ``ThreadedBroker`` as users run it:

- an aiokafka consumer group whose member falls silent (its event loop frozen, as a process
  stopped by SIGSTOP or a long GC pause) with a 45 s session timeout: a clock move of 46 s
  expires it at once and the live member takes its partitions; nothing waits 45 s.
- idempotent producers (aiokafka and confluent-kafka) meet three injected
  NOT_LEADER_OR_FOLLOWER answers and still deliver every record exactly once.
- an aiokafka transaction left open is aborted by a clock move past its timeout (60 s): its
  commit is refused and a read_committed consumer never sees its record.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.errors import KafkaError
from confluent_kafka import Producer

from kgroupd.broker.testing import ThreadedBroker
from tests.support.groups import wait_until

SESSION_MS = 45_000
WAIT_S = 20.0  # well under the session timeout: passing means the move expired the member


@pytest.fixture
def broker() -> Iterator[ThreadedBroker]:
    topics = ["silent:4", "idem-aio:3", "idem-rdk:3", "txn:1"]
    with ThreadedBroker(create_topics=topics, initial_rebalance_delay_ms=0) as b:
        yield b


class FrozenConsumer:
    """An aiokafka consumer on an event loop of its own thread, which ``freeze`` blocks: the
    member stays in the group, connected, sending nothing."""

    def __init__(self, bootstrap: str) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.gate = threading.Event()
        self.consumer: AIOKafkaConsumer | None = None
        self.bootstrap = bootstrap

    def run(self, coro: object) -> object:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(WAIT_S)  # type: ignore[arg-type]

    async def _start(self) -> str:
        self.consumer = AIOKafkaConsumer(
            "silent",
            bootstrap_servers=self.bootstrap,
            group_id="silent-group",
            client_id="frozen",
            session_timeout_ms=SESSION_MS,
            heartbeat_interval_ms=200,
        )
        await self.consumer.start()
        while len(self.consumer.assignment()) != 4:
            await self.consumer.getmany(timeout_ms=50)
        member_id: str = self.consumer._coordinator.member_id
        return member_id

    def start(self) -> str:
        member = self.run(self._start())
        assert isinstance(member, str)
        return member

    def freeze(self) -> None:
        self.loop.call_soon_threadsafe(self.gate.wait)

    def close(self) -> None:
        self.gate.set()
        if self.consumer is not None:
            self.run(self.consumer.stop())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()


async def test_a_clock_move_expires_a_silent_member(broker: ThreadedBroker) -> None:
    frozen = FrozenConsumer(broker.bootstrap)
    live = AIOKafkaConsumer(
        "silent",
        bootstrap_servers=broker.bootstrap,
        group_id="silent-group",
        client_id="live",
        session_timeout_ms=SESSION_MS,
        heartbeat_interval_ms=200,
    )
    starting: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    try:
        silent_member = frozen.start()
        frozen.freeze()
        # aiokafka's start returns once the consumer has joined: here, after the move
        starting = asyncio.ensure_future(live.start())
        server = broker.server
        assert server is not None
        group = server.broker.coordinator.shard_for("silent-group").groups["silent-group"]

        def both_joined() -> bool:  # the live member's JoinGroup waits for the silent one
            return len(group.members) == 2 and group.state.name == "PREPARING_REBALANCE"

        # (aiokafka joins from its own task; a getmany would wait for an assignment)
        await wait_until(both_joined, WAIT_S, "the live member to join")
        assert silent_member in group.members
        moved = broker.controls.advance_clock(SESSION_MS + 1000)
        assert moved["advanced_ms"] == 46_000 and moved["fired"] >= 1
        assert silent_member not in group.members  # expired by the move itself
        await asyncio.wait_for(starting, WAIT_S)

        async def live_has_everything() -> bool:
            await live.getmany(timeout_ms=50)
            return len(live.assignment()) == 4

        await wait_until(live_has_everything, WAIT_S, "the live member to take all 4")
        assert set(group.members) == {live._coordinator.member_id}
        assert live.assignment() == {TopicPartition("silent", p) for p in range(4)}
    finally:
        if not starting.done():
            starting.cancel()
        await live.stop()
        frozen.close()


NOT_LEADER = "NOT_LEADER_OR_FOLLOWER"
RECORDS = 30


def consumed(broker: ThreadedBroker, topic: str) -> list[bytes]:
    async def read() -> list[bytes]:
        consumer = AIOKafkaConsumer(
            bootstrap_servers=broker.bootstrap, auto_offset_reset="earliest"
        )
        await consumer.start()
        try:
            tps = [TopicPartition(topic, p) for p in range(3)]
            consumer.assign(tps)
            ends = await consumer.end_offsets(tps)
            values: list[bytes] = []
            while any([await consumer.position(tp) < ends[tp] for tp in tps]):
                for batch in (await consumer.getmany(timeout_ms=500)).values():
                    values.extend(r.value for r in batch if r.value is not None)
            return values
        finally:
            await consumer.stop()

    return asyncio.run(read())


def expect_met(broker: ThreadedBroker, topic: str) -> None:
    assert broker.controls.pending_errors() == []  # all three were answered
    values = consumed(broker, topic)
    assert sorted(values) == sorted(f"r{i}".encode() for i in range(RECORDS))
    assert len(values) == len(set(values)) == RECORDS  # exactly once


async def test_aiokafka_idempotent_producer_meets_three_not_leader(
    broker: ThreadedBroker,
) -> None:
    rule = broker.controls.inject_error("Produce", NOT_LEADER, count=3, topic="idem-aio")
    assert rule["count"] == 3 and rule["error_code"] == 6
    producer = AIOKafkaProducer(
        bootstrap_servers=broker.bootstrap, enable_idempotence=True, retry_backoff_ms=20
    )
    await producer.start()
    try:
        sent = [
            await producer.send("idem-aio", f"r{i}".encode(), partition=i % 3)
            for i in range(RECORDS)
        ]
        await asyncio.gather(*sent)
    finally:
        await producer.stop()
    await asyncio.get_running_loop().run_in_executor(None, expect_met, broker, "idem-aio")


def test_confluent_idempotent_producer_meets_three_not_leader(broker: ThreadedBroker) -> None:
    broker.controls.inject_error("Produce", 6, count=3, topic="idem-rdk")
    producer = Producer(
        {
            "bootstrap.servers": broker.bootstrap,
            "enable.idempotence": True,
            "retry.backoff.ms": 20,
            "linger.ms": 5,
        }
    )
    failed: list[str] = []

    def delivered(err: object, _msg: object) -> None:
        if err is not None:
            failed.append(str(err))

    for i in range(RECORDS):
        producer.produce("idem-rdk", f"r{i}".encode(), partition=i % 3, on_delivery=delivered)
    assert producer.flush(WAIT_S) == 0
    assert failed == []
    expect_met(broker, "idem-rdk")


async def test_a_clock_move_aborts_a_transaction_left_open(broker: ThreadedBroker) -> None:
    producer = AIOKafkaProducer(
        bootstrap_servers=broker.bootstrap,
        transactional_id="left-open",
        transaction_timeout_ms=60_000,
    )
    await producer.start()
    try:
        await producer.begin_transaction()
        await producer.send_and_wait("txn", b"never-committed", partition=0)
        moved = broker.controls.advance_clock(70_000)
        assert moved["fired"] >= 1
        with pytest.raises(KafkaError):
            await producer.commit_transaction()  # the coordinator aborted it and fenced us
    finally:
        await producer.stop()
    consumer = AIOKafkaConsumer(
        bootstrap_servers=broker.bootstrap,
        isolation_level="read_committed",
        auto_offset_reset="earliest",
    )
    await consumer.start()
    try:
        tp = TopicPartition("txn", 0)
        consumer.assign([tp])
        end = (await consumer.end_offsets([tp]))[tp]
        assert end >= 2  # the record and the abort marker: the last stable offset moved on
        seen: list[bytes | None] = []
        while await consumer.position(tp) < end:
            for batch in (await consumer.getmany(tp, timeout_ms=500)).values():
                seen.extend(r.value for r in batch)
        assert seen == []
    finally:
        await consumer.stop()
