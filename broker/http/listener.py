"""The HTTP listener: ``/healthz``, ``/readyz``, ``/metrics`` and (``kgroupd.broker.http.api``) the
JSON API, ``/api/events`` and the live page, on the broker's own event
loop (aiohttp's low-level ``AppRunner`` and ``TCPSite``: no thread, no second loop, and a
scrape is one short callback between Kafka requests). Open to whoever reaches it unless
``--http-auth-token-file`` or ``--http-ssl`` with client certificates says otherwise
(``kgroupd.broker.http.auth``); ``/healthz`` and ``/readyz`` are always open."""

from __future__ import annotations

import asyncio
import errno
from collections.abc import Callable, Iterable

import structlog
from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.metrics_core import Metric

from kgroupd.broker.http.api import Api
from kgroupd.broker.http.auth import HttpSecurity

log = structlog.get_logger("kgroupd.http")


class HttpBindError(OSError):
    """The HTTP listener's address cannot be bound."""


class HttpListener:
    def __init__(
        self,
        host: str | None,
        port: int,
        ready: Callable[[], str | None],
        collect: Callable[[], Iterable[Metric]] | None,
        api: Api | None = None,
        security: HttpSecurity | None = None,
        fallback: bool = False,
    ) -> None:
        self.host = host
        self.port = port
        # the port was not asked for (the default 8080): when it is taken, take a free one
        self.fallback = fallback
        self._ready = ready  # None when ready, else why not
        self._collect = collect  # None: --no-metrics
        self._runner: web.AppRunner | None = None
        self.api = api
        self.security = security or HttpSecurity()

    async def start(self) -> int:
        """Bind and serve; the bound port (``--http-port 0`` binds a free one)."""
        app = web.Application(middlewares=self.security.middlewares())
        app.router.add_get("/healthz", self._healthz)
        app.router.add_get("/readyz", self._readyz)
        app.router.add_get("/metrics", self._metrics)
        if self.api is not None:
            self.api.routes(app)
        runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await runner.setup()
        requested = self.port
        try:
            try:
                site = await self._bind(runner, requested)
            except OSError as exc:
                if not (self.fallback and exc.errno == errno.EADDRINUSE):
                    raise
                site = await self._bind(runner, 0)
        except OSError as exc:
            await runner.cleanup()
            where = f"{self.host or '*'}:{self.port}"
            raise HttpBindError(
                f"cannot listen for HTTP on {where} (--http-port, --http-host): "
                f"{exc.strerror or exc}"
            ) from None
        self._runner = runner
        server = site._server
        sockets = getattr(server, "sockets", None) or ()
        self.port = sockets[0].getsockname()[1] if sockets else self.port
        if self.port != requested and requested != 0:
            log.warning("http_port_taken", requested=requested, port=self.port, flag="--http-port")
        log.info(
            "http_listening",
            host=self.host or "*",
            port=self.port,
            scheme="https" if self.security.tls is not None else "http",
            token=self.security.token is not None,
            client_certs=self.security.client_certs,
        )
        return self.port

    async def _bind(self, runner: web.AppRunner, port: int) -> web.TCPSite:
        site = web.TCPSite(
            runner, self.host or None, port, reuse_address=True, ssl_context=self.security.tls
        )
        try:
            await site.start()
        except OSError:
            await site.stop()  # unregistered from the runner: another site may be tried
            raise
        return site

    async def stop(self) -> None:
        if self.api is not None:
            await self.api.live.stop()  # open /api/events streams end
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def _healthz(self, _request: web.Request) -> web.Response:
        return web.Response(text="ok\n")

    async def _readyz(self, _request: web.Request) -> web.Response:
        why = self._ready()
        if why is None:
            return web.Response(text="ready\n")
        return web.Response(status=503, text=f"not ready: {why}\n")

    async def _metrics(self, _request: web.Request) -> web.Response:
        if self._collect is None:
            return web.Response(status=404, text="metrics are off (--no-metrics)\n")
        # The broker's state is read on the loop (nothing else may touch it); the text is
        # written on a worker thread, so a large scrape does not hold the Kafka path.
        families = list(self._collect())
        body = await asyncio.get_running_loop().run_in_executor(None, _render, families)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})


class _Collected:
    """Metric families already read, for ``generate_latest``."""

    def __init__(self, families: list[Metric]) -> None:
        self.families = families

    def collect(self) -> Iterable[Metric]:
        return self.families


def _render(families: list[Metric]) -> bytes:
    """The text of ``families`` in order; those that write their own (``metrics.Later``: a
    line per partition) do, the others through ``generate_latest``."""
    out: list[bytes] = []
    plain: list[Metric] = []
    for family in families:
        text = getattr(family, "text", None)
        if text is None:
            plain.append(family)
            continue
        if plain:
            out.append(generate_latest(_Collected(plain)))
            plain = []
        out.append(text().encode())
    if plain:
        out.append(generate_latest(_Collected(plain)))
    return b"".join(out)
