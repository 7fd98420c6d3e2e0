"""The share session cache (Kafka's ShareSessionCache) on a manual clock: epochs, a session
owned by the connection that opened it (its end releases the member's records at once, its
locks never fire), the bound on sessions, a member the coordinator removes."""

from __future__ import annotations

import uuid
from collections.abc import Callable

from kgroupd.broker.config.settings import BrokerConfig
from kgroupd.broker.coordinator.consumer.commands import InMemoryTopics
from kgroupd.broker.coordinator.timers import ManualTimers
from kgroupd.broker.share.group_config import GroupConfigs
from kgroupd.broker.share.partition import Acquired, SharePartition
from kgroupd.broker.share.service import ShareService, ShareSession
from kgroupd.protocol.errors import ErrorCode

G, T = "g", uuid.UUID(int=1)


def make(max_sessions: int = 2000) -> tuple[ShareService, ManualTimers, SharePartition]:
    timers = ManualTimers()
    service = ShareService(
        timers, InMemoryTopics(), GroupConfigs(BrokerConfig()), 10, lambda _g: False, max_sessions
    )
    return service, timers, service.make_partition(G, T, 0, 0)


def opened(service: ShareService, member: str, conn: list[Callable[[], None]]) -> ShareSession:
    got = service.session(G, member, 0, conn)
    assert isinstance(got, ShareSession)
    return got


def close(conn: list[Callable[[], None]]) -> None:
    for fn in conn:
        fn()


def test_epochs() -> None:
    service, _t, _sp = make()
    assert service.session(G, "a", 1) == ErrorCode.SHARE_SESSION_NOT_FOUND
    s = opened(service, "a", [])
    assert service.session(G, "a", 2) == ErrorCode.INVALID_SHARE_SESSION_EPOCH
    assert service.session(G, "a", 1) is s
    service.advance(s, 1)
    assert service.session(G, "a", 2) is s
    service.advance(s, -1)  # closed
    assert service.session(G, "a", 3) == ErrorCode.SHARE_SESSION_NOT_FOUND


def test_a_closed_connection_ends_its_sessions_and_releases_at_once() -> None:
    service, timers, sp = make()
    conn_a: list[Callable[[], None]] = []
    conn_b: list[Callable[[], None]] = []
    opened(service, "a", conn_a)
    opened(service, "b", conn_b)
    assert sp.acquire("a", [(0, 9)], 5) == [Acquired(0, 4, 1)]
    assert sp.acquire("b", [(0, 9)], 5) == [Acquired(5, 9, 1)]
    close(conn_a)
    assert (G, "a") not in service.sessions and (G, "b") in service.sessions
    # a's records are available now, before any lock expires; b's stay b's
    assert sp.acquire("c", [(0, 9)], 10) == [Acquired(0, 4, 2)]
    timers.advance(30_000)  # every lock of the first acquisitions has gone by now
    assert sp.acquired_count() == 0


def test_a_session_reopened_on_another_connection_is_not_ended_by_the_first() -> None:
    service, _t, _sp = make()
    first: list[Callable[[], None]] = []
    second: list[Callable[[], None]] = []
    opened(service, "a", first)
    s = opened(service, "a", second)
    close(first)
    assert service.sessions[(G, "a")] is s
    close(second)
    assert (G, "a") not in service.sessions


def test_the_cache_is_bounded() -> None:
    service, _t, _sp = make(max_sessions=2)
    conn: list[Callable[[], None]] = []
    opened(service, "a", conn)
    opened(service, "b", [])
    assert service.session(G, "c", 0, []) == ErrorCode.SHARE_SESSION_LIMIT_REACHED
    opened(service, "a", [])  # replacing a's own session takes no more room
    assert service.session(G, "c", 0, []) == ErrorCode.SHARE_SESSION_LIMIT_REACHED
    service.advance(service.sessions[(G, "b")], -1)
    opened(service, "c", [])


def test_a_member_removed_by_the_coordinator_loses_its_session_and_records() -> None:
    service, _t, sp = make()
    opened(service, "a", [])
    sp.acquire("a", [(0, 3)], 10)
    service.member_gone(G, "a")
    assert (G, "a") not in service.sessions
    assert sp.acquire("b", [(0, 3)], 10) == [Acquired(0, 3, 2)]
