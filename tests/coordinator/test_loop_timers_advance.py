"""``LoopTimers.advance`` (the test controls' clock): due ops run at once, in time order, each
seeing the clock at its own due time; ops they schedule within the move run too; what is not
due stays armed on the moved clock. Nothing here sleeps or waits for a deadline."""

from __future__ import annotations

import asyncio

from kgroupd.broker.coordinator import LoopTimers


async def test_advance_fires_due_ops_in_time_order() -> None:
    timers = LoopTimers(asyncio.get_running_loop())
    start = timers.now_ms()
    fired: list[tuple[str, int]] = []

    def op(name: str) -> None:
        fired.append((name, timers.now_ms() - start))

    timers.schedule("late", 45_000, lambda: op("late"))
    timers.schedule("early", 10_000, lambda: op("early"))
    timers.schedule("never", 60_000, lambda: op("never"))
    timers.schedule("gone", 5_000, lambda: op("gone"))
    timers.cancel("gone")
    timers.schedule("moved", 1_000, lambda: op("moved-old"))
    timers.schedule("moved", 30_000, lambda: op("moved"))  # pushed back: runs at 30 s

    def chained() -> None:
        op("chain-1")
        timers.schedule("chain-2", 5_000, lambda: op("chain-2"))  # due at 25 s: in the move

    timers.schedule("chain-1", 20_000, chained)
    assert timers.advance(46_000) == 5
    names = [name for name, _ in fired]
    assert names == ["early", "chain-1", "chain-2", "moved", "late"]
    at = dict(fired)
    # each op saw the clock at (or, real time running on, just past) its own due time
    assert 10_000 <= at["early"] < 20_000
    assert 25_000 <= at["chain-2"] < 30_000
    assert 45_000 <= at["late"] < 46_000
    assert timers.offset_ms >= 46_000
    assert timers.now_ms() - start >= 46_000
    assert timers.is_scheduled("never") and not timers.is_scheduled("late")
    timers.cancel_all()


async def test_what_is_not_due_fires_on_the_moved_clock() -> None:
    loop = asyncio.get_running_loop()
    timers = LoopTimers(loop)
    done: asyncio.Future[None] = loop.create_future()
    timers.schedule("session", 45_000, lambda: done.set_result(None))
    assert timers.advance(44_990) == 0
    assert not done.done()
    # 10 ms of the 45 s are left: the armed loop timer was moved with the clock
    await asyncio.wait_for(done, 5)
    # a heartbeat after the move pushes the deadline from the moved clock, not real time
    timers.schedule("hb", 45_000, lambda: None)
    assert timers.advance(44_000) == 0 and timers.is_scheduled("hb")
    assert timers.advance(2_000) == 1
