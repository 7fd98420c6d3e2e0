"""Who may use the HTTP listener: ``--http-auth-token-file`` (a bearer token) and, with
``--http-ssl``, ``--ssl-client-auth required`` (a client certificate signed by
``--ssl-cafile``). Both leave ``/healthz`` and ``/readyz`` open for probes.

A browser cannot add an ``Authorization`` header to the live page or its ``EventSource``:
visiting ``/?token=TOKEN`` once sets a cookie (HttpOnly, SameSite=Strict, Secure under
HTTPS) and redirects to the address without the token. The cookie holds an HMAC of the
token, never the token itself. The token is never logged."""

from __future__ import annotations

import hashlib
import hmac
import ssl
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import structlog
from aiohttp import web
from aiohttp.typedefs import Middleware

from kgroupd.broker.config.http import TokenFileError, bind_host, exposed, read_token
from kgroupd.broker.security.credentials import SecuritySetupError

if TYPE_CHECKING:
    from kgroupd.broker.config.settings import BrokerConfig

log = structlog.get_logger("kgroupd.http")

OPEN_PATHS = frozenset({"/healthz", "/readyz"})
COOKIE = "kgroupd_http_token"
_COOKIE_KEY = b"kgroupd http cookie v1"
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@dataclass(frozen=True)
class HttpSecurity:
    token: str | None = None  # --http-auth-token-file's
    tls: ssl.SSLContext | None = None  # --http-ssl
    client_certs: bool = False  # --http-ssl with --ssl-client-auth required

    @property
    def cookie_value(self) -> str:
        assert self.token is not None
        return hmac.new(self.token.encode(), _COOKIE_KEY, hashlib.sha256).hexdigest()

    def middlewares(self) -> list[Middleware]:
        out: list[Middleware] = []
        if self.client_certs:
            out.append(self._client_cert)
        if self.token is not None:
            out.append(self._bearer)
        return out

    @web.middleware
    async def _client_cert(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        if request.path in OPEN_PATHS:
            return await handler(request)
        ssl_object = request.transport.get_extra_info("ssl_object") if request.transport else None
        if ssl_object is None or not ssl_object.getpeercert():
            log.info("http_refused", path=request.path, remote=request.remote, why="no cert")
            return web.Response(status=403, text="a client certificate is required\n")
        return await handler(request)

    @web.middleware
    async def _bearer(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        if request.path in OPEN_PATHS:
            return await handler(request)
        given = request.query.get("token")
        if given is not None:
            if not _same(given, self.token):
                return _unauthorized(request, "wrong token in the query")
            # the cookie for the browser, and the address again without the token in it
            query = {k: v for k, v in request.query.items() if k != "token"}
            # a path, never "//host/...": the redirect stays on this listener
            where = request.rel_url.with_query(query)
            location = "/" + str(where).lstrip("/")
            resp = web.Response(status=303, headers={"Location": location})
            resp.set_cookie(
                COOKIE,
                self.cookie_value,
                path="/",
                httponly=True,
                samesite="Strict",
                secure=self.tls is not None,
            )
            resp.headers["Cache-Control"] = "no-store"
            return resp
        header = request.headers.get("Authorization", "")
        scheme, _, credentials = header.partition(" ")
        if scheme.lower() == "bearer" and _same(credentials.strip(), self.token):
            return await handler(request)
        cookie = request.cookies.get(COOKIE)
        if cookie is not None and _same(cookie, self.cookie_value):
            return await handler(request)
        return _unauthorized(request, "wrong token" if header or cookie else "no token")


def _same(given: str, expected: str | None) -> bool:
    assert expected is not None
    return hmac.compare_digest(given.encode(), expected.encode())


def _unauthorized(request: web.Request, why: str) -> web.Response:
    log.info("http_refused", path=request.path, remote=request.remote, why=why)
    return web.Response(
        status=401,
        text="unauthorized: send 'Authorization: Bearer TOKEN', or open /?token=TOKEN once in "
        "a browser (the token of --http-auth-token-file)\n",
        headers={"WWW-Authenticate": 'Bearer realm="kgroupd"'},
    )


def http_security(
    token_file: str | None,
    tls: bool,
    certfile: str | None,
    keyfile: str | None,
    cafile: str | None,
    client_auth: str,
) -> HttpSecurity:
    """The token read from its file (warning when group or other may read it) and the HTTPS
    context; ``SecuritySetupError`` when either cannot be used."""
    token = None
    if token_file is not None:
        try:
            token = read_token(token_file)
        except TokenFileError as exc:
            raise SecuritySetupError(str(exc)) from None
        if exposed(token_file):
            log.warning(
                "http_token_file_readable",
                file=token_file,
                hint="group or other may read it: chmod 600",
            )
    context = None
    if tls:
        assert certfile is not None  # kgroupd.broker.config.http.check
        # A certificate is asked for, not demanded, in the handshake: /healthz and /readyz
        # stay open to probes; the middleware demands it on every other path.
        asked = "none" if client_auth == "none" else "requested"
        try:
            from kgroupd.broker.security.tls import server_context

            context = server_context(certfile, keyfile, cafile, asked)
        except (OSError, ssl.SSLError) as exc:
            files = ", ".join(n for n in (certfile, keyfile, cafile) if n)
            raise SecuritySetupError(
                f"--http-ssl cannot use the TLS files {files}: {exc}"
            ) from None
    return HttpSecurity(token, context, tls and client_auth == "required")


def http_settings(config: BrokerConfig) -> tuple[str, HttpSecurity]:
    """Where the HTTP listener binds (logged when a secured Kafka listener made it loopback)
    and who may use it."""
    host, loopback = bind_host(config.http_host, config.listener_list())
    if loopback:
        log.info(
            "http_host_loopback",
            host=host,
            why="a Kafka listener is secured; --http-host (KGROUPD_HTTP_HOST) binds elsewhere",
        )
    security = http_security(
        config.http_auth_token_file,
        config.http_ssl,
        config.ssl_certfile,
        config.ssl_keyfile,
        config.ssl_cafile,
        config.ssl_client_auth,
    )
    return host, security
