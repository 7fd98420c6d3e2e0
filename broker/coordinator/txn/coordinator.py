"""The transaction coordinator: one shard per transaction-state partition, routed by
``partition_for(transactional_id, config.transaction_partitions)``."""

from __future__ import annotations

from collections.abc import Callable

from kgroupd.protocol.errors import ErrorCode

from ..placement import partition_for
from ..timers import Timers
from .commands import (
    AddOffsets,
    AddPartitions,
    DescribedTransaction,
    EndTxn,
    EndTxnResult,
    InitProducerId,
    InitProducerIdResult,
    ListedTransaction,
    ListTransactions,
    ListTransactionsResult,
    TxnConfig,
    VerifyPartitionsResult,
)
from .core import TxnRecordSink
from .io import MarkerWriter, ProducerIdAllocator
from .shard import TransactionShard

__all__ = ["TransactionCoordinator"]


class TransactionCoordinator:
    """Routes each command to the shard of its transactional id. ``sink_for(partition)``
    gives the record sink of a shard (None: records are dropped, as in tests). With
    ``loaded=False`` every shard waits for ``load(records)`` (start-up from a data dir)."""

    def __init__(
        self,
        config: TxnConfig,
        timers: Timers,
        producer_ids: ProducerIdAllocator,
        markers: MarkerWriter,
        sink_for: Callable[[int], TxnRecordSink | None] | None = None,
        loaded: bool = True,
    ) -> None:
        self.config = config
        self.shards = [
            TransactionShard(
                p,
                config,
                timers,
                producer_ids,
                markers,
                sink_for(p) if sink_for else None,
                loaded=loaded,
            )
            for p in range(config.transaction_partitions)
        ]
        self._used = False

    @property
    def used(self) -> bool:
        """A transactional id has been known here (Kafka's ``__transaction_state`` exists
        from then on)."""
        if not self._used:
            self._used = any(shard.transactions for shard in self.shards)
        return self._used

    def partition_for(self, transactional_id: str) -> int:
        return partition_for(transactional_id, self.config.transaction_partitions)

    def shard_for(self, transactional_id: str) -> TransactionShard:
        return self.shards[self.partition_for(transactional_id)]

    def init_producer_id(self, cmd: InitProducerId) -> InitProducerIdResult:
        return self.shard_for(cmd.transactional_id).init_producer_id(cmd)

    def add_partitions(self, cmd: AddPartitions) -> ErrorCode:
        return self.shard_for(cmd.transactional_id).add_partitions(cmd)

    def verify_partitions(self, cmd: AddPartitions) -> VerifyPartitionsResult:
        return self.shard_for(cmd.transactional_id).verify_partitions(cmd)

    def add_offsets(self, cmd: AddOffsets) -> ErrorCode:
        return self.shard_for(cmd.transactional_id).add_offsets(cmd)

    def end_txn(self, cmd: EndTxn) -> EndTxnResult:
        return self.shard_for(cmd.transactional_id).end_txn(cmd)

    def describe(self, transactional_id: str) -> DescribedTransaction:
        return self.shard_for(transactional_id).describe(transactional_id)

    def list_transactions(self, filters: ListTransactions) -> ListTransactionsResult:
        """Every owned shard's answer merged; a loading shard makes the whole answer
        COORDINATOR_LOAD_IN_PROGRESS, as Kafka's."""
        unknown: tuple[str, ...] = ()
        listed: list[ListedTransaction] = []
        for shard in self.shards:
            result = shard.list_transactions(filters)
            if result.error is not ErrorCode.NONE:
                return ListTransactionsResult(result.error)
            unknown = result.unknown_state_filters
            listed.extend(result.transactions)
        return ListTransactionsResult(ErrorCode.NONE, unknown, tuple(listed))

    def shutdown(self) -> None:
        for shard in self.shards:
            shard.shutdown()
