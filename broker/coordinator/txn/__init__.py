"""kgroupd's transaction coordinator (issue 11), pure: no asyncio, sockets or wire imports.

Placed like the group coordinator: ``TransactionCoordinator`` owns one ``TransactionShard``
per transaction-state partition (``TxnConfig.transaction_partitions``, default 50), and a
transactional id lives on ``partition_for(transactional_id, partitions)``. Handlers turn any
version of a request into a version-free command (``commands``) and call, synchronously:

- ``init_producer_id(InitProducerId) -> InitProducerIdResult``
- ``add_partitions(AddPartitions) -> ErrorCode`` (one error for all partitions);
  ``verify_partitions(AddPartitions) -> VerifyPartitionsResult`` (v4+ VerifyOnly)
- ``add_offsets(AddOffsets) -> ErrorCode``
- ``end_txn(EndTxn) -> EndTxnResult``
- ``describe(transactional_id) -> DescribedTransaction``
- ``list_transactions(ListTransactions) -> ListTransactionsResult``

Errors are ``kgroupd.protocol.errors.ErrorCode`` values, never raised. State changes are records
(``records``: types 13 and 14) written to the shard's sink and applied by the one
``replay``, live and at load. Markers are written by a ``MarkerWriter`` (``io``); when it
reports them written the shard logs CompleteCommit / CompleteAbort. Producer ids come from a
``ProducerIdAllocator``.
"""

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
from .coordinator import TransactionCoordinator
from .io import (
    MarkerWriter,
    ProducerIdAllocator,
    ProducerIdUnavailable,
    SequentialProducerIds,
    TxnMarkers,
)
from .metadata import TransactionMetadata
from .records import (
    TransactionMetadataRecord,
    TransactionTombstoneRecord,
    TxnRecord,
    decode_txn_record,
    encode_txn_record,
)
from .shard import TransactionShard
from .state import ALLOWED_PREVIOUS, IllegalTransactionTransition, TransactionState

__all__ = [
    "ALLOWED_PREVIOUS",
    "AddOffsets",
    "AddPartitions",
    "DescribedTransaction",
    "EndTxn",
    "EndTxnResult",
    "IllegalTransactionTransition",
    "InitProducerId",
    "InitProducerIdResult",
    "ListTransactions",
    "ListTransactionsResult",
    "ListedTransaction",
    "MarkerWriter",
    "ProducerIdAllocator",
    "ProducerIdUnavailable",
    "SequentialProducerIds",
    "TransactionCoordinator",
    "TransactionMetadata",
    "TransactionMetadataRecord",
    "TransactionShard",
    "TransactionState",
    "TransactionTombstoneRecord",
    "TxnConfig",
    "TxnMarkers",
    "TxnRecord",
    "VerifyPartitionsResult",
    "decode_txn_record",
    "encode_txn_record",
]
