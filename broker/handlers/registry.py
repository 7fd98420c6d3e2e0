"""The handler registry: which API versions the broker serves, and the function for each.

ApiVersions is answered from this table, so what is advertised is what is implemented.
A handler's module is imported when the first request of its API arrives (``entry_for``):
``HOMES`` names it, and ``SERVED`` (``kgroupd.protocol.schemas``) is every handler's range.
"""

from __future__ import annotations

import asyncio
import importlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import structlog

from kgroupd.protocol.schemas import DEFINITIONS, SERVED

if TYPE_CHECKING:
    from kgroupd.broker.security.acls import Access
    from kgroupd.broker.security.rules import Rule
    from kgroupd.broker.security.sasl import SaslSession
    from kgroupd.broker.state import Broker

Fields = dict[str, Any]


@dataclass(frozen=True, slots=True)
class Held:
    """An answer that is ready but may be sent only once ``until`` resolves (the fsync of
    what the request wrote, under ``--fsync always``). Unlike an awaitable, it does not
    stop the connection: the requests behind it are handled meanwhile and their answers
    queue behind this one, so one fsync covers every request of a pipeline. If ``until``
    fails, nothing was acknowledged: the connection is closed."""

    until: asyncio.Future[None]
    reply: Fields | bytes


class CloseConnection(Exception):
    """Raised by a handler, or by the awaitable it returned: no answer, and the connection
    closes once the answers before it are sent (the requests after it are dropped). Kafka's
    ``closeConnection`` for an acks=0 Produce that failed, so that the producer notices and
    refreshes its metadata. The handler logged why; ``error`` is counted in the metrics."""

    def __init__(self, reason: str, error: int) -> None:
        super().__init__(reason)
        self.error = error


class HeldAnswer:
    """A framed answer held until ``until`` (the fsync of what its request wrote): what the
    connection queues (``KafkaConnection._hold``); the lane's hot functions make it
    themselves under ``--fsync always``."""

    __slots__ = ("framed", "until")

    def __init__(self, until: asyncio.Future[None], framed: list[bytes | memoryview]) -> None:
        self.until = until
        self.framed = framed


# A handler answers with the response fields (one dict shape for every version: fields a
# version lacks are ignored), an encoded response body (hot paths), an awaitable of either
# when it must wait, a ``Held`` answer, or None for no answer.
Reply = Fields | bytes | Awaitable[Fields] | Held | None
HandlerFn = Callable[["RequestContext", Fields], Reply]
# A hand-written request decoder for a hot API: (frame, body offset, version) -> fields.
# Tests check it against the struct codec.
Decoder = Callable[[bytes, int, int], Fields]
# A hot API's whole request on the lane of a connection with no SASL, no injected error and
# no request quota (``kgroupd.broker.net.hot``): (broker, frame, body offset, version,
# correlation id, the connection's authorizer access or None) -> (the framed answer, or a
# ``HeldAnswer`` of it under ``--fsync always``, and its top-level error code for the
# metrics), or None to take the general path (a malformed or refused request, anything
# unusual). It changes nothing before it knows it answers; tests check its answers against
# the general path's.
HotFn = Callable[
    ["Broker", bytes, int, int, int, "Access | None"], "tuple[bytes | HeldAnswer, int] | None"
]


@dataclass(slots=True)
class RequestContext:
    broker: Broker
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    client_host: str
    log: structlog.stdlib.BoundLogger
    # (host, port) clients of this connection's listener are told to use
    advertised: tuple[str, int] = ("", -1)
    # the connection's SASL state on a SASL listener (SaslHandshake, SaslAuthenticate)
    sasl: SaslSession | None = None
    # --authorizer acl: the connection's principal and host with its cached decisions
    access: Access | None = None
    # a hand-encoded answer's top-level error code, for the metrics (dict answers carry
    # their own "error_code")
    error: int = 0
    # client quotas (kgroupd.broker.throttle): the connection's principal, the request's
    # size, and what mutes the connection for a throttle time (KIP-219)
    principal: str = "User:ANONYMOUS"
    size: int = 0
    throttle: Callable[[int], None] | None = None
    # what is called once the connection closes (a share session ends with its connection);
    # None outside a connection
    closers: list[Callable[[], None]] | None = None

    def denies(self, rule: Rule, name: str) -> bool:
        """Under ``--authorizer acl``: does ``rule`` refuse the resource ``name``?"""
        access = self.access
        return access is not None and not access.allowed(
            rule.resource_type, name or "", rule.operation
        )


