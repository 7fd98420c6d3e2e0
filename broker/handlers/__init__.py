"""One module per API, imported when the first request of its API arrives
(``registry.entry_for``; ``registry.HOMES`` names each API's module). ``HANDLERS`` read from
this package holds every handler: reading it imports them all."""

from typing import Any

from kgroupd.broker.handlers.registry import RequestContext, handler, supported_versions

__all__ = ["HANDLERS", "RequestContext", "handler", "supported_versions"]


def __getattr__(name: str) -> Any:
    if name == "HANDLERS":
        from kgroupd.broker.handlers.registry import load_all

        return load_all()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
