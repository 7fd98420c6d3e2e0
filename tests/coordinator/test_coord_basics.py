"""Placement, Deferred, timers, the state table, config defaults, subscription parsing."""

from __future__ import annotations

import asyncio

import pytest

from kgroupd.broker.coordinator import (
    ALLOWED_PREVIOUS,
    CoordinatorConfig,
    Deferred,
    DeferredError,
    GroupState,
    IllegalStateTransition,
    LoopTimers,
    ManualTimers,
    java_string_hashcode,
    partition_for,
)
from kgroupd.broker.coordinator.consumer_protocol import (
    ConsumerProtocolError,
    encode_subscription,
    subscription_topics,
)
from kgroupd.broker.coordinator.group import ClassicGroup
from kgroupd.broker.coordinator.state import check_transition


# --- placement ---------------------------------------------------------------------------
def test_hashcode_known_values() -> None:
    assert java_string_hashcode("hello") == 99162322
    assert java_string_hashcode("polygenelubricants") == -(2**31)
    assert java_string_hashcode("") == 0


def test_hashcode_wraps_and_uses_utf16_code_units() -> None:
    # "a"*20 overflows int32; computed independently with Java semantics
    h = 0
    for _ in range(20):
        h = (31 * h + 97) & 0xFFFFFFFF
    expected = h - 2**32 if h >= 2**31 else h
    assert java_string_hashcode("a" * 20) == expected
    # a non-BMP character is two UTF-16 code units (a surrogate pair)
    assert java_string_hashcode("\U0001f600") == 31 * 0xD83D + 0xDE00


def test_partition_for() -> None:
    assert partition_for("hello", 50) == 99162322 % 50
    assert partition_for("polygenelubricants", 50) == 0  # MIN_VALUE -> 0
    neg = next(
        s for s in (f"consumer-group-{i}" for i in range(1000)) if java_string_hashcode(s) < 0
    )
    assert partition_for(neg, 50) == abs(java_string_hashcode(neg)) % 50
    assert all(0 <= partition_for(f"group-{i}", 7) < 7 for i in range(200))


# --- Deferred ----------------------------------------------------------------------------
def test_deferred() -> None:
    d: Deferred[int] = Deferred()
    seen: list[int] = []
    d.add_callback(seen.append)
    assert not d.done()
    with pytest.raises(DeferredError):
        d.result()
    d.resolve(5)
    assert d.done() and d.result() == 5 and seen == [5]
    d.add_callback(seen.append)  # already resolved: called at once
    assert seen == [5, 5]
    with pytest.raises(DeferredError):
        d.resolve(6)
    assert Deferred.resolved("x").result() == "x"


# --- timers ------------------------------------------------------------------------------
def test_manual_timers_order_nested_and_stale_guard() -> None:
    t = ManualTimers()
    log: list[str] = []
    t.schedule("b", 20, lambda: log.append(f"b@{t.now_ms()}"))
    t.schedule(
        "a",
        10,
        lambda: (
            log.append(f"a@{t.now_ms()}"),
            t.schedule("c", 5, lambda: log.append(f"c@{t.now_ms()}")),
        ),
    )
    t.schedule("d", 10, lambda: log.append("d-old"))
    t.schedule("d", 30, lambda: log.append(f"d@{t.now_ms()}"))  # replaces
    t.schedule("e", 1, lambda: log.append("e"))
    t.cancel("e")
    t.advance(9)
    assert log == []
    t.advance(100)
    assert log == ["a@10", "c@15", "b@20", "d@30"]
    assert t.now_ms() == 109
    assert t.keys() == []


def test_manual_timers_zero_delay_and_due_at() -> None:
    t = ManualTimers(start_ms=50)
    log: list[int] = []
    t.schedule("k", 0, lambda: log.append(t.now_ms()))
    assert t.is_scheduled("k") and t.due_at("k") == 50
    t.advance(0)
    assert log == [50] and not t.is_scheduled("k")


async def test_loop_timers_fire_replace_and_cancel() -> None:
    loop = asyncio.get_running_loop()
    handed: list[str] = []
    timers = LoopTimers(loop, dispatch=lambda op: (handed.append("dispatch"), op()))
    fired: list[str] = []
    done: asyncio.Future[None] = loop.create_future()

    def last() -> None:
        fired.append("x")
        done.set_result(None)

    start = timers.now_ms()
    timers.schedule("x", 1, lambda: fired.append("x-old"))
    timers.schedule("x", 5, last)  # a later deadline replaces the op and the time
    timers.schedule("y", 1, lambda: fired.append("y"))
    timers.cancel("y")
    assert len(timers) == 1
    await asyncio.wait_for(done, 5)
    assert fired == ["x"] and handed == ["dispatch"]
    assert timers.now_ms() >= start + 5
    assert len(timers) == 0
    timers.schedule("z", 1000, lambda: fired.append("z"))
    timers.cancel_all()
    assert len(timers) == 0


