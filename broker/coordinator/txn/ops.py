"""The producer-facing operations of a transaction shard, as Kafka's TransactionCoordinator
decides them: InitProducerId, AddPartitionsToTxn (and its verification), AddOffsetsToTxn,
EndTxn, and the abort of timed-out transactions.

Every operation is a plain synchronous function over the shard's state; a log append is
synchronous here, so Kafka's CONCURRENT_TRANSACTIONS for "a transition is pending" never
arises: CONCURRENT_TRANSACTIONS means the markers of the previous transaction are still
being written (PrepareCommit / PrepareAbort).
"""

from __future__ import annotations

from kgroupd.protocol.errors import ErrorCode

from ..placement import partition_for
from .commands import (
    AddOffsets,
    AddPartitions,
    EndTxn,
    EndTxnResult,
    InitProducerId,
    InitProducerIdResult,
    VerifyPartitionsResult,
)
from .core import TxnShardCore
from .io import ProducerIdUnavailable
from .metadata import (
    MAX_EPOCH,
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    TV_0,
    TV_2,
    TransactionMetadata,
    epoch_exhausted,
)
from .records import TransactionMetadataRecord
from .state import TransactionState

__all__ = ["OFFSETS_TOPIC", "TxnOps"]

OFFSETS_TOPIC = "__consumer_offsets"
_S = TransactionState


