"""InitProducerId, AddPartitionsToTxn, AddOffsetsToTxn and EndTxn on one shard, with the
error codes Kafka's TransactionCoordinator answers."""

from __future__ import annotations

from txn_helpers import TIMEOUT, TP, TP1, Harness, harness, ok

from kgroupd.broker.coordinator.placement import partition_for
from kgroupd.broker.coordinator.txn import (
    AddOffsets,
    AddPartitions,
    InitProducerId,
    ProducerIdUnavailable,
    TransactionMetadataRecord,
    TransactionState,
)
from kgroupd.broker.coordinator.txn.metadata import MAX_EPOCH
from kgroupd.protocol.errors import ErrorCode

S = TransactionState
E = ErrorCode


def started(h: Harness) -> tuple[int, int]:
    r = ok(h.init())
    assert h.add(r.producer_id, r.producer_epoch) is E.NONE
    return r.producer_id, r.producer_epoch


# --- InitProducerId ------------------------------------------------------------------------
def test_init_creates_an_empty_transaction_at_epoch_0_and_logs_it() -> None:
    h = harness()
    r = ok(h.init())
    assert (r.producer_id, r.producer_epoch) == (1000, 0)
    meta = h.meta()
    assert (meta.state, meta.producer_id, meta.producer_epoch) == (S.EMPTY, 1000, 0)
    assert meta.timeout_ms == TIMEOUT and meta.last_update_ms == h.timers.now_ms()
    assert [type(x) for x in h.records] == [TransactionMetadataRecord]
    assert h.records[0].state is S.EMPTY and h.records[0].producer_epoch == 0


def test_init_again_bumps_the_epoch_and_fences_the_old_producer() -> None:
    h = harness()
    first = ok(h.init())
    second = ok(h.init())
    assert (second.producer_id, second.producer_epoch) == (first.producer_id, 1)
    assert h.meta().last_producer_epoch == -1
    assert h.add(first.producer_id, first.producer_epoch) is E.PRODUCER_FENCED
    assert h.end(first.producer_id, 0).error is E.PRODUCER_FENCED


def test_init_refuses_bad_requests_and_timeouts() -> None:
    h = harness()
    ok(h.init(txn_id=""), E.INVALID_REQUEST)
    ok(h.init(pid=5), E.INVALID_REQUEST)  # a producer id without an epoch
    ok(h.init(epoch=5), E.INVALID_REQUEST)
    ok(h.init(timeout=0), E.INVALID_TRANSACTION_TIMEOUT)
    ok(h.init(timeout=900_001), E.INVALID_TRANSACTION_TIMEOUT)
    ok(h.init(timeout=900_000))
    assert h.records and h.records[-1].timeout_ms == 900_000
    assert len(h.records) == 1  # nothing else was logged


def test_init_when_not_coordinator_or_loading() -> None:
    h = harness()
    h.shard.loading = True
    ok(h.init(), E.COORDINATOR_LOAD_IN_PROGRESS)
    h.shard.loading, h.shard.owned = False, False
    ok(h.init(), E.NOT_COORDINATOR)
    assert h.records == []


def test_init_returns_the_allocators_error() -> None:
    h = harness()
    h.pids.limit = h.pids.next_id  # no id left
    ok(h.init(), E.COORDINATOR_LOAD_IN_PROGRESS)
    assert "tx" not in h.shard.transactions and h.records == []


def test_recovering_producer_bumps_its_epoch_and_a_retry_gets_the_same_epoch() -> None:
    """KIP-360: InitProducerId with the current (pid, epoch) bumps; retried with the same
    pair (the response was lost) it answers the bumped epoch again without bumping."""
    h = harness()
    r = ok(h.init())
    bumped = ok(h.init(pid=r.producer_id, epoch=0))
    assert bumped.producer_epoch == 1 and h.meta().last_producer_epoch == 0
    retry = ok(h.init(pid=r.producer_id, epoch=0))
    assert retry.producer_epoch == 1
    ok(h.init(pid=r.producer_id, epoch=5), E.PRODUCER_FENCED)  # neither current nor last
    ok(h.init(pid=r.producer_id + 7, epoch=1), E.PRODUCER_FENCED)  # another producer id


