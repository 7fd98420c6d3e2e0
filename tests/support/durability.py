"""What the ``--data-dir`` tests (test_durability*.py) share: aiokafka clients started and
stopped together, the topic most of them write, and how long they wait for a condition."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

from aiokafka.admin import AIOKafkaAdminClient

WAIT_S = 20.0  # seconds a condition may take
TOPIC, PARTITIONS = "events", 3


@contextlib.asynccontextmanager
async def started(*clients: Any) -> AsyncIterator[None]:
    """Start aiokafka clients; stop (an admin client: close) them all at the end."""
    running = []
    try:
        for client in clients:
            await client.start()
            running.append(client)
        yield
    finally:
        for client in reversed(running):
            await (client.close() if isinstance(client, AIOKafkaAdminClient) else client.stop())
