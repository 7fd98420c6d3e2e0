"""Static membership across a broker crash (issue 4), with confluent-kafka: across a
``kill -9`` of the broker, a live member keeps its partitions and generation with no rebalance
callback, and a static member that was closed before the crash and rejoins within its session
timeout gets its cached partitions.

The broker runs as a subprocess on a fixed port (``tests.support.broker_process``) so it can be
killed with SIGKILL and started again on the same data dir, with the clients reconnecting to the
same address.
"""

from __future__ import annotations

import asyncio
import queue
import struct
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from aiokafka import AIOKafkaProducer
from confluent_kafka import Consumer
from confluent_kafka import TopicPartition as CTopicPartition

from tests.support.broker_process import BrokerProcess, broker_process, fetch_committed
from tests.support.durability import WAIT_S, started
from tests.support.groups import RawConnection, describe_group, wait_until
from tests.support.threads import settle

T = TypeVar("T")

# --- static membership across a broker crash (confluent-kafka) -------------------------------

STATIC_TOPIC, STATIC_PARTITIONS, STATIC_GROUP = "static", 4, "static-group"


class ConfluentMember:
    """A confluent ``Consumer`` created, subscribed, polled and closed on its own thread (it
    serves rebalance callbacks from ``poll()``), recording its callbacks and records."""

    def __init__(self, bootstrap: str, instance: str) -> None:
        self.instance = instance
        self.config = {
            "bootstrap.servers": bootstrap,
            "group.id": STATIC_GROUP,
            "group.instance.id": instance,
            "client.id": instance,
            "session.timeout.ms": 10000,
            "heartbeat.interval.ms": 300,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "reconnect.backoff.max.ms": 200,
            "topic.metadata.refresh.interval.ms": 1000,
        }
        self.callbacks: list[tuple[str, frozenset[int]]] = []  # ("assign"|"revoke", parts)
        self.records: list[tuple[int | None, int | None, bytes | None]] = []
        self._lock = threading.Lock()
        self._loop = asyncio.get_running_loop()
        self._calls: queue.SimpleQueue[tuple[Callable[[Consumer], Any], asyncio.Future[Any]]]
        self._calls = queue.SimpleQueue()
        self._stop = threading.Event()
        self._done: asyncio.Future[None] = self._loop.create_future()
        self._failure: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name=instance, daemon=True)

    def start(self) -> ConfluentMember:
        self._thread.start()
        return self

    def assigned(self) -> frozenset[int] | None:
        """The partitions its callbacks say it holds (None before its first assignment)."""
        with self._lock:
            held: frozenset[int] | None = None
            for kind, parts in self.callbacks:
                held = parts if kind == "assign" else frozenset()
            return held

    def callback_count(self) -> int:
        with self._lock:
            return len(self.callbacks)

    def got(self, value: bytes) -> bool:
        with self._lock:
            return any(v == value for _, _, v in self.records)

    async def call(self, fn: Callable[[Consumer], T]) -> T:
        """Run ``fn(consumer)`` on the member's thread, between two polls."""
        fut: asyncio.Future[T] = self._loop.create_future()
        self._calls.put((fn, fut))
        return await asyncio.wait_for(fut, WAIT_S)

    async def generation(self) -> tuple[str, int]:
        """(member id, generation) as librdkafka sees them: its serialized group metadata is
        b"CGMDv2:", the generation as a native int32, then group id and member id."""
        member_id, meta = await self.call(lambda c: (c.memberid(), c.consumer_group_metadata()))
        assert meta.startswith(b"CGMDv2:"), meta
        (gen,) = struct.unpack_from("=i", meta, 7)
        assert meta[11:].startswith(f"{STATIC_GROUP}\0{member_id}\0".encode()), meta
        return member_id, int(gen)

    async def close(self) -> None:
        self._stop.set()
        await asyncio.wait_for(asyncio.shield(self._done), WAIT_S)
        if self._failure is not None:
            raise self._failure

    # on the member's thread
    def _settle(self, fut: asyncio.Future[Any], value: Any, exc: BaseException | None) -> None:
        settle(self._loop, fut, value, exc)

    def _on_assign(self, consumer: Consumer, partitions: list[CTopicPartition]) -> None:
        with self._lock:
            self.callbacks.append(("assign", frozenset(p.partition for p in partitions)))
        consumer.assign(partitions)

    def _on_revoke(self, consumer: Consumer, partitions: list[CTopicPartition]) -> None:
        consumer.unassign()
        with self._lock:
            self.callbacks.append(("revoke", frozenset(p.partition for p in partitions)))

    def _run(self) -> None:
        consumer = None
        try:
            consumer = Consumer(self.config)
            consumer.subscribe([STATIC_TOPIC], on_assign=self._on_assign, on_revoke=self._on_revoke)
            while not self._stop.is_set():
                while not self._calls.empty():
                    fn, fut = self._calls.get_nowait()
                    try:
                        self._settle(fut, fn(consumer), None)
                    except Exception as exc:
                        self._settle(fut, None, exc)
                msg = consumer.poll(0.05)
                if msg is not None and not msg.error():
                    with self._lock:
                        self.records.append((msg.partition(), msg.offset(), msg.value()))
        except BaseException as exc:
            self._failure = exc
        finally:
            if consumer is not None:
                try:
                    consumer.close()  # a static member sends no LeaveGroup
                except BaseException as exc:
                    self._failure = self._failure or exc
            self._settle(self._done, None, None)


