"""The transaction state table, the one transition gate, and the records' binary form."""

from __future__ import annotations

import itertools

import pytest

from kgroupd.broker.coordinator.records import NewerRecordFormat, RecordFormatError
from kgroupd.broker.coordinator.txn import (
    IllegalTransactionTransition,
    TransactionMetadata,
    TransactionMetadataRecord,
    TransactionState,
    TransactionTombstoneRecord,
    decode_txn_record,
    encode_txn_record,
)

S = TransactionState

# Kafka's TransactionState.VALID_PREVIOUS_STATES, written out independently of ours.
KAFKA_PREVIOUS = {
    S.EMPTY: {S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT},
    S.ONGOING: {S.ONGOING, S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT},
    S.PREPARE_COMMIT: {S.ONGOING},
    S.PREPARE_ABORT: {
        S.ONGOING,
        S.PREPARE_EPOCH_FENCE,
        S.EMPTY,
        S.COMPLETE_COMMIT,
        S.COMPLETE_ABORT,
    },
    S.COMPLETE_COMMIT: {S.PREPARE_COMMIT},
    S.COMPLETE_ABORT: {S.PREPARE_ABORT},
    S.DEAD: {S.EMPTY, S.COMPLETE_ABORT, S.COMPLETE_COMMIT},
    S.PREPARE_EPOCH_FENCE: {S.ONGOING},
}
PAIRS = list(itertools.product(S, S))


@pytest.mark.parametrize(
    ("current", "target"), PAIRS, ids=[f"{a.value}->{b.value}" for a, b in PAIRS]
)
def test_transition_to_allows_exactly_kafkas_moves(current: S, target: S) -> None:
    meta = TransactionMetadata("tx", 1, state=current)
    if current in KAFKA_PREVIOUS[target]:
        meta.transition_to(target)
        assert meta.state is target
    else:
        with pytest.raises(IllegalTransactionTransition):
            meta.transition_to(target)
        assert meta.state is current


def test_state_names_ids_and_docs_are_kafkas() -> None:
    names = [s.value for s in S]
    assert names == [
        "Empty", "Ongoing", "PrepareCommit", "PrepareAbort",
        "CompleteCommit", "CompleteAbort", "Dead", "PrepareEpochFence",
    ]  # fmt: skip
    assert [s.id for s in S] == list(range(8))
    for s in S:
        assert S.from_id(s.id) is s
        assert S.from_name(s.value) is s
        assert s.__doc__ and len(s.__doc__) > 40
    assert S.from_name("ongoing") is None  # exact names, as Kafka's fromName
    with pytest.raises(ValueError):
        S.from_id(8)
    assert {s for s in S if s.expiration_allowed} == {S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}


RECORD = TransactionMetadataRecord(
    transactional_id="tx-ñ€😀",
    producer_id=2**40 + 3,
    prev_producer_id=2**40 + 2,
    next_producer_id=-1,
    producer_epoch=32766,
    last_producer_epoch=-1,
    timeout_ms=60_000,
    state=S.PREPARE_ABORT,
    partitions=frozenset({("b", 2), ("a", 7), ("a", 0), ("é", 1)}),
    start_ms=1_700_000_000_000,
    last_update_ms=1_700_000_000_500,
    transaction_version=2,
)


def _fields(r: TransactionMetadataRecord) -> dict[str, object]:
    return {f: getattr(r, f) for f in r.__dataclass_fields__}


EMPTY_RECORD = TransactionMetadataRecord(
    **{**_fields(RECORD), "partitions": frozenset(), "state": S.EMPTY, "start_ms": -1}
)


@pytest.mark.parametrize(
    "record",
    [RECORD, EMPTY_RECORD, TransactionTombstoneRecord("tx"), TransactionTombstoneRecord("")],
)
def test_records_round_trip(record: TransactionMetadataRecord | TransactionTombstoneRecord) -> None:
    raw = encode_txn_record(record)
    assert raw[0] == 2 and raw[1] in (13, 14)
    assert decode_txn_record(raw) == record


def test_metadata_record_layout_and_every_state_round_trips() -> None:
    for state in S:
        record = TransactionMetadataRecord(**{**_fields(RECORD), "state": state})
        assert decode_txn_record(encode_txn_record(record)) == record
    raw = encode_txn_record(RECORD)
    assert raw[:2] == bytes((2, 13))
    assert encode_txn_record(TransactionTombstoneRecord("x")) == bytes((2, 14, 0, 0, 0, 1)) + b"x"


def test_malformed_and_newer_records_are_refused() -> None:
    raw = encode_txn_record(RECORD)
    for cut in range(len(raw)):
        with pytest.raises(RecordFormatError):
            decode_txn_record(raw[:cut])
    with pytest.raises(RecordFormatError):
        decode_txn_record(raw + b"\0")
    with pytest.raises(NewerRecordFormat):
        decode_txn_record(bytes((3,)) + raw[1:])
    with pytest.raises(RecordFormatError):
        decode_txn_record(bytes((2, 12)) + raw[2:])  # a consumer-group type, not ours
    bad_state = bytearray(raw)
    bad_state[2 + 8 * 3 + 2 * 2 + 4] = 9  # the state id byte
    with pytest.raises(RecordFormatError):
        decode_txn_record(bytes(bad_state))