def test_init_with_a_producer_id_on_a_new_transactional_id_is_accepted() -> None:
    h = harness()
    r = ok(h.init(pid=77, epoch=3))  # epoch -1 in the new metadata: always valid
    assert (r.producer_id, r.producer_epoch) == (1000, 0)


def test_exhausted_epoch_rotates_the_producer_id_and_a_retry_is_recognised() -> None:
    h = harness()
    r = ok(h.init())
    h.meta().producer_epoch = MAX_EPOCH - 1  # 32766: exhausted
    rotated = ok(h.init(pid=r.producer_id, epoch=MAX_EPOCH - 1))
    assert (rotated.producer_id, rotated.producer_epoch) == (1001, 0)
    meta = h.meta()
    assert (meta.prev_producer_id, meta.last_producer_epoch) == (r.producer_id, MAX_EPOCH - 1)
    # the same request again (response lost): old id + exhausted epoch is a valid retry,
    # answered with the new id's epoch bumped (its expected epoch is the last one)
    again = ok(h.init(pid=r.producer_id, epoch=MAX_EPOCH - 1))
    assert (again.producer_id, again.producer_epoch) == (1001, 0)
    ok(h.init(pid=r.producer_id, epoch=MAX_EPOCH - 2), E.PRODUCER_FENCED)


def test_exhausted_epoch_without_expected_epoch_rotates_and_forgets_the_last_epoch() -> None:
    h = harness()
    ok(h.init())
    h.meta().producer_epoch = MAX_EPOCH - 1
    r = ok(h.init())
    assert (r.producer_id, r.producer_epoch) == (1001, 0)
    assert h.meta().last_producer_epoch == -1


def test_exhausted_epoch_and_an_older_expected_epoch_is_an_unknown_server_error() -> None:
    h = harness()
    r = ok(h.init())
    h.meta().producer_epoch = MAX_EPOCH - 1
    h.meta().last_producer_epoch = MAX_EPOCH - 2
    ok(h.init(pid=r.producer_id, epoch=MAX_EPOCH - 2), E.UNKNOWN_SERVER_ERROR)


def test_rotation_fails_with_the_allocators_error() -> None:
    h = harness()
    ok(h.init())
    h.meta().producer_epoch = MAX_EPOCH - 1
    h.pids.limit = h.pids.next_id
    ok(h.init(), E.COORDINATOR_LOAD_IN_PROGRESS)
    assert h.meta().producer_epoch == MAX_EPOCH - 1


def test_init_during_an_open_transaction_fences_and_aborts_it() -> None:
    """The ongoing transaction is aborted at epoch + 1 (CONCURRENT_TRANSACTIONS: retry);
    the retry after the markers are written bumps once more."""
    h = harness()
    pid, epoch = started(h)
    ok(h.init(), E.CONCURRENT_TRANSACTIONS)
    meta = h.meta()
    assert (meta.state, meta.producer_epoch, meta.last_producer_epoch) == (S.PREPARE_ABORT, 1, -1)
    assert h.records[-1].state is S.PREPARE_ABORT and h.records[-1].producer_epoch == 1
    ok(h.init(), E.CONCURRENT_TRANSACTIONS)  # markers still being written
    markers = h.markers.complete()
    assert (markers.commit, markers.producer_epoch, markers.partitions) == (False, 1, {TP})
    assert h.meta().state is S.COMPLETE_ABORT
    r = ok(h.init())
    assert (r.producer_id, r.producer_epoch) == (pid, 2)
    assert h.add(pid, epoch) is E.PRODUCER_FENCED


# --- AddPartitionsToTxn / AddOffsetsToTxn ---------------------------------------------------
def test_add_partitions_starts_the_transaction_and_grows_it() -> None:
    h = harness()
    r = ok(h.init())
    h.timers.advance(5)
    assert h.add(r.producer_id, 0) is E.NONE
    meta = h.meta()
    start = h.timers.now_ms()
    assert (meta.state, meta.partitions, meta.start_ms) == (S.ONGOING, {TP}, start)
    n = len(h.records)
    assert h.add(r.producer_id, 0) is E.NONE  # already in: nothing logged
    assert len(h.records) == n
    h.timers.advance(5)
    assert h.add(r.producer_id, 0, TP1) is E.NONE
    assert h.meta().partitions == {TP, TP1} and h.meta().start_ms == start
    assert h.meta().last_update_ms == start + 5 and len(h.records) == n + 1


