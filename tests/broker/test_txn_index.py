"""A partition's transaction index: open transactions set the last stable offset, markers
close them, aborts are listed by range and trimmed with the log start."""

from __future__ import annotations

from aiokafka.record.default_records import DefaultRecordBatchBuilder

from kgroupd.broker.log.partition import PartitionLog, now_ms
from kgroupd.protocol.records import control_batch, control_marker, parse_header, with_base_offset


def add(log: PartitionLog, pid: int, n: int = 1, transactional: bool = True) -> int:
    builder = DefaultRecordBatchBuilder(2, 0, int(transactional), pid, 0, 0, 1 << 20)
    for i in range(n):
        builder.append(i, None, None, b"v", [])
    stored = bytes(with_base_offset(bytes(builder.build()), log.high_watermark))
    return log.append(stored, parse_header(stored), now_ms())


def test_last_stable_offset_follows_the_earliest_open_transaction() -> None:
    log = PartitionLog("t", 0)
    add(log, -1, 2, transactional=False)
    assert log.last_stable_offset == 2
    first = add(log, 7, 2)  # 2-3
    add(log, 8)  # 4
    add(log, 7)  # 5: same transaction, still opened at 2
    assert (first, log.last_stable_offset, log.high_watermark) == (2, 2, 6)
    log.write_marker(7, 0, commit=True, coordinator_epoch=3)  # 6
    assert log.last_stable_offset == 4
    log.write_marker(8, 0, commit=False, coordinator_epoch=3)  # 7
    assert log.last_stable_offset == log.high_watermark == 8
    assert log.txn.aborted_between(0, 8) == [(8, 4)]
    assert log.txn.aborted_between(8, 9) == []  # ended before the read starts
    assert log.txn.aborted_between(0, 4) == []  # begins after the read ends


def test_a_marker_without_an_open_transaction_lists_nothing() -> None:
    log = PartitionLog("t", 0)
    log.write_marker(9, 0, commit=False, coordinator_epoch=0)
    assert log.txn.aborted == [] and log.last_stable_offset == 1


def test_aborts_below_the_log_start_are_trimmed_and_restore_rebuilds_the_index() -> None:
    log = PartitionLog("t", 0)
    add(log, 5)
    log.write_marker(5, 0, commit=False, coordinator_epoch=0)
    add(log, 6)
    restored = PartitionLog("t", 0)
    for b in log.batches:
        restored.restore(b.data, parse_header(b.data))
    assert restored.txn == log.txn and restored.last_stable_offset == 2
    log.drop_below(2)
    assert log.txn.aborted == []


def test_control_batches_carry_the_marker() -> None:
    assert control_marker(control_batch(1, 2, True, 9, 0)) == (True, 9)
    assert control_marker(control_batch(1, 2, False, 4, 0)) == (False, 4)
