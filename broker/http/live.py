"""Live group events: the coordinator's ``GroupEvents`` turned into what ``/api/events``
sends (server-sent events ``group``, ``rebalance`` and ``commits``) and into the one log line
a rebalance ends with (``rebalance_completed``).

Bounded: each subscriber has a queue of at most ``QUEUE_LIMIT`` events; one that falls that
far behind (a slow reader: its socket's send buffer full) is disconnected, not buffered
without end (an ``EventSource`` reconnects by itself and reads the state afresh). At most
``MAX_SUBSCRIBERS`` are served at once; the history replayed to a new subscriber keeps the
last ``HISTORY`` rebalances.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import time
from collections import deque
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, Any

import structlog

from kgroupd.broker.coordinator.events import GroupEvents, rebalance_reason
from kgroupd.broker.http.views import Owner, TopicPartition, assignment, find_group

if TYPE_CHECKING:
    from kgroupd.broker.state import Broker

log = structlog.get_logger("kgroupd.groups")

QUEUE_LIMIT = 1000
MAX_SUBSCRIBERS = 64
HISTORY = 50
MOVED_LIMIT = 1000  # partitions listed in one rebalance event (all are counted)
# an event's data, or what builds it (when a subscriber reads it)
Data = dict[str, Any] | Callable[[], dict[str, Any]]
_TOKEN = re.compile(r"[^\s'\"\[\](),]+")


class Subscriber:
    """One ``/api/events`` reader: its queue of encoded events."""

    def __init__(self) -> None:
        self.queue: deque[bytes] = deque()
        self.wake = asyncio.Event()
        self.dropped = False  # fell QUEUE_LIMIT behind: disconnected
        self.closed = False  # the broker stops
        # drops the connection: a writer blocked on a full socket is woken with an error
        self.abort: Callable[[], None] | None = None

    def put(self, data: bytes) -> None:
        if self.dropped:
            return
        if len(self.queue) >= QUEUE_LIMIT:
            self.dropped = True
            self.queue.clear()
            if self.abort is not None:
                self.abort()
        else:
            self.queue.append(data)
        self.wake.set()


class _Open:
    """A classic group's rebalance in progress."""

    __slots__ = ("member", "monotonic", "reason", "started")

    def __init__(self, reason: str, member: Owner | None) -> None:
        self.reason = reason
        self.member = member
        self.monotonic = time.monotonic()
        self.started = time.time()


