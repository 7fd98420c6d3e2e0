"""The test controls' HTTP side (``--test-controls``; unregistered, so 404, without it):

    POST/GET/DELETE /api/test/errors            injected errors
    POST /api/test/clock                        {"advance_ms": N}
    POST /api/test/groups/{group}/rebalance
    POST /api/test/groups/{group}/members/{member}/expire
    GET /api/test/nodes, POST /api/test/nodes/{id}/down, POST /api/test/nodes/{id}/up

The logic is ``kgroupd.broker.testing.controls``; the contract is in docs/testing.md."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from aiohttp import web

from kgroupd.broker.nodes import NodesError
from kgroupd.broker.testing.controls import BadControl, ControlRefused

if TYPE_CHECKING:
    from kgroupd.broker.testing.controls import BrokerControls


class TestControlsApi:
    __test__ = False  # not a pytest class

    def __init__(self, controls: Callable[[], BrokerControls | None]) -> None:
        self._controls = controls

    def routes(self, app: web.Application) -> None:
        app.router.add_post("/api/test/errors", self._inject)
        app.router.add_get("/api/test/errors", self._pending)
        app.router.add_delete("/api/test/errors", self._clear)
        app.router.add_post("/api/test/clock", self._clock)
        app.router.add_post("/api/test/groups/{group}/rebalance", self._rebalance)
        app.router.add_post("/api/test/groups/{group}/members/{member}/expire", self._expire)
        app.router.add_get("/api/test/nodes", self._nodes)
        app.router.add_post("/api/test/nodes/{node}/down", self._down)
        app.router.add_post("/api/test/nodes/{node}/up", self._up)

    def _ready(self) -> BrokerControls:
        controls = self._controls()
        if controls is None:
            raise web.HTTPServiceUnavailable(text="not ready: loading the data dir\n")
        return controls

    async def _inject(self, request: web.Request) -> web.Response:
        controls = self._ready()
        body = await _body(request)
        return _run(lambda: {"injected": controls.inject_error(body)})

    async def _pending(self, _request: web.Request) -> web.Response:
        return web.json_response({"errors": self._ready().pending_errors()})

    async def _clear(self, _request: web.Request) -> web.Response:
        return web.json_response({"cleared": self._ready().clear_errors()})

    async def _clock(self, request: web.Request) -> web.Response:
        controls = self._ready()
        body = await _body(request)
        return _run(lambda: controls.advance_clock(body))

    async def _rebalance(self, request: web.Request) -> web.Response:
        controls = self._ready()
        return _run(lambda: controls.rebalance(request.match_info["group"]))

    async def _expire(self, request: web.Request) -> web.Response:
        controls = self._ready()
        group, member = request.match_info["group"], request.match_info["member"]
        return _run(lambda: controls.expire_member(group, member))

    async def _nodes(self, _request: web.Request) -> web.Response:
        return web.json_response({"nodes": self._ready().nodes()})

    async def _down(self, request: web.Request) -> web.Response:
        controls = self._ready()
        return _run(lambda: controls.node_down(request.match_info["node"]))

    async def _up(self, request: web.Request) -> web.Response:
        controls = self._ready()
        return _run(lambda: controls.node_up(request.match_info["node"]))


async def _body(request: web.Request) -> Any:
    text = await request.text()
    try:
        return json.loads(text)
    except ValueError as exc:
        raise web.HTTPBadRequest(
            text=json.dumps({"error": "INVALID_REQUEST", "reason": f"the body is not JSON: {exc}"}),
            content_type="application/json",
        ) from None


def _run(control: Callable[[], Any]) -> web.Response:
    try:
        result = control()
    except BadControl as exc:
        return web.json_response({"error": "INVALID_REQUEST", "reason": str(exc)}, status=400)
    except (ControlRefused, NodesError) as exc:
        return web.json_response({"error": exc.error, "reason": exc.reason}, status=exc.status)
    return web.json_response(result)
