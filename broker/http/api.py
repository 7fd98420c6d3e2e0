"""The HTTP listener's JSON API and live page: ``/api/groups``, ``/api/groups/{id}``,
``/api/topics``, ``/api/events`` (server-sent events) and ``/`` (static files under
``broker/http/web``, shipped as package data; no build step)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import structlog
from aiohttp import web

from kgroupd.broker.http.live import QUEUE_LIMIT, LiveEvents
from kgroupd.broker.http.views import group_view, groups_view, topics_view

if TYPE_CHECKING:
    from kgroupd.broker.http.test_controls import TestControlsApi
    from kgroupd.broker.state import Broker

log = structlog.get_logger("kgroupd.http")

WEB = Path(__file__).parent / "web"
KEEPALIVE_S = 15.0
_TYPES = {".html": "text/html", ".js": "text/javascript", ".css": "text/css"}


class Api:
    def __init__(
        self,
        broker: Callable[[], Broker | None],
        live: LiveEvents,
        test_controls: TestControlsApi | None = None,  # --test-controls: /api/test/*
    ) -> None:
        self._broker = broker
        self.live = live
        self.test_controls = test_controls

    def routes(self, app: web.Application) -> None:
        app.router.add_get("/", self._index)
        app.router.add_get("/static/{name}", self._static)
        app.router.add_get("/api/groups", self._groups)
        app.router.add_get("/api/groups/{group}", self._group)
        app.router.add_get("/api/topics", self._topics)
        app.router.add_get("/api/events", self._events)
        if self.test_controls is not None:
            self.test_controls.routes(app)

    def _loaded(self) -> Broker:
        broker = self._broker()
        if broker is None:
            raise web.HTTPServiceUnavailable(text="not ready: loading the data dir\n")
        return broker

    async def _groups(self, _request: web.Request) -> web.Response:
        return await _json({"groups": groups_view(self._loaded())})

    async def _group(self, request: web.Request) -> web.Response:
        found = group_view(self._loaded(), request.match_info["group"])
        if found is None:
            return web.json_response({"error": "GROUP_ID_NOT_FOUND"}, status=404)
        return web.json_response(found)

    async def _topics(self, _request: web.Request) -> web.Response:
        return await _json({"topics": topics_view(self._loaded())})

    async def _index(self, _request: web.Request) -> web.Response:
        return _file("index.html")

    async def _static(self, request: web.Request) -> web.Response:
        return _file(request.match_info["name"])

    async def _events(self, request: web.Request) -> web.StreamResponse:
        sub = self.live.subscribe()
        if sub is None:
            return web.Response(status=503, text="too many event subscribers\n")
        resp = web.StreamResponse(
            headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
        )
        transport = request.transport
        sub.abort = transport.abort if transport is not None else None
        try:
            await resp.prepare(request)
            await resp.write(b"retry: 2000\n\n")
            while not sub.closed:
                while sub.queue and not sub.dropped:
                    await resp.write(sub.queue.popleft())
                if sub.dropped:
                    break
                sub.wake.clear()
                try:
                    await asyncio.wait_for(sub.wake.wait(), KEEPALIVE_S)
                except TimeoutError:
                    await resp.write(b": keepalive\n\n")
        except ConnectionError:
            pass
        finally:
            self.live.unsubscribe(sub)
            if sub.dropped:
                log.warning(
                    "events_subscriber_dropped",
                    peer=request.remote,
                    why=f"{QUEUE_LIMIT} events behind; disconnected",
                )
        return resp


async def _json(data: dict[str, Any]) -> web.Response:
    """The state was read on the loop (nothing else may touch it); the text is written on a
    worker thread, as /metrics' is, so a broker with many groups is not held meanwhile."""
    body = await asyncio.get_running_loop().run_in_executor(None, json.dumps, data)
    return web.Response(text=body, content_type="application/json")


def _file(name: str) -> web.Response:
    path = WEB / name
    kind = _TYPES.get(path.suffix)
    # a bare file name of web/ (its files may be links, as in a strict editable install)
    if kind is None or Path(name).name != name or name.startswith(".") or not path.is_file():
        raise web.HTTPNotFound()
    return web.Response(
        body=path.read_bytes(),
        content_type=kind,
        charset="utf-8",
        headers={"Cache-Control": "no-cache"},
    )