async def produce_each(bootstrap: str, value: str) -> dict[int, bytes]:
    """One record per partition of the static topic: {partition: value}."""
    out = {p: f"{value}-{p}".encode() for p in range(STATIC_PARTITIONS)}
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all")
    async with started(producer):
        for p, v in out.items():
            await producer.send_and_wait(STATIC_TOPIC, v, partition=p)
    return out


async def consumed(members: dict[str, ConfluentMember], values: dict[int, bytes]) -> None:
    """Until each record reached the member whose partitions hold it."""

    def check() -> bool:
        for m in members.values():
            held = m.assigned() or frozenset()
            if not all(m.got(values[p]) for p in held):
                return False
        return True

    await wait_until(check, WAIT_S, f"the members to consume {sorted(values.values())}")


async def stable_view(broker: BrokerProcess) -> dict[str, tuple[str, list[int]]]:
    """Once the group is Stable: {instance id: (member id, partitions)} per DescribeGroups."""
    async with await RawConnection.open(broker.bootstrap) as conn:
        view = None

        async def check() -> bool:
            nonlocal view
            view = await describe_group(conn, STATIC_GROUP)
            return view.state == "Stable" and len(view.members) == 2

        await wait_until(check, WAIT_S, "the static group to be Stable with two members")
    assert view is not None
    return {
        m.group_instance_id or "": (m.member_id, m.assignment.get(STATIC_TOPIC, []))
        for m in view.members.values()
    }


async def test_static_members_keep_their_partitions_across_a_broker_crash(
    tmp_path: Path,
) -> None:
    args = (
        "--initial-rebalance-delay-ms",
        "200",
        "--create-topic",
        f"{STATIC_TOPIC}:{STATIC_PARTITIONS}",
    )
    members: dict[str, ConfluentMember] = {}
    async with broker_process(tmp_path / "data", args=args) as broker:
        await broker.start()
        try:
            # "a" first, so it leads; "b" joins a Stable group.
            members["a"] = ConfluentMember(broker.bootstrap, "static-a").start()
            await wait_until(
                lambda: members["a"].assigned() is not None, WAIT_S, "static-a's assignment"
            )
            members["b"] = ConfluentMember(broker.bootstrap, "static-b").start()

            def split() -> bool:
                held = [m.assigned() for m in members.values()]
                return all(held) and sorted(p for h in held if h for p in h) == list(
                    range(STATIC_PARTITIONS)
                )

            await wait_until(split, WAIT_S, "the partitions to be split between a and b")
            before = await stable_view(broker)
            await consumed(members, await produce_each(broker.bootstrap, "before"))
            held = {name: m.assigned() for name, m in members.items()}
            gen_a = await members["a"].generation()
            gen_b = await members["b"].generation()
            assert gen_a[1] == gen_b[1]
            callbacks_a = members["a"].callback_count()

            # b goes away (a static member sends no LeaveGroup), then the broker crashes.
            await members.pop("b").close()
            await broker.kill()
            await broker.start()

            # b comes back within its session timeout, under a new client.
            members["b"] = ConfluentMember(broker.bootstrap, "static-b").start()
            await wait_until(
                lambda: members["b"].assigned() is not None, WAIT_S, "static-b's assignment"
            )
            assert members["b"].assigned() == held["b"], "the rejoined static member moved"
            await consumed(members, await produce_each(broker.bootstrap, "after"))

            # Both commit with the generation they hold: the broker still knows it.
            for m in members.values():
                parts = sorted(m.assigned() or ())
                offsets = [CTopicPartition(STATIC_TOPIC, p, 2) for p in parts]

                def commit(c: Consumer, offsets: list[CTopicPartition] = offsets) -> Any:
                    return c.commit(offsets=offsets, asynchronous=False)

                await m.call(commit)
            committed = await fetch_committed(
                broker.port, STATIC_GROUP, STATIC_TOPIC, list(range(STATIC_PARTITIONS))
            )
            assert {p: o for p, (o, _) in committed.items()} == dict.fromkeys(
                range(STATIC_PARTITIONS), 2
            )

            assert await members["a"].generation() == gen_a, "a's generation changed"
            assert (await members["b"].generation())[1] == gen_b[1], "the group rebalanced"
            after = await stable_view(broker)
            assert after["static-a"] == before["static-a"]
            assert after["static-b"][1] == before["static-b"][1]
            # a went through the crash without a single rebalance callback.
            assert members["a"].callback_count() == callbacks_a, members["a"].callbacks
            assert members["b"].callbacks == [("assign", held["b"])]
        finally:
            for m in members.values():
                await m.close()
        await broker.stop()
