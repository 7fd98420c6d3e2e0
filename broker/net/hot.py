"""The request path's pieces outside ``KafkaConnection``: the lane of the hot requests, and
how answers are counted and framed.

The lane (issue 26): a connection with no injected error and no request quota (over SASL
once its session is authenticated and unexpired, which the connection checks first) answers
Heartbeat, OffsetCommit and ConsumerGroupHeartbeat through their ``HandlerEntry.hot``
functions, which read the frame and write the framed answer themselves: no header object, no
request dict, no ``RequestContext``. Anything unusual (a null client id, header tags, a
malformed body, a refusal of ``--authorizer acl``, whose cached decisions the hot functions
ask) returns None and takes the general path, which answers it as before. What the lane skips
is exactly what such a connection does not use. Under ``--fsync always`` an OffsetCommit that
wrote a record is answered with a ``HeldAnswer``: the framed answer, sent once the fsync of
what it wrote is done (the connection goes on meanwhile, so one fsync covers a pipeline).
"""

from __future__ import annotations

import time
from bisect import bisect_left
from collections.abc import Awaitable
from typing import TYPE_CHECKING, Any, Protocol

from kgroupd.broker.handlers.registry import CloseConnection, HandlerEntry, Held, HeldAnswer
from kgroupd.broker.quotas import REQUEST as REQUEST_QUOTA
from kgroupd.broker.security.rules import ACCESS
from kgroupd.broker.stats import FIRST_BOUND, REQUEST_BUCKETS, BrokerStats
from kgroupd.protocol.errors import ErrorCode
from kgroupd.protocol.fast import Chunks
from kgroupd.protocol.framing import encode_response, response_header
from kgroupd.protocol.messages import MessageSpec, lookup

if TYPE_CHECKING:
    from kgroupd.broker.security.acls import Access
    from kgroupd.broker.state import Broker

clock = time.perf_counter  # request durations (the metrics)
UNKNOWN = int(ErrorCode.UNKNOWN_SERVER_ERROR)


class Lane(Protocol):
    """What the lane reads and keeps of a connection (``KafkaConnection``)."""

    broker: Broker
    client_id: str | None
    log: Any
    # the last client id's bytes on the lane and the ``client_id`` they gave
    hot_client: tuple[bytes, str | None]
    access: Access | None  # --authorizer acl


def hot_answer(
    conn: Lane, entry: HandlerEntry, frame: bytes | bytearray, version: int, corr: int
) -> bytes | HeldAnswer | None:
    """The framed answer of a hot request on the lane (held for its fsync under ``--fsync
    always``), or None: take the general path."""
    broker = conn.broker
    # (``broker.quotas.keys``: ``broker.throttle.enabled`` without a call)
    if broker.injected or type(frame) is not bytes or REQUEST_QUOTA in broker.quotas.keys:
        return None
    n = len(frame)
    if n < 10 or frame[8] >= 0x80:  # a null client id: the general path
        return None
    end = 10 + (frame[8] << 8 | frame[9])
    if end > n:
        return None
    raw = frame[10:end]
    known = conn.hot_client
    if raw != known[0] or conn.client_id is not known[1]:
        try:
            client_id = raw.decode("utf-8")
        except UnicodeDecodeError:
            return None
        if client_id != conn.client_id:
            conn.client_id = client_id
            conn.log = conn.log.bind(client_id=client_id)
        conn.hot_client = (raw, conn.client_id)
    if version >= entry.flexible_from:  # request header v2: its tags, none in practice
        if end < n and frame[end] == 0:
            end += 1
        else:
            return None
    hot = entry.hot
    assert hot is not None
    started = clock()
    try:
        answer = hot(broker, frame, end, version, corr, conn.access)
    except Exception:
        conn.log.exception("handler_failed", api_key=entry.api_key, api_version=version)
        if broker.stats is not None:
            broker.stats.request(entry.api_key, version, UNKNOWN, clock() - started)
        spec = lookup(entry.api_key, version)
        assert spec is not None
        return encode_response(
            corr, spec.encode_error(ErrorCode.UNKNOWN_SERVER_ERROR), spec.response_header_v1
        )
    if answer is None:
        return None
    stats = broker.stats
    if stats is not None:  # BrokerStats.request, inline (one call less per request)
        seconds = clock() - started
        hist = stats.requests.get(entry.api_key << 8 | version)
        if hist is None or answer[1]:
            stats.request_rare(entry.api_key, version, answer[1], seconds)
        else:
            hist.counts[0 if seconds < FIRST_BOUND else bisect_left(REQUEST_BUCKETS, seconds)] += 1
            hist.total += seconds
    return answer[0]


def count_reply(
    stats: BrokerStats, api_key: int, version: int, reply: Any, error: int, started: float
) -> Any:
    """Count an answered request (its top-level error code and time); an answer still to
    come is counted when it comes."""
    kind = type(reply)
    if kind is dict:
        error = error or reply.get("error_code") or 0
    elif kind is Held:
        if type(reply.reply) is dict:
            error = error or reply.reply.get("error_code") or 0
    elif reply is not None and kind is not bytes and not isinstance(reply, Chunks):
        return _counted(stats, api_key, version, reply, started)
    stats.request(api_key, version, error, clock() - started)
    return reply


async def _counted(
    stats: BrokerStats, api_key: int, version: int, waiting: Awaitable[Any], started: float
) -> Any:
    try:
        reply = await waiting
    except CloseConnection as exc:  # an acks=0 Produce that failed: its error
        stats.request(api_key, version, exc.error, clock() - started)
        raise
    except Exception:
        stats.request(api_key, version, UNKNOWN, clock() - started)
        raise
    error = reply.get("error_code") or 0 if type(reply) is dict else 0
    stats.request(api_key, version, error, clock() - started)
    return reply


def gate(access: Access, api_key: int, request: Any) -> ErrorCode | None:
    """The whole-request check of ``rules.ACCESS``; an API missing there is refused."""
    entry = ACCESS.get(api_key)
    if entry is None:
        return ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    if entry.gate is None:
        return None
    return entry.gate(access, request)


def framed_chunks(corr: int, body: Chunks, spec: MessageSpec) -> Chunks:
    size = 0
    for chunk in body:
        size += len(chunk)
    framed = Chunks([response_header(corr, size, spec.response_header_v1)])
    framed.extend(body)
    return framed
