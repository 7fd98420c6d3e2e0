"""kill -9 of a broker with ``--data-dir`` (fsync always) during a stream of transactions:
after the restart every transaction is all or nothing, nothing whose commit was acknowledged
is lost, nothing aborted or unfinished is visible to read_committed, read_committed reads
what it read before the kill, and the producer's next InitProducerId aborts the transaction
it left open."""

from __future__ import annotations

import asyncio
import contextlib
import sys
from pathlib import Path

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, ConsumerRecord, TopicPartition

from tests.support.broker_process import BrokerProcess, broker_process
from tests.support.kafka_wire import WireClient, create_topic

TOPIC, PARTITIONS = "crash-txn", 4


async def read(bootstrap: str, isolation: str) -> list[bytes]:
    """Every record below the end offsets as of now (the LSO under read_committed): bounded
    even while a producer keeps writing."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, isolation_level=isolation)
    await consumer.start()
    try:
        tps = [TopicPartition(TOPIC, p) for p in range(PARTITIONS)]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        ends = await consumer.end_offsets(tps)
        got: list[bytes] = []
        while [tp for tp in tps if await consumer.position(tp) < ends[tp]]:
            batches = await consumer.getmany(timeout_ms=200)
            got += [r.value for recs in batches.values() for r in recs if r.offset < ends[r_tp(r)]]
        return sorted(got)
    finally:
        await consumer.stop()


def r_tp(record: ConsumerRecord[bytes, bytes]) -> TopicPartition:
    return TopicPartition(record.topic, record.partition)


class Stream:
    """``tests/support/txn_stream.py`` in a subprocess: what it printed so far."""

    def __init__(self, bootstrap: str) -> None:
        self.bootstrap = bootstrap
        self.committed: list[int] = []
        self.aborted: list[int] = []
        self.proc: asyncio.subprocess.Process | None = None
        self.reader: asyncio.Task[None] | None = None

    async def start(self) -> None:
        self.proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "tests.support.txn_stream",
            self.bootstrap,
            TOPIC,
            str(PARTITIONS),
            "crash-1",
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.DEVNULL,
        )
        self.reader = asyncio.create_task(self._read())

    async def _read(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        async for line in self.proc.stdout:
            outcome, n = line.decode().split()
            (self.committed if outcome == "committed" else self.aborted).append(int(n))

    async def kill(self) -> None:
        assert self.proc is not None and self.reader is not None
        with contextlib.suppress(ProcessLookupError):
            self.proc.kill()
        await self.proc.wait()
        await self.reader


def by_transaction(values: list[bytes]) -> dict[int, set[int]]:
    out: dict[int, set[int]] = {}
    for v in values:
        txn, part = v.decode()[1:].split("-")
        out.setdefault(int(txn), set()).add(int(part))
    return out


async def test_kill_9_during_a_stream_of_transactions(tmp_path: Path) -> None:
    async with broker_process(tmp_path / "data") as broker:
        await broker.start()
        async with await WireClient.connect(broker.port) as wire:
            await create_topic(wire, TOPIC, PARTITIONS)
        producer = Stream(broker.bootstrap)
        await producer.start()
        try:
            while len(producer.committed) < 20:
                await asyncio.sleep(0.05)
                assert producer.proc is not None and producer.proc.returncode is None
            before = await read(broker.bootstrap, "read_committed")
            await broker.kill()  # somewhere inside a transaction, or between two
        finally:
            await producer.kill()
        await broker.start()
        await check_after_restart(broker, producer.committed, producer.aborted, before)


async def check_after_restart(
    broker: BrokerProcess, acknowledged: list[int], aborted: list[int], before: list[bytes]
) -> None:
    after = await read(broker.bootstrap, "read_committed")
    visible = by_transaction(after)
    # all or nothing, never an aborted one, every acknowledged commit
    assert all(parts == set(range(PARTITIONS)) for parts in visible.values()), visible
    assert not set(visible) & set(aborted)
    assert set(acknowledged) <= set(visible)
    # at most the one in flight: the transaction after the last that ended (committed or
    # aborted) may have committed without the producer hearing of it
    ended = max([*acknowledged, *aborted], default=-1)
    assert set(visible) - set(acknowledged) <= {ended + 1}
    assert set(before) <= set(after)
    # the producer comes back: InitProducerId ends what it left open; nothing else changes
    producer = AIOKafkaProducer(bootstrap_servers=broker.bootstrap, transactional_id="crash-1")
    await producer.start()
    await producer.stop()
    assert await read(broker.bootstrap, "read_committed") == after
    everything = await read(broker.bootstrap, "read_uncommitted")
    assert set(after) <= set(everything)
    assert not broker.problems()