class TxnOps(TxnShardCore):
    # --- InitProducerId ----------------------------------------------------------------------
    def init_producer_id(self, cmd: InitProducerId) -> InitProducerIdResult:
        """A producer id and epoch for a transactional id: a new id, the epoch bumped, or a
        new producer id once the epochs run out; an open transaction is aborted first
        (answered CONCURRENT_TRANSACTIONS: the producer retries)."""
        pid, epoch = cmd.producer_id, cmd.producer_epoch
        if (pid == NO_PRODUCER_ID) != (epoch == NO_PRODUCER_EPOCH):
            return InitProducerIdResult(ErrorCode.INVALID_REQUEST)  # KafkaApis: one of two
        expected = None if pid == NO_PRODUCER_ID else (pid, epoch)
        if not cmd.transactional_id:
            return InitProducerIdResult(ErrorCode.INVALID_REQUEST)
        timeout = cmd.transaction_timeout_ms
        if not 0 < timeout <= self.config.max_timeout_ms:
            return InitProducerIdResult(ErrorCode.INVALID_TRANSACTION_TIMEOUT)
        error = self.availability_error()
        if error is not ErrorCode.NONE:
            return InitProducerIdResult(error)
        meta = self.transactions.get(cmd.transactional_id)
        if meta is None:
            try:
                new_pid = self.producer_ids.allocate()
            except ProducerIdUnavailable as exc:
                return InitProducerIdResult(exc.error)
            # not in the shard until its first record (Empty at epoch 0) is written
            meta = TransactionMetadata(
                cmd.transactional_id, new_pid, timeout_ms=timeout, last_update_ms=self.now()
            )
        if expected is not None and not (
            meta.producer_epoch == NO_PRODUCER_EPOCH
            or expected[0] == meta.producer_id
            # a retry of an InitProducerId that rotated the producer id
            or (expected[0] == meta.prev_producer_id and epoch_exhausted(expected[1]))
        ):
            return InitProducerIdResult(ErrorCode.PRODUCER_FENCED)
        if meta.state.preparing:
            return InitProducerIdResult(ErrorCode.CONCURRENT_TRANSACTIONS)
        if meta.state is _S.ONGOING:
            return self._fence_and_abort(meta)
        if meta.state not in (_S.EMPTY, _S.COMPLETE_COMMIT, _S.COMPLETE_ABORT):
            raise AssertionError(f"{meta.transactional_id} found in {meta.state.value}")
        transit: TransactionMetadataRecord | ErrorCode
        if meta.epoch_exhausted and (expected is None or expected[1] == meta.producer_epoch):
            try:
                new_pid = self.producer_ids.allocate()
            except ProducerIdUnavailable as exc:
                return InitProducerIdResult(exc.error)
            transit = meta.prepare_producer_id_rotation(
                new_pid, timeout, self.now(), record_last_epoch=expected is not None
            )
        elif meta.epoch_exhausted:
            # Kafka's prepareIncrementProducerEpoch throws here (an exhausted epoch and a
            # retry of an older one): the request fails with an unknown server error
            return InitProducerIdResult(ErrorCode.UNKNOWN_SERVER_ERROR)
        else:
            transit = meta.prepare_increment_epoch(
                timeout, None if expected is None else expected[1], self.now()
            )
        if isinstance(transit, ErrorCode):
            return InitProducerIdResult(transit)
        self._write(transit)
        return InitProducerIdResult(ErrorCode.NONE, transit.producer_id, transit.producer_epoch)

    def _fence_and_abort(self, meta: TransactionMetadata) -> InitProducerIdResult:
        meta.fence_epoch()
        result = self._end_transaction_v1(
            meta.transactional_id, meta.producer_id, meta.producer_epoch, False, False
        )
        if result.error is not ErrorCode.NONE:
            return InitProducerIdResult(result.error)
        return InitProducerIdResult(ErrorCode.CONCURRENT_TRANSACTIONS)

    # --- AddPartitionsToTxn / AddOffsetsToTxn ------------------------------------------------
    def _check_producer(
        self, txn_id: str, producer_id: int, producer_epoch: int
    ) -> TransactionMetadata | ErrorCode:
        if not txn_id:
            return ErrorCode.INVALID_REQUEST
        error = self.availability_error()
        if error is not ErrorCode.NONE:
            return error
        meta = self.transactions.get(txn_id)
        if meta is None or meta.producer_id != producer_id:
            return ErrorCode.INVALID_PRODUCER_ID_MAPPING
        if meta.producer_epoch != producer_epoch:
            return ErrorCode.PRODUCER_FENCED
        if meta.state.preparing:
            return ErrorCode.CONCURRENT_TRANSACTIONS
        return meta

    def add_partitions(self, cmd: AddPartitions) -> ErrorCode:
        """The partitions join the transaction (which starts if none is open); one error for
        all of them, as Kafka's coordinator answers."""
        meta = self._check_producer(cmd.transactional_id, cmd.producer_id, cmd.producer_epoch)
        if isinstance(meta, ErrorCode):
            return meta
        if meta.state is _S.ONGOING and cmd.partitions <= meta.partitions:
            return ErrorCode.NONE  # already in: nothing to log
        self._write(
            meta.prepare_add_partitions(cmd.partitions, self.now(), cmd.transaction_version)
        )
        return ErrorCode.NONE

    def verify_partitions(self, cmd: AddPartitions) -> VerifyPartitionsResult:
        """AddPartitionsToTxn v4+ with VerifyOnly (KIP-890 part 1): is each partition in the
        transaction? Nothing is logged."""
        if not cmd.transactional_id:
            return VerifyPartitionsResult(dict.fromkeys(cmd.partitions, ErrorCode.INVALID_REQUEST))
        error = self.availability_error()
        meta = self.transactions.get(cmd.transactional_id)
        if error is ErrorCode.NONE:
            if meta is None or meta.producer_id != cmd.producer_id:
                error = ErrorCode.INVALID_PRODUCER_ID_MAPPING
            elif meta.producer_epoch != cmd.producer_epoch:
                error = ErrorCode.PRODUCER_FENCED
            elif meta.state.preparing:
                error = ErrorCode.CONCURRENT_TRANSACTIONS
        if error is not ErrorCode.NONE or meta is None:
            return VerifyPartitionsResult(dict.fromkeys(cmd.partitions, error))
        return VerifyPartitionsResult(
            {
                tp: ErrorCode.NONE if tp in meta.partitions else ErrorCode.TRANSACTION_ABORTABLE
                for tp in cmd.partitions
            }
        )

    def add_offsets(self, cmd: AddOffsets) -> ErrorCode:
        """The group's offsets partition joins the transaction (TxnOffsetCommit follows)."""
        partition = partition_for(cmd.group_id, self.config.offsets_partitions)
        return self.add_partitions(
            AddPartitions(
                cmd.transactional_id,
                cmd.producer_id,
                cmd.producer_epoch,
                frozenset({(OFFSETS_TOPIC, partition)}),
                cmd.transaction_version,
            )
        )

    # --- EndTxn ------------------------------------------------------------------------------
    def end_txn(self, cmd: EndTxn) -> EndTxnResult:
        """Commit or abort: PrepareCommit / PrepareAbort is logged and answered at once, the
        markers follow (``MarkerWriter``), then CompleteCommit / CompleteAbort."""
        if cmd.transaction_version_2:
            return self._end_transaction_v2(
                cmd.transactional_id, cmd.producer_id, cmd.producer_epoch, cmd.commit
            )
        return self._end_transaction_v1(
            cmd.transactional_id, cmd.producer_id, cmd.producer_epoch, cmd.commit, True
        )

    def _prepare_end(
        self,
        meta: TransactionMetadata,
        commit: bool,
        transaction_version: int,
        no_partition_added: bool,
        rotate: bool,
    ) -> TransactionMetadataRecord | ErrorCode:
        """The PrepareCommit / PrepareAbort record; a new producer id when ``rotate`` and the
        epoch is exhausted."""
        next_pid = NO_PRODUCER_ID
        if rotate and meta.epoch_exhausted:
            try:
                next_pid = self.producer_ids.allocate()
            except ProducerIdUnavailable as exc:
                return exc.error
        state = _S.PREPARE_COMMIT if commit else _S.PREPARE_ABORT
        return meta.prepare_abort_or_commit(
            state, transaction_version, next_pid, self.now(), no_partition_added
        )

    def _finish_prepare(self, transit: TransactionMetadataRecord) -> TransactionMetadata:
        self._write(transit)
        meta = self.transactions[transit.transactional_id]
        self._send_markers(meta)
        return meta

    def _end_transaction_v1(
        self, txn_id: str, producer_id: int, producer_epoch: int, commit: bool, from_client: bool
    ) -> EndTxnResult:
        """EndTxn before transaction version 2, and the coordinator's own aborts (a fence:
        one epoch bump in all, the producer id rotated if that bump exhausted the epoch)."""
        if not txn_id:
            return EndTxnResult(ErrorCode.INVALID_REQUEST)
        error = self.availability_error()
        if error is not ErrorCode.NONE:
            return EndTxnResult(error)
        meta = self.transactions.get(txn_id)
        if meta is None or meta.producer_id != producer_id:
            return EndTxnResult(ErrorCode.INVALID_PRODUCER_ID_MAPPING)
        if (from_client and producer_epoch != meta.producer_epoch) or (
            producer_epoch < meta.producer_epoch
        ):
            return EndTxnResult(ErrorCode.PRODUCER_FENCED)
        state = meta.state
        if state in (_S.ONGOING, _S.PREPARE_EPOCH_FENCE):
            fence = state is _S.PREPARE_EPOCH_FENCE
            transit = self._prepare_end(meta, commit, TV_0, False, rotate=fence)
            if isinstance(transit, ErrorCode):
                if fence:
                    meta.undo_fence()
                return EndTxnResult(transit)
            self._finish_prepare(transit)
            return EndTxnResult(ErrorCode.NONE)
        if state is _S.COMPLETE_COMMIT:
            return EndTxnResult(ErrorCode.NONE if commit else ErrorCode.INVALID_TXN_STATE)
        if state is _S.COMPLETE_ABORT:
            return EndTxnResult(ErrorCode.INVALID_TXN_STATE if commit else ErrorCode.NONE)
        if state is _S.PREPARE_COMMIT:
            return EndTxnResult(
                ErrorCode.CONCURRENT_TRANSACTIONS if commit else ErrorCode.INVALID_TXN_STATE
            )
        if state is _S.PREPARE_ABORT:
            return EndTxnResult(
                ErrorCode.INVALID_TXN_STATE if commit else ErrorCode.CONCURRENT_TRANSACTIONS
            )
        if state is _S.EMPTY:
            return EndTxnResult(ErrorCode.INVALID_TXN_STATE)
        raise AssertionError(f"{txn_id} found in {state.value}")

    def _end_transaction_v2(
        self, txn_id: str, producer_id: int, producer_epoch: int, commit: bool
    ) -> EndTxnResult:
        """EndTxn v5+ with transaction version 2: the epoch is bumped by every EndTxn, so a
        retry carries the epoch before the bump (or MAX-1 and the old producer id after a
        rotation). Empty / CompleteCommit / CompleteAbort accept a fresh abort:

        =============  ======================  ==========================
        state          abort: retry / current  commit: retry / current
        =============  ======================  ==========================
        Empty          FENCED / bump           FENCED / INVALID_TXN_STATE
        CompleteAbort  NONE / bump             INVALID_TXN_STATE (both)
        CompleteCommit INVALID_TXN_STATE/bump  NONE / INVALID_TXN_STATE
        =============  ======================  ==========================
        """
        if not txn_id:
            return EndTxnResult(ErrorCode.INVALID_REQUEST)
        error = self.availability_error()
        if error is not ErrorCode.NONE:
            return EndTxnResult(error)
        meta = self.transactions.get(txn_id)
        if meta is None:
            return EndTxnResult(ErrorCode.INVALID_PRODUCER_ID_MAPPING)
        retry_on_overflow = (
            meta.prev_producer_id == producer_id
            and producer_epoch == MAX_EPOCH - 1
            and meta.producer_epoch == 0
        )
        retry_on_bump = meta.producer_epoch == producer_epoch + 1
        state = meta.state
        if state in (_S.ONGOING, _S.EMPTY):
            valid_epoch = producer_epoch == meta.producer_epoch
        elif state.preparing:
            valid_epoch = retry_on_bump
        else:  # CompleteCommit, CompleteAbort
            valid_epoch = (
                retry_on_bump or retry_on_overflow or producer_epoch == meta.producer_epoch
            )
        retry = retry_on_bump or retry_on_overflow
        if meta.producer_id != producer_id and not retry_on_overflow:
            return EndTxnResult(ErrorCode.INVALID_PRODUCER_ID_MAPPING)
        if not valid_epoch:
            return EndTxnResult(ErrorCode.PRODUCER_FENCED)
        if state.preparing:
            ongoing_same = (state is _S.PREPARE_COMMIT) == commit
            return EndTxnResult(
                ErrorCode.CONCURRENT_TRANSACTIONS if ongoing_same else ErrorCode.INVALID_TXN_STATE
            )
        done = _S.COMPLETE_COMMIT if commit else _S.COMPLETE_ABORT
        if state is done and retry:
            return EndTxnResult(ErrorCode.NONE, meta.producer_id, meta.producer_epoch)
        if state is _S.ONGOING:
            no_partition_added = False
        elif not commit and not retry and state is not _S.DEAD:
            no_partition_added = True  # Empty, CompleteCommit, CompleteAbort: abort anyway
        else:
            return EndTxnResult(ErrorCode.INVALID_TXN_STATE)
        transit = self._prepare_end(meta, commit, TV_2, no_partition_added, rotate=True)
        if isinstance(transit, ErrorCode):
            return EndTxnResult(transit)
        self._finish_prepare(transit)
        if transit.next_producer_id != NO_PRODUCER_ID:
            return EndTxnResult(ErrorCode.NONE, transit.next_producer_id, 0)
        return EndTxnResult(ErrorCode.NONE, transit.producer_id, transit.producer_epoch)

    # --- timed-out transactions --------------------------------------------------------------
    def abort_timed_out_transactions(self) -> list[tuple[str, ErrorCode]]:
        """Fence and abort every transaction open longer than its timeout (Kafka's
        transaction-abort task); returns what each abort answered."""
        if not self._active():
            return []
        now = self.now()
        out: list[tuple[str, ErrorCode]] = []
        for meta in list(self.transactions.values()):
            if meta.state is not _S.ONGOING or meta.start_ms + meta.timeout_ms >= now:
                continue
            if meta.producer_epoch >= MAX_EPOCH:
                self.log.error(
                    "txn_timeout_abort_at_max_epoch", transactional_id=meta.transactional_id
                )
                continue
            meta.fence_epoch()
            result = self._end_transaction_v1(
                meta.transactional_id, meta.producer_id, meta.producer_epoch, False, False
            )
            self.log.info(
                "txn_timed_out_abort",
                transactional_id=meta.transactional_id,
                error=result.error.name,
            )
            out.append((meta.transactional_id, result.error))
        return out
