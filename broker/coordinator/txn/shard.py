"""One transaction coordinator shard: every transactional id of one transaction-state
partition (``partition_for(transactional_id, config.transaction_partitions)``)."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable

from kgroupd.protocol.errors import ErrorCode

from ..timers import Timers
from .commands import (
    DescribedTransaction,
    ListedTransaction,
    ListTransactions,
    ListTransactionsResult,
    TxnConfig,
)
from .core import TxnRecordSink
from .io import MarkerWriter, ProducerIdAllocator
from .ops import TxnOps
from .records import TransactionTombstoneRecord, TxnRecord
from .state import TransactionState

__all__ = ["TransactionShard"]

_S = TransactionState


class TransactionShard(TxnOps):
    """Owns the transactional ids of one transaction-state partition.

    Every operation is a plain synchronous method; the two periodic tasks (aborting
    timed-out transactions, expiring idle transactional ids) run on ``timers``. Pass
    ``loaded=False`` to start in the loading state, then ``load(records)``.
    """

    def __init__(
        self,
        partition: int,
        config: TxnConfig,
        timers: Timers,
        producer_ids: ProducerIdAllocator,
        markers: MarkerWriter,
        sink: TxnRecordSink | None = None,
        loaded: bool = True,
    ) -> None:
        super().__init__(partition, config, timers, producer_ids, markers, sink)
        self.loading = True
        if loaded:
            self.complete_loading()

    # --- lifecycle -------------------------------------------------------------------------
    def load(self, records: Iterable[TxnRecord]) -> None:
        """Replay persisted records (start-up or a partition moving here), then serve."""
        self.loading = True
        for record in records:
            self.replay(record)
        self.complete_loading()

    def complete_loading(self) -> None:
        """End of load: the markers of every transaction left in PrepareCommit / PrepareAbort
        are written again (Kafka's load does the same), the periodic tasks start."""
        self.loading = False
        self.owned = True
        for meta in list(self.transactions.values()):
            if meta.state.preparing:
                self._send_markers(meta)
        self._schedule(self._abort_key(), self.config.abort_timed_out_interval_ms, self._on_abort)
        self._schedule(self._expire_key(), self.config.remove_expired_interval_ms, self._on_expire)

    def shutdown(self) -> None:
        """Unload: forget every transactional id, stop the periodic tasks; markers still
        being written complete nothing."""
        self.transactions.clear()
        self.timers.cancel(self._abort_key())
        self.timers.cancel(self._expire_key())
        self.owned = False

    def _abort_key(self) -> str:
        return f"txn-abort/{self.partition}"

    def _expire_key(self) -> str:
        return f"txn-expire/{self.partition}"

    def _schedule(self, key: str, delay_ms: int, op: Callable[[], None]) -> None:
        self.timers.schedule(key, delay_ms, op)

    def _on_abort(self) -> None:
        if not self._active():
            return
        self.abort_timed_out_transactions()
        self._schedule(self._abort_key(), self.config.abort_timed_out_interval_ms, self._on_abort)

    def _on_expire(self) -> None:
        if not self._active():
            return
        self.expire_transactional_ids()
        self._schedule(self._expire_key(), self.config.remove_expired_interval_ms, self._on_expire)

    # --- expiry ----------------------------------------------------------------------------
    def expire_transactional_ids(self) -> list[str]:
        """Transactional ids with no open transaction, untouched for
        ``transactional_id_expiration_ms``, go Dead and are tombstoned."""
        if not self._active():
            return []
        cutoff = self.now() - self.config.transactional_id_expiration_ms
        expired = []
        for txn_id, meta in list(self.transactions.items()):
            if meta.state.expiration_allowed and meta.last_update_ms <= cutoff:
                meta.prepare_dead()
                self._write(TransactionTombstoneRecord(txn_id))
                expired.append(txn_id)
        return expired

    # --- DescribeTransactions / ListTransactions ---------------------------------------------
    def describe(self, transactional_id: str) -> DescribedTransaction:
        if not transactional_id:
            return DescribedTransaction(ErrorCode.INVALID_REQUEST, transactional_id)
        error = self.availability_error()
        if error is not ErrorCode.NONE:
            return DescribedTransaction(error, transactional_id)
        meta = self.transactions.get(transactional_id)
        if meta is None or meta.state is _S.DEAD:
            return DescribedTransaction(ErrorCode.TRANSACTIONAL_ID_NOT_FOUND, transactional_id)
        by_topic: dict[str, list[int]] = {}
        for topic, partition in meta.partitions:
            by_topic.setdefault(topic, []).append(partition)
        return DescribedTransaction(
            ErrorCode.NONE,
            transactional_id,
            state=meta.state.value,
            timeout_ms=meta.timeout_ms,
            start_ms=meta.start_ms,
            producer_id=meta.producer_id,
            producer_epoch=meta.producer_epoch,
            topics=tuple((t, tuple(sorted(ps))) for t, ps in sorted(by_topic.items())),
        )

    def list_transactions(self, filters: ListTransactions) -> ListTransactionsResult:
        """This shard's transactional ids that pass every filter (the coordinator merges the
        shards' answers). Dead ids are never listed."""
        if self.loading and self.owned:
            return ListTransactionsResult(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS)
        if not self.owned:
            return ListTransactionsResult(ErrorCode.NONE)
        states: set[TransactionState] = set()
        unknown: list[str] = []
        for name in sorted(filters.states):
            state = TransactionState.from_name(name)
            if state is None:
                unknown.append(name)
            else:
                states.add(state)
        pattern = None
        if filters.transactional_id_pattern:
            try:
                pattern = re.compile(filters.transactional_id_pattern)
            except re.error:
                return ListTransactionsResult(ErrorCode.INVALID_REGULAR_EXPRESSION)
        now = self.now()
        listed = []
        for txn_id, meta in sorted(self.transactions.items()):
            if meta.state is _S.DEAD:
                continue
            if filters.producer_ids and meta.producer_id not in filters.producer_ids:
                continue
            if filters.states and meta.state not in states:
                continue
            if filters.duration_ms >= 0 and now - meta.start_ms <= filters.duration_ms:
                continue
            if pattern is not None and pattern.fullmatch(txn_id) is None:
                continue
            listed.append(ListedTransaction(txn_id, meta.producer_id, meta.state.value))
        return ListTransactionsResult(ErrorCode.NONE, tuple(unknown), tuple(listed))
