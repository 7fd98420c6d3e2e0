"""Transactions under ``--data-dir``: the outcome is in the coordinator log before any marker
reaches a partition, and a restart keeps committed transactions committed, aborted ones
invisible, and offsets committed inside a transaction.

aiokafka's transactional producer (transaction version 1 requests: AddPartitionsToTxn,
AddOffsetsToTxn, TxnOffsetCommit, EndTxn) against a broker with ``--fsync always``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from kgroupd.broker.coordinator.txn import TransactionMetadataRecord, TransactionState
from kgroupd.broker.log.partition import PartitionLog
from kgroupd.broker.storage.coordinator_store import file_records
from kgroupd.broker.testing import running_server


def txn_states(data: Path) -> list[TransactionState]:
    out = []
    for path in sorted((data / "coordinator").glob("log-*.log")):
        out += [r.state for r in file_records(path) if isinstance(r, TransactionMetadataRecord)]
    return out


async def read(bootstrap: str, isolation: str, topic: str = "out") -> list[bytes]:
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, isolation_level=isolation)
    await consumer.start()
    try:
        tps = [TopicPartition(topic, p) for p in range(2)]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        got: list[bytes] = []
        for _ in range(6):
            batches = await consumer.getmany(timeout_ms=150)
            got += [r.value for recs in batches.values() for r in recs]
        return sorted(got)
    finally:
        await consumer.stop()


async def test_markers_follow_the_prepare_record_and_a_restart_keeps_the_outcomes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen_at_marker: list[list[TransactionState]] = []
    original = PartitionLog.write_marker

    def spy(self: PartitionLog, *args: Any, **kw: Any) -> int:
        seen_at_marker.append(txn_states(tmp_path))  # what the coordinator log holds now
        return original(self, *args, **kw)

    monkeypatch.setattr(PartitionLog, "write_marker", spy)
    async with running_server(log_level="warning", data_dir=str(tmp_path)) as srv:
        bootstrap = f"127.0.0.1:{srv.port}"
        admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
        await admin.start()
        await admin.create_topics([NewTopic("out", 2, 1), NewTopic("in", 1, 1)])
        await admin.close()
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, transactional_id="d-1")
        await producer.start()
        try:
            async with producer.transaction():
                await producer.send("out", b"c1", partition=0)
                await producer.send("out", b"c2", partition=1)
                await producer.send_offsets_to_transaction({TopicPartition("in", 0): 7}, "grp")
            with pytest.raises(RuntimeError):
                async with producer.transaction():
                    await producer.send_and_wait("out", b"a1", partition=0)
                    raise RuntimeError("abort")
        finally:
            await producer.stop()
        before = await read(bootstrap, "read_committed")
    assert before == [b"c1", b"c2"]
    # every marker was written after its transaction's prepare record reached the log
    assert len(seen_at_marker) == 3  # commit: partitions 0 and 1; abort: partition 0
    assert TransactionState.PREPARE_COMMIT in seen_at_marker[0]
    assert seen_at_marker[2][-1] is TransactionState.PREPARE_ABORT

    monkeypatch.setattr(PartitionLog, "write_marker", original)
    async with running_server(log_level="warning", data_dir=str(tmp_path)) as srv:
        bootstrap = f"127.0.0.1:{srv.port}"
        assert await read(bootstrap, "read_committed") == before
        assert await read(bootstrap, "read_uncommitted") == [b"a1", b"c1", b"c2"]
        consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id="grp")
        await consumer.start()
        try:
            assert await consumer.committed(TopicPartition("in", 0)) == 7
        finally:
            await consumer.stop()
        described = srv.broker.transactions.describe("d-1")
        assert described.state == "CompleteAbort"
