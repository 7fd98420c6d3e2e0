"""A shared log of rebalance callbacks from every member of a group, replayed to prove that
no partition ever had two owners."""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Iterable
from typing import Any


@dataclasses.dataclass(frozen=True)
class Event:
    at: float  # time.monotonic(), taken under the log's lock: the list is in time order
    member: str
    kind: str  # "assigned" | "revoked"
    partitions: frozenset[int]


class CallbackLog:
    """Rebalance callbacks of every member of a group, in the order they happened."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._events: list[Event] = []

    def record(self, member: str, kind: str, partitions: Iterable[Any]) -> None:
        """``partitions``: any client's topic-partition objects (with ``.partition``)."""
        with self._lock:
            parts = frozenset(p.partition for p in partitions)
            self._events.append(Event(time.monotonic(), member, kind, parts))

    def events(self) -> list[Event]:
        with self._lock:
            return list(self._events)

    def owned(self) -> dict[str, frozenset[int]]:
        """Each member's partitions after replaying every event; raises on any overlap."""
        owner: dict[int, str] = {}
        last = 0.0
        for e in self.events():
            assert e.at >= last, f"log out of time order at {e}"
            last = e.at
            for p in sorted(e.partitions):
                if e.kind == "assigned":
                    assert p not in owner, (
                        f"partition {p} assigned to {e.member} while {owner[p]} owns it: {e}"
                    )
                    owner[p] = e.member
                else:
                    assert owner.get(p) == e.member, (
                        f"{e.member} revoked partition {p} it does not own (owner "
                        f"{owner.get(p)}): {e}"
                    )
                    del owner[p]
        out: dict[str, set[int]] = {}
        for p, m in owner.items():
            out.setdefault(m, set()).add(p)
        return {m: frozenset(ps) for m, ps in out.items()}
