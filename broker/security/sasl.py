"""SASL on a connection, as Kafka's SaslServerAuthenticator runs it.

A connection on a SASL_PLAINTEXT or SASL_SSL listener may send ApiVersions, then
SaslHandshake naming an enabled mechanism, then the mechanism's tokens: in SaslAuthenticate
requests (handshake v1), or raw and unframed by a Kafka header (handshake v0, as the first
Kafka clients did). Until the exchange succeeds any other request closes the connection. A
failed exchange is answered SASL_AUTHENTICATION_FAILED with a message, then the connection
closes. With ``--connections-max-reauth-ms`` (KIP-368) the session lasts that long: the
client re-authenticates on the same connection (same principal) before it ends, and a
request after it ends closes the connection.

Mechanisms: PLAIN (RFC 4616) and SCRAM-SHA-256/512 (RFC 5802, through ``scramp``).

Before authentication, cheap bounds come before any work: the connection refuses a frame
over ``--sasl-server-max-receive-size`` (Kafka's ``sasl.server.max.receive.size``) by its size
prefix, and here a token's fields are measured before anything is done with them (scramp's
SASLprep of a SCRAM user name costs about 3 s per MB). A failed exchange is answered after
Kafka's ``connection.failed.authentication.delay.ms`` (``kgroupd.broker.net.failed_auth``). An
unknown user fails as a wrong password does, at the same cost and, with SCRAM, after a
server-first message of the same form (``kgroupd.broker.security.credentials``)."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import scramp

from kgroupd.broker.security.credentials import CredentialStore
from kgroupd.protocol.errors import ErrorCode

API_VERSIONS = 18
SASL_HANDSHAKE = 17
SASL_AUTHENTICATE = 36
SASL_APIS = (API_VERSIONS, SASL_HANDSHAKE, SASL_AUTHENTICATE)
# Field bounds checked before any work (RFC 4616 asks for up to 255 bytes of each PLAIN field;
# Kafka's own bound is only sasl.server.max.receive.size)
MAX_FIELD_BYTES = 1024  # PLAIN's authzid, user and password; a SCRAM user name (escaped)
MAX_SCRAM_MESSAGE_BYTES = 4096  # a SCRAM message: real ones are 100-200 bytes


class AuthenticationFailed(Exception):
    """The exchange failed; the message is the one the client is sent."""


class _Plain:
    """``[authzid] NUL authcid NUL passwd``, checked against the SCRAM credentials."""

    def __init__(self, store: CredentialStore) -> None:
        self.store = store

    def step(self, token: bytes) -> tuple[bytes, str | None]:
        if len(token) > 3 * MAX_FIELD_BYTES + 2:
            raise AuthenticationFailed(_PLAIN_TOO_LONG)
        parts = token.split(b"\0")
        if len(parts) != 3:
            raise AuthenticationFailed("Invalid SASL/PLAIN response: expected 3 tokens")
        if max(map(len, parts)) > MAX_FIELD_BYTES:
            raise AuthenticationFailed(_PLAIN_TOO_LONG)
        authz, user, password = (p.decode("utf-8", "replace") for p in parts)
        if not user or not password:
            raise AuthenticationFailed("Authentication failed: username or password is empty")
        if authz and authz != user:
            raise AuthenticationFailed(
                "Authentication failed: Client requested an authorization id that is "
                "different from username"
            )
        if not self.store.check_plain(user, password):
            raise AuthenticationFailed("Authentication failed: Invalid username or password")
        return b"", user


_PLAIN_TOO_LONG = f"Invalid SASL/PLAIN response: a field is longer than {MAX_FIELD_BYTES} bytes"


def _names_too_long(client_first: bytes) -> bool:
    """A SCRAM client-first message's authzid (``a=``) or user name (``n=``) is over the
    bound: checked on the raw bytes, before scramp normalizes them."""
    return any(
        len(part) > MAX_FIELD_BYTES + 2
        for part in client_first.split(b",", 3)[:3]
        if part[:2] in (b"a=", b"n=")
    )


class _Scram:
    def __init__(self, store: CredentialStore, mechanism: str) -> None:
        self.mechanism = mechanism
        self.user: str | None = None
        self.known = False  # whether the user exists (else the exchange runs on a mock)

        def auth_info(user: str) -> tuple[bytes, bytes, bytes, int]:
            self.user = user  # scramp has undone the =2C / =3D escaping (and SASLprep'd it)
            cred, self.known = store.scram_login(mechanism, user)
            return cred.auth_info()

        self.server = scramp.ScramMechanism(mechanism).make_server(auth_info)
        self.first = True

    def step(self, token: bytes) -> tuple[bytes, str | None]:
        try:
            if len(token) > MAX_SCRAM_MESSAGE_BYTES:
                raise ValueError("SCRAM message too long")
            if self.first:
                self.first = False
                if _names_too_long(token):
                    raise ValueError("SCRAM user name too long")
                self.server.set_client_first(token.decode("utf-8"))
                return self.server.get_server_first().encode(), None
            self.server.set_client_final(token.decode("utf-8"))
            if not self.known:  # a mock never verifies (nor could a proof match it)
                raise ValueError("unknown user")
            return self.server.get_server_final().encode(), self.user
        except (scramp.ScramException, UnicodeDecodeError, ValueError, KeyError):
            raise AuthenticationFailed(
                "Authentication failed during authentication due to invalid credentials with "
                f"SASL mechanism {self.mechanism}"
            ) from None


@dataclass(slots=True)
class Answer:
    error: ErrorCode
    message: str | None
    token: bytes
    session_lifetime_ms: int


class SaslSession:
    """One connection's SASL state."""

    def __init__(
        self,
        store: CredentialStore,
        enabled: tuple[str, ...],
        reauth_ms: int,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.store = store
        self.enabled = enabled
        self.reauth_ms = reauth_ms
        self.clock = clock
        self.principal: str | None = None  # "User:NAME" once authenticated
        self.mechanism: str | None = None
        self.raw_tokens = False  # after a v0 handshake: tokens come unframed
        self.failed = False
        self.expires_at: float | None = None
        self._exchange: _Plain | _Scram | None = None

    def refusal(self, api_key: int) -> str | None:
        """Why a request of ``api_key`` may not be handled now (the connection closes), or
        None."""
        if api_key in SASL_APIS:
            return None
        if self.principal is None:
            return f"request of api key {api_key} before SASL authentication completed"
        if self.expires_at is not None and self.clock() >= self.expires_at:
            return "the SASL session expired (connections.max.reauth.ms) without re-authentication"
        return None

    def handshake(self, mechanism: str, version: int) -> ErrorCode:
        if self._exchange is not None or (self.principal is not None and version == 0):
            self.failed = True
            return ErrorCode.ILLEGAL_SASL_STATE
        if mechanism not in self.enabled:
            self.failed = True
            return ErrorCode.UNSUPPORTED_SASL_MECHANISM
        if self.principal is not None and mechanism != self.mechanism:
            self.failed = True  # re-authentication keeps the mechanism (KIP-368)
            return ErrorCode.ILLEGAL_SASL_STATE
        self.mechanism = mechanism
        if mechanism == "PLAIN":
            self._exchange = _Plain(self.store)
        else:
            self._exchange = _Scram(self.store, mechanism)
        self.raw_tokens = version == 0
        return ErrorCode.NONE

    def authenticate(self, token: bytes) -> Answer:
        if self._exchange is None:
            self.failed = True
            return Answer(
                ErrorCode.ILLEGAL_SASL_STATE,
                "SaslAuthenticate before a SaslHandshake",
                b"",
                0,
            )
        try:
            reply, user = self._exchange.step(token)
        except AuthenticationFailed as exc:
            self.failed = True
            self._exchange = None
            return Answer(ErrorCode.SASL_AUTHENTICATION_FAILED, str(exc), b"", 0)
        if user is None:
            return Answer(ErrorCode.NONE, None, reply, 0)
        principal = f"User:{user}"
        if self.principal is not None and principal != self.principal:
            self.failed = True
            self._exchange = None
            return Answer(
                ErrorCode.SASL_AUTHENTICATION_FAILED,
                f"Cannot change principals during re-authentication from {self.principal}: "
                f"{principal}",
                b"",
                0,
            )
        self.principal = principal
        self._exchange = None
        self.raw_tokens = False
        lifetime = self.reauth_ms if self.reauth_ms > 0 else 0
        self.expires_at = self.clock() + lifetime / 1000 if lifetime else None
        return Answer(ErrorCode.NONE, None, reply, lifetime)
