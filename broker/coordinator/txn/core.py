"""Shared state and plumbing of a transaction shard: the metadata of its transactional ids,
records (written, then replayed), and marker writing."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import structlog

from kgroupd.protocol.errors import ErrorCode

from ..timers import Timers
from .commands import TxnConfig
from .io import MarkerWriter, ProducerIdAllocator, TxnMarkers
from .metadata import TransactionMetadata
from .records import TransactionMetadataRecord, TransactionTombstoneRecord, TxnRecord
from .state import TransactionState

__all__ = ["TxnRecordSink", "TxnShardCore"]

TxnRecordSink = Callable[[TxnRecord], None]
_S = TransactionState


def _no_sink(record: TxnRecord) -> None:
    return None


class TxnShardCore:
    """The transactional ids of one transaction-state partition."""

    def __init__(
        self,
        partition: int,
        config: TxnConfig,
        timers: Timers,
        producer_ids: ProducerIdAllocator,
        markers: MarkerWriter,
        sink: TxnRecordSink | None = None,
    ) -> None:
        self.partition = partition
        self.config = config
        self.timers = timers
        self.producer_ids = producer_ids
        self.markers = markers
        self.sink: TxnRecordSink = sink or _no_sink
        self.transactions: dict[str, TransactionMetadata] = {}
        self.owned = True
        self.loading = False
        self.log: Any = structlog.get_logger("kgroupd.txn").bind(shard=partition)

    # --- availability ----------------------------------------------------------------------
    def availability_error(self) -> ErrorCode:
        if not self.owned:
            return ErrorCode.NOT_COORDINATOR
        if self.loading:
            return ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
        return ErrorCode.NONE

    def _active(self) -> bool:
        return self.owned and not self.loading

    def now(self) -> int:
        return self.timers.now_ms()

    # --- records ---------------------------------------------------------------------------
    def _write(self, record: TxnRecord) -> None:
        """Log ``record`` and apply it: every state change goes through ``replay``."""
        self.replay(record)
        self.sink(record)

    def replay(self, record: TxnRecord) -> None:
        """Apply one record, live and at load alike."""
        if isinstance(record, TransactionTombstoneRecord):
            self.transactions.pop(record.transactional_id, None)
            return
        for pid in (record.producer_id, record.prev_producer_id, record.next_producer_id):
            if pid >= 0:
                self.producer_ids.observe(pid)
        meta = self.transactions.get(record.transactional_id)
        if meta is None:
            self.transactions[record.transactional_id] = TransactionMetadata.from_record(record)
        else:
            meta.apply(record)

    # --- markers ---------------------------------------------------------------------------
    def _send_markers(self, meta: TransactionMetadata) -> None:
        """Write the markers of ``meta``'s PrepareCommit / PrepareAbort; with no partition
        to mark (a version-2 abort of nothing) it completes at once."""
        commit = meta.state is _S.PREPARE_COMMIT
        markers = TxnMarkers(
            meta.transactional_id,
            meta.producer_id,
            meta.producer_epoch,
            commit,
            meta.partitions,
            meta.transaction_version,
        )
        if not markers.partitions:
            self._markers_written(markers)
            return
        self.markers.write_markers(markers, lambda: self._markers_written(markers))

    def _markers_written(self, markers: TxnMarkers) -> None:
        """The markers are in the logs: log CompleteCommit / CompleteAbort, unless the
        transaction moved on meanwhile (shard unloaded, reloaded, or the id expired)."""
        if not self._active():
            return
        meta = self.transactions.get(markers.transactional_id)
        expected = _S.PREPARE_COMMIT if markers.commit else _S.PREPARE_ABORT
        if (
            meta is None
            or meta.state is not expected
            or meta.producer_id != markers.producer_id
            or meta.producer_epoch != markers.producer_epoch
        ):
            self.log.debug("stale_txn_markers", transactional_id=markers.transactional_id)
            return
        self._write(meta.prepare_complete(self.now()))

    # --- helpers for the operations ----------------------------------------------------------
    def _record_of(self, meta: TransactionMetadata) -> TransactionMetadataRecord:
        """``meta`` as a record (tests and snapshots)."""
        return TransactionMetadataRecord(
            meta.transactional_id,
            meta.producer_id,
            meta.prev_producer_id,
            meta.next_producer_id,
            meta.producer_epoch,
            meta.last_producer_epoch,
            meta.timeout_ms,
            meta.state,
            meta.partitions,
            meta.start_ms,
            meta.last_update_ms,
            meta.transaction_version,
        )
