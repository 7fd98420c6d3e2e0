"""Records of the transaction coordinator (Kafka's transaction log), their keys and their
binary form.

Every state change a transaction shard persists is one of these, applied by the shard's
``replay`` live and at load alike. The compaction key is ``("txn", transactional_id)``: the
latest record per key wins, a ``TransactionTombstoneRecord`` deletes.

Binary form (record format version 2, beside types 1-12 of ``kgroupd.broker.coordinator.records``):
``uint8 version | uint8 type | fields``.

- type 13, transaction metadata: ``int64 producer id | int64 previous producer id | int64
  next producer id | int16 producer epoch | int16 last producer epoch | int32 timeout ms |
  uint8 state id | uint8 client transaction version | int64 start ms | int64 last update ms
  | uint32 len | transactional id (UTF-8) | uint32 topic count``, then per topic (sorted):
  ``uint32 len | topic | uint32 n | int32 partition * n`` (sorted).
- type 14, tombstone: ``uint32 len | transactional id``.

Unlike Kafka's TransactionLogValue, the last producer epoch is kept: an InitProducerId
retried across a restart is still recognised as a retry (Kafka documents losing it).
"""

from __future__ import annotations

import struct
from collections import defaultdict
from dataclasses import dataclass

from ..records import RECORD_FORMAT_VERSION, NewerRecordFormat, RecordFormatError
from .state import TransactionState

__all__ = [
    "TXN_RECORD_TYPES",
    "TransactionMetadataRecord",
    "TransactionTombstoneRecord",
    "TxnRecord",
    "decode_txn_record",
    "encode_txn_record",
]

TopicPartition = tuple[str, int]


@dataclass(frozen=True, slots=True)
class TransactionMetadataRecord:
    """The whole state of one transactional id after a transition (Kafka's
    TransactionLogValue, plus the last producer epoch)."""

    transactional_id: str
    producer_id: int
    prev_producer_id: int
    next_producer_id: int
    producer_epoch: int
    last_producer_epoch: int
    timeout_ms: int
    state: TransactionState
    partitions: frozenset[TopicPartition]
    start_ms: int
    last_update_ms: int
    transaction_version: int

    def key(self) -> tuple[str, ...]:
        return ("txn", self.transactional_id)


@dataclass(frozen=True, slots=True)
class TransactionTombstoneRecord:
    """The transactional id expired: forget it."""

    transactional_id: str

    def key(self) -> tuple[str, ...]:
        return ("txn", self.transactional_id)


TxnRecord = TransactionMetadataRecord | TransactionTombstoneRecord
TXN_RECORD_TYPES: dict[type, int] = {TransactionMetadataRecord: 13, TransactionTombstoneRecord: 14}

_HEAD = struct.Struct(">qqqhhiBBqq")
_U32 = struct.Struct(">I")


def _put_str(out: bytearray, s: str) -> None:
    raw = s.encode()
    out += _U32.pack(len(raw))
    out += raw


def encode_txn_record(record: TxnRecord) -> bytes:
    out = bytearray((RECORD_FORMAT_VERSION, TXN_RECORD_TYPES[type(record)]))
    if isinstance(record, TransactionTombstoneRecord):
        _put_str(out, record.transactional_id)
        return bytes(out)
    r = record
    out += _HEAD.pack(
        r.producer_id,
        r.prev_producer_id,
        r.next_producer_id,
        r.producer_epoch,
        r.last_producer_epoch,
        r.timeout_ms,
        r.state.id,
        r.transaction_version,
        r.start_ms,
        r.last_update_ms,
    )
    _put_str(out, r.transactional_id)
    by_topic: dict[str, list[int]] = defaultdict(list)
    for topic, partition in r.partitions:
        by_topic[topic].append(partition)
    out += _U32.pack(len(by_topic))
    for topic in sorted(by_topic):
        parts = sorted(by_topic[topic])
        _put_str(out, topic)
        out += _U32.pack(len(parts))
        out += struct.pack(f">{len(parts)}i", *parts)
    return bytes(out)


class _Reader:
    __slots__ = ("buf", "pos")

    def __init__(self, buf: bytes, pos: int) -> None:
        self.buf = buf
        self.pos = pos

    def take(self, n: int) -> bytes:
        end = self.pos + n
        if end > len(self.buf):
            raise RecordFormatError("transaction record cut short")
        out = self.buf[self.pos : end]
        self.pos = end
        return out

    def u32(self) -> int:
        value: int = _U32.unpack(self.take(4))[0]
        return value

    def string(self) -> str:
        try:
            return self.take(self.u32()).decode()
        except UnicodeDecodeError as exc:
            raise RecordFormatError(f"transaction record string: {exc}") from None


def decode_txn_record(payload: bytes) -> TxnRecord:
    """The record ``encode_txn_record`` made. Raises ``NewerRecordFormat`` for a newer format
    version and ``RecordFormatError`` for anything else that is not one of these records."""
    if len(payload) < 2:
        raise RecordFormatError("transaction record cut short")
    version, kind = payload[0], payload[1]
    if version > RECORD_FORMAT_VERSION:
        raise NewerRecordFormat(version)
    r = _Reader(payload, 2)
    record: TxnRecord
    if kind == 14:
        record = TransactionTombstoneRecord(r.string())
    elif kind == 13:
        try:
            head = _HEAD.unpack(r.take(_HEAD.size))
            state = TransactionState.from_id(head[6])
        except ValueError as exc:
            raise RecordFormatError(str(exc)) from None
        txn_id = r.string()
        partitions: set[TopicPartition] = set()
        for _ in range(r.u32()):
            topic = r.string()
            n = r.u32()
            partitions.update((topic, p) for p in struct.unpack(f">{n}i", r.take(4 * n)))
        record = TransactionMetadataRecord(
            transactional_id=txn_id,
            producer_id=head[0],
            prev_producer_id=head[1],
            next_producer_id=head[2],
            producer_epoch=head[3],
            last_producer_epoch=head[4],
            timeout_ms=head[5],
            state=state,
            transaction_version=head[7],
            start_ms=head[8],
            last_update_ms=head[9],
            partitions=frozenset(partitions),
        )
    else:
        raise RecordFormatError(f"record type {kind} is not a transaction record")
    if r.pos != len(payload):
        raise RecordFormatError(f"{len(payload) - r.pos} bytes after the transaction record")
    return record
