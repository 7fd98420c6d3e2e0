"""kgroupd's pytest plugin, registered through the ``pytest11`` entry point: installing
kgroupd makes these fixtures available in any test suite, no ``pytest_plugins`` line needed.

``kgroupd_bootstrap``: the ``host:port`` of one broker for the whole session (in memory, on
127.0.0.1, a free port; on a thread of its own, so sync and async tests on any event loop can
use it). Topics and groups persist across the tests of a session: give each test its own.

``kgroupd_broker``: a factory for brokers with settings, each stopped when the test ends::

    def test_restart_keeps_offsets(kgroupd_broker, tmp_path):
        broker = kgroupd_broker(data_dir=tmp_path, create_topics=["events:3"])
        ...                                      # clients on broker.bootstrap
        broker.restart()                         # same port, same data

Settings are the broker's configuration fields (``data_dir``, ``listeners``,
``create_topics``, ``log_level``, ...), see ``kgroupd.broker.testing.ThreadedBroker``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from kgroupd.broker.testing.brokers import ThreadedBroker

__all__ = ["kgroupd_bootstrap", "kgroupd_broker"]


@pytest.fixture(scope="session")
def kgroupd_bootstrap() -> Iterator[str]:
    """``host:port`` of a kgroupd shared by the session (in memory, 127.0.0.1)."""
    from kgroupd.broker.testing.brokers import ThreadedBroker

    with ThreadedBroker() as broker:
        yield broker.bootstrap


@pytest.fixture
def kgroupd_broker() -> Iterator[Callable[..., ThreadedBroker]]:
    """Start kgroupd brokers with settings (data_dir, listeners, create_topics, ...): each a
    ``ThreadedBroker`` (``.bootstrap``, ``.restart()``), stopped when the test ends."""
    started: list[ThreadedBroker] = []

    def start(**settings: Any) -> ThreadedBroker:
        from kgroupd.broker.testing.brokers import ThreadedBroker

        broker = ThreadedBroker(**settings).start()
        started.append(broker)
        return broker

    yield start
    for broker in reversed(started):
        broker.stop()
