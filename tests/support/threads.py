"""Blocking clients (confluent-kafka, kafka-python) run on threads of their own; what they
hand back to the test's event loop goes through ``settle``."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any


def settle(
    loop: asyncio.AbstractEventLoop,
    fut: asyncio.Future[Any],
    value: Any = None,
    exc: BaseException | None = None,
) -> None:
    """From a client's thread: give ``fut`` its result (``exc``: its exception) on ``loop``,
    unless it is done already. Nothing once the loop is closed: the test is over already."""

    def set_it() -> None:
        if fut.done():
            return
        if exc is not None:
            fut.set_exception(exc)
        else:
            fut.set_result(value)

    with contextlib.suppress(RuntimeError):
        loop.call_soon_threadsafe(set_it)
