"""The transaction data path on the wire: the last stable offset, read_committed Fetch and
ListOffsets, and the aborted-transaction list.

The transaction coordinator (InitProducerId with a transactional id, AddPartitionsToTxn,
EndTxn) writes the batches and markers these tests write straight into the partition log:
a transactional batch opens a producer's transaction, a control batch (commit or abort
marker) closes it. Real clients then read: aiokafka with ``isolation_level`` read_committed
sees only committed records; read_uncommitted sees aborted records as ordinary ones, and
neither ever shows a control record.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest_asyncio
from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.record.default_records import DefaultRecordBatchBuilder

from kgroupd.broker.log.partition import PartitionLog, now_ms
from kgroupd.broker.net.server import KafkaServer
from kgroupd.protocol.records import parse_header, with_base_offset
from tests.support.kafka_wire import (
    WireClient,
    build_batch,
    create_topic,
    fetch_request,
    iter_records,
    list_offsets_request,
    only_partition,
)

FETCH, LIST_OFFSETS = 1, 2
PID, EPOCH = 5000, 0


def txn_batch(values: list[bytes], producer_id: int = PID, sequence: int = 0) -> bytes:
    builder = DefaultRecordBatchBuilder(2, 0, 1, producer_id, EPOCH, sequence, 1 << 20)
    for i, v in enumerate(values):
        builder.append(i, None, None, v, [])
    return bytes(builder.build())


def append(log: PartitionLog, batch: bytes) -> bytes:
    """Append as the Produce path does; returns the batch as stored."""
    stored = bytes(with_base_offset(batch, log.high_watermark))
    log.append(stored, parse_header(stored), now_ms())
    return stored


@pytest_asyncio.fixture
async def wire(server: KafkaServer) -> AsyncIterator[WireClient]:
    async with await WireClient.connect(server.port) as client:
        await create_topic(client, "tx", 1)
        yield client


TOPIC_ID: dict[str, Any] = {}


async def fetch(wire: WireClient, offset: int, committed: bool, version: int = 11) -> Any:
    body = fetch_request("tx", 0, offset) | {"isolation_level": int(committed)}
    body["topics"][0]["topic_id"] = TOPIC_ID.get("tx")  # v13+ name topics by id
    return only_partition(await wire.request(FETCH, version, body))


async def latest(wire: WireClient, committed: bool) -> int:
    body = list_offsets_request("tx", [0], -1) | {"isolation_level": int(committed)}
    return int(only_partition(await wire.request(LIST_OFFSETS, 5, body))["offset"])


async def test_an_open_transaction_holds_back_read_committed_and_an_abort_is_listed(
    server: KafkaServer, wire: WireClient
) -> None:
    log = server.broker.topics.partition("tx", 0)
    assert log is not None
    topic = server.broker.topics.get("tx")
    assert topic is not None
    TOPIC_ID["tx"] = topic.topic_id
    plain = append(log, build_batch([(b"k", b"a", ()), (b"k", b"b", ())]))
    txn = append(log, txn_batch([b"t1", b"t2"]))  # offsets 2-3, transaction open

    for version in (4, 11, 12, 16):
        committed = await fetch(wire, 0, True, version)
        assert committed["records"] == plain, version  # nothing from the first txn offset on
        assert (committed["high_watermark"], committed["last_stable_offset"]) == (4, 2)
        assert committed["aborted_transactions"] == []
        uncommitted = await fetch(wire, 0, False, version)
        assert uncommitted["records"] == plain + txn
        assert uncommitted["last_stable_offset"] == 2
        assert uncommitted["aborted_transactions"] is None
    assert (await fetch(wire, 2, True))["records"] in (b"", None)
    assert (await latest(wire, True), await latest(wire, False)) == (2, 4)

    marker_offset = log.write_marker(PID, EPOCH, commit=False, coordinator_epoch=0)
    assert marker_offset == 4
    marker = log.batches[-1].data
    done = await fetch(wire, 0, True)
    assert done["records"] == plain + txn + marker  # batches and control batch unchanged
    assert done["last_stable_offset"] == 5 == done["high_watermark"]
    assert [dict(a) for a in done["aborted_transactions"]] == [
        {"producer_id": PID, "first_offset": 2}
    ]
    # a read past the aborted transaction does not list it
    assert (await fetch(wire, 5, True))["aborted_transactions"] == []
    assert (await latest(wire, True), await latest(wire, False)) == (5, 5)
    # the control batch is one record (key: version 0, type 0 = abort)
    (control,) = [r for r in iter_records(marker)]
    assert control.key == b"\x00\x00\x00\x00"


async def test_clients_read_committed_and_uncommitted(
    server: KafkaServer, wire: WireClient
) -> None:
    log = server.broker.topics.partition("tx", 0)
    assert log is not None
    append(log, build_batch([(None, b"plain", ())]))
    append(log, txn_batch([b"aborted-1", b"aborted-2"], producer_id=PID))
    append(log, txn_batch([b"committed-1"], producer_id=PID + 1))
    append(log, txn_batch([b"aborted-3"], producer_id=PID, sequence=2))
    log.write_marker(PID, EPOCH, commit=False, coordinator_epoch=0)
    append(log, txn_batch([b"open"], producer_id=PID + 2))  # never finished
    log.write_marker(PID + 1, EPOCH, commit=True, coordinator_epoch=0)
    append(log, build_batch([(None, b"after", ())]))

    async def read(isolation: str) -> list[bytes]:
        consumer = AIOKafkaConsumer(
            bootstrap_servers=f"127.0.0.1:{server.port}",
            isolation_level=isolation,
            enable_auto_commit=False,
        )
        await consumer.start()
        try:
            tp = TopicPartition("tx", 0)
            consumer.assign([tp])
            await consumer.seek_to_beginning(tp)
            got: list[bytes] = []
            for _ in range(20):
                batch = await consumer.getmany(tp, timeout_ms=200)
                got += [r.value for r in batch.get(tp, [])]
                if isolation == "read_uncommitted" and b"after" in got:
                    break
            return got
        finally:
            await consumer.stop()

    # read_committed stops at the open transaction (the last stable offset)
    assert await read("read_committed") == [b"plain", b"committed-1"]
    assert await read("read_uncommitted") == [
        b"plain",
        b"aborted-1",
        b"aborted-2",
        b"committed-1",
        b"aborted-3",
        b"open",
        b"after",
    ]
