"""Partition assignors as pure functions: range, roundrobin, sticky, cooperative-sticky, failover.

The KIP-848 server-side assignors ``uniform`` and ``range`` live in ``kgroupd.assignors.server``
(``SERVER_ASSIGNORS``, re-exported here).

``GroupSpec`` in, ``GroupAssignment`` out; no I/O and no broker imports, so the
same code serves Python consumers (through the aiokafka adapters in
``kgroupd.assignors.adapters``) and the broker's server-side assignment.
The adapter classes are also importable from here (loaded lazily, on first use).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from kgroupd.assignors.codec import (
    Assignment,
    CodecError,
    Subscription,
    decode_assignment,
    decode_priority,
    decode_subscription,
    encode_assignment,
    encode_priority,
    encode_subscription,
)
from kgroupd.assignors.server import (
    DEFAULT_SERVER_ASSIGNOR,
    SERVER_ASSIGNORS,
    RangeServerAssignor,
    ServerAssignment,
    ServerAssignor,
    ServerMember,
    TopicKey,
    UniformServerAssignor,
    range_server_assign,
    uniform_assign,
)
from kgroupd.assignors.simple import failover_assign, range_assign, roundrobin_assign
from kgroupd.assignors.spec import (
    DEFAULT_GENERATION,
    GroupAssignment,
    GroupSpec,
    MemberSpec,
    TopicPartition,
)
from kgroupd.assignors.sticky import cooperative_sticky_assign, minimum_moves, sticky_assign

if TYPE_CHECKING:
    from kgroupd.assignors.adapters import (
        FailoverAssignor,
        RangeAssignor,
        RoundRobinAssignor,
        StickyAssignor,
    )

__all__ = [
    "ASSIGNORS",
    "DEFAULT_GENERATION",
    "DEFAULT_SERVER_ASSIGNOR",
    "SERVER_ASSIGNORS",
    "Assignment",
    "CodecError",
    "FailoverAssignor",
    "GroupAssignment",
    "GroupSpec",
    "MemberSpec",
    "RangeAssignor",
    "RangeServerAssignor",
    "RoundRobinAssignor",
    "ServerAssignment",
    "ServerAssignor",
    "ServerMember",
    "StickyAssignor",
    "Subscription",
    "TopicKey",
    "TopicPartition",
    "UniformServerAssignor",
    "cooperative_sticky_assign",
    "decode_assignment",
    "decode_priority",
    "decode_subscription",
    "encode_assignment",
    "encode_priority",
    "encode_subscription",
    "failover_assign",
    "minimum_moves",
    "range_assign",
    "range_server_assign",
    "roundrobin_assign",
    "sticky_assign",
    "uniform_assign",
]

#: Protocol name -> assignment function (cooperative-sticky with deferral off).
ASSIGNORS: dict[str, Callable[[GroupSpec], GroupAssignment]] = {
    "range": range_assign,
    "roundrobin": roundrobin_assign,
    "sticky": sticky_assign,
    "cooperative-sticky": cooperative_sticky_assign,
    "failover": failover_assign,
}

_ADAPTERS = frozenset({"FailoverAssignor", "RangeAssignor", "RoundRobinAssignor", "StickyAssignor"})


def __getattr__(name: str) -> Any:
    if name in _ADAPTERS:
        from kgroupd.assignors import adapters

        return getattr(adapters, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
