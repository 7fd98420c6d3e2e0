"""Shared harness for the transaction coordinator tests: one shard on a manual clock, a fake
marker writer and a record list."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from kgroupd.broker.coordinator.timers import ManualTimers
from kgroupd.broker.coordinator.txn import (
    AddPartitions,
    EndTxn,
    InitProducerId,
    SequentialProducerIds,
    TransactionShard,
    TxnConfig,
    TxnMarkers,
    TxnRecord,
)
from kgroupd.protocol.errors import ErrorCode

TIMEOUT = 60_000
CONFIG = TxnConfig(
    transaction_partitions=1,
    max_timeout_ms=900_000,
    abort_timed_out_interval_ms=10_000,
    transactional_id_expiration_ms=604_800_000,
    remove_expired_interval_ms=3_600_000,
    offsets_partitions=50,
)
TP = ("t", 0)
TP1 = ("t", 1)


@dataclass
class FakeMarkers:
    """Records every marker request; ``complete()`` reports the oldest written."""

    pending: list[tuple[TxnMarkers, Callable[[], None]]] = field(default_factory=list)
    written: list[TxnMarkers] = field(default_factory=list)

    def write_markers(self, markers: TxnMarkers, done: Callable[[], None]) -> None:
        self.pending.append((markers, done))

    def complete(self) -> TxnMarkers:
        markers, done = self.pending.pop(0)
        self.written.append(markers)
        done()
        return markers


@dataclass
class Harness:
    shard: TransactionShard
    timers: ManualTimers
    markers: FakeMarkers
    records: list[TxnRecord]
    pids: SequentialProducerIds

    def init(self, txn_id: str = "tx", pid: int = -1, epoch: int = -1, timeout: int = TIMEOUT):
        return self.shard.init_producer_id(InitProducerId(txn_id, timeout, pid, epoch))

    def add(self, pid: int, epoch: int, *tps: tuple[str, int], txn_id: str = "tx", tv: int = 0):
        return self.shard.add_partitions(
            AddPartitions(txn_id, pid, epoch, frozenset(tps or (TP,)), tv)
        )

    def end(self, pid: int, epoch: int, commit: bool = True, tv2: bool = False, txn_id="tx"):
        return self.shard.end_txn(EndTxn(txn_id, pid, epoch, commit, tv2))

    def meta(self, txn_id: str = "tx"):
        return self.shard.transactions[txn_id]


def harness(start_ms: int = 1_000_000, pid_start: int = 1000, **shard_kw) -> Harness:
    timers = ManualTimers(start_ms)
    markers = FakeMarkers()
    records: list[TxnRecord] = []
    pids = SequentialProducerIds(pid_start)
    shard = TransactionShard(0, CONFIG, timers, pids, markers, records.append, **shard_kw)
    return Harness(shard, timers, markers, records, pids)


def ok(result, error: ErrorCode = ErrorCode.NONE):
    assert result.error is error, result
    return result
