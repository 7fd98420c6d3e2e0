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
    assert (sp.start_offset, sp.records) == (5, {})


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
