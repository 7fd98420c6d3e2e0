"""Integration tests run a real broker on a free loopback port, under uvloop."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable

import pytest
import pytest_asyncio
import uvloop

from kgroupd.broker.net.server import KafkaServer
from kgroupd.broker.testing import running_server


def pytest_asyncio_loop_factories(
    config: pytest.Config, item: pytest.Item
) -> dict[str, Callable[[], asyncio.AbstractEventLoop]]:
    return {"uvloop": uvloop.new_event_loop}


@pytest_asyncio.fixture
async def server() -> AsyncIterator[KafkaServer]:
    async with running_server(log_level="warning") as srv:
        yield srv


@pytest.fixture
def bootstrap(server: KafkaServer) -> str:
    return f"127.0.0.1:{server.port}"