def test_add_partitions_errors() -> None:
    h = harness()
    assert h.add(1000, 0) is E.INVALID_PRODUCER_ID_MAPPING  # unknown transactional id
    r = ok(h.init())
    assert h.add(r.producer_id, 0, txn_id="") is E.INVALID_REQUEST
    assert h.add(r.producer_id + 1, 0) is E.INVALID_PRODUCER_ID_MAPPING
    assert h.add(r.producer_id, 1) is E.PRODUCER_FENCED
    assert h.add(r.producer_id, 0) is E.NONE
    ok(h.end(r.producer_id, 0))
    assert h.add(r.producer_id, 0, TP1) is E.CONCURRENT_TRANSACTIONS  # PrepareCommit
    h.shard.loading = True
    assert h.add(r.producer_id, 0) is E.COORDINATOR_LOAD_IN_PROGRESS
    h.shard.owned = False
    assert h.add(r.producer_id, 0) is E.NOT_COORDINATOR


def test_add_partitions_records_the_clients_transaction_version() -> None:
    h = harness()
    r = ok(h.init())
    assert h.add(r.producer_id, 0, tv=2) is E.NONE
    assert h.meta().transaction_version == 2


def test_add_offsets_adds_the_groups_offsets_partition() -> None:
    h = harness()
    r = ok(h.init())
    err = h.shard.add_offsets(AddOffsets("tx", r.producer_id, 0, "group-1"))
    assert err is E.NONE
    assert h.meta().partitions == {("__consumer_offsets", partition_for("group-1", 50))}
    assert h.shard.add_offsets(AddOffsets("tx", r.producer_id, 3, "g")) is E.PRODUCER_FENCED


def test_verify_partitions() -> None:
    h = harness()
    pid, epoch = started(h)

    def verify(txn: str, p: int, e: int) -> dict:
        return h.shard.verify_partitions(AddPartitions(txn, p, e, frozenset({TP, TP1}))).errors

    assert verify("tx", pid, epoch) == {TP: E.NONE, TP1: E.TRANSACTION_ABORTABLE}
    assert verify("", pid, epoch) == {TP: E.INVALID_REQUEST, TP1: E.INVALID_REQUEST}
    assert set(verify("other", pid, epoch).values()) == {E.INVALID_PRODUCER_ID_MAPPING}
    assert set(verify("tx", pid + 1, epoch).values()) == {E.INVALID_PRODUCER_ID_MAPPING}
    assert set(verify("tx", pid, epoch + 1).values()) == {E.PRODUCER_FENCED}
    ok(h.end(pid, epoch))
    assert set(verify("tx", pid, epoch).values()) == {E.CONCURRENT_TRANSACTIONS}
    n = len(h.records)
    h.shard.owned = False
    assert set(verify("tx", pid, epoch).values()) == {E.NOT_COORDINATOR}
    assert len(h.records) == n


# --- EndTxn before transaction version 2 -----------------------------------------------------
def test_commit_prepares_writes_markers_then_completes() -> None:
    h = harness()
    pid, epoch = started(h)
    assert h.add(pid, epoch, TP1) is E.NONE
    r = ok(h.end(pid, epoch, commit=True))
    assert (r.producer_id, r.producer_epoch) == (-1, -1)  # v5 fields only with version 2
    assert h.meta().state is S.PREPARE_COMMIT
    assert h.records[-1].state is S.PREPARE_COMMIT
    (markers, _done) = h.markers.pending[0]
    assert (markers.producer_id, markers.producer_epoch, markers.commit) == (pid, epoch, True)
    assert markers.partitions == {TP, TP1} and markers.transaction_version == 0
    h.timers.advance(7)
    h.markers.complete()
    meta = h.meta()
    assert (meta.state, meta.partitions, meta.producer_epoch) == (S.COMPLETE_COMMIT, set(), epoch)
    assert meta.last_update_ms == h.timers.now_ms() and h.records[-1].state is S.COMPLETE_COMMIT


