"""The handler registry: which API versions the broker serves, and the function for each.

ApiVersions is answered from this table, so what is advertised is what is implemented.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import structlog

from kgroupd.protocol.messages import lookup, served_range

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


# A handler answers with the response fields (one dict shape for every version: fields a
# version lacks are ignored), an encoded response body (hot paths), an awaitable of either
# when it must wait, a ``Held`` answer, or None for no answer.
Reply = Fields | bytes | Awaitable[Fields] | Held | None
HandlerFn = Callable[["RequestContext", Fields], Reply]
# A hand-written request decoder for a hot API: (frame, body offset, version) -> fields.
# Tests check it against the struct codec.
Decoder = Callable[[bytes, int, int], Fields]


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


HANDLERS: dict[int, HandlerEntry] = {}


def handler(
    api_key: int,
    min_version: int | None = None,
    max_version: int | None = None,
    decoder: Decoder | None = None,
) -> Callable[[HandlerFn], HandlerFn]:
    """Register ``fn`` for ``api_key``. Its versions are the served table's range
    (``kgroupd.protocol.schemas.SERVED``) for which a definition exists; ``min_version`` and
    ``max_version`` narrow it further."""

    def register(fn: HandlerFn) -> HandlerFn:
        if api_key in HANDLERS:
            raise RuntimeError(f"two handlers for api key {api_key}")
        served = served_range(api_key)
        if served is None:
            raise RuntimeError(f"api key {api_key} is not in the served table")
        lo = served[0] if min_version is None else max(min_version, served[0])
        hi = served[1] if max_version is None else min(max_version, served[1])
        for v in range(lo, hi + 1):
            if lookup(api_key, v) is None:
                raise RuntimeError(f"api key {api_key} v{v} has no message definition")
        HANDLERS[api_key] = HandlerEntry(api_key, lo, hi, fn, decoder)
        return fn

    return register


def supported_versions() -> list[tuple[int, int, int]]:
    return sorted((e.api_key, e.min_version, e.max_version) for e in HANDLERS.values())
