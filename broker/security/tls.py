"""TLS listeners with the standard library's ``ssl`` (served by asyncio or uvloop), and the
principal of a client certificate as Kafka's DEFAULT ``ssl.principal.mapping.rules`` writes
it: the subject's distinguished name in RFC 2253 form, most specific part first
(``User:CN=client,O=example``). Without a certificate the principal is ``User:ANONYMOUS``."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import ssl
from asyncio import sslproto
from collections import defaultdict
from typing import Any

import structlog

from kgroupd.broker.security.acls import ANONYMOUS

log = structlog.get_logger("kgroupd.tls")
HANDSHAKE_TIMEOUT_S = 10
RECORD = 16384  # the most plaintext a TLS record holds: what one SSLObject.read returns
JOINED = 4 * RECORD  # answers written at once up to this size are copied into one piece
_WANT_MORE = sslproto.SSLAgainErrors
_WRAPPED = sslproto.SSLProtocolState.WRAPPED
_HANDSHAKE = sslproto.SSLProtocolState.DO_HANDSHAKE
_FLUSHING = sslproto.SSLProtocolState.FLUSHING
_SHUTDOWN = sslproto.SSLProtocolState.SHUTDOWN

# --ssl-client-auth (its values named in kgroupd.broker.config.security.CLIENT_AUTH)
CLIENT_AUTH = {
    "none": ssl.CERT_NONE,
    "requested": ssl.CERT_OPTIONAL,
    "required": ssl.CERT_REQUIRED,
}
# RFC 2253's short names; the rest keep the name Python's ssl gives them
_SHORT = {
    "commonName": "CN",
    "countryName": "C",
    "localityName": "L",
    "stateOrProvinceName": "ST",
    "organizationName": "O",
    "organizationalUnitName": "OU",
    "streetAddress": "STREET",
    "domainComponent": "DC",
    "userId": "UID",
}


def server_context(
    certfile: str, keyfile: str | None, cafile: str | None, client_auth: str
) -> ssl.SSLContext:
    """A server context: the listener's certificate chain and key (PEM), the CAs that sign
    client certificates, and whether a client certificate is required, requested or not
    asked for (Kafka: ``ssl.client.auth``)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2  # Kafka: ssl.enabled.protocols
    context.load_cert_chain(certfile, keyfile)
    if cafile is not None:
        context.load_verify_locations(cafile)
    context.verify_mode = CLIENT_AUTH[client_auth]
    return context


def _escape(value: str) -> str:
    out = []
    for i, ch in enumerate(value):
        if ch in ',+"\\<>;=' or (i == 0 and ch in "# ") or (i == len(value) - 1 and ch == " "):
            out.append("\\" + ch)
        else:
            out.append(ch)
    return "".join(out)


def principal(peercert: dict[str, Any] | None) -> str:
    """``User:<RFC 2253 subject>`` of a verified client certificate, else ANONYMOUS."""
    if not peercert or not peercert.get("subject"):
        return ANONYMOUS
    rdns = []
    for rdn in reversed(peercert["subject"]):
        rdns.append("+".join(f"{_SHORT.get(k, k)}={_escape(v)}" for k, v in rdn))
    return "User:" + ",".join(rdns)


def _raw(sslobj: Any) -> Any:
    """The C object under an ``ssl.SSLObject``: its ``read``, ``write`` and ``pending``
    without the Python method ``SSLObject`` wraps each in (a call per record spared)."""
    return getattr(sslobj, "_sslobj", sslobj)


