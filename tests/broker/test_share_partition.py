"""One share partition's record states on a manual clock: acquisition, ACCEPT / RELEASE /
REJECT / RENEW, lock expiry, the delivery count limit, the start offset, the in-flight bound."""

from __future__ import annotations

from kgroupd.broker.coordinator.timers import ManualTimers
from kgroupd.broker.share.partition import (
    ACCEPT,
    GAP,
    REJECT,
    RELEASE,
    RENEW,
    Acquired,
    Limits,
    RecordState,
    SharePartition,
)
from kgroupd.protocol.errors import ErrorCode


def make(limits: Limits | None = None) -> tuple[SharePartition, ManualTimers]:
    timers = ManualTimers()
    lim = limits or Limits(lock_duration_ms=1000, delivery_count_limit=3, max_in_flight=100)
    return SharePartition("g/t/0", 0, timers, lambda: lim), timers


def test_members_share_records_and_accept_settles_them() -> None:
    sp, _ = make()
    assert sp.acquire("a", [(0, 4)], 3) == [Acquired(0, 2, 1)]
    assert sp.acquire("b", [(0, 4)], 10) == [Acquired(3, 4, 1)]
    assert sp.acquire("c", [(0, 4)], 10) == []
    assert sp.acknowledge("a", 0, 2, [ACCEPT]) == ErrorCode.NONE
    assert sp.start_offset == 3
    assert sp.acknowledge("a", 3, 3, [ACCEPT]) == ErrorCode.INVALID_RECORD_STATE  # b holds it
    assert sp.acknowledge("b", 3, 4, [ACCEPT, GAP]) == ErrorCode.NONE
    assert (sp.start_offset, sp.in_flight_count()) == (5, 0)


def test_release_redelivers_with_a_higher_count_reject_never() -> None:
    sp, _ = make()
    sp.acquire("a", [(0, 1)], 10)
    assert sp.acknowledge("a", 0, 1, [RELEASE, REJECT]) == ErrorCode.NONE
    assert sp.start_offset == 0
    assert sp.acquire("b", [(0, 1)], 10) == [Acquired(0, 0, 2)]
    assert sp.acknowledge("b", 0, 0, [REJECT]) == ErrorCode.NONE
    assert sp.acquire("b", [(0, 1)], 10) == []
    assert sp.start_offset == 2


def test_lock_expiry_and_the_delivery_limit() -> None:
    sp, timers = make()
    for count in (1, 2, 3):
        assert sp.acquire("a", [(0, 0)], 10) == [Acquired(0, 0, count)]
        assert sp.acquired_count() == 1
        timers.advance(999)
        assert sp.acquire("b", [(0, 0)], 10) == []
        timers.advance(1)
    # third delivery's lock expired with the count at the limit (3): archived
    assert sp.acquire("b", [(0, 0)], 10) == []
    assert sp.start_offset == 1


def test_renew_extends_the_lock_and_stale_locks_do_nothing() -> None:
    sp, timers = make()
    sp.acquire("a", [(0, 1)], 10)
    timers.advance(800)
    assert sp.acknowledge("a", 0, 1, [RENEW]) == ErrorCode.NONE
    timers.advance(800)  # the first lock's time is past: the renewed lock holds
    assert sp.acquired_count() == 2
    timers.advance(200)
    assert sp.acquired_count() == 0
    assert sp.acquire("a", [(0, 1)], 10) == [Acquired(0, 1, 2)]


def test_member_release_and_bad_acknowledgements() -> None:
    sp, _ = make()
    sp.acquire("a", [(0, 2)], 10)
    assert sp.acknowledge("a", 0, 2, [ACCEPT, ACCEPT]) == ErrorCode.INVALID_REQUEST
    assert sp.acknowledge("a", 2, 1, [ACCEPT]) == ErrorCode.INVALID_REQUEST
    assert sp.acknowledge("a", 0, 0, [9]) == ErrorCode.INVALID_REQUEST
    assert sp.acknowledge("a", 0, 5, [ACCEPT]) == ErrorCode.INVALID_RECORD_STATE
    assert sp.acquired_count() == 3  # nothing changed
    assert sp.release_member("a") == 3
    assert sp.acquire("b", [(0, 2)], 10) == [Acquired(0, 2, 2)]


def test_in_flight_bound() -> None:
    sp, _ = make(Limits(lock_duration_ms=1000, delivery_count_limit=5, max_in_flight=4))
    assert sp.acquire("a", [(0, 9)], 100) == [Acquired(0, 3, 1)]
    assert not sp.has_available(10)
    sp.acknowledge("a", 0, 1, [ACCEPT])
    assert sp.has_available(10)
    assert sp.acquire("a", [(0, 9)], 100) == [Acquired(4, 5, 1)]


def test_undeliverable_batches_are_archived_as_the_fetch_passes_them() -> None:
    sp, _ = make()
    # data 0-2, an aborted transaction's batch 3-4, a marker at 5, data 6-7
    ranges = [(0, 2, True), (3, 4, False), (5, 5, False), (6, 7, True)]
    assert sp.acquire("a", ranges, 4) == [Acquired(0, 2, 1), Acquired(6, 6, 1)]
    assert sp.next_fetch_offset() == 7
    assert sp.acquire("b", ranges, 10) == [Acquired(7, 7, 1)]
    assert sp.acknowledge("a", 0, 2, [ACCEPT]) == ErrorCode.NONE
    assert sp.start_offset == 6  # past the archived offsets too
    # a fetch that stops at its record limit archives nothing beyond where it stopped
    sp2, _ = make()
    assert sp2.acquire("a", [(0, 3, True), (4, 4, False)], 2) == [Acquired(0, 1, 1)]
    assert (sp2.end_offset, sp2.next_fetch_offset()) == (2, 2)
    assert sp2.acquire("b", [(2, 3, True), (4, 4, False)], 10) == [Acquired(2, 3, 1)]
    assert sp2.end_offset == 5


