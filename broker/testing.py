"""An in-process broker for your own tests.

    async with running_broker() as bootstrap:      # "127.0.0.1:PORT"
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap)

or, with pytest, ``pytest_plugins = ["broker.testing"]`` and the ``kgroupd_bootstrap`` fixture.
"""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from broker.config import BrokerConfig
from broker.server import KafkaServer


@asynccontextmanager
async def running_server(**overrides: Any) -> AsyncIterator[KafkaServer]:
    """Start a broker on a free loopback port; stop it (gracefully) on exit."""
    fields = {"host": "127.0.0.1", "port": 0, **overrides}
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


try:
    import pytest_asyncio
except ImportError:  # pragma: no cover - pytest is only there in test environments
    pass
else:

    @pytest_asyncio.fixture
    async def kgroupd_bootstrap() -> AsyncIterator[str]:
        async with running_broker() as bootstrap:
            yield bootstrap