class TlsProtocol(sslproto.SSLProtocol, asyncio.Protocol):
    """The standard library's TLS layer in front of a Kafka connection, sending its alert
    when a handshake fails.

    asyncio's and uvloop's own server-side TLS drop the connection without the alert OpenSSL
    wrote (an untrusted client certificate, no shared protocol), so a Java client sees a
    bare disconnect and retries until it times out instead of failing at once with
    SslAuthenticationException, as against Kafka. A failed handshake is logged as one line.

    A network read and the answers written in the common case (the connection open, nothing
    waiting, no flow control in force) go straight through: a read decrypts the records that
    came and hands them on in one ``data_received``; the answers written at once go out as
    one encryption call. Any other state takes asyncio's own path.
    """

    def __init__(self, app: asyncio.Protocol, context: ssl.SSLContext) -> None:
        super().__init__(
            asyncio.get_running_loop(),
            app,
            context,
            None,  # type: ignore[arg-type]  # no one waits for the handshake but the app
            server_side=True,
            ssl_handshake_timeout=HANDSHAKE_TIMEOUT_S,
        )
        self._ssl: Any = None  # the C object of asyncio's SSLObject, once the handshake is done
        # The buffer of every network read, asked for before each (by uvloop, or asyncio):
        # always asyncio's own, made at its largest, so any size asked for gets it whole, as
        # asyncio's get_buffer would; answered by C code alone, without a Python call.
        view = self._ssl_buffer_view  # type: ignore[attr-defined]
        self.__dict__["get_buffer"] = defaultdict(itertools.repeat(view).__next__).__getitem__

    def _get_app_transport(self) -> Any:
        me: Any = self  # asyncio's private state, untyped
        if me._app_transport is None:
            if me._app_transport_created:
                raise RuntimeError("Creating _SSLProtocolTransport twice")
            me._app_transport = AppTransport(me._loop, self)
            me._app_transport_created = True
        return me._app_transport

    def _write_appdata(self, list_of_data: Any) -> None:
        """The pieces of the answers written at once (a frame's size, header and body, the
        answers to a pipelined read: ``writelines``) go out in as few TLS records as fit,
        small pieces joined up to a record's size: asyncio encrypts each piece it is handed
        as records of its own, 22 bytes and an encryption call each."""
        parts = list_of_data if isinstance(list_of_data, list) else list(list_of_data)
        if len(parts) > 1:
            joined: list[Any] = []
            small: list[Any] = []
            size = 0
            for part in parts:
                n = len(part)
                if n >= RECORD:
                    if small:
                        joined.append(small[0] if len(small) == 1 else b"".join(small))
                        small, size = [], 0
                    joined.append(part)
                    continue
                small.append(part)
                size += n
                if size >= RECORD:
                    joined.append(small[0] if len(small) == 1 else b"".join(small))
                    small, size = [], 0
            if small:
                joined.append(small[0] if len(small) == 1 else b"".join(small))
            parts = joined
        me: Any = self  # asyncio's private state, untyped
        if me._state is not _WRAPPED or me._write_backlog or me._ssl_writing_paused:
            super()._write_appdata(parts)
            return
        # the common case straight through (asyncio's _write_appdata, _do_write and
        # _process_outgoing, without the backlog list and the flow control's calls)
        write = me._ssl.write
        try:
            for i, part in enumerate(parts):
                try:
                    n = write(part)
                except _WANT_MORE:
                    n = 0
                if n < len(part):  # what OpenSSL did not take yet: asyncio's backlog
                    super()._write_appdata([part[n:], *parts[i + 1 :]])
                    return
            data = me._outgoing.read()
            if data:
                me._transport.write(data)
            if me._app_writing_paused:
                me._control_app_writing()
        except Exception as exc:
            me._fatal_error(exc, "Fatal error on SSL protocol")

    def buffer_updated(self, nbytes: int) -> None:
        """A network read into asyncio's buffer (asyncio's own event loop)."""
        self.data_received(self._ssl_buffer_view[:nbytes])  # type: ignore[attr-defined]

    def data_received(self, data: bytes | memoryview) -> None:
        """A network read (uvloop hands it over as bytes: a protocol that is also an
        ``asyncio.Protocol`` is not asked for a buffer first, a call with the GIL taken
        spared): asyncio's path (``buffer_updated``, ``_do_read``) with the calls that find
        nothing to do left out: no outgoing data to send, no flow control to change; one
        whole record (a request, or the last of a pipelined few) handed on at once."""
        me: Any = self
        incoming = me._incoming
        incoming.write(data)
        if me._state is not _WRAPPED or me._app_reading_paused or me._app_protocol_is_buffer:
            state = me._state  # asyncio's buffer_updated after its write
            if state is _HANDSHAKE:
                me._do_handshake()
            elif state is _WRAPPED:
                me._do_read()
            elif state is _FLUSHING:
                me._do_flush()
            elif state is _SHUTDOWN:
                me._do_shutdown()
            return
        try:
            try:
                chunk = me._ssl.read(RECORD)
            except _WANT_MORE:  # a part of a record: the rest comes with the next read
                chunk = None
            if chunk is not None:
                if chunk and not incoming.pending and len(chunk) < RECORD:
                    me._app_protocol.data_received(chunk)
                else:
                    self._do_read__copied(chunk)
            if me._write_backlog:
                me._do_write()
            elif me._outgoing.pending:
                me._process_outgoing()
            elif me._app_writing_paused:
                me._control_app_writing()
            if me._ssl_reading_paused or incoming.pending:
                me._control_ssl_reading()
        except Exception as exc:
            me._fatal_error(exc, "Fatal error on SSL protocol")

    def _do_read__copied(self, chunk: bytes | None = None) -> None:
        """The records decrypted so far (after ``chunk``, read already), handed on in one
        ``data_received``: asyncio's reads until OpenSSL raises SSLWantReadError, each read
        allocating 256 KiB first; this one reads a record's size at a time (a read takes a
        whole record: TLS records hold at most ``RECORD`` bytes of plaintext) and stops when
        no ciphertext is left to decrypt (an exception per network read spared), as asyncio
        calls it after each network read."""
        me: Any = self
        ssl_object = me._ssl or _raw(me._sslobj)
        read = ssl_object.read
        incoming = me._incoming
        chunks: list[bytes] = []
        closed = False
        try:
            if chunk is None:
                chunk = read(RECORD)
            while True:
                if not chunk:  # close_notify
                    closed = True
                    break
                chunks.append(chunk)
                # no ciphertext left and the record read whole: nothing more to decrypt
                if not incoming.pending and (len(chunk) < RECORD or not ssl_object.pending()):
                    break
                chunk = read(RECORD)
        except _WANT_MORE:
            pass
        if chunks:
            app: asyncio.Protocol = me._app_protocol
            app.data_received(chunks[0] if len(chunks) == 1 else b"".join(chunks))
        if closed:
            me._call_eof_received()
            self._start_shutdown()

    def _on_handshake_complete(self, handshake_exc: BaseException | None) -> None:
        if handshake_exc is not None:
            transport = self._transport
            peer = transport.get_extra_info("peername") if transport is not None else None
            log.warning(
                "tls_handshake_failed",
                peer=f"{peer[0]}:{peer[1]}" if peer else "?",
                error=str(handshake_exc),
            )
            # the alert; if the peer is gone already there is nobody to tell
            with contextlib.suppress(Exception):
                self._process_outgoing()  # type: ignore[attr-defined]
        else:
            self._ssl = _raw(self._sslobj)  # type: ignore[attr-defined]
        super()._on_handshake_complete(handshake_exc)


