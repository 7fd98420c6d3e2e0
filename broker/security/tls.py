"""TLS listeners with the standard library's ``ssl`` (served by asyncio or uvloop), and the
principal of a client certificate as Kafka's DEFAULT ``ssl.principal.mapping.rules`` writes
it: the subject's distinguished name in RFC 2253 form, most specific part first
(``User:CN=client,O=example``). Without a certificate the principal is ``User:ANONYMOUS``."""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from asyncio import sslproto
from typing import Any

import structlog

from kgroupd.broker.security.acls import ANONYMOUS

log = structlog.get_logger("kgroupd.tls")
HANDSHAKE_TIMEOUT_S = 10
RECORD = 16384  # the most plaintext a TLS record holds: what one SSLObject.read returns
_WANT_MORE = sslproto.SSLAgainErrors
_WRAPPED = sslproto.SSLProtocolState.WRAPPED

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


class TlsProtocol(sslproto.SSLProtocol):
    """The standard library's TLS layer in front of a Kafka connection, sending its alert
    when a handshake fails.

    asyncio's and uvloop's own server-side TLS drop the connection without the alert OpenSSL
    wrote (an untrusted client certificate, no shared protocol), so a Java client sees a
    bare disconnect and retries until it times out instead of failing at once with
    SslAuthenticationException, as against Kafka. A failed handshake is logged as one line.
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
        write = me._sslobj.write
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
        """A network read: asyncio's path (``_do_read``) with the calls that find nothing to
        do left out: no outgoing data to send, no flow control to change."""
        me: Any = self
        if me._state is not _WRAPPED or me._app_reading_paused or me._app_protocol_is_buffer:
            super().buffer_updated(nbytes)
            return
        incoming = me._incoming
        incoming.write(me._ssl_buffer_view[:nbytes])
        try:
            self._do_read__copied()
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

    def _do_read__copied(self) -> None:
        """The records decrypted so far, handed on in one ``data_received``: asyncio's reads
        until OpenSSL raises SSLWantReadError, each read allocating 256 KiB first; this one
        reads a record's size at a time and stops when no ciphertext is left to decrypt (an
        exception per network read spared), as asyncio calls it after each network read."""
        sslobj = self._sslobj  # type: ignore[attr-defined]
        incoming = self._incoming  # type: ignore[attr-defined]
        chunks: list[bytes] = []
        closed = False
        try:
            while incoming.pending or sslobj.pending():
                chunk = sslobj.read(RECORD)
                if not chunk:  # close_notify
                    closed = True
                    break
                chunks.append(chunk)
        except _WANT_MORE:
            pass
        if chunks:
            app: asyncio.Protocol = self._app_protocol  # type: ignore[assignment]
            app.data_received(chunks[0] if len(chunks) == 1 else b"".join(chunks))
        if closed:
            self._call_eof_received()  # type: ignore[attr-defined]
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
        super()._on_handshake_complete(handshake_exc)
