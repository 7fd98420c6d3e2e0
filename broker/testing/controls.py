"""The test controls (``--test-controls``): errors injected into the next requests, the
broker's clock moved forward, a rebalance forced, a member expired. One ``BrokerControls``
per broker, used on its event loop by the HTTP API (``kgroupd.broker.http.test_controls``)
and, through ``ThreadControls``, by ``ThreadedBroker.controls`` and the pytest fixtures.
The contract (paths and JSON fields) is in docs/testing.md."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import structlog

from kgroupd.broker.coordinator.controls import ControlRefused, expire_member, force_rebalance
from kgroupd.broker.testing.faults import BadControl, ErrorInjector

if TYPE_CHECKING:
    from kgroupd.broker.coordinator.timers import LoopTimers
    from kgroupd.broker.nodes import Nodes
    from kgroupd.broker.state import Broker

__all__ = ["BadControl", "BrokerControls", "ControlRefused", "ThreadControls"]

log = structlog.get_logger("kgroupd.test_controls")
MAX_ADVANCE_MS = 10 * 365 * 24 * 3600 * 1000  # ten years
T = TypeVar("T")


class BrokerControls:
    """Every control, on the broker's event loop. Bad input raises ``BadControl`` (HTTP 400);
    a group or member that is not there raises ``ControlRefused`` (its HTTP status)."""

    def __init__(self, broker: Broker, timers: LoopTimers) -> None:
        self.broker = broker
        self.timers = timers
        self.errors = ErrorInjector(broker.injected)

    # --- /api/test/errors ------------------------------------------------------------------
    def inject_error(self, rule: Any) -> dict[str, Any]:
        return self.errors.add(rule).view()

    def pending_errors(self) -> list[dict[str, Any]]:
        return self.errors.pending()

    def clear_errors(self) -> int:
        return self.errors.clear()

    # --- /api/test/clock -------------------------------------------------------------------
    def advance_clock(self, body: Any) -> dict[str, Any]:
        """``{"advance_ms": N}``: every wait of the broker (sessions, rebalances, pending
        syncs, transactions, acquisition locks, offsets retention) moves N ms ahead now."""
        if not isinstance(body, dict) or set(body) != {"advance_ms"}:
            raise BadControl('the body must be {"advance_ms": N}')
        ms = body["advance_ms"]
        if isinstance(ms, bool) or not isinstance(ms, int) or not 0 <= ms <= MAX_ADVANCE_MS:
            raise BadControl(
                f"advance_ms must be an integer from 0 to {MAX_ADVANCE_MS}, not {ms!r}"
            )
        fired = self.timers.advance(ms)
        log.info("test_clock_advanced", advance_ms=ms, fired=fired, offset_ms=self.timers.offset_ms)
        return {
            "advanced_ms": ms,
            "offset_ms": self.timers.offset_ms,
            "fired": fired,
            "now_ms": self.timers.now_ms(),
        }

    # --- /api/test/groups ------------------------------------------------------------------
    def rebalance(self, group_id: str) -> dict[str, Any]:
        return force_rebalance(self.broker.coordinator, group_id)

    def expire_member(self, group_id: str, member_id: str) -> dict[str, Any]:
        return expire_member(self.broker.coordinator, group_id, member_id)

    # --- /api/test/nodes (--nodes N) -------------------------------------------------------
    def nodes(self) -> list[dict[str, Any]]:
        nodes = self.broker.nodes
        if nodes is None:
            b = self.broker
            address = f"{b.advertised_host}:{b.advertised_port}"
            return [{"id": b.node_id, "up": True, "listeners": {"*": address}}]
        return nodes.view()

    def node_down(self, node_id: Any) -> dict[str, Any]:
        """The node's connections close, it takes no new ones; its partitions' leadership
        and its groups' coordination move to the live nodes."""
        result = self._nodes(node_id).set_down(int(node_id))
        log.info("test_node_down", **result)
        return result

    def node_up(self, node_id: Any) -> dict[str, Any]:
        result = self._nodes(node_id).set_up(int(node_id))
        log.info("test_node_up", **result)
        return result

    def coordinator(self, group_id: str) -> int:
        """The id of the node coordinating ``group_id`` now (as FindCoordinator answers)."""
        nodes = self.broker.nodes
        return self.broker.node_id if nodes is None else nodes.coordinator(0, group_id)

    def _nodes(self, node_id: Any) -> Nodes:
        if isinstance(node_id, bool) or not isinstance(node_id, (int, str)):
            raise BadControl(f"a node id is an integer, not {node_id!r}")
        if isinstance(node_id, str) and not node_id.lstrip("-").isdigit():
            raise BadControl(f"a node id is an integer, not {node_id!r}")
        nodes = self.broker.nodes
        if nodes is None:
            raise ControlRefused(
                409,
                "INVALID_REQUEST",
                "this broker serves one node: start it with --nodes N (2 to 16) to take nodes "
                "down and up",
            )
        return nodes


class ThreadControls:
    """The controls of a broker running on another thread (``ThreadedBroker.controls``):
    each call runs on the broker's loop and returns its result (or raises its error)."""

    def __init__(self, loop: asyncio.AbstractEventLoop, controls: BrokerControls) -> None:
        self._loop = loop
        self._controls = controls

    def _call(self, fn: Callable[..., T], *args: Any) -> T:
        async def run() -> T:
            return fn(*args)

        return asyncio.run_coroutine_threadsafe(run(), self._loop).result(30)

    def inject_error(
        self,
        api: str | int,
        error: str | int | None = None,
        count: int = 1,
        **options: Any,
    ) -> dict[str, Any]:
        """The next ``count`` requests of ``api`` are answered with ``error``; ``options``:
        ``client_id``, ``group_id``, ``topic``, ``delay_ms``, ``disconnect``."""
        rule: dict[str, Any] = {"api": api, "count": count, **options}
        if error is not None:
            rule["error"] = error
        return self._call(self._controls.inject_error, rule)

    def pending_errors(self) -> list[dict[str, Any]]:
        return self._call(self._controls.pending_errors)

    def clear_errors(self) -> int:
        return self._call(self._controls.clear_errors)

    def advance_clock(self, ms: int) -> dict[str, Any]:
        return self._call(self._controls.advance_clock, {"advance_ms": ms})

    def rebalance(self, group_id: str) -> dict[str, Any]:
        return self._call(self._controls.rebalance, group_id)

    def expire_member(self, group_id: str, member_id: str) -> dict[str, Any]:
        return self._call(self._controls.expire_member, group_id, member_id)

    def nodes(self) -> list[dict[str, Any]]:
        """Every node (``--nodes N``): its id, whether it is up, its address per listener."""
        return self._call(self._controls.nodes)

    def node_down(self, node_id: int) -> dict[str, Any]:
        """Take a node down: its connections close, its leadership and groups move."""
        return self._call(self._controls.node_down, node_id)

    def node_up(self, node_id: int) -> dict[str, Any]:
        return self._call(self._controls.node_up, node_id)

    def coordinator(self, group_id: str) -> int:
        """The id of the node coordinating ``group_id`` now."""
        return self._call(self._controls.coordinator, group_id)
