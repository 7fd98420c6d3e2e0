"""The transaction state machine: states, the allowed previous states of each, and the one
transition check (Kafka's ``TransactionState`` and its ``validPreviousStates``)."""

from __future__ import annotations

from enum import Enum

__all__ = ["ALLOWED_PREVIOUS", "IllegalTransactionTransition", "TransactionState", "check_move"]


class IllegalTransactionTransition(RuntimeError):
    """A move the table forbids: always a coordinator bug (Kafka throws
    IllegalStateException)."""


class TransactionState(Enum):
    """A transactional id's state. The value is the name DescribeTransactions and
    ListTransactions report; ``id`` is Kafka's status byte (the transaction log's)."""

    EMPTY = "Empty"
    ONGOING = "Ongoing"
    PREPARE_COMMIT = "PrepareCommit"
    PREPARE_ABORT = "PrepareAbort"
    COMPLETE_COMMIT = "CompleteCommit"
    COMPLETE_ABORT = "CompleteAbort"
    DEAD = "Dead"
    PREPARE_EPOCH_FENCE = "PrepareEpochFence"

    @property
    def id(self) -> int:
        return _IDS[self]

    @classmethod
    def from_id(cls, state_id: int) -> TransactionState:
        try:
            return _BY_ID[state_id]
        except KeyError:
            raise ValueError(f"unknown transaction state id {state_id}") from None

    @classmethod
    def from_name(cls, name: str) -> TransactionState | None:
        """The state named ``name`` exactly (ListTransactions' state filters), or None."""
        try:
            return cls(name)
        except ValueError:
            return None

    @property
    def expiration_allowed(self) -> bool:
        """A transactional id may expire only with no transaction open."""
        return self in (
            TransactionState.EMPTY,
            TransactionState.COMPLETE_COMMIT,
            TransactionState.COMPLETE_ABORT,
        )

    @property
    def preparing(self) -> bool:
        """PrepareCommit or PrepareAbort: the markers are being written."""
        return self in (TransactionState.PREPARE_COMMIT, TransactionState.PREPARE_ABORT)


_IDS = {state: i for i, state in enumerate(TransactionState)}
_BY_ID = {i: state for state, i in _IDS.items()}

_DOCS = {
    TransactionState.EMPTY: """A producer id and epoch, no transaction open: what
    InitProducerId leaves. AddPartitionsToTxn / AddOffsetsToTxn -> Ongoing; with transaction
    version 2 an EndTxn abort -> PrepareAbort; InitProducerId -> Empty (epoch bumped or
    producer id rotated); expiry -> Dead.""",
    TransactionState.ONGOING: """A transaction is open over a set of partitions. More
    partitions -> Ongoing; EndTxn commit -> PrepareCommit, abort -> PrepareAbort; an
    InitProducerId or the transaction timeout fences it -> PrepareEpochFence.""",
    TransactionState.PREPARE_COMMIT: """EndTxn commit is logged; the commit markers are being
    written to the transaction's partitions. Markers written -> CompleteCommit. Everything
    else answers CONCURRENT_TRANSACTIONS (or INVALID_TXN_STATE for an abort).""",
    TransactionState.PREPARE_ABORT: """EndTxn abort (or a fence) is logged; the abort markers
    are being written. Markers written -> CompleteAbort. Everything else answers
    CONCURRENT_TRANSACTIONS (or INVALID_TXN_STATE for a commit).""",
    TransactionState.COMPLETE_COMMIT: """The last transaction committed; its markers are in
    the logs. A new AddPartitions -> Ongoing; InitProducerId -> Empty; with transaction
    version 2 an EndTxn abort -> PrepareAbort; a retried EndTxn commit answers NONE; expiry
    -> Dead.""",
    TransactionState.COMPLETE_ABORT: """The last transaction aborted; its markers are in the
    logs. A new AddPartitions -> Ongoing; InitProducerId -> Empty; a retried EndTxn abort
    answers NONE (with version 2 a fresh one -> PrepareAbort); expiry -> Dead.""",
    TransactionState.DEAD: """The transactional id expired: its tombstone is being written and
    it leaves the shard. Never logged, never left.""",
    TransactionState.PREPARE_EPOCH_FENCE: """The open transaction is being fenced (a new
    InitProducerId, or its timeout): the epoch is bumped and the abort is prepared at once
    -> PrepareAbort. Never logged.""",
}
for _state, _doc in _DOCS.items():
    _state.__doc__ = _doc

_S = TransactionState
ALLOWED_PREVIOUS: dict[TransactionState, frozenset[TransactionState]] = {
    _S.EMPTY: frozenset({_S.EMPTY, _S.COMPLETE_COMMIT, _S.COMPLETE_ABORT}),
    _S.ONGOING: frozenset({_S.ONGOING, _S.EMPTY, _S.COMPLETE_COMMIT, _S.COMPLETE_ABORT}),
    _S.PREPARE_COMMIT: frozenset({_S.ONGOING}),
    _S.PREPARE_ABORT: frozenset(
        {_S.ONGOING, _S.PREPARE_EPOCH_FENCE, _S.EMPTY, _S.COMPLETE_COMMIT, _S.COMPLETE_ABORT}
    ),
    _S.COMPLETE_COMMIT: frozenset({_S.PREPARE_COMMIT}),
    _S.COMPLETE_ABORT: frozenset({_S.PREPARE_ABORT}),
    _S.DEAD: frozenset({_S.EMPTY, _S.COMPLETE_ABORT, _S.COMPLETE_COMMIT}),
    _S.PREPARE_EPOCH_FENCE: frozenset({_S.ONGOING}),
}


def check_move(current: TransactionState, target: TransactionState) -> None:
    """Raise ``IllegalTransactionTransition`` unless ``current -> target`` is allowed."""
    if current not in ALLOWED_PREVIOUS[target]:
        raise IllegalTransactionTransition(
            f"illegal transaction state move {current.value} -> {target.value}"
        )
