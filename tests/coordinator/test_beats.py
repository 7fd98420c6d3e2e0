"""The steady heartbeats of the hot path (``kgroupd.broker.coordinator.beats``) answer as the
shard's own operations do, push the session back as they do, and leave every other case to
them; on a manual clock, never sleeping."""

from __future__ import annotations

import dataclasses

from coord_helpers import SESSION, Harness
from test_consumer_group import CONFIG
from test_consumer_group import Harness as ConsumerHarness

from kgroupd.broker.coordinator import ConsumerGroupHeartbeat
from kgroupd.broker.coordinator.beats import classic_beat, consumer_beat
from kgroupd.broker.coordinator.commands import HeartbeatResult
from kgroupd.protocol.errors import ErrorCode as E


class Beats(Harness):
    """Heartbeats through ``classic_beat``."""

    def hb(
        self, member_id: str, generation: int, group: str = "g", instance: str | None = None
    ) -> HeartbeatResult:
        return HeartbeatResult(E(classic_beat(self.shard, group, generation, member_id, instance)))


def test_classic_beat_errors_in_order() -> None:
    h = Beats()
    assert h.hb("m", 0, group="").error == E.INVALID_GROUP_ID
    assert h.hb("m", 0).error == E.UNKNOWN_MEMBER_ID  # unknown group
    ids = h.stable(2, instances=["i0", None])
    gen = h.group().generation_id
    assert h.hb("nobody", gen).error == E.UNKNOWN_MEMBER_ID
    assert h.hb("nobody", gen + 5).error == E.UNKNOWN_MEMBER_ID
    assert h.hb("x", gen, instance="i0").error == E.FENCED_INSTANCE_ID
    assert h.hb(ids[0], gen, instance="i0").error == E.NONE
    assert h.hb(ids[1], gen + 1).error == E.ILLEGAL_GENERATION
    assert h.hb(ids[1], gen).error == E.NONE
    h.join(member_id=ids[0])  # PreparingRebalance
    assert h.hb(ids[1], gen - 1).error == E.ILLEGAL_GENERATION
    assert h.hb(ids[1], gen).error == E.REBALANCE_IN_PROGRESS
    h.shard.loading = True
    assert h.hb(ids[1], gen).error == E.NONE  # as Kafka while it loads
    h.shard.loading = False
    h.shard.owned = False
    assert h.hb(ids[1], gen).error == E.NOT_COORDINATOR


def test_classic_beat_pushes_the_session_back_every_time() -> None:
    h = Beats()
    ids = h.form(2, session=SESSION, rebalance=10 * SESSION)
    gen = h.group().generation_id
    h.advance(SESSION - 10)
    assert h.hb(ids[1], gen).error == E.NONE  # CompletingRebalance
    assert h.timers.due_at(f"heartbeat/g/{ids[1]}") == h.timers.now_ms() + SESSION
    h.sync(ids[1], gen)
    h.sync(ids[0], gen)
    for _ in range(5):  # Stable: each beat pushes the deadline back again
        h.advance(SESSION - 10)
        assert h.hb(ids[1], gen).error == E.NONE
        assert h.hb(ids[0], gen).error == E.NONE
        assert h.timers.due_at(f"heartbeat/g/{ids[1]}") == h.timers.now_ms() + SESSION
    h.advance(SESSION - 1)
    assert h.hb(ids[0], gen).error == E.NONE
    h.advance(1)  # ids[1] fell silent a session ago: it expires, a rebalance starts
    assert ids[1] not in h.group().members
    assert h.hb(ids[1], gen).error == E.UNKNOWN_MEMBER_ID
    assert h.hb(ids[0], gen).error == E.REBALANCE_IN_PROGRESS


def _steady(h: ConsumerHarness) -> int:
    """A lone member "a" reconciled at epoch 1: its epoch."""
    first = h.hb("a", 0)
    assert first.error is E.NONE
    got = h.hb("a", first.member_epoch, owned_partitions=h.owned(first))
    assert got.error is E.NONE
    return got.member_epoch


def test_consumer_beat_answers_only_the_steady_heartbeat() -> None:
    h = ConsumerHarness()
    epoch = _steady(h)
    shard = h.shard
    assert consumer_beat(shard, "g", "a", epoch)
    assert not consumer_beat(shard, "g", "a", epoch + 1)  # fenced: the full operation says
    assert not consumer_beat(shard, "g", "ghost", epoch)
    assert not consumer_beat(shard, "other", "a", epoch)
    h.hb("b", 0)  # a new epoch: "a" must hear of it through the full heartbeat
    assert not consumer_beat(shard, "g", "a", epoch)
    shard.loading = True
    assert not consumer_beat(shard, "g", "b", shard.consumer_groups["g"].members["b"].member_epoch)


def test_consumer_beat_pushes_the_session_back_and_a_silent_member_is_fenced() -> None:
    h = ConsumerHarness()
    epoch = _steady(h)
    session = h.shard.config.consumer_session_timeout_ms
    for _ in range(5):
        h.timers.advance(session - 1)
        assert consumer_beat(h.shard, "g", "a", epoch)
        assert h.timers.due_at("consumer-session/g/a") == h.timers.now_ms() + session
    h.timers.advance(session)  # silent for a session: fenced, as the full heartbeat's timer
    assert "a" not in h.shard.consumer_groups["g"].members
    r = h.shard.consumer_group_heartbeat(
        ConsumerGroupHeartbeat("g", "a", epoch, client_generates_member_id=True)
    )
    assert r.error is E.UNKNOWN_MEMBER_ID


def test_consumer_beat_keeps_its_timer_op_only_for_the_current_member() -> None:
    """The member comes back under the same id (fenced, then joins again): the kept session
    op of the old member object is not reused, and the new session still fences it."""
    h = ConsumerHarness(dataclasses.replace(CONFIG, consumer_session_timeout_ms=SESSION))
    epoch = _steady(h)
    assert consumer_beat(h.shard, "g", "a", epoch)
    h.timers.advance(SESSION)  # fenced
    assert "a" not in h.shard.consumer_groups["g"].members
    epoch = _steady(h)
    group = h.shard.consumer_groups["g"]
    assert consumer_beat(h.shard, "g", "a", epoch)
    assert group.beats["a"][0] is group.members["a"]
    h.timers.advance(SESSION)
    assert "a" not in group.members
