"""A tiny single-shot result holder for parked requests.

The coordinator never runs an event loop: a JoinGroup or SyncGroup that must wait returns
a ``Deferred`` that only the shard resolves. The wire layer bridges it to an asyncio future
with ``add_callback`` (see ``to_future`` in the package docstring).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")

__all__ = ["Deferred", "DeferredError"]


class DeferredError(RuntimeError):
    """Raised on ``result()`` before resolution, or on a second ``resolve()``."""


class Deferred(Generic[T]):
    """A value that is resolved exactly once; callbacks run at resolution (or at once)."""

    __slots__ = ("_callbacks", "_done", "_value")

    def __init__(self) -> None:
        self._done = False
        self._value: T | None = None
        self._callbacks: list[Callable[[T], None]] = []

    @classmethod
    def resolved(cls, value: T) -> Deferred[T]:
        d: Deferred[T] = cls()
        d.resolve(value)
        return d

    def done(self) -> bool:
        return self._done

    def result(self) -> T:
        if not self._done:
            raise DeferredError("deferred is not resolved yet")
        return self._value  # type: ignore[return-value]

    def resolve(self, value: T) -> None:
        if self._done:
            raise DeferredError("deferred already resolved")
        self._done = True
        self._value = value
        callbacks, self._callbacks = self._callbacks, []
        for fn in callbacks:
            fn(value)

    def add_callback(self, fn: Callable[[T], None]) -> None:
        if self._done:
            fn(self._value)  # type: ignore[arg-type]
        else:
            self._callbacks.append(fn)

    def __repr__(self) -> str:
        return f"Deferred({self._value!r})" if self._done else "Deferred(<pending>)"