async def test_loop_timers_earlier_deadline_rearms() -> None:
    loop = asyncio.get_running_loop()
    timers = LoopTimers(loop)
    done: asyncio.Future[str] = loop.create_future()
    timers.schedule("k", 60_000, lambda: done.set_result("late"))
    timers.schedule("k", 1, lambda: done.set_result("early"))
    assert await asyncio.wait_for(done, 5) == "early"


def test_loop_timers_reschedule_a_due_key_on_uvloop() -> None:
    """uvloop arms a deadline already due with call_soon (a Handle without ``when``):
    scheduling the same key again must still replace its op (a regex resolution at delay 0
    asked for twice)."""
    import uvloop

    async def run() -> list[str]:
        loop = asyncio.get_running_loop()
        timers = LoopTimers(loop)
        fired: list[str] = []
        done: asyncio.Future[None] = loop.create_future()
        timers.schedule("k", 0, lambda: fired.append("old"))
        timers.schedule("k", 0, lambda: (fired.append("new"), done.set_result(None)))
        await asyncio.wait_for(done, 5)
        return fired

    loop = uvloop.new_event_loop()
    try:
        assert loop.run_until_complete(run()) == ["new"]
    finally:
        loop.close()


async def test_loop_timers_stale_fire_is_dropped() -> None:
    loop = asyncio.get_running_loop()
    timers = LoopTimers(loop)
    fired: list[int] = []
    timers.schedule("k", 0, lambda: fired.append(1))
    stale = timers._live["k"]
    timers.cancel("k")
    timers.schedule("k", 60_000, lambda: fired.append(2))  # rescheduled meanwhile
    timers._fire("k", stale)  # the old handle firing late does nothing
    assert fired == []
    assert len(timers) == 1
    timers.cancel_all()


# --- state machine -----------------------------------------------------------------------
def test_allowed_previous_table() -> None:
    S = GroupState
    assert ALLOWED_PREVIOUS[S.PREPARING_REBALANCE] == {S.STABLE, S.COMPLETING_REBALANCE, S.EMPTY}
    assert ALLOWED_PREVIOUS[S.COMPLETING_REBALANCE] == {S.PREPARING_REBALANCE}
    assert ALLOWED_PREVIOUS[S.STABLE] == {S.COMPLETING_REBALANCE}
    assert ALLOWED_PREVIOUS[S.EMPTY] == {S.PREPARING_REBALANCE}
    assert ALLOWED_PREVIOUS[S.DEAD] == set(S)
    assert [s.value for s in S] == [
        "Empty",
        "PreparingRebalance",
        "CompletingRebalance",
        "Stable",
        "Dead",
    ]
    for state in S:
        assert state.__doc__


@pytest.mark.parametrize("current", list(GroupState))
@pytest.mark.parametrize("target", list(GroupState))
def test_every_transition_checked(current: GroupState, target: GroupState) -> None:
    if current in ALLOWED_PREVIOUS[target]:
        check_transition(current, target)
    else:
        with pytest.raises(IllegalStateTransition):
            check_transition(current, target)


def test_group_transition_to_raises_on_illegal_move() -> None:
    import structlog

    g = ClassicGroup("g", 0, structlog.get_logger())
    with pytest.raises(IllegalStateTransition):
        g.transition_to(GroupState.STABLE, 1, "bug")
    g.transition_to(GroupState.PREPARING_REBALANCE, 1, "join")
    assert g.previous_state is GroupState.EMPTY and g.state_timestamp_ms == 1


def test_config_defaults_are_kafkas() -> None:
    c = CoordinatorConfig()
    assert (c.offsets_partitions, c.initial_rebalance_delay_ms) == (50, 3000)
    assert (c.group_min_session_timeout_ms, c.group_max_session_timeout_ms) == (6000, 1800000)
    assert c.group_max_size is None
    assert c.offsets_retention_minutes == 10080 and c.offsets_retention_ms == 10080 * 60000
    assert c.offset_metadata_max_bytes == 4096
    assert c.new_member_join_timeout_ms == 300000
    assert c.offsets_retention_check_interval_ms == 600000


# --- consumer protocol subscription ------------------------------------------------------
@pytest.mark.parametrize("version", [0, 1, 2, 3])
def test_subscription_topics_any_version(version: int) -> None:
    # later versions append fields (owned partitions, generation, rack): only the prefix counts
    raw = encode_subscription(["a", "bé"], version=version, user_data=b"u") + b"\x00\x00\x00\x00"
    assert subscription_topics(raw) == ["a", "bé"]


@pytest.mark.parametrize("raw", [b"", b"\x00", b"\x00\x00\x00\x00\x00\x02\x00\x05ab", b"\xff\xff"])
def test_subscription_topics_malformed(raw: bytes) -> None:
    with pytest.raises(ConsumerProtocolError):
        subscription_topics(raw)