class LiveEvents(GroupEvents):
    """Hears the coordinator; tells subscribers and the log."""

    def __init__(self, broker: Callable[[], Broker | None]) -> None:
        self._broker = broker
        self.subscribers: set[Subscriber] = set()
        # the last rebalances: their events encoded, or (id, event, data) until one is read
        self.history: deque[bytes | tuple[int, str, Data]] = deque(maxlen=HISTORY)
        self._open: dict[str, _Open] = {}
        # group -> partition -> owner at its last completed rebalance
        self._assigned: dict[str, dict[TopicPartition, Owner]] = {}
        self._commits: dict[str, int] = {}
        self._ticker: asyncio.Task[None] | None = None
        self._next_id = 0

    # --- subscribers -----------------------------------------------------------------------
    def subscribe(self) -> Subscriber | None:
        """A new subscriber (the recent rebalances already queued); None when full."""
        if len(self.subscribers) >= MAX_SUBSCRIBERS:
            return None
        sub = Subscriber()
        history = self.history
        for i, kept in enumerate(history):
            if type(kept) is not bytes:  # kept with no subscriber: encoded now, once
                kept = history[i] = _encoded(*kept)
            sub.put(kept)
        self.subscribers.add(sub)
        if self._ticker is None:
            self._ticker = asyncio.get_running_loop().create_task(self._tick())
        return sub

    def unsubscribe(self, sub: Subscriber) -> None:
        self.subscribers.discard(sub)

    async def stop(self) -> None:
        """Every subscriber's stream ends (the broker stops)."""
        for sub in self.subscribers:
            sub.closed = True
            sub.wake.set()
            if sub.abort is not None:  # a writer stuck on a reader that does not read
                sub.abort()
        ticker, self._ticker = self._ticker, None
        if ticker is not None:
            ticker.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await ticker

    def _send(self, event: str, data: Data, keep: bool = False) -> None:
        self._next_id += 1
        if not self.subscribers:  # kept as it is, encoded if a subscriber comes (its data
            if keep:  # is built for the event and not changed after)
                self.history.append((self._next_id, event, data))
            return
        encoded = _encoded(self._next_id, event, data)
        if keep:
            self.history.append(encoded)
        for sub in self.subscribers:
            sub.put(encoded)

    async def _tick(self) -> None:
        """Once a second: the commits of the second just past, per group."""
        try:
            while self.subscribers:
                await asyncio.sleep(1.0)
                commits, self._commits = self._commits, {}
                if commits:
                    self._send("commits", {"ts": time.time(), "interval_s": 1.0, "groups": commits})
        finally:
            self._commits = {}
            if self._ticker is asyncio.current_task():
                self._ticker = None

    # --- GroupEvents -----------------------------------------------------------------------
    def offsets_committed(self, group_id: str, count: int) -> None:
        if self.subscribers:
            commits = self._commits
            commits[group_id] = commits.get(group_id, 0) + count

    def group_state_changed(self, group_id: str, state: str, generation: int) -> None:
        if state in ("Empty", "Dead"):
            self._close(group_id, state)
        if self.subscribers:
            self._send(
                "group",
                {"ts": time.time(), "group": group_id, "state": state, "generation": generation},
            )

    def rebalance_started(self, group_id: str, reason: str, consumer: bool = False) -> None:
        broker = self._broker()
        group = find_group(broker, group_id) if broker is not None else None
        before = None if consumer else self._assigned.get(group_id)
        if before is None:  # a classic group's owners are kept from its last rebalance
            before = assignment(broker, group) if broker is not None and group is not None else {}
            if not consumer:
                self._assigned[group_id] = before
        started = self._open.get(group_id)
        if not consumer and not self.subscribers:  # a classic start is not kept: no event
            self._next_id += 1  # (its id taken, as if sent)
            if started is None:
                self._open[group_id] = _Open(reason, _trigger(reason, group, before))
            return
        member = _trigger(reason, group, before)
        if not consumer and started is None:
            self._open[group_id] = _Open(reason, member)
        generation = getattr(group, "generation_id", getattr(group, "group_epoch", 0))
        self._send(
            "rebalance",
            {
                "ts": time.time(),
                "phase": "start",
                "group": group_id,
                "type": "consumer" if consumer else "classic",
                "generation": generation,
                "reason": reason,
                "category": rebalance_reason(reason),
                "member": member.json() if member else None,
            },
            keep=consumer,  # a consumer group's epoch bump has no end: kept as it is
        )

    def rebalance_completed(self, group_id: str) -> None:
        self._close(group_id, "Stable")

    def _close(self, group_id: str, state: str) -> None:
        started = self._open.pop(group_id, None)
        if started is None:
            if state == "Dead":
                self._assigned.pop(group_id, None)
            return
        broker = self._broker()
        group = find_group(broker, group_id) if broker is not None else None
        now = assignment(broker, group) if broker is not None and group is not None else {}
        before = self._assigned.pop(group_id, {})
        if state != "Dead":
            self._assigned[group_id] = now
        moved = []
        for tp in sorted(set(before) | set(now)):
            old, new = before.get(tp), now.get(tp)
            if (old.key if old else None) != (new.key if new else None):
                moved.append((tp, old, new))
        duration = time.monotonic() - started.monotonic
        generation = getattr(group, "generation_id", 0)
        members = len(group.members) if group is not None else 0
        log.info(
            "rebalance_completed",
            group_id=group_id,
            generation=generation,
            state=state,
            reason=started.reason,
            duration_ms=round(duration * 1000, 1),
            members=members,
            partitions_moved=len(moved),
        )
        # built when read: kept as it is while nobody subscribes
        end = partial(
            _end_event, time.time(), group_id, state, generation, started, duration, members, moved
        )
        self._send("rebalance", end, keep=True)


def _end_event(
    ts: float,
    group_id: str,
    state: str,
    generation: int,
    started: _Open,
    duration: float,
    members: int,
    moved: list[tuple[TopicPartition, Owner | None, Owner | None]],
) -> dict[str, Any]:
    """A classic rebalance's end event."""
    return {
        "ts": ts,
        "phase": "end",
        "group": group_id,
        "type": "classic",
        "generation": generation,
        "state": state,
        "reason": started.reason,
        "category": rebalance_reason(started.reason),
        "member": started.member.json() if started.member else None,
        "started": started.started,
        "duration_ms": round(duration * 1000, 1),
        "members": members,
        "partitions_moved": len(moved),
        "moved": [
            {
                "topic": t,
                "partition": p,
                "from": old.json() if old else None,
                "to": new.json() if new else None,
            }
            for (t, p), old, new in moved[:MOVED_LIMIT]
        ],
    }


def _encoded(event_id: int, event: str, data: Data) -> bytes:
    body = json.dumps(data if isinstance(data, dict) else data(), separators=(",", ":"))
    return f"id: {event_id}\nevent: {event}\ndata: {body}\n\n".encode()


def _trigger(reason: str, group: object, before: dict[TopicPartition, Owner]) -> Owner | None:
    """The member a coordinator's reason names (``adding new member X``, ``session of X
    expired``, ``explicit LeaveGroup for ['X']``), if any."""
    known: dict[str, Owner] = {o.member_id: o for o in before.values()}
    for m in getattr(group, "members", {}).values():
        instance = getattr(m, "group_instance_id", None) or getattr(m, "instance_id", None)
        known[m.member_id] = Owner(m.member_id, m.client_id, instance)
    for token in _TOKEN.findall(reason):
        if token in known:
            return known[token]
    for token in _TOKEN.findall(reason):
        if "-" in token and len(token) > 20:  # a member id that already left
            return Owner(token, "", None)
    return None
