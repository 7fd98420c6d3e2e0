"""One transactional id's metadata and the transitions Kafka's ``TransactionMetadata``
prepares.

Each ``prepare_*`` builds the record of the target state (checked against the state table)
without touching the metadata; the shard writes the record and its ``replay`` applies it
(``apply``), live and at load alike. Kafka's pending state (a transition whose log append is
in flight) has no counterpart: a shard's appends are synchronous, so no operation ever sees
one. The two states that are never logged, PrepareEpochFence and Dead, are entered in memory
only (``fence_epoch``, and the expiry that writes a tombstone).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from kgroupd.protocol.errors import ErrorCode

from .records import TransactionMetadataRecord
from .state import IllegalTransactionTransition, TransactionState, check_move

__all__ = [
    "MAX_EPOCH",
    "NO_PRODUCER_EPOCH",
    "NO_PRODUCER_ID",
    "TV_0",
    "TV_2",
    "TopicPartition",
    "TransactionMetadata",
    "epoch_exhausted",
]

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
MAX_EPOCH = 32767  # Short.MAX_VALUE
TV_0 = 0  # transaction version of clients before KIP-890 part 2 (and of coordinator fences)
TV_2 = 2  # KIP-890 part 2: partitions added implicitly, every EndTxn bumps the epoch

TopicPartition = tuple[str, int]
_S = TransactionState


def epoch_exhausted(epoch: int) -> bool:
    """No epoch past MAX-1 is handed to a client, so a fence can always bump once more."""
    return epoch >= MAX_EPOCH - 1


@dataclass(slots=True)
class TransactionMetadata:
    """What the coordinator knows of one transactional id (Kafka's TransactionMetadata).

    ``prev_producer_id`` is the producer id before the last transition (so, after a rotation,
    the old one); ``next_producer_id`` is set while a version-2 transaction that exhausted its
    epoch is being completed: the id the producer moves to. ``transaction_version`` is the
    client's transaction version at the last transition (0: before KIP-890 part 2)."""

    transactional_id: str
    producer_id: int
    prev_producer_id: int = NO_PRODUCER_ID
    next_producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = NO_PRODUCER_EPOCH
    last_producer_epoch: int = NO_PRODUCER_EPOCH
    timeout_ms: int = 0
    state: TransactionState = _S.EMPTY
    partitions: frozenset[TopicPartition] = frozenset()
    start_ms: int = -1
    last_update_ms: int = -1
    transaction_version: int = TV_0
    # the epochs a fence replaced (in memory only, to undo a fence whose abort failed)
    _before_fence: tuple[int, int] | None = field(
        default=None, init=False, compare=False, repr=False
    )

    # --- the one state gate ---------------------------------------------------------------
    def transition_to(self, target: TransactionState) -> None:
        """Move to ``target``; raises ``IllegalTransactionTransition`` on a move the table
        forbids."""
        check_move(self.state, target)
        self.state = target

    # --- records ----------------------------------------------------------------------------
    @classmethod
    def from_record(cls, r: TransactionMetadataRecord) -> TransactionMetadata:
        meta = cls(r.transactional_id, r.producer_id, state=r.state)
        meta._copy(r)
        return meta

    def apply(self, r: TransactionMetadataRecord) -> None:
        """Complete the transition ``r`` describes (Kafka's completeTransitionTo)."""
        self.transition_to(r.state)
        self._copy(r)

    def _copy(self, r: TransactionMetadataRecord) -> None:
        self.producer_id = r.producer_id
        self.prev_producer_id = r.prev_producer_id
        self.next_producer_id = r.next_producer_id
        self.producer_epoch = r.producer_epoch
        self.last_producer_epoch = r.last_producer_epoch
        self.timeout_ms = r.timeout_ms
        self.partitions = r.partitions
        self.start_ms = r.start_ms
        self.last_update_ms = r.last_update_ms
        self.transaction_version = r.transaction_version
        self._before_fence = None

    def _transit(self, state: TransactionState, **changes: Any) -> TransactionMetadataRecord:
        """The record of moving to ``state`` with ``changes``; everything else is kept, the
        previous producer id becomes the current one and the next one is cleared."""
        check_move(self.state, state)
        values: dict[str, Any] = {
            "transactional_id": self.transactional_id,
            "producer_id": self.producer_id,
            "prev_producer_id": self.producer_id,
            "next_producer_id": NO_PRODUCER_ID,
            "producer_epoch": self.producer_epoch,
            "last_producer_epoch": self.last_producer_epoch,
            "timeout_ms": self.timeout_ms,
            "state": state,
            "partitions": self.partitions,
            "start_ms": self.start_ms,
            "last_update_ms": self.last_update_ms,
            "transaction_version": self.transaction_version,
        }
        values.update(changes)
        if values["producer_id"] < 0:
            raise IllegalTransactionTransition(f"illegal new producer id {values['producer_id']}")
        if state is not _S.DEAD and not 0 <= values["producer_epoch"] <= MAX_EPOCH:
            raise IllegalTransactionTransition(
                f"illegal new producer epoch {values['producer_epoch']}"
            )
        return TransactionMetadataRecord(**values)

    # --- Kafka's prepare* ------------------------------------------------------------------
    @property
    def epoch_exhausted(self) -> bool:
        return epoch_exhausted(self.producer_epoch)

    def prepare_increment_epoch(
        self, timeout_ms: int, expected_epoch: int | None, now_ms: int
    ) -> TransactionMetadataRecord | ErrorCode:
        """InitProducerId on a producer id with epochs left: Empty with the epoch bumped, or
        unchanged for a retry of a bump that succeeded; PRODUCER_FENCED for a stale epoch."""
        if self.epoch_exhausted:  # the caller rotates the producer id instead
            raise IllegalTransactionTransition(
                f"no producer epochs left for producer id {self.producer_id}"
            )
        bumped = self.producer_epoch + 1
        if expected_epoch is None:
            # a fresh producer: bump and forget the last epoch (-1 becomes 0 for a new id)
            epoch, last = bumped, NO_PRODUCER_EPOCH
        elif self.producer_epoch == NO_PRODUCER_EPOCH or expected_epoch == self.producer_epoch:
            # the producer recovers (KIP-360) and nobody else initialised since: bump
            epoch, last = bumped, self.producer_epoch
        elif expected_epoch == self.last_producer_epoch:
            # a retry of a bump that succeeded: hand out the current epoch again
            epoch, last = self.producer_epoch, self.last_producer_epoch
        else:
            return ErrorCode.PRODUCER_FENCED
        return self._transit(
            _S.EMPTY,
            producer_epoch=epoch,
            last_producer_epoch=last,
            timeout_ms=timeout_ms,
            partitions=frozenset(),
            start_ms=-1,
            last_update_ms=now_ms,
        )

    def prepare_producer_id_rotation(
        self, new_producer_id: int, timeout_ms: int, now_ms: int, record_last_epoch: bool
    ) -> TransactionMetadataRecord:
        """InitProducerId once the epochs are exhausted: a new producer id at epoch 0."""
        return self._transit(
            _S.EMPTY,
            producer_id=new_producer_id,
            producer_epoch=0,
            last_producer_epoch=self.producer_epoch if record_last_epoch else NO_PRODUCER_EPOCH,
            timeout_ms=timeout_ms,
            partitions=frozenset(),
            start_ms=-1,
            last_update_ms=now_ms,
        )

    def prepare_add_partitions(
        self, added: frozenset[TopicPartition], now_ms: int, transaction_version: int
    ) -> TransactionMetadataRecord:
        """Ongoing with ``added`` partitions; a new transaction starts its clock now."""
        starting = self.state in (_S.EMPTY, _S.COMPLETE_ABORT, _S.COMPLETE_COMMIT)
        return self._transit(
            _S.ONGOING,
            partitions=self.partitions | added,
            start_ms=now_ms if starting else self.start_ms,
            last_update_ms=now_ms,
            transaction_version=transaction_version,
        )

    def prepare_abort_or_commit(
        self,
        state: TransactionState,
        transaction_version: int,
        next_producer_id: int,
        now_ms: int,
        no_partition_added: bool,
    ) -> TransactionMetadataRecord:
        """PrepareCommit / PrepareAbort. Version 2 bumps the epoch (remembering the old one);
        an abort with no partition added (version 2 only) starts its clock now."""
        if transaction_version >= TV_2:
            epoch, last = self.producer_epoch + 1, self.producer_epoch
        else:
            epoch, last = self.producer_epoch, self.last_producer_epoch
        return self._transit(
            state,
            producer_epoch=epoch,
            last_producer_epoch=last,
            next_producer_id=next_producer_id,
            start_ms=now_ms if no_partition_added else self.start_ms,
            last_update_ms=now_ms,
            transaction_version=transaction_version,
        )

    def prepare_complete(self, now_ms: int) -> TransactionMetadataRecord:
        """CompleteCommit / CompleteAbort once the markers are written; a producer id the
        completion rotates to takes over at epoch 0 (the last epoch stays what the client
        last saw)."""
        target = _S.COMPLETE_COMMIT if self.state is _S.PREPARE_COMMIT else _S.COMPLETE_ABORT
        if self.next_producer_id != NO_PRODUCER_ID:
            producer_id, epoch = self.next_producer_id, 0
        else:
            producer_id, epoch = self.producer_id, self.producer_epoch
        return self._transit(
            target,
            producer_id=producer_id,
            producer_epoch=epoch,
            partitions=frozenset(),
            last_update_ms=now_ms,
        )

    def fence_epoch(self) -> None:
        """PrepareEpochFence, in memory: bump the epoch so the current producer is fenced and
        forget the last epoch (the abort that follows is prepared at once)."""
        if self.producer_epoch >= MAX_EPOCH:
            raise IllegalTransactionTransition(
                "cannot fence a producer at the largest epoch: it would overflow"
            )
        self.transition_to(_S.PREPARE_EPOCH_FENCE)
        self._before_fence = (self.producer_epoch, self.last_producer_epoch)
        self.producer_epoch += 1
        self.last_producer_epoch = NO_PRODUCER_EPOCH

    def undo_fence(self) -> None:
        """Back to Ongoing with the epochs before ``fence_epoch`` (its abort failed and
        nothing was logged)."""
        assert self._before_fence is not None and self.state is _S.PREPARE_EPOCH_FENCE
        self.producer_epoch, self.last_producer_epoch = self._before_fence
        self._before_fence = None
        self.state = _S.ONGOING  # the one move back the table does not list: nothing happened

    def prepare_dead(self) -> None:
        """Dead, in memory: the transactional id expires (its tombstone follows at once)."""
        self.transition_to(_S.DEAD)
        self.partitions = frozenset()
