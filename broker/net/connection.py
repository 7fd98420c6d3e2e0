"""One client connection: frames in, responses out, strictly in request order.

Every complete frame of a read is handled in order; what can be answered at once is, and the
answers of one read go out in one write. A request that must wait (a JoinGroup, a long-poll
Fetch) pauses the connection until it is answered, as Kafka mutes a channel while a request
is in flight, so responses never overtake each other.

A ``Held`` answer (a commit or produce waiting for its fsync under ``--fsync always``) does
not pause the connection: the requests behind it are handled at once, and every answer from
then on queues in ``held`` until the fsyncs before it have completed. So a client pipelining
commits puts all of them into one fsync, and answers still leave in request order.
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import struct
import time
from collections import deque
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Protocol, cast

import structlog

from kgroupd.broker.config.security import SASL_PROTOCOLS
from kgroupd.broker.handlers.api_versions import api_versions_body
from kgroupd.broker.handlers.registry import (
    HANDLERS,
    CloseConnection,
    Held,
    RequestContext,
    entry_for,
)
from kgroupd.broker.handlers.registry import HeldAnswer as _HeldAnswer
from kgroupd.broker.handlers.throttling import UNTHROTTLED, charge_request_time
from kgroupd.broker.log.partition import now_ms
from kgroupd.broker.net.failed_auth import FailedAuthDelay
from kgroupd.broker.net.hot import UNKNOWN as _UNKNOWN
from kgroupd.broker.net.hot import clock as _clock
from kgroupd.broker.net.hot import count_reply as _count
from kgroupd.broker.net.hot import framed_chunks as _framed_chunks
from kgroupd.broker.net.hot import gate as _gate
from kgroupd.broker.net.hot import hot_answer
from kgroupd.broker.net.mute import Mute
from kgroupd.broker.net.request_pool import FrameReader, RequestMemoryPool
from kgroupd.broker.quotas import CONNECTION_RATE
from kgroupd.broker.quotas import REQUEST as REQUEST_QUOTA
from kgroupd.broker.security.acls import ANONYMOUS, Access
from kgroupd.protocol.errors import ErrorCode
from kgroupd.protocol.fast import Chunks
from kgroupd.protocol.framing import (
    FrameError,
    encode_response,
    parse_request_header,
    peek_api,
)
from kgroupd.protocol.messages import MessageSpec, lookup

if TYPE_CHECKING:
    from kgroupd.broker.security.sasl import SaslSession
    from kgroupd.broker.state import Broker


class ConnectionHost(Protocol):
    """What a connection needs of the server that accepted it."""

    @property
    def broker(self) -> Broker: ...

    @property
    def connections(self) -> set[KafkaConnection]: ...

    @property
    def pool(self) -> RequestMemoryPool: ...

    @property
    def failed_auth(self) -> FailedAuthDelay: ...


log = structlog.get_logger("kgroupd.connection")
_ids = itertools.count(1)
_API_VERSIONS_V0 = lookup(18, 0)
_HEADER = struct.Struct(">hhi")  # api_key, api_version, correlation_id
# Requests a client may pipeline behind one that waits before we stop reading from it.
MAX_QUEUED_FRAMES = 256


class _Close(Exception):
    """Close this connection after logging why; everyone else carries on."""


class KafkaConnection(asyncio.Protocol):
    def __init__(
        self,
        server: ConnectionHost,
        advertised: tuple[str, int] | None = None,
        protocol: str = "PLAINTEXT",
    ) -> None:
        self.server = server
        self.broker = server.broker
        # The address of the listener this connection came in on, as clients are told it
        # (Metadata, FindCoordinator); None: the broker's first listener's.
        self.advertised = advertised or (
            server.broker.advertised_host,
            server.broker.advertised_port,
        )
        self.conn_id = next(_ids)
        # The frames read, what they hold of the shared pool (--queued-max-request-bytes),
        # and since when a frame has been incomplete (--incomplete-request-timeout-ms).
        self.reader = FrameReader(server.pool, server.broker.config.max_request_bytes, self._flow)
        self.transport: asyncio.Transport | None = None
        self.queue: deque[bytes | bytearray] = deque()
        self.waiting: asyncio.Future[Any] | None = None
        # Answers that may not be sent yet, in order: (the fsync each waits for, or None
        # for an answer that only waits for those before it, framed bytes).
        self.held: deque[tuple[asyncio.Future[None] | None, list[bytes | memoryview]]] = deque()
        self._watched: asyncio.Future[None] | None = None
        self.close_when_done = False
        self.write_paused = False
        self.read_paused = False
        self.closing = False
        self.peer = "?"
        self.host = "?"
        self.client_id: str | None = None
        self.hot_client: tuple[bytes, str | None] = (b"", None)  # kgroupd.broker.net.hot
        self.log: Any = log.bind(conn=self.conn_id)
        self.last_read = time.monotonic()  # for the sweep (connections.max.idle.ms)
        # Who the client is: its SASL user once authenticated on a SASL listener, its
        # certificate's subject on an SSL listener, else User:ANONYMOUS.
        self.principal = ANONYMOUS
        self.sasl: SaslSession | None = None
        if protocol in SASL_PROTOCOLS:
            from kgroupd.broker.security.sasl import SaslSession  # scramp: SASL listeners only

            config = server.broker.config
            self.sasl = SaslSession(
                server.broker.credentials,
                tuple(config.sasl_enabled_mechanisms.split(",")),
                config.connections_max_reauth_ms,
            )
            # frames before authentication: sasl.server.max.receive.size (_authenticated lifts it)
            self.reader.decoder.set_limit(config.sasl_server_max_receive_size)
        self.protocol = protocol
        self.access: Access | None = None  # --authorizer acl: set once the principal is known
        self.mute = Mute(self._run)  # a quota's throttle time (KIP-219)
        self.closers: list[Callable[[], None]] = []  # called once it closes (share sessions)

    def _set_principal(self, principal: str) -> None:
        self.principal = principal
        authorizer = self.broker.authorizer
        if authorizer is not None:
            self.access = Access(authorizer, principal, self.host)

    # asyncio callbacks -------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports do not subclass asyncio.Transport, but implement it.
        self.transport = cast(asyncio.Transport, transport)
        peer = transport.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if peer else "?"
        self.host = peer[0] if peer else "?"
        self.log = self.log.bind(peer=self.peer)
        if self.protocol == "SSL":
            from kgroupd.broker.security.tls import principal

            self._set_principal(principal(transport.get_extra_info("peercert")))
            if self.principal != ANONYMOUS:
                self.log = self.log.bind(principal=self.principal)
        elif self.sasl is None:
            self._set_principal(ANONYMOUS)
        limit = self.broker.config.max_connections_per_ip
        if limit is not None and sum(c.host == self.host for c in self.server.connections) >= limit:
            # Kafka closes a connection over max.connections.per.ip as soon as it is accepted
            self.log.warning("connection_refused", reason="max_connections_per_ip", limit=limit)
            self.closing = True
            self.transport.close()
            return
        throttle = self.broker.throttle
        if throttle.enabled(CONNECTION_RATE) and (wait := throttle.accept(self.host, now_ms())):
            self.log.warning("connection_throttled", reason="connection_creation_rate", ms=wait)
            self.closing = True  # held unserved, then closed, as Kafka's acceptor does
            asyncio.get_running_loop().call_later(wait / 1000, self.transport.close)
            return
        self.server.connections.add(self)
        self.log.info("connection_open")

    def connection_lost(self, exc: Exception | None) -> None:
        self.closing = True
        self.server.connections.discard(self)
        self.reader.close()
        self.mute.cancel()
        if self.waiting is not None and not self.waiting.done():
            self.waiting.cancel()
        self.log.info("connection_closed", error=str(exc) if exc else None)
        for close in self.closers:
            close()

    def data_received(self, data: bytes) -> None:
        if self.closing:
            return
        now = self.last_read = time.monotonic()
        frames = self.reader.feed(data, now)
        if frames:
            self.queue.extend(frames)
        if self.waiting is None:
            self._run()
        else:
            # Reading goes on while a request waits, so a client that hangs up during a
            # long poll or a parked JoinGroup is noticed at once; only a client that piles
            # up requests behind the waiting one is paused.
            self._account()
            self._flow()

    def _flow(self) -> None:
        """Read unless the peer is not reading our answers or too much is queued."""
        if self.transport is None or self.closing:
            return
        stop = (
            self.write_paused
            or self.reader.paused
            or len(self.queue) > MAX_QUEUED_FRAMES
            or len(self.held) > MAX_QUEUED_FRAMES
        )
        if stop and not self.read_paused:
            self.transport.pause_reading()
            self.read_paused = True
        elif not stop and self.read_paused:
            self.transport.resume_reading()
            self.read_paused = False

    def pause_writing(self) -> None:
        self.write_paused = True
        self._flow()

    def resume_writing(self) -> None:
        self.write_paused = False
        self._flow()

    # request handling --------------------------------------------------------------------

    def _run(self) -> None:
        out: list[bytes | memoryview] = []
        queue = self.queue
        held = self.held
        reader = self.reader
        while queue and self.waiting is None and not self.closing:
            if self.mute.until and self.mute.active():
                break
            frame = queue.popleft()
            reader.queued -= len(frame)  # reader.taken(frame), inlined: this runs per frame
            try:
                result = self._dispatch(frame)
            except _Close as exc:
                if out:
                    self._write_out(out)
                self._close(str(exc))
                return
            except CloseConnection as exc:  # no answer; the handler logged why
                if out:
                    self._write_out(out)
                self._close_after_held(str(exc))
                return
            if result is None:
                continue
            if isinstance(result, bytes):
                if held:
                    self._hold(None, [result])
                else:
                    out.append(result)
                if self.sasl is not None and self.sasl.failed:
                    self._auth_failed(out)  # Kafka answers a failed exchange, then closes
                    return
                continue
            if isinstance(result, Chunks):  # header plus buffers, written as they are
                if held:
                    self._hold(None, result)
                else:
                    out.extend(result)
                continue
            if isinstance(result, _HeldAnswer):
                self._hold(result.until, result.framed)
                continue
            awaitable, spec, corr = result
            fut = asyncio.ensure_future(awaitable)
            self.waiting = fut
            fut.add_done_callback(functools.partial(self._finished, spec=spec, corr=corr))
        if out:
            self._write_out(out)
        self._account()
        self._flow()
        self._close_if_done()

    def _account(self) -> None:
        """Claim the pool memory this connection's frames take; stop reading if refused."""
        if self.closing:
            return
        refused = self.reader.account()
        if refused is not None:  # the caller's _flow stops reading
            self.log.info("request_pool_full", want=refused, used=self.reader.pool.used)

    def _hold(self, until: asyncio.Future[None] | None, framed: list[bytes | memoryview]) -> None:
        held = self.held
        if held and held[-1][0] is until:  # behind the same fsync (or none): one entry
            held[-1][1].extend(framed)
            return
        held.append((until, list(framed)))
        if until is not None and until is not self._watched:
            self._watched = until
            until.add_done_callback(self._release)

    def _release(self, _fut: asyncio.Future[None]) -> None:
        """An fsync finished: send every held answer whose fsyncs are all done, in order."""
        if self.closing:
            return
        held = self.held
        out: list[bytes | memoryview] = []
        while held:
            until, framed = held[0]
            if until is not None:
                if not until.done():
                    break
                if until.cancelled() or until.exception() is not None:
                    error = "cancelled" if until.cancelled() else str(until.exception())
                    if out:
                        self._write_out(out)
                    self.log.error("fsync_failed_answers_withheld", error=error)
                    self._close(f"fsync failed: {error}")
                    return
            held.popleft()
            out.extend(framed)
        if not held:
            self._watched = None
        if out:
            self._write_out(out)
        self._flow()
        if self.waiting is None and self.queue:
            self._run()
        else:
            self._close_if_done()

    def _send(self, framed: list[bytes | memoryview]) -> None:
        """Write now, or queue behind held answers."""
        if self.held:
            self._hold(None, framed)
        else:
            self._write_out(framed)

    def _write_out(self, chunks: list[bytes | memoryview]) -> None:
        if self.transport is None:
            return
        try:
            self.broker.before_send()
        except OSError as exc:  # the records are not in the file: acknowledge nothing
            self._close(f"writing coordinator records failed: {exc}")
            return
        self.transport.writelines(chunks)

    def _close_if_done(self) -> None:
        if self.waiting is not None or self.held or self.queue:
            return
        if self.reader.decoder.error is not None:
            # Everything framed before the bad size prefix has been answered.
            if self.sasl is not None and self.sasl.principal is None:  # as Kafka: auth failed
                reason = f"sasl.server.max.receive.size: {self.reader.decoder.error}"
                self.log.warning("sasl_authentication_failed", reason=reason)
                self._auth_failed([])
            else:
                self._close(f"bad frame: {self.reader.decoder.error}")
        elif self.close_when_done:
            self._close("broker shutting down", error=False)

    def _finished(self, fut: asyncio.Future[Any], *, spec: MessageSpec, corr: int) -> None:
        self.waiting = None
        if self.closing or fut.cancelled():
            return
        exc = fut.exception()
        if isinstance(exc, CloseConnection):
            self._close_after_held(str(exc))
            return
        if exc is not None:
            self.log.error(
                "handler_failed",
                api_key=spec.api_key,
                api_version=spec.version,
                exc_info=exc,
            )
            body = spec.encode_error(ErrorCode.UNKNOWN_SERVER_ERROR)
        else:
            reply = fut.result()
            if isinstance(reply, Chunks):
                self._send(_framed_chunks(corr, reply, spec))
                body = None
            elif reply is None or isinstance(reply, bytes):
                body = reply
            else:
                body = spec.encode_response(reply)
        if body is not None:
            self._send([encode_response(corr, body, spec.response_header_v1)])
        self._run()

    def _dispatch(
        self, frame: bytes | bytearray
    ) -> bytes | Chunks | _HeldAnswer | tuple[Awaitable[Any], MessageSpec, int] | None:
        sasl = self.sasl
        if sasl is not None and sasl.raw_tokens:
            return self._raw_token(sasl, frame)
        if len(frame) < 8:
            try:
                peek_api(frame)
            except FrameError as exc:
                raise _Close(f"bad request header: {exc}") from None
        api_key, version, corr = _HEADER.unpack_from(frame)  # peek_api's, inlined
        if sasl is not None:
            refusal = sasl.refusal(api_key)
            if refusal is not None:
                raise _Close(refusal)
        entry = HANDLERS.get(api_key)
        if entry is None:
            entry = entry_for(api_key)  # its module imported on the first request
            if entry is None:
                raise _Close(f"unknown api key {api_key} (version {version})")
        if not entry.min_version <= version <= entry.max_version:
            if api_key == 18 and _API_VERSIONS_V0 is not None:
                # Kafka answers an ApiVersions it cannot parse with a v0 body listing its
                # ranges, so the client can retry with a version we speak.
                self.log.info("api_versions_unsupported", api_version=version)
                body = _API_VERSIONS_V0.encode_response(
                    api_versions_body(ErrorCode.UNSUPPORTED_VERSION)
                )
                return encode_response(corr, body, False)
            raise _Close(
                f"unsupported version {version} of api key {api_key} "
                f"(we serve {entry.min_version}-{entry.max_version})"
            )
        if entry.hot is not None:  # an authenticated SASL session too (refusal() above)
            answer = hot_answer(self, entry, frame, version, corr)
            if answer is not None:
                return answer
        spec = lookup(api_key, version)
        assert spec is not None
        injected = self.broker.injected
        if injected and api_key in injected:  # --test-controls: an injected error is pending
            answer = injected[api_key](self, frame, spec, corr)
            if answer is not None or self.closing:
                return cast(Any, answer)
        started = _clock()
        try:
            header = parse_request_header(frame, spec.flexible)
            if entry.decoder is not None:  # hand-written, for small hot requests: bytes
                if type(frame) is not bytes:
                    frame = bytes(frame)
                request = entry.decoder(frame, header.body_offset, version)
            else:
                request = spec.decode_request(frame, header.body_offset)
        except Exception as exc:  # any decode failure is the client's malformed request
            raise _Close(f"malformed request api_key={api_key} v{version}: {exc!r}") from None
        if header.client_id != self.client_id:
            self.client_id = header.client_id
            self.log = self.log.bind(client_id=header.client_id)
        access = self.access
        if access is not None:
            refused = _gate(access, api_key, request)
            if refused is not None:
                self.log.info("request_refused", api_key=api_key, error=refused.name)
                if self.broker.stats is not None:
                    self.broker.stats.request(api_key, version, refused, 0.0)
                return encode_response(corr, spec.encode_error(refused), spec.response_header_v1)
        ctx = RequestContext(
            self.broker,
            api_key,
            version,
            corr,
            header.client_id,
            self.host,
            self.log,
            self.advertised,
            sasl,
            access,
            principal=self.principal,
            size=len(frame),
            throttle=self.mute.throttle,
            closers=self.closers,
        )
        stats = self.broker.stats
        try:
            reply = entry.fn(ctx, request)
            if api_key not in UNTHROTTLED and self.broker.throttle.enabled(REQUEST_QUOTA):
                reply = charge_request_time(ctx, reply, _clock() - started)
            if stats is not None:
                if type(reply) is bytes:  # the hot paths' hand-encoded answers
                    stats.request(api_key, version, ctx.error, _clock() - started)
                else:
                    reply = _count(stats, api_key, version, reply, ctx.error, started)
            if sasl is not None and api_key == 36:
                self._authenticated(sasl)
            if reply is None:
                return None
            if isinstance(reply, bytes):
                body = reply
            elif isinstance(reply, Chunks):
                return _framed_chunks(corr, reply, spec)
            elif isinstance(reply, dict):
                body = spec.encode_response(reply)
            elif isinstance(reply, Held):
                inner = reply.reply
                body = inner if isinstance(inner, bytes) else spec.encode_response(inner)
                framed = encode_response(corr, body, spec.response_header_v1)
                return _HeldAnswer(reply.until, [framed])
            else:
                return reply, spec, corr
        except CloseConnection as exc:
            if stats is not None:
                stats.request(api_key, version, exc.error, _clock() - started)
            raise
        except Exception:
            self.log.exception("handler_failed", api_key=api_key, api_version=version)
            if stats is not None:
                stats.request(api_key, version, _UNKNOWN, _clock() - started)
            body = spec.encode_error(ErrorCode.UNKNOWN_SERVER_ERROR)
        return encode_response(corr, body, spec.response_header_v1)

    def _raw_token(self, sasl: SaslSession, frame: bytes | bytearray) -> bytes:
        """After SaslHandshake v0 the tokens come as bare size-prefixed frames and go back
        the same way; a failed exchange just closes the connection, as Kafka does."""
        # a frame before authentication: bytes (no copy), or bytearray only if
        # --sasl-server-max-receive-size allows frames of framing.HAND_OVER
        answer = sasl.authenticate(bytes(frame))
        if answer.error is not ErrorCode.NONE:
            self.log.warning(
                "sasl_authentication_failed", mechanism=sasl.mechanism, reason=answer.message
            )
            return b""  # nothing to answer: closes without a reply
        self._authenticated(sasl)
        return struct.pack(">i", len(answer.token)) + answer.token

    def _authenticated(self, sasl: SaslSession) -> None:
        if sasl.principal is not None and sasl.principal != self.principal:
            self.reader.decoder.set_limit(self.broker.config.max_request_bytes)
            self._set_principal(sasl.principal)
            self.log = self.log.bind(principal=sasl.principal)
            self.log.info("sasl_authenticated", mechanism=sasl.mechanism)

    def sweep(self, now: float, idle_s: float, incomplete_s: float) -> None:
        """Close this connection if it sent nothing for ``idle_s`` while nothing of it was
        in flight, or a frame of it stayed incomplete for ``incomplete_s``."""
        if self.closing:
            return
        if self.reader.stalled(now, incomplete_s):  # waits for the pool not counted
            decoder = self.reader.decoder
            self.log.warning(
                "connection_closing",
                reason="a request frame stayed incomplete too long",
                frame_bytes=decoder.pending,
                received_bytes=decoder.buffered,
            )
            self._close("incomplete request", error=False)
        elif (
            now - self.last_read > idle_s
            and self.waiting is None
            and not self.queue
            and not self.held
        ):
            self._close("idle (connections.max.idle.ms)", error=False)
            self.log.info("connection_idle_closed")

    def _auth_failed(self, out: list[bytes | memoryview]) -> None:
        """Stop reading; the answers after --connection-failed-authentication-delay-ms, then
        the close (kgroupd.broker.net.failed_auth): everyone else is served meanwhile."""
        self.closing = True
        self.server.failed_auth.close_later(self.transport, out)

    def _close(self, reason: str, error: bool = True) -> None:
        if self.closing:
            return
        self.closing = True
        if error:
            self.log.warning("connection_closing", reason=reason)
        if self.transport is not None:
            self.transport.close()

    def _close_after_held(self, reason: str) -> None:
        """Close, answering nothing more, once the answers held before (their fsyncs) are
        sent; the requests after are dropped (a handler's CloseConnection)."""
        pending = [until for until, _ in self.held if until is not None]
        if not pending:
            self._close(reason, error=False)
            return
        self.waiting = asyncio.gather(*pending, return_exceptions=True)
        self.waiting.add_done_callback(lambda _: self._close(reason, error=False))

    def close_when_idle(self) -> None:
        """For shutdown: close now if nothing is in flight, else once it is answered."""
        self.close_when_done = True
        self._close_if_done()
