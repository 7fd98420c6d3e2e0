"""Transaction APIs on the wire, version by version: the errors Kafka gives, the implicit
partition add of transaction version 2 (KIP-890), verification for older Produce versions,
and ``__transaction_state`` in Metadata once used."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest_asyncio
from aiokafka.record.default_records import DefaultRecordBatchBuilder

from kgroupd.broker.net.server import KafkaServer
from kgroupd.broker.testing import running_server
from kgroupd.protocol.errors import ErrorCode
from tests.support.kafka_wire import WireClient, create_topic

PRODUCE, METADATA, INIT_PID, ADD_PARTITIONS, END_TXN = 0, 3, 22, 24, 26


@pytest_asyncio.fixture
async def wire(server: KafkaServer) -> AsyncIterator[WireClient]:
    async with await WireClient.connect(server.port) as client:
        await create_topic(client, "w", 2)
        yield client


async def init(wire: WireClient, txn_id: str, version: int = 5) -> tuple[int, int]:
    body = {"transactional_id": txn_id, "transaction_timeout_ms": 60000}
    body |= {"producer_id": -1, "producer_epoch": -1}
    resp = await wire.request(INIT_PID, version, body)
    assert resp["error_code"] == 0, resp
    return resp["producer_id"], resp["producer_epoch"]


def txn_batch(pid: int, epoch: int, seq: int = 0) -> bytes:
    builder = DefaultRecordBatchBuilder(2, 0, 1, pid, epoch, seq, 1 << 20)
    builder.append(0, None, None, b"v", [])
    return bytes(builder.build())


def produce(txn_id: str | None, batch: bytes, partition: int = 0) -> dict[str, Any]:
    return {
        "transactional_id": txn_id,
        "acks": -1,
        "timeout_ms": 5000,
        "topic_data": [{"name": "w", "partition_data": [{"index": partition, "records": batch}]}],
    }


def produce_error(resp: dict[str, Any]) -> int:
    return int(resp["responses"][0]["partition_responses"][0]["error_code"])


def add_partitions(txn_id: str, pid: int, epoch: int, parts: dict[str, list[int]]) -> Any:
    return {
        "v3_and_below_transactional_id": txn_id,
        "v3_and_below_producer_id": pid,
        "v3_and_below_producer_epoch": epoch,
        "v3_and_below_topics": [{"name": t, "partitions": ps} for t, ps in parts.items()],
    }


async def test_produce_v12_adds_the_partition_and_v11_must_have_added_it(
    wire: WireClient,
) -> None:
    pid, epoch = await init(wire, "w-1")
    # Produce v11 is verified: the partition was never added
    refused = await wire.request(PRODUCE, 11, produce("w-1", txn_batch(pid, epoch)))
    assert produce_error(refused) == ErrorCode.TRANSACTION_ABORTABLE
    old = await wire.request(PRODUCE, 9, produce("w-1", txn_batch(pid, epoch)))
    assert produce_error(old) == ErrorCode.INVALID_TXN_STATE
    # Produce v12 under transaction.version 2 adds it
    ok = await wire.request(PRODUCE, 12, produce("w-1", txn_batch(pid, epoch)))
    assert produce_error(ok) == 0
    # a transactional id with a plain batch, or a transactional batch without one
    plain = DefaultRecordBatchBuilder(2, 0, 0, -1, -1, -1, 1 << 20)
    plain.append(0, None, None, b"v", [])
    mixed = await wire.request(PRODUCE, 12, produce("w-1", bytes(plain.build())))
    assert produce_error(mixed) == ErrorCode.INVALID_RECORD
    orphan = await wire.request(PRODUCE, 12, produce(None, txn_batch(pid, epoch, 1)))
    assert produce_error(orphan) == ErrorCode.INVALID_RECORD
    # EndTxn v5 commits and hands out the next epoch (transaction version 2)
    end = await wire.request(
        END_TXN,
        5,
        {"transactional_id": "w-1", "producer_id": pid, "producer_epoch": epoch, "committed": True},
    )
    assert (end["error_code"], end["producer_id"], end["producer_epoch"]) == (0, pid, epoch + 1)


async def test_fencing_errors_by_version_and_unknown_partitions(wire: WireClient) -> None:
    pid, epoch = await init(wire, "w-2")
    await init(wire, "w-2")  # a second producer of the id: the first is fenced
    for version, expected in (
        (1, ErrorCode.INVALID_PRODUCER_EPOCH),
        (3, ErrorCode.PRODUCER_FENCED),
    ):
        resp = await wire.request(
            ADD_PARTITIONS, version, add_partitions("w-2", pid, epoch, {"w": [0]})
        )
        (topic,) = resp["results_by_topic_v3_and_below"]
        assert topic["results_by_partition"][0]["partition_error_code"] == expected
    pid, epoch = await init(wire, "w-2")
    resp = await wire.request(
        ADD_PARTITIONS, 3, add_partitions("w-2", pid, epoch, {"w": [0, 7], "nope": [0]})
    )
    errors = {
        (t["name"], p["partition_index"]): p["partition_error_code"]
        for t in resp["results_by_topic_v3_and_below"]
        for p in t["results_by_partition"]
    }
    assert errors == {
        ("w", 0): ErrorCode.OPERATION_NOT_ATTEMPTED,
        ("w", 7): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ("nope", 0): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
    }


async def test_transaction_state_is_an_internal_topic_once_used(
    server: KafkaServer, wire: WireClient
) -> None:
    def names(resp: dict[str, Any]) -> dict[str, bool]:
        return {t["name"]: t["is_internal"] for t in resp["topics"]}

    before = await wire.request(METADATA, 12, {"topics": None, "allow_auto_topic_creation": True})
    assert "__transaction_state" not in names(before)
    await init(wire, "w-3")
    after = await wire.request(METADATA, 12, {"topics": None, "allow_auto_topic_creation": True})
    assert names(after)["__transaction_state"] is True
    (entry,) = [t for t in after["topics"] if t["name"] == "__transaction_state"]
    assert len(entry["partitions"]) == server.broker.config.transaction_partitions
    assert server.broker.topics.get("__transaction_state") is None  # never a data topic


async def test_transaction_version_1_makes_produce_verify() -> None:
    async with (
        running_server(log_level="warning", transaction_version=1) as srv,
        await WireClient.connect(srv.port) as wire,
    ):
        await create_topic(wire, "w", 1)
        pid, epoch = await init(wire, "w-4")
        refused = await wire.request(PRODUCE, 12, produce("w-4", txn_batch(pid, epoch)))
        assert produce_error(refused) == ErrorCode.INVALID_TXN_STATE
        added = await wire.request(ADD_PARTITIONS, 3, add_partitions("w-4", pid, epoch, {"w": [0]}))
        (topic,) = added["results_by_topic_v3_and_below"]
        assert topic["results_by_partition"][0]["partition_error_code"] == 0
        ok = await wire.request(PRODUCE, 12, produce("w-4", txn_batch(pid, epoch)))
        assert produce_error(ok) == 0


async def test_a_transaction_past_its_timeout_is_aborted_by_the_coordinator() -> None:
    import asyncio

    from tests.support.kafka_wire import fetch_request, only_partition

    async with (
        running_server(
            log_level="warning", transaction_abort_timed_out_transaction_cleanup_interval_ms=50
        ) as srv,
        await WireClient.connect(srv.port) as wire,
    ):
        await create_topic(wire, "w", 1)
        body = {"transactional_id": "w-5", "transaction_timeout_ms": 200}
        resp = await wire.request(INIT_PID, 5, body | {"producer_id": -1, "producer_epoch": -1})
        pid, epoch = resp["producer_id"], resp["producer_epoch"]
        assert (
            produce_error(await wire.request(PRODUCE, 12, produce("w-5", txn_batch(pid, epoch))))
            == 0
        )

        async def fetch() -> dict[str, Any]:
            body = fetch_request("w", 0, 0) | {"isolation_level": 1}
            return only_partition(await wire.request(1, 12, body))

        assert (await fetch())["last_stable_offset"] == 0  # open
        for _ in range(100):
            await asyncio.sleep(0.05)
            if srv.broker.transactions.describe("w-5").state == "CompleteAbort":
                break
        done = await fetch()
        assert done["last_stable_offset"] == done["high_watermark"] == 2  # data + abort marker
        assert [a["producer_id"] for a in done["aborted_transactions"]] == [pid]
        # the abort bumped the producer's epoch: its commit is refused (EndTxn v4: fenced;
        # v5, transaction version 2, sees epoch + 1 as its own bump: the state is wrong)
        commit = {"transactional_id": "w-5", "producer_id": pid, "producer_epoch": epoch}
        commit["committed"] = True
        v4 = await wire.request(END_TXN, 4, commit)
        assert v4["error_code"] == ErrorCode.PRODUCER_FENCED
        v5 = await wire.request(END_TXN, 5, commit)
        assert v5["error_code"] == ErrorCode.INVALID_TXN_STATE
