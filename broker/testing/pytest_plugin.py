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

``kgroupd_controls``: the test controls of the session's broker (every fixture's broker has
them on; ``broker.controls`` for one of ``kgroupd_broker``'s)::

    def test_retries(kgroupd_controls, kgroupd_bootstrap):
        kgroupd_controls.inject_error("Produce", "NOT_LEADER_OR_FOLLOWER", count=3)
        kgroupd_controls.advance_clock(46_000)   # sessions of 45 s expire now

    def test_failover(kgroupd_broker):
        broker = kgroupd_broker(nodes=3)         # three simulated nodes, one process
        ...                                      # clients on broker.bootstrap_all
        broker.controls.node_down(broker.controls.coordinator("my-group"))

``kgroupd_session_broker``: the session's ``ThreadedBroker`` itself (``.http`` is the base
URL of its HTTP listener, where the same controls are under ``/api/test``; docs/testing.md).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from kgroupd.broker.testing.brokers import ThreadedBroker
    from kgroupd.broker.testing.controls import ThreadControls

__all__ = ["kgroupd_bootstrap", "kgroupd_broker", "kgroupd_controls", "kgroupd_session_broker"]


@pytest.fixture(scope="session")
def kgroupd_session_broker() -> Iterator[ThreadedBroker]:
    """The kgroupd shared by the session (in memory, 127.0.0.1, test controls on)."""
    from kgroupd.broker.testing.brokers import ThreadedBroker

    with ThreadedBroker() as broker:
        yield broker


@pytest.fixture(scope="session")
def kgroupd_bootstrap(kgroupd_session_broker: ThreadedBroker) -> str:
    """``host:port`` of a kgroupd shared by the session (in memory, 127.0.0.1)."""
    return kgroupd_session_broker.bootstrap


@pytest.fixture
def kgroupd_controls(kgroupd_session_broker: ThreadedBroker) -> Iterator[ThreadControls]:
    """The session broker's test controls; errors a test injected and left pending are
    cleared when it ends (the clock stays where it was moved: it only goes forward)."""
    controls = kgroupd_session_broker.controls
    yield controls
    controls.clear_errors()


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