class AppTransport(sslproto._SSLProtocolTransport):
    """The transport the Kafka connection writes its answers to: the answers written at once
    (``writelines``), unless they hold large pieces (a Fetch's record batches, never copied),
    joined and encrypted in one call (OpenSSL cuts the records), straight to the socket, when
    nothing waits before them and no flow control is in force; anything else through
    ``TlsProtocol._write_appdata``."""

    def writelines(self, list_of_data: Any) -> None:
        me: Any = self._ssl_protocol
        if (
            me._state is not _WRAPPED
            or me._write_backlog
            or me._ssl_writing_paused
            or type(list_of_data) is not list
        ):
            super().writelines(list_of_data)
            return
        pieces = len(list_of_data)
        if pieces == 1:
            data = list_of_data[0]
        elif pieces == 2 or sum(map(len, list_of_data)) <= JOINED:
            data = b"".join(list_of_data)
        else:
            me._write_appdata(list_of_data)
            return
        n = len(data)
        if not n:
            return
        try:
            try:
                sent = me._ssl.write(data)
            except _WANT_MORE:
                sent = 0
            if sent < n:  # what OpenSSL did not take yet: asyncio's backlog
                sslproto.SSLProtocol._write_appdata(me, [data[sent:]])
                return
            me._transport.write(me._outgoing.read())
            if me._app_writing_paused:
                me._control_app_writing()
        except Exception as exc:
            me._fatal_error(exc, "Fatal error on SSL protocol")
