"""The listener: accepts connections, runs housekeeping, shuts down gracefully."""

from __future__ import annotations

import asyncio
import contextlib

import structlog

from broker.config import BrokerConfig
from broker.connection import KafkaConnection
from broker.coordinator import LoopTimers
from broker.log.partition import now_ms
from broker.state import Broker

log = structlog.get_logger("kgroupd.server")

RETENTION_CHECK_INTERVAL_S = 300.0  # Kafka: log.retention.check.interval.ms


class KafkaServer:
    def __init__(self, config: BrokerConfig) -> None:
        self.config = config
        self.broker = Broker(config)
        self.connections: set[KafkaConnection] = set()
        self._server: asyncio.base_events.Server | None = None
        self._housekeeping: asyncio.Task[None] | None = None
        self.port = config.port

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        self.timers = LoopTimers(loop)
        broker = self.broker
        if self.config.data_dir is not None:
            from broker.storage.durability import Durability

            durability = Durability(self.config, loop)
            broker.cluster_id, records = durability.open(broker.topics, broker.producers)
            broker.create_startup_topics()
            broker.start_coordinator(self.timers, durability.sink_for)
            durability.attach(broker.coordinator, records)
            broker.durability = durability
            log.info(
                "data_dir_loaded",
                data_dir=self.config.data_dir,
                fsync=self.config.fsync_mode,
                topics=len(broker.topics.topics),
            )
        else:
            broker.create_startup_topics()
            broker.start_coordinator(self.timers)
        self._server = await loop.create_server(
            lambda: KafkaConnection(self),
            self.config.host,
            self.config.port,
            reuse_address=True,
            backlog=1024,
        )
        sock = self._server.sockets[0]
        self.port = sock.getsockname()[1]
        self.broker.bound(self.port)
        self._housekeeping = asyncio.create_task(self._retention_loop())
        log.info(
            "listening",
            host=self.config.host,
            port=self.port,
            advertised=f"{self.broker.advertised_host}:{self.broker.advertised_port}",
            node_id=self.broker.node_id,
            cluster_id=self.broker.cluster_id,
        )

    async def _retention_loop(self) -> None:
        while True:
            await asyncio.sleep(RETENTION_CHECK_INTERVAL_S)
            dropped = self.broker.topics.apply_retention(now_ms())
            if dropped:
                log.info("retention", batches_deleted=dropped)

    async def stop(self, grace_s: float = 5.0) -> None:
        """Stop accepting, let in-flight requests finish, close every connection."""
        if self._server is None:
            return
        self._server.close()
        if self._housekeeping is not None:
            self._housekeeping.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._housekeeping
        # Parked JoinGroup/SyncGroup are answered (NOT_COORDINATOR) and timers stop; with a
        # data dir, the coordinator's state is snapshotted first.
        if self.broker.durability is not None:
            await self.broker.durability.close()
        else:
            self.broker.coordinator.shutdown()
        self.timers.cancel_all()
        for conn in list(self.connections):
            conn.close_when_idle()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + grace_s
        while self.connections and loop.time() < deadline:
            await asyncio.sleep(0.01)
        for conn in list(self.connections):
            if conn.transport is not None:
                conn.transport.abort()
        await self._server.wait_closed()
        self._server = None
        log.info("stopped")
