"""An in-process broker for your own tests.

    async with running_broker() as bootstrap:      # "127.0.0.1:PORT", on the caller's loop
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap)

    with ThreadedBroker(create_topics=["events:3"]) as broker:   # on a thread of its own
        producer = KafkaProducer(bootstrap_servers=broker.bootstrap)

With pytest, installing kgroupd is enough: its plugin (``kgroupd.broker.testing.pytest_plugin``,
registered
through the ``pytest11`` entry point) provides the ``kgroupd_bootstrap`` and ``kgroupd_broker``
fixtures.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from kgroupd.broker.config.settings import BrokerConfig, TopicSpec
from kgroupd.broker.net.server import KafkaServer
from kgroupd.broker.testing.controls import ThreadControls


@asynccontextmanager
async def running_server(**overrides: Any) -> AsyncIterator[KafkaServer]:
    """Start a broker on a free loopback port (and a free HTTP port: ``server.http.port``);
    stop it (gracefully) on exit."""
    fields = {"host": "127.0.0.1", "port": 0, "http_port": 0, **overrides}
    config = dataclasses.replace(BrokerConfig(), **fields)
    server = KafkaServer(config)
    await server.start()
    try:
        yield server
    finally:
        await server.stop()


@asynccontextmanager
async def running_broker(**overrides: Any) -> AsyncIterator[str]:
    """Like ``running_server`` but yields the bootstrap address ``host:port``."""
    async with running_server(**overrides) as server:
        yield f"{server.config.host}:{server.port}"


def _settings(overrides: dict[str, Any]) -> dict[str, Any]:
    """BrokerConfig fields from friendlier test settings: ``create_topics`` may name topics
    as ``"name:partitions"`` strings, ``data_dir`` may be a Path."""
    out = dict(overrides)
    topics = out.get("create_topics")
    if topics is not None:
        specs = []
        for t in topics:
            if isinstance(t, str):
                name, _, count = t.rpartition(":")
                t = TopicSpec(name, int(count))
            specs.append(t)
        out["create_topics"] = tuple(specs)
    if out.get("data_dir") is not None:
        out["data_dir"] = os.fspath(out["data_dir"])
    if out.get("listeners") is not None:
        out.pop("host", None)
        out.pop("port", None)
    return out


class ThreadedBroker:
    """A broker on an event loop of its own in a daemon thread: usable from synchronous tests
    and from async tests on any event loop (pytest-asyncio's loop scopes do not matter).

        broker = ThreadedBroker(create_topics=["events:3"], data_dir=tmp_path).start()
        broker.bootstrap        # "127.0.0.1:PORT" (the first listener)
        broker.bootstraps       # {"PLAINTEXT": "127.0.0.1:PORT", ...} every listener
        broker.restart()        # stop and start again (same ports; same data with data_dir)
        broker.stop()

    Settings are ``BrokerConfig`` fields (``data_dir``, ``listeners``, ``create_topics`` as
    ``"name:partitions"``, ``log_level``...); without ``listeners`` it listens on 127.0.0.1
    on a free port. The test controls are on (``broker.controls``, ``broker.http`` +
    ``/api/test/...``) unless ``test_controls=False``.
    """

    def __init__(self, **settings: Any) -> None:
        self.settings = _settings(
            {
                "host": "127.0.0.1",
                "port": 0,
                "http_port": 0,
                "log_level": "warning",
                "test_controls": True,
            }
            | settings
        )
        self.server: KafkaServer | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    def start(self, timeout: float = 30.0) -> ThreadedBroker:
        assert self.server is None, "already running"
        loop = self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=loop.run_forever, name="kgroupd", daemon=True)
        self._thread.start()
        config = dataclasses.replace(BrokerConfig(), **self.settings)
        server = KafkaServer(config)
        try:
            asyncio.run_coroutine_threadsafe(server.start(), loop).result(timeout)
        except BaseException:
            self._stop_loop()
            raise
        self.server = server
        # a restart binds the same ports, so clients (and advertised addresses) stay valid
        if "listeners" in self.settings:
            self.settings["listeners"] = ",".join(
                f"{listener.name}://{listener.host}:{port}" for listener, port, _adv in server.bound
            )
        else:
            self.settings["port"] = server.port
        return self

    @property
    def bootstraps(self) -> dict[str, str]:
        """Every listener's name and its advertised ``host:port``."""
        assert self.server is not None, "not running"
        return {listener.name: f"{host}:{port}" for listener, _p, (host, port) in self.server.bound}

    @property
    def bootstrap(self) -> str:
        return next(iter(self.bootstraps.values()))

    @property
    def bootstrap_all(self) -> str:
        """Every node's address on the first listener, comma-separated (``--nodes N``; with
        one node, ``bootstrap``): what clients need to reach the cluster when a node is down."""
        assert self.server is not None, "not running"
        nodes = self.server.broker.nodes
        if nodes is None:
            return self.bootstrap
        first = self.server.bound[0][0].name
        return ",".join(f"{host}:{port}" for host, port in nodes.endpoints[first])

    @property
    def http(self) -> str:
        """``http://host:port`` of the HTTP listener (the test controls are under /api/test)."""
        assert self.server is not None and self.server.http is not None, "no HTTP listener"
        return f"http://{self.server.http.host or '127.0.0.1'}:{self.server.http.port}"

    @property
    def controls(self) -> ThreadControls:
        """The test controls (on unless started with ``test_controls=False``)::

        broker.controls.inject_error("Produce", "NOT_LEADER_OR_FOLLOWER", count=3)
        broker.controls.advance_clock(46_000)        # sessions of 45 s expire now
        broker.controls.rebalance("my-group")
        broker.controls.expire_member("my-group", member_id)
        broker.controls.node_down(1)                 # with nodes=N: a node fails
        """
        server = self.server
        assert server is not None and self._loop is not None, "not running"
        if server.controls is None:
            raise RuntimeError("the test controls are off (test_controls=False)")
        return ThreadControls(self._loop, server.controls)

    def stop(self, timeout: float = 30.0) -> None:
        """A clean stop (what --data-dir holds is flushed, as on SIGTERM)."""
        if self.server is not None and self._loop is not None:
            try:
                asyncio.run_coroutine_threadsafe(self.server.stop(), self._loop).result(timeout)
            finally:
                self.server = None
                self._stop_loop()

    def restart(self) -> ThreadedBroker:
        self.stop()
        return self.start()

    def _stop_loop(self) -> None:
        loop, thread = self._loop, self._thread
        if loop is not None and thread is not None:
            loop.call_soon_threadsafe(loop.stop)
            thread.join(10)
            loop.close()
        self._loop = self._thread = None

    def __enter__(self) -> ThreadedBroker:
        return self.start() if self.server is None else self

    def __exit__(self, *exc: object) -> None:
        self.stop()
