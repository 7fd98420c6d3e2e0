"""Timed-out transactions, transactional id expiry, Describe/ListTransactions, loading, the
routing coordinator, and the replay property: records a live shard wrote rebuild it."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from txn_helpers import CONFIG, TIMEOUT, TP, FakeMarkers, Harness, harness, ok

from kgroupd.broker.coordinator.timers import ManualTimers
from kgroupd.broker.coordinator.txn import (
    AddOffsets,
    InitProducerId,
    ListTransactions,
    SequentialProducerIds,
    TransactionCoordinator,
    TransactionShard,
    TransactionState,
    TransactionTombstoneRecord,
    TxnConfig,
    decode_txn_record,
    encode_txn_record,
)
from kgroupd.broker.coordinator.txn.metadata import MAX_EPOCH
from kgroupd.protocol.errors import ErrorCode

S = TransactionState
E = ErrorCode
ABORT_EVERY = CONFIG.abort_timed_out_interval_ms


def started(h: Harness, txn_id: str = "tx", tv: int = 0) -> tuple[int, int]:
    r = ok(h.init(txn_id))
    assert h.add(r.producer_id, r.producer_epoch, txn_id=txn_id, tv=tv) is E.NONE
    return r.producer_id, r.producer_epoch


# --- timed-out transactions ----------------------------------------------------------------
def test_a_transaction_past_its_timeout_is_fenced_and_aborted_by_the_periodic_task() -> None:
    h = harness()
    pid, epoch = started(h)
    assert h.timers.due_at("txn-abort/0") == h.timers.now_ms() + ABORT_EVERY
    h.timers.advance(TIMEOUT)  # start + timeout == now: not yet past it
    assert h.meta().state is S.ONGOING
    h.timers.advance(ABORT_EVERY)
    meta = h.meta()
    assert (meta.state, meta.producer_epoch, meta.last_producer_epoch) == (S.PREPARE_ABORT, 1, -1)
    assert meta.transaction_version == 0  # a fence aborts as before version 2
    markers = h.markers.pending[0][0]
    assert (markers.commit, markers.producer_epoch, markers.partitions) == (False, 1, {TP})
    h.markers.complete()
    assert h.meta().state is S.COMPLETE_ABORT
    # the old producer learns it was fenced
    assert h.add(pid, epoch) is E.PRODUCER_FENCED
    ok(h.end(pid, epoch, commit=False), E.PRODUCER_FENCED)
    assert h.timers.is_scheduled("txn-abort/0")  # the task keeps running


def test_a_late_v2_abort_after_a_timeout_is_a_retry() -> None:
    h = harness()
    pid, epoch = started(h, tv=2)
    h.timers.advance(TIMEOUT + ABORT_EVERY)
    h.markers.complete()
    res = ok(h.end(pid, epoch, commit=False, tv2=True))
    assert (res.producer_id, res.producer_epoch) == (pid, epoch + 1)


def test_a_timeout_at_the_last_epoch_rotates_the_producer_id() -> None:
    h = harness()
    r = ok(h.init())
    h.meta().producer_epoch = MAX_EPOCH - 1
    assert h.add(r.producer_id, MAX_EPOCH - 1, tv=2) is E.NONE
    assert h.shard.abort_timed_out_transactions() == []  # not timed out yet
    h.timers.advance(TIMEOUT + 1)
    assert h.shard.abort_timed_out_transactions() == [("tx", E.NONE)]
    meta = h.meta()
    assert (meta.producer_epoch, meta.next_producer_id) == (MAX_EPOCH, 1001)
    h.markers.complete()
    meta = h.meta()
    assert (meta.producer_id, meta.producer_epoch, meta.prev_producer_id) == (
        1001,
        0,
        r.producer_id,
    )
    late = ok(h.end(r.producer_id, MAX_EPOCH - 1, commit=False, tv2=True))
    assert (late.producer_id, late.producer_epoch) == (1001, 0)


def test_a_failed_fence_is_undone_and_retried_later() -> None:
    h = harness()
    r = ok(h.init())
    h.meta().producer_epoch = MAX_EPOCH - 1
    assert h.add(r.producer_id, MAX_EPOCH - 1) is E.NONE
    h.pids.limit = h.pids.next_id
    h.timers.advance(TIMEOUT + 1)
    n = len(h.records)
    assert h.shard.abort_timed_out_transactions() == [("tx", E.COORDINATOR_LOAD_IN_PROGRESS)]
    meta = h.meta()
    assert (meta.state, meta.producer_epoch, len(h.records)) == (S.ONGOING, MAX_EPOCH - 1, n)
    ok(h.init(), E.COORDINATOR_LOAD_IN_PROGRESS)  # the fence by InitProducerId fails too
    assert h.meta().state is S.ONGOING
    h.pids.limit = None
    assert h.shard.abort_timed_out_transactions() == [("tx", E.NONE)]


def test_an_ongoing_transaction_at_the_largest_epoch_is_not_fenced() -> None:
    h = harness()
    r = ok(h.init())
    h.add(r.producer_id, 0)
    h.meta().producer_epoch = MAX_EPOCH
    h.timers.advance(TIMEOUT + 1)
    assert h.shard.abort_timed_out_transactions() == []
    assert h.meta().state is S.ONGOING


def test_a_reconnecting_producer_aborts_its_open_transaction_through_init() -> None:
    """A producer crashed mid-transaction: its successor's InitProducerId aborts the open
    transaction (CONCURRENT_TRANSACTIONS until the markers are written), then gets a bumped
    epoch; the crashed instance is fenced."""
    h = harness()
    pid, epoch = started(h)
    ok(h.init(), E.CONCURRENT_TRANSACTIONS)
    h.markers.complete()
    r = ok(h.init())
    assert (r.producer_id, r.producer_epoch) == (pid, epoch + 2)
    ok(h.end(pid, epoch), E.PRODUCER_FENCED)


# --- transactional id expiry ----------------------------------------------------------------
def test_idle_transactional_ids_expire_with_a_tombstone() -> None:
    h = harness()
    h.timers.cancel("txn-abort/0")  # the periodic tasks would act first: called by hand
    h.timers.cancel("txn-expire/0")
    ok(h.init("idle"))
    started(h, "busy")
    h.timers.advance(CONFIG.transactional_id_expiration_ms - 1)
    assert h.shard.expire_transactional_ids() == []
    h.timers.advance(1)
    h.shard.transactions["busy"].last_update_ms = 0  # ongoing: never expires
    assert h.shard.expire_transactional_ids() == ["idle"]
    assert "idle" not in h.shard.transactions and "busy" in h.shard.transactions
    assert h.records[-1] == TransactionTombstoneRecord("idle")
    ok(h.shard.describe("idle"), E.TRANSACTIONAL_ID_NOT_FOUND)
    assert ok(h.init("idle")).producer_epoch == 0  # a new life


def test_expiry_runs_on_its_timer() -> None:
    h = harness()
    h.timers.advance(1)  # the task last ran 1 ms before the id is due
    ok(h.init())
    h.timers.advance(CONFIG.transactional_id_expiration_ms)
    assert "tx" in h.shard.transactions
    h.timers.advance(CONFIG.remove_expired_interval_ms)
    assert "tx" not in h.shard.transactions


# --- DescribeTransactions / ListTransactions -----------------------------------------------
def test_describe() -> None:
    h = harness()
    pid, epoch = started(h)
    h.add(pid, epoch, ("a", 3), ("a", 1))
    d = ok(h.shard.describe("tx"))
    assert (d.state, d.producer_id, d.producer_epoch, d.timeout_ms) == ("Ongoing", pid, 0, TIMEOUT)
    assert d.start_ms == h.timers.now_ms()
    assert d.topics == (("a", (1, 3)), ("t", (0,)))
    ok(h.shard.describe(""), E.INVALID_REQUEST)
    ok(h.shard.describe("nope"), E.TRANSACTIONAL_ID_NOT_FOUND)
    h.shard.loading = True
    ok(h.shard.describe("tx"), E.COORDINATOR_LOAD_IN_PROGRESS)


def test_list_filters() -> None:
    h = harness()
    a = ok(h.init("a"))
    pid_b, _ = started(h, "b")
    h.timers.advance(100)
    started(h, "c")

    def names(**kw: object) -> list[str]:
        res = ok(h.shard.list_transactions(ListTransactions(**kw)))  # type: ignore[arg-type]
        return [t.transactional_id for t in res.transactions]

    assert names() == ["a", "b", "c"]
    assert names(states=frozenset({"Ongoing"})) == ["b", "c"]
    assert names(producer_ids=frozenset({a.producer_id, pid_b})) == ["a", "b"]
    assert names(duration_ms=50) == ["a", "b"]  # running longer than 50 ms (a: start -1)
    assert names(duration_ms=100) == ["a"]
    assert names(transactional_id_pattern="[ab]") == ["a", "b"]
    assert names(transactional_id_pattern="") == ["a", "b", "c"]
    res = h.shard.list_transactions(ListTransactions(states=frozenset({"Bogus", "Empty"})))
    assert res.unknown_state_filters == ("Bogus",)
    assert [(t.transactional_id, t.state) for t in res.transactions] == [("a", "Empty")]
    res = h.shard.list_transactions(ListTransactions(states=frozenset({"Bogus"})))
    assert res.transactions == ()
    ok(h.shard.list_transactions(ListTransactions(transactional_id_pattern="(")),
       E.INVALID_REGULAR_EXPRESSION)  # fmt: skip
    h.shard.loading = True
    ok(h.shard.list_transactions(ListTransactions()), E.COORDINATOR_LOAD_IN_PROGRESS)


# --- loading, unloading, the coordinator ---------------------------------------------------
def test_load_serves_after_replay_and_rewrites_pending_markers() -> None:
    h = harness()
    pid, epoch = started(h)
    ok(h.end(pid, epoch))
    markers = FakeMarkers()
    timers = ManualTimers(h.timers.now_ms())
    shard = TransactionShard(0, CONFIG, timers, SequentialProducerIds(), markers, loaded=False)
    ok(shard.init_producer_id(InitProducerId("tx", TIMEOUT)), E.COORDINATOR_LOAD_IN_PROGRESS)
    shard.load(h.records)
    assert shard.transactions == h.shard.transactions
    assert [m.partitions for m, _ in markers.pending] == [{TP}]
    markers.complete()
    assert shard.transactions["tx"].state is S.COMPLETE_COMMIT
    assert shard.producer_ids.allocate() > pid  # type: ignore[attr-defined]
    assert timers.is_scheduled("txn-abort/0") and timers.is_scheduled("txn-expire/0")


def test_shutdown_forgets_everything_and_stops_the_tasks() -> None:
    h = harness()
    started(h)
    h.shard.shutdown()
    assert h.shard.transactions == {} and h.timers.keys() == []
    ok(h.init(), E.NOT_COORDINATOR)
    assert h.shard.abort_timed_out_transactions() == []
    assert h.shard.expire_transactional_ids() == []


def test_the_coordinator_routes_by_transactional_id_and_merges_lists() -> None:
    config = TxnConfig(transaction_partitions=3)
    timers = ManualTimers()
    coord = TransactionCoordinator(config, timers, SequentialProducerIds(), FakeMarkers())
    ids = [f"id-{i}" for i in range(6)]
    for txn_id in ids:
        ok(coord.init_producer_id(InitProducerId(txn_id, TIMEOUT)))
        shard = coord.shard_for(txn_id)
        assert txn_id in shard.transactions and shard.partition == coord.partition_for(txn_id)
    assert len({coord.partition_for(i) for i in ids}) > 1
    listed = ok(coord.list_transactions(ListTransactions()))
    assert sorted(t.transactional_id for t in listed.transactions) == ids
    assert coord.add_offsets(AddOffsets("id-0", 0, 0, "g")) is E.NONE
    assert ok(coord.describe("id-0")).state == "Ongoing"
    coord.shards[1].loading = True
    ok(coord.list_transactions(ListTransactions()), E.COORDINATOR_LOAD_IN_PROGRESS)
    coord.shutdown()
    assert timers.keys() == []


# --- replay property ---------------------------------------------------------------------------
OPS = st.lists(
    st.tuples(
        st.sampled_from(["init", "init_pid", "add", "add_tv2", "commit", "abort", "commit2",
                         "abort2", "markers", "tick", "expire", "exhaust"]),
        st.sampled_from(["x", "y", "z"]),
        st.integers(0, 2),
    ),
    max_size=60,
)  # fmt: skip


@settings(max_examples=300, deadline=None)
@given(OPS)
def test_replaying_the_records_of_a_live_shard_rebuilds_it(ops: list) -> None:
    h = harness()
    for op, txn_id, n in ops:
        meta = h.shard.transactions.get(txn_id)
        pid, epoch = (meta.producer_id, meta.producer_epoch) if meta else (0, 0)
        epoch -= n == 2  # sometimes a stale epoch (or a v2 retry)
        if op == "init":
            h.init(txn_id)
        elif op == "init_pid":
            h.init(txn_id, pid=pid, epoch=max(epoch, 0))
        elif op in ("add", "add_tv2"):
            h.add(pid, epoch, ("t", n), txn_id=txn_id, tv=2 if op == "add_tv2" else 0)
        elif op in ("commit", "abort", "commit2", "abort2"):
            h.end(pid, epoch, commit=op.startswith("commit"), tv2=op.endswith("2"), txn_id=txn_id)
        elif op == "markers" and h.markers.pending:
            h.markers.complete()
        elif op == "tick":
            h.timers.advance(TIMEOUT // 2 * (n + 1))
        elif op == "expire":
            h.timers.advance(CONFIG.transactional_id_expiration_ms)
        elif op == "exhaust" and meta is not None and meta.state.expiration_allowed:
            # the next bump runs out of epochs: an Empty record at a late epoch
            h.init(txn_id)
            h.shard.replay(_with_epoch(h.shard._record_of(h.meta(txn_id)), MAX_EPOCH - 1 - n))
            h.records.append(h.shard._record_of(h.meta(txn_id)))
    rebuilt = TransactionShard(
        0, CONFIG, ManualTimers(h.timers.now_ms()), SequentialProducerIds(), FakeMarkers(),
        loaded=False,
    )  # fmt: skip
    rebuilt.load(decode_txn_record(encode_txn_record(r)) for r in h.records)
    assert rebuilt.transactions == h.shard.transactions
    used = [
        pid
        for r in h.records
        if not isinstance(r, TransactionTombstoneRecord)
        for pid in (r.producer_id, r.prev_producer_id, r.next_producer_id)
    ]
    assert rebuilt.producer_ids.allocate() > max(used, default=-1)  # type: ignore[attr-defined]


def _with_epoch(record, epoch):  # type: ignore[no-untyped-def]
    from dataclasses import replace

    return replace(record, producer_epoch=epoch, state=S.EMPTY)
