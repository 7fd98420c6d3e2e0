"""Version-free commands of the transaction coordinator, their results, and its settings.

Wire handlers build these from any version of the request and turn the results back into
replies; version rules stay in the handlers (e.g. PRODUCER_FENCED answered as
INVALID_PRODUCER_EPOCH to InitProducerId v0-v3 and EndTxn / AddPartitionsToTxn /
AddOffsetsToTxn v0-v1, as Kafka does). Producer ids and epochs are -1 when absent.
"""

from __future__ import annotations

from dataclasses import dataclass

from kgroupd.protocol.errors import ErrorCode

__all__ = [
    "AddOffsets",
    "AddPartitions",
    "DescribedTransaction",
    "EndTxn",
    "EndTxnResult",
    "InitProducerId",
    "InitProducerIdResult",
    "ListTransactions",
    "ListTransactionsResult",
    "ListedTransaction",
    "TxnConfig",
    "VerifyPartitionsResult",
]

TopicPartition = tuple[str, int]


@dataclass(frozen=True, slots=True)
class TxnConfig:
    """Transaction coordinator settings (Kafka broker config names in comments)."""

    transaction_partitions: int = 50  # transaction.state.log.num.partitions
    max_timeout_ms: int = 900000  # transaction.max.timeout.ms
    # transaction.abort.timed.out.transaction.cleanup.interval.ms
    abort_timed_out_interval_ms: int = 10000
    transactional_id_expiration_ms: int = 604800000  # transactional.id.expiration.ms
    # transaction.remove.expired.transaction.cleanup.interval.ms
    remove_expired_interval_ms: int = 3600000
    offsets_partitions: int = 50  # offsets.topic.num.partitions (AddOffsetsToTxn's partition)


@dataclass(frozen=True, slots=True)
class InitProducerId:
    """InitProducerId with a transactional id. ``producer_id``/``producer_epoch`` (v3+) are
    the producer's current ones when it recovers (KIP-360), both -1 otherwise."""

    transactional_id: str
    transaction_timeout_ms: int
    producer_id: int = -1
    producer_epoch: int = -1


@dataclass(frozen=True, slots=True)
class InitProducerIdResult:
    error: ErrorCode
    producer_id: int = -1
    producer_epoch: int = -1


@dataclass(frozen=True, slots=True)
class AddPartitions:
    """AddPartitionsToTxn for one transaction. ``transaction_version`` is 2 when the
    partition leader adds the partition for a KIP-890 part 2 producer (implicitly, on its
    first transactional produce), 0 for a client's request (v0-v3)."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    partitions: frozenset[TopicPartition]
    transaction_version: int = 0


@dataclass(frozen=True, slots=True)
class VerifyPartitionsResult:
    """AddPartitionsToTxn v4+ with VerifyOnly: per partition, NONE if it is in the
    transaction, TRANSACTION_ABORTABLE if not, or the transaction's error for all."""

    errors: dict[TopicPartition, ErrorCode]


@dataclass(frozen=True, slots=True)
class AddOffsets:
    """AddOffsetsToTxn: the group's offsets partition joins the transaction."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    group_id: str
    transaction_version: int = 0


@dataclass(frozen=True, slots=True)
class EndTxn:
    """EndTxn. ``transaction_version_2`` (EndTxn v5+ from a client with transaction version
    2): every EndTxn bumps the epoch, and retries are recognised by epoch + 1."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    commit: bool
    transaction_version_2: bool = False


@dataclass(frozen=True, slots=True)
class EndTxnResult:
    """``producer_id``/``producer_epoch``: what the producer continues with (EndTxn v5+),
    -1 unless the transaction version is 2."""

    error: ErrorCode
    producer_id: int = -1
    producer_epoch: int = -1


@dataclass(frozen=True, slots=True)
class DescribedTransaction:
    """One DescribeTransactions entry; ``topics`` is ((topic, (partitions...)), ...)
    sorted."""

    error: ErrorCode
    transactional_id: str
    state: str = ""
    timeout_ms: int = 0
    start_ms: int = -1
    producer_id: int = -1
    producer_epoch: int = -1
    topics: tuple[tuple[str, tuple[int, ...]], ...] = ()


@dataclass(frozen=True, slots=True)
class ListTransactions:
    """ListTransactions filters: state names (exact; unknown ones are reported), producer
    ids, ``duration_ms`` (v1+: only transactions running longer; -1: no filter) and
    ``transactional_id_pattern`` (v2+: a regular expression the whole id must match; None
    or empty: no filter)."""

    states: frozenset[str] = frozenset()
    producer_ids: frozenset[int] = frozenset()
    duration_ms: int = -1
    transactional_id_pattern: str | None = None


@dataclass(frozen=True, slots=True)
class ListedTransaction:
    transactional_id: str
    producer_id: int
    state: str


@dataclass(frozen=True, slots=True)
class ListTransactionsResult:
    error: ErrorCode
    unknown_state_filters: tuple[str, ...] = ()
    transactions: tuple[ListedTransaction, ...] = ()