def test_next_fetch_offset_is_the_first_available_in_flight() -> None:
    sp, _ = make()
    sp.acquire("a", [(0, 9)], 10)
    assert sp.next_fetch_offset() == 10
    sp.acknowledge("a", 4, 5, [RELEASE])
    assert sp.next_fetch_offset() == 4
    assert sp.has_available(10)  # nothing new, but 4 and 5 are available again


def test_changes_and_snapshot_restore_what_is_settled() -> None:
    sp, timers = make()
    sp.track = True  # a store keeps its changes
    sp.acquire("a", [(0, 5)], 10)
    assert sp.take_changes() is None  # acquisitions are never written
    sp.acknowledge("a", 0, 0, [ACCEPT])
    sp.acknowledge("a", 2, 3, [REJECT])
    sp.acknowledge("a", 4, 4, [RELEASE])
    start, batches = sp.take_changes() or (None, None)
    # 0 settled (the start moved past it), 2-3 archived, 4 available after one delivery
    assert (start, batches) == (1, [(2, 3, 4, 1), (4, 4, 0, 1)])
    assert sp.take_changes() is None
    snap = sp.snapshot()  # 1 and 5 still acquired: kept as what they were before
    assert snap == (1, [(2, 3, 4, 1), (4, 4, 0, 1)])
    # a restart: the acquired records come back, the settled never
    back, _ = make()
    back.track = True
    back.restore(*snap)
    got = back.acquire("b", [(0, 5)], 10)
    assert got == [Acquired(1, 1, 1), Acquired(4, 4, 2), Acquired(5, 5, 1)]
    back.acknowledge("b", 1, 1, [ACCEPT])
    assert back.start_offset == 4
    # a lock that expires is written too (through ``changed``: outside a request)
    seen = []
    back.changed = seen.append
    timers_back = back.timers
    assert isinstance(timers_back, type(timers))
    timers_back.advance(1000)
    assert seen == [back]
    assert back.take_changes() == (4, [(4, 4, 0, 2), (5, 5, 0, 1)])


def test_batch_optimized_mode_takes_whole_batches() -> None:
    sp, _ = make()
    # batches 0-3 and 4-7: the record limit (2) is passed to end at the first batch's end
    assert sp.acquire("a", [(0, 3), (4, 7)], 2, whole_batches=True) == [Acquired(0, 3, 1)]
    assert sp.acquire("b", [(0, 3), (4, 7)], 5, whole_batches=True) == [Acquired(4, 7, 1)]
    # released in part: the available piece is taken whole, the rest stays where it is
    assert sp.acknowledge("a", 1, 2, [RELEASE]) == ErrorCode.NONE
    assert sp.acquire("c", [(0, 3), (4, 7)], 1, whole_batches=True) == [Acquired(1, 2, 2)]
    assert sp.acquired_count() == 8


def test_partial_acknowledgements_split_runs_and_the_start_moves_over_them() -> None:
    sp, timers = make()
    assert sp.acquire("a", [(0, 9)], 10) == [Acquired(0, 9, 1)]
    assert sp.acknowledge("a", 0, 9, [ACCEPT] * 3 + [RELEASE] * 2 + [REJECT] * 5) == 0
    assert sp.start_offset == 3
    assert sp.state_counts()[RecordState.AVAILABLE] == 2
    assert sp.acquire("b", [(0, 9)], 10) == [Acquired(3, 4, 2)]
    assert sp.acknowledge("a", 3, 3, [ACCEPT]) == ErrorCode.INVALID_RECORD_STATE  # b holds it
    assert sp.acknowledge("b", 4, 4, [ACCEPT]) == ErrorCode.NONE
    assert sp.start_offset == 3
    assert sp.acknowledge("b", 3, 3, [ACCEPT]) == ErrorCode.NONE
    assert (sp.start_offset, sp.in_flight_count()) == (10, 0)
    # every lock was let go: no timer is left to fire
    assert timers.keys() == []


def test_a_lock_timer_goes_when_its_records_are_settled() -> None:
    sp, timers = make()
    sp.acquire("a", [(0, 4)], 10)
    sp.acquire("b", [(5, 9)], 10)
    assert len(timers.keys()) == 2
    sp.acknowledge("a", 0, 4, [ACCEPT])
    assert len(timers.keys()) == 1
    timers.advance(1000)  # b's lock expires
    assert sp.acquire("c", [(5, 9)], 10) == [Acquired(5, 9, 2)]


def test_a_restored_state_with_settled_records_at_the_start() -> None:
    sp, _ = make()
    # offsets 2-3 archived, 4 accepted, 6 released once; 5 and 7 never seen
    sp.restore(2, [(2, 3, 4, 1), (4, 4, 2, 1), (6, 6, 0, 1)])
    assert sp.acquire("a", [(0, 7)], 10) == [
        Acquired(5, 5, 1),
        Acquired(6, 6, 2),
        Acquired(7, 7, 1),
    ]
    assert (sp.start_offset, sp.end_offset) == (5, 8)
    assert sp.acknowledge("a", 5, 7, [ACCEPT]) == ErrorCode.NONE
    assert (sp.start_offset, sp.in_flight_count()) == (8, 0)
