"""The classic group state machine: states, allowed moves, and the one transition check."""

from __future__ import annotations

from enum import Enum

__all__ = ["ALLOWED_PREVIOUS", "GroupState", "IllegalStateTransition", "check_transition"]


class IllegalStateTransition(RuntimeError):
    """A move the table forbids: always a coordinator bug."""


class GroupState(Enum):
    """A classic group's state; each member's ``__doc__`` says what it accepts and where it
    goes next."""

    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


_DOCS = {
    GroupState.EMPTY: """No members (KIP-394 pending ids may exist). Accepts JoinGroup (starts
    the initial, delayed rebalance -> PreparingRebalance) and offset commits with generation
    -1; the only state where DeleteGroups works and offsets expire by group age.
    -> PreparingRebalance, Dead.""",
    GroupState.PREPARING_REBALANCE: """Join phase: members (re)join and their JoinGroup is
    parked; Heartbeat and SyncGroup answer REBALANCE_IN_PROGRESS; commits of the current
    generation are accepted. Completes when every member has rejoined or on the rebalance
    timer -> CompletingRebalance (members left) or Empty (none left); -> Dead.""",
    GroupState.COMPLETING_REBALANCE: """Sync phase: JoinGroup answered; followers' SyncGroup
    is parked until the leader's assignment arrives -> Stable. Any membership or protocol
    change, or a missing SyncGroup -> PreparingRebalance; -> Dead.""",
    GroupState.STABLE: """Assignment delivered: heartbeats and commits flow, SyncGroup serves
    the stored assignment. A leader rejoin, a changed follower, a removal or a missing
    SyncGroup -> PreparingRebalance; -> Dead.""",
    GroupState.DEAD: """Deleted or unloaded: the group is gone from its shard and every parked
    request has been answered. Terminal.""",
}
for _state, _doc in _DOCS.items():
    _state.__doc__ = _doc


ALLOWED_PREVIOUS: dict[GroupState, frozenset[GroupState]] = {
    GroupState.EMPTY: frozenset({GroupState.PREPARING_REBALANCE}),
    GroupState.PREPARING_REBALANCE: frozenset(
        {GroupState.STABLE, GroupState.COMPLETING_REBALANCE, GroupState.EMPTY}
    ),
    GroupState.COMPLETING_REBALANCE: frozenset({GroupState.PREPARING_REBALANCE}),
    GroupState.STABLE: frozenset({GroupState.COMPLETING_REBALANCE}),
    GroupState.DEAD: frozenset(GroupState),
}


def check_transition(current: GroupState, target: GroupState) -> None:
    if current not in ALLOWED_PREVIOUS[target]:
        raise IllegalStateTransition(f"illegal group state move {current.value} -> {target.value}")