def test_abort_and_the_retries_of_a_completed_end_txn() -> None:
    h = harness()
    pid, epoch = started(h)
    ok(h.end(pid, epoch, commit=False))
    ok(h.end(pid, epoch, commit=False), E.CONCURRENT_TRANSACTIONS)  # PrepareAbort, same
    ok(h.end(pid, epoch, commit=True), E.INVALID_TXN_STATE)  # PrepareAbort, other
    h.markers.complete()
    assert h.meta().state is S.COMPLETE_ABORT
    n = len(h.records)
    ok(h.end(pid, epoch, commit=False))  # a retry of the completed abort: NONE, nothing new
    ok(h.end(pid, epoch, commit=True), E.INVALID_TXN_STATE)
    assert len(h.records) == n


def test_end_txn_retries_after_commit() -> None:
    h = harness()
    pid, epoch = started(h)
    ok(h.end(pid, epoch))
    ok(h.end(pid, epoch), E.CONCURRENT_TRANSACTIONS)
    ok(h.end(pid, epoch, commit=False), E.INVALID_TXN_STATE)
    h.markers.complete()
    ok(h.end(pid, epoch))
    ok(h.end(pid, epoch, commit=False), E.INVALID_TXN_STATE)


def test_end_txn_errors_before_version_2() -> None:
    h = harness()
    ok(h.end(1000, 0), E.INVALID_PRODUCER_ID_MAPPING)
    r = ok(h.init())
    ok(h.end(r.producer_id, 0, txn_id=""), E.INVALID_REQUEST)
    ok(h.end(r.producer_id, 0), E.INVALID_TXN_STATE)  # Empty
    ok(h.end(r.producer_id + 1, 0), E.INVALID_PRODUCER_ID_MAPPING)
    ok(h.end(r.producer_id, 1), E.PRODUCER_FENCED)  # a newer epoch from a client, too
    h.shard.loading = True
    ok(h.end(r.producer_id, 0), E.COORDINATOR_LOAD_IN_PROGRESS)


def test_stale_marker_completion_is_ignored() -> None:
    h = harness()
    pid, epoch = started(h)
    ok(h.end(pid, epoch))
    _markers, done = h.markers.pending.pop()
    h.shard.shutdown()
    done()  # the shard moved away: nothing happens
    assert h.records[-1].state is S.PREPARE_COMMIT


# --- EndTxn with transaction version 2 --------------------------------------------------------
def test_v2_commit_bumps_the_epoch_and_answers_it() -> None:
    h = harness()
    r = ok(h.init())
    assert h.add(r.producer_id, 0, tv=2) is E.NONE
    res = ok(h.end(r.producer_id, 0, tv2=True))
    assert (res.producer_id, res.producer_epoch) == (r.producer_id, 1)
    meta = h.meta()
    assert (meta.state, meta.producer_epoch, meta.last_producer_epoch) == (S.PREPARE_COMMIT, 1, 0)
    assert h.markers.pending[0][0].producer_epoch == 1
    ok(h.end(r.producer_id, 0, tv2=True), E.CONCURRENT_TRANSACTIONS)  # retry while writing
    ok(h.end(r.producer_id, 0, commit=False, tv2=True), E.INVALID_TXN_STATE)
    ok(h.end(r.producer_id, 1, tv2=True), E.PRODUCER_FENCED)  # not a retry in Prepare*
    h.markers.complete()
    assert h.meta().state is S.COMPLETE_COMMIT and h.meta().producer_epoch == 1
    retry = ok(h.end(r.producer_id, 0, tv2=True))  # retry: NONE with the current epoch
    assert (retry.producer_id, retry.producer_epoch) == (r.producer_id, 1)
    ok(h.end(r.producer_id, 1, tv2=True), E.INVALID_TXN_STATE)  # commit, current epoch
    ok(h.end(r.producer_id, 0, commit=False, tv2=True), E.INVALID_TXN_STATE)  # abort retry
    ok(h.end(r.producer_id, 5, tv2=True), E.PRODUCER_FENCED)