@dataclass(frozen=True, slots=True)
class HandlerEntry:
    api_key: int
    min_version: int
    max_version: int
    fn: HandlerFn
    decoder: Decoder | None = None
    hot: HotFn | None = None
    flexible_from: int = 32767  # the first version with request header v2 (for ``hot``)


# The handlers of the modules imported so far (``load_all`` imports every one).
HANDLERS: dict[int, HandlerEntry] = {}

# api_key -> the module of this package that handles it.
HOMES: dict[int, str] = {
    0: "produce",
    1: "fetch",
    2: "offsets_list",
    3: "metadata",
    **dict.fromkeys((8, 9, 47), "group_offsets"),
    **dict.fromkeys((10, 11, 12, 13, 14), "groups"),
    **dict.fromkeys((15, 16, 42), "groups_admin"),
    **dict.fromkeys((17, 36, 50, 51), "security"),
    18: "api_versions",
    **dict.fromkeys((19, 20, 32, 37), "admin"),
    21: "delete_records",
    **dict.fromkeys((22, 24, 25, 26, 28, 61, 65, 66), "transactions"),
    **dict.fromkeys((29, 30, 31), "acls"),
    **dict.fromkeys((33, 44), "configs"),
    **dict.fromkeys((68, 69), "consumer_groups"),
    **dict.fromkeys((76, 78, 79), "share"),
    **dict.fromkeys((77, 90, 91, 92), "share_admin"),
    **dict.fromkeys((34, 35, 60, 75), "cluster"),
    **dict.fromkeys((48, 49), "quotas"),
    **dict.fromkeys((23, 43, 45, 46), "replication"),
    **dict.fromkeys((71, 72), "telemetry"),
    **dict.fromkeys((38, 39, 40, 41), "tokens"),
    **dict.fromkeys((55, 57, 64, 80, 81), "quorum"),
    74: "config_resources",
}


def handler(
    api_key: int,
    decoder: Decoder | None = None,
    hot: HotFn | None = None,
    flexible_from: int = 32767,
) -> Callable[[HandlerFn], HandlerFn]:
    """Register ``fn`` for ``api_key``, for the served table's range of versions
    (``kgroupd.protocol.schemas.SERVED``: what ApiVersions advertises); ``hot`` (with the
    first flexible version) answers its common requests on the lane (``HotFn``)."""

    def register(fn: HandlerFn) -> HandlerFn:
        if api_key in HANDLERS:
            raise RuntimeError(f"two handlers for api key {api_key}")
        served = SERVED.get(api_key)
        if served is None:
            raise RuntimeError(f"api key {api_key} is not in the served table")
        if api_key not in DEFINITIONS:
            raise RuntimeError(f"api key {api_key} has no message definition")
        # each version's codecs are built when first used (tests/broker/test_registry.py
        # builds every one)
        HANDLERS[api_key] = HandlerEntry(
            api_key, served[0], served[1], fn, decoder, hot, flexible_from
        )
        return fn

    return register


def entry_for(api_key: int) -> HandlerEntry | None:
    """The handler of ``api_key``, its module imported on first use; None: not served."""
    entry = HANDLERS.get(api_key)
    if entry is None:
        home = HOMES.get(api_key)
        if home is None:
            return None
        importlib.import_module(f"{__package__}.{home}")
        entry = HANDLERS.get(api_key)
    return entry


def load_all() -> dict[int, HandlerEntry]:
    """Every handler registered (tests, tools listing them): ``HANDLERS`` complete."""
    for home in sorted(set(HOMES.values())):
        importlib.import_module(f"{__package__}.{home}")
    return HANDLERS


def supported_versions() -> list[tuple[int, int, int]]:
    """(api_key, min, max) of every API a handler serves, as ApiVersions lists them."""
    return sorted((api_key, *SERVED[api_key]) for api_key in HOMES)
