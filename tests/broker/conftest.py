from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest_asyncio

from tests.broker.storage_helpers import BROKER_ARGS
from tests.support.broker_process import BrokerProcess, broker_process


@pytest_asyncio.fixture
async def broker(tmp_path: Path) -> AsyncIterator[BrokerProcess]:
    """A kgroupd subprocess on ``tmp_path / "data"`` with one coordinator shard (not started)."""
    async with broker_process(tmp_path / "data", args=BROKER_ARGS) as proc:
        yield proc
