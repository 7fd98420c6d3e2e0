"""Plain notifications the coordinator gives as it works (the broker's metrics count them;
the HTTP listener's live events, ``/api/events``, pass them on).

The coordinator stays wire-free: it calls these methods with group ids, short reason
categories and counts, and knows nothing of who listens. The default does nothing.
"""

from __future__ import annotations

__all__ = ["NO_EVENTS", "REBALANCE_REASONS", "GroupEvents", "TeeEvents", "rebalance_reason"]

# What starts a classic group's rebalance, as a bounded label (the coordinator's reasons
# name members; these do not).
REBALANCE_REASONS = (
    "member_joined",
    "member_rejoined",
    "metadata_changed",
    "member_left",
    "session_expired",
    "sync_timeout",
    "migration",
    "other",
)


def rebalance_reason(text: str) -> str:
    """The category of one of the coordinator's rebalance reasons (classic groups' and the
    consumer groups' epoch bumps)."""
    if text.startswith("adding new member") or "joined or changed" in text:
        return "member_joined"
    if text.startswith("explicit LeaveGroup") or "left the group" in text:
        return "member_left"
    if text.startswith("session of") or "(session timeout)" in text:
        return "session_expired"
    if "sent no SyncGroup" in text:
        return "sync_timeout"
    if text.startswith("Downgrade"):
        return "migration"
    if "change" in text:
        return "metadata_changed"
    if "rejoin" in text:
        return "member_rejoined"
    return "other"


class GroupEvents:
    """Override what you listen to; each call is made on the coordinator's (event) thread."""

    def rebalance_started(self, group_id: str, reason: str, consumer: bool = False) -> None:
        """A classic group entered PreparingRebalance, or a consumer group's epoch was
        bumped (``consumer``); ``reason`` is the coordinator's text."""

    def rebalance_completed(self, group_id: str) -> None:
        """A classic group became Stable with its leader's assignment (a consumer group has
        no such moment: each member reconciles on its own)."""

    def group_state_changed(self, group_id: str, state: str, generation: int) -> None:
        """A classic group's state changed to ``state`` (Kafka's name, ``Stable``)."""

    def offsets_committed(self, group_id: str, count: int) -> None:
        """An OffsetCommit stored ``count`` partitions' offsets of ``group_id`` (called once
        per request: keep it cheap)."""


class TeeEvents(GroupEvents):
    """Every notification to each of ``listeners``, in order."""

    def __init__(self, *listeners: GroupEvents) -> None:
        self.listeners = listeners
        # A commit's notice (hot) goes straight to the one listener that hears it, if one.
        hearing = [
            listener
            for listener in listeners
            if type(listener).offsets_committed is not GroupEvents.offsets_committed
        ]
        if len(hearing) == 1:
            self.offsets_committed = hearing[0].offsets_committed  # type: ignore[method-assign]
        elif not hearing:
            self.offsets_committed = NO_EVENTS.offsets_committed  # type: ignore[method-assign]

    def rebalance_started(self, group_id: str, reason: str, consumer: bool = False) -> None:
        for listener in self.listeners:
            listener.rebalance_started(group_id, reason, consumer)

    def rebalance_completed(self, group_id: str) -> None:
        for listener in self.listeners:
            listener.rebalance_completed(group_id)

    def group_state_changed(self, group_id: str, state: str, generation: int) -> None:
        for listener in self.listeners:
            listener.group_state_changed(group_id, state, generation)

    def offsets_committed(self, group_id: str, count: int) -> None:
        for listener in self.listeners:
            listener.offsets_committed(group_id, count)


NO_EVENTS = GroupEvents()