def test_v2_abort_without_partitions_from_empty_and_complete_states() -> None:
    """Version 2 lets a producer abort when unsure whether a transaction is open: from
    Empty, CompleteCommit or CompleteAbort it bumps the epoch; no marker to write."""
    h = harness()
    r = ok(h.init())
    h.timers.advance(3)
    res = ok(h.end(r.producer_id, 0, commit=False, tv2=True))
    assert res.producer_epoch == 1
    assert h.meta().state is S.COMPLETE_ABORT  # nothing to mark: complete at once
    assert [x.state for x in h.records[-2:]] == [S.PREPARE_ABORT, S.COMPLETE_ABORT]
    assert h.records[-2].start_ms == h.timers.now_ms()
    assert h.markers.pending == []
    assert ok(h.end(r.producer_id, 1, commit=False, tv2=True)).producer_epoch == 2
    ok(h.end(r.producer_id, 2, commit=True, tv2=True), E.INVALID_TXN_STATE)
    ok(h.end(r.producer_id, 1, commit=True, tv2=True), E.INVALID_TXN_STATE)  # commit retry
    e = h.meta().producer_epoch
    h.add(r.producer_id, e, tv=2)
    ok(h.end(r.producer_id, e, tv2=True))
    h.markers.complete()
    assert ok(h.end(r.producer_id, e + 1, commit=False, tv2=True)).producer_epoch == e + 2


def test_v2_empty_state_errors() -> None:
    h = harness()
    r = ok(h.init())
    ok(h.end(r.producer_id, 0, commit=True, tv2=True), E.INVALID_TXN_STATE)
    ok(h.end(r.producer_id, 1, commit=False, tv2=True), E.PRODUCER_FENCED)  # not current
    ok(h.end(r.producer_id, -1, commit=False, tv2=True), E.PRODUCER_FENCED)  # a "retry"
    ok(h.end(r.producer_id + 1, 0, tv2=True), E.INVALID_PRODUCER_ID_MAPPING)
    ok(h.end(r.producer_id, 0, tv2=True, txn_id="nope"), E.INVALID_PRODUCER_ID_MAPPING)
    ok(h.end(r.producer_id, 0, tv2=True, txn_id=""), E.INVALID_REQUEST)
    h.shard.owned = False
    ok(h.end(r.producer_id, 0, tv2=True), E.NOT_COORDINATOR)


def test_v2_end_txn_at_an_exhausted_epoch_rotates_the_producer_id() -> None:
    h = harness()
    r = ok(h.init())
    old = r.producer_id
    h.meta().producer_epoch = MAX_EPOCH - 1
    assert h.add(old, MAX_EPOCH - 1, tv=2) is E.NONE
    res = ok(h.end(old, MAX_EPOCH - 1, tv2=True))
    assert (res.producer_id, res.producer_epoch) == (1001, 0)  # what the producer moves to
    meta = h.meta()
    assert (meta.state, meta.producer_id, meta.producer_epoch) == (S.PREPARE_COMMIT, old, MAX_EPOCH)
    assert meta.next_producer_id == 1001
    h.markers.complete()
    meta = h.meta()
    assert (meta.producer_id, meta.producer_epoch, meta.prev_producer_id) == (1001, 0, old)
    assert meta.next_producer_id == -1 and meta.last_producer_epoch == MAX_EPOCH - 1
    retry = ok(h.end(old, MAX_EPOCH - 1, tv2=True))  # retry across the rotation
    assert (retry.producer_id, retry.producer_epoch) == (1001, 0)
    ok(h.end(old, MAX_EPOCH - 2, tv2=True), E.INVALID_PRODUCER_ID_MAPPING)


def test_v2_rotation_fails_with_the_allocators_error() -> None:
    h = harness()
    r = ok(h.init())
    h.meta().producer_epoch = MAX_EPOCH - 1
    assert h.add(r.producer_id, MAX_EPOCH - 1, tv=2) is E.NONE
    h.pids.limit = h.pids.next_id
    ok(h.end(r.producer_id, MAX_EPOCH - 1, tv2=True), E.COORDINATOR_LOAD_IN_PROGRESS)
    assert h.meta().state is S.ONGOING


def test_the_allocator_error_type_carries_its_code() -> None:
    assert ProducerIdUnavailable(E.NOT_COORDINATOR).error is E.NOT_COORDINATOR
    assert InitProducerId("x", 1).producer_id == -1
