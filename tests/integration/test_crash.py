"""Crash test (issue 4): ``kill -9`` under load loses no acknowledged commit or record.

A real broker subprocess (``--fsync always``, a small ``--snapshot-log-bytes`` so log
rotation and snapshots happen under the crashes too, a topic with small segments so segment
rolls do as well) on a fixed port and data dir. Load, all at once:

- three aiokafka consumers with manual assignment commit offsets for partitions of their
  own, each in a loop (two of them share a group, the third has a group of its own); the
  metadata of every commit names its offset;
- two aiokafka producers with ``acks="all"`` (one of them idempotent), two sending tasks
  each, every value unique.

The broker is killed with SIGKILL at ``KILLS`` random moments (a seeded ``random.Random``:
the seed is printed, and ``KGROUPD_CRASH_SEED`` replays a run) and restarted each time on the
same data dir and port; the clients reconnect by themselves. After every restart:

- every commit acknowledged before the kill is there with its offset or a later one that
  was sent (OffsetFetch), with the metadata of that offset;
- every record acknowledged before the kill is readable at its offset with its value (Fetch).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.errors import KafkaError
from aiokafka.structs import OffsetAndMetadata

from tests.support.broker_process import (
    broker_process,
    fetch_committed,
    read_partition,
)
from tests.support.kafka_wire import WireClient, create_topic

KILLS = 20
COMMIT_TOPIC, COMMIT_PARTITIONS = "crash-commits", 6
DATA_TOPIC, DATA_PARTITIONS = "crash-data", 3
# consumer name -> (group, its partitions of COMMIT_TOPIC)
COMMITTERS = {
    "c0": ("crash-a", [0, 1]),
    "c1": ("crash-a", [2, 3]),
    "c2": ("crash-b", [4, 5]),
}
PRODUCERS = {"p0": False, "p1": True}  # name -> enable_idempotence
SENDERS_PER_PRODUCER = 2
RESUME_TIMEOUT_S = 20.0  # for every client to get an acknowledgement after a restart


def crash_seed() -> int:
    text = os.environ.get("KGROUPD_CRASH_SEED")
    return int(text) if text else random.SystemRandom().randrange(2**32)


@dataclass
class Load:
    """What the clients sent and what the broker acknowledged."""

    stop: bool = False
    # (group, partition) -> highest offset sent / acknowledged
    sent: dict[tuple[str, int], int] = field(default_factory=dict)
    acked: dict[tuple[str, int], int] = field(default_factory=dict)
    # (partition, offset) -> value, acknowledged with acks=all
    records: dict[tuple[int, int], bytes] = field(default_factory=dict)
    errors: Counter[str] = field(default_factory=Counter)
    commits: int = 0
    # client name -> set on each acknowledgement (cleared at each kill)
    progress: dict[str, asyncio.Event] = field(default_factory=dict)

    def acknowledged(self, client: str) -> None:
        self.progress[client].set()


async def commit_loop(load: Load, name: str, consumer: AIOKafkaConsumer) -> None:
    group, partitions = COMMITTERS[name]
    tps = [TopicPartition(COMMIT_TOPIC, p) for p in partitions]
    n = 0
    while not load.stop:
        n += 1
        for p in partitions:
            load.sent[(group, p)] = n
        try:
            # aiokafka retries a commit until the coordinator answers it (across a restart).
            await consumer.commit({tp: OffsetAndMetadata(n, f"{name}:{n}") for tp in tps})
        except KafkaError as exc:
            load.errors[f"{name}: {type(exc).__name__}"] += 1
            await asyncio.sleep(0.01)
            continue
        for p in partitions:
            load.acked[(group, p)] = n
        load.commits += 1
        load.acknowledged(name)


async def send_loop(load: Load, name: str, producer: AIOKafkaProducer, rng: random.Random) -> None:
    n = 0
    while not load.stop:
        n += 1
        value = f"{name}:{n}".encode()
        partition = rng.randrange(DATA_PARTITIONS)
        try:
            meta = await producer.send_and_wait(DATA_TOPIC, value, partition=partition)
        except KafkaError as exc:
            load.errors[f"{name.split('/')[0]}: {type(exc).__name__}"] += 1
            await asyncio.sleep(0.01)
            continue
        load.records[(meta.partition, meta.offset)] = value
        load.acknowledged(name)


async def check_nothing_acknowledged_is_lost(
    port: int,
    acked: dict[tuple[str, int], int],
    sent: Callable[[tuple[str, int]], int],
    records: dict[tuple[int, int], bytes],
    where: str,
) -> None:
    by_group: dict[str, dict[int, tuple[int, str]]] = {}
    for group in sorted({g for g, _ in COMMITTERS.values()}):
        by_group[group] = await fetch_committed(
            port, group, COMMIT_TOPIC, list(range(COMMIT_PARTITIONS))
        )
    owner = {(g, p): name for name, (g, ps) in COMMITTERS.items() for p in ps}
    for (group, partition), offset in sorted(acked.items()):
        got = by_group[group].get(partition)
        assert got is not None, f"{where}: acknowledged commit {group}/{partition}@{offset} lost"
        got_offset, metadata = got
        assert offset <= got_offset <= sent((group, partition)), (
            f"{where}: {group}/{partition} has offset {got_offset}; acknowledged {offset}, "
            f"highest sent {sent((group, partition))}"
        )
        assert metadata == f"{owner[(group, partition)]}:{got_offset}", (
            f"{where}: {group}/{partition}@{got_offset} has metadata {metadata!r}"
        )
    stored = {}
    for partition in range(DATA_PARTITIONS):
        values, high_watermark = await read_partition(port, DATA_TOPIC, partition)
        stored[partition] = (values, high_watermark)
    for (partition, offset), value in sorted(records.items()):
        values, high_watermark = stored[partition]
        assert offset < high_watermark, (
            f"{where}: acknowledged record {partition}@{offset} is past the high watermark "
            f"{high_watermark}"
        )
        assert values.get(offset) == value, (
            f"{where}: acknowledged record {partition}@{offset} was {value!r}, "
            f"now {values.get(offset)!r}"
        )


async def wait_for_progress(load: Load, where: str) -> None:
    """Until every client got an acknowledgement since the events were cleared."""
    waits = {name: asyncio.ensure_future(ev.wait()) for name, ev in load.progress.items()}
    try:
        done, _ = await asyncio.wait(waits.values(), timeout=RESUME_TIMEOUT_S)
    finally:
        for fut in waits.values():
            fut.cancel()
    stuck = [name for name, fut in waits.items() if fut not in done]
    assert not stuck, f"{where}: no acknowledgement for {stuck} in {RESUME_TIMEOUT_S} s"


async def test_kill_9_under_load_loses_no_acknowledged_commit_or_record(tmp_path: Path) -> None:
    seed = crash_seed()
    print(f"crash test seed: {seed} (replay with KGROUPD_CRASH_SEED={seed})")
    rng = random.Random(seed)
    load = Load()
    consumers: list[AIOKafkaConsumer] = []
    producers: list[AIOKafkaProducer] = []
    tasks: list[asyncio.Task[None]] = []
    args = ("--fsync", "always", "--snapshot-log-bytes", "6144")
    async with broker_process(tmp_path / "data", args=args) as broker:
        await broker.start()
        async with await WireClient.connect(broker.port) as wire:
            await create_topic(wire, COMMIT_TOPIC, COMMIT_PARTITIONS)
            await create_topic(wire, DATA_TOPIC, DATA_PARTITIONS, {"segment.bytes": "8192"})
        common = {"bootstrap_servers": broker.bootstrap, "retry_backoff_ms": 100}
        try:
            for name, (group, partitions) in COMMITTERS.items():
                consumer = AIOKafkaConsumer(
                    group_id=group, enable_auto_commit=False, client_id=name, **common
                )
                consumers.append(consumer)
                await consumer.start()
                consumer.assign([TopicPartition(COMMIT_TOPIC, p) for p in partitions])
                load.progress[name] = asyncio.Event()
                tasks.append(asyncio.create_task(commit_loop(load, name, consumer)))
            for name, idempotent in PRODUCERS.items():
                producer = AIOKafkaProducer(
                    acks="all",
                    enable_idempotence=idempotent,
                    request_timeout_ms=15000,
                    client_id=name,
                    **common,
                )
                producers.append(producer)
                await producer.start()
                for i in range(SENDERS_PER_PRODUCER):
                    sender = f"{name}/{i}"
                    load.progress[sender] = asyncio.Event()
                    task_rng = random.Random(rng.random())
                    tasks.append(asyncio.create_task(send_loop(load, sender, producer, task_rng)))

            for kill in range(1, KILLS + 1):
                where = f"seed {seed}, kill {kill}"
                await wait_for_progress(load, where)
                # A random moment while every client has requests in flight.
                await asyncio.sleep(rng.uniform(0.1, 0.4))
                await broker.kill()
                acked, records = dict(load.acked), dict(load.records)
                for event in load.progress.values():
                    event.clear()
                await broker.start()
                await check_nothing_acknowledged_is_lost(
                    broker.port, acked, lambda k: load.sent[k], records, where
                )

            await wait_for_progress(load, f"seed {seed}, after the last kill")
            load.stop = True
            await asyncio.wait_for(asyncio.gather(*tasks), RESUME_TIMEOUT_S)
            await check_nothing_acknowledged_is_lost(
                broker.port, dict(load.acked), lambda k: load.sent[k], dict(load.records), "end"
            )
        finally:
            load.stop = True
            for task in tasks:
                task.cancel()
            for task in tasks:
                with contextlib.suppress(asyncio.CancelledError):
                    await task
            for client in [*consumers, *producers]:
                await client.stop()
        await broker.stop()

    print(
        f"seed {seed}: {KILLS} kills, {load.commits} commits and {len(load.records)} records "
        f"acknowledged; client errors {dict(load.errors)}; "
        f"{len(broker.find('snapshots_written'))} snapshots, "
        f"{len(broker.find('torn_tail_cut'))} torn tails cut"
    )
    assert broker.starts == KILLS + 1
    # The load was real: many acknowledgements between kills, and the snapshot path ran.
    assert load.commits >= 10 * KILLS and len(load.records) >= 10 * KILLS
    assert broker.find("snapshots_written"), "no snapshot was written under the load"
    # The idempotent producer never saw its sequence state lost across a restart.
    for kind in ("OutOfOrderSequenceNumber", "DuplicateSequenceNumber", "UnknownProducerId"):
        assert not [e for e in load.errors if e.startswith("p1") and kind in e], load.errors
