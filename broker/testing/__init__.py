"""kgroupd in your own tests: ``ThreadedBroker`` (a broker on a thread of its own),
``running_broker`` and ``running_server`` (on the caller's event loop), and the pytest plugin
(``pytest_plugin``: the ``kgroupd_bootstrap`` and ``kgroupd_broker`` fixtures).

The names are imported when first used, so loading the plugin costs a test session nothing
until a fixture starts a broker.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kgroupd.broker.testing.brokers import ThreadedBroker, running_broker, running_server

__all__ = ["ThreadedBroker", "running_broker", "running_server"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from kgroupd.broker.testing import brokers

        return getattr(brokers, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
