"""The broker's shared state: config, topics, producers; what every handler reaches."""

from __future__ import annotations

import asyncio
import base64
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING

from broker.config import BrokerConfig
from broker.coordinator import CoordinatorConfig, GroupCoordinator, RecordSink, Timers
from broker.log.producers import ProducerStateManager
from broker.log.topics import TopicManager

if TYPE_CHECKING:
    from broker.storage.durability import Durability


def new_cluster_id() -> str:
    # Kafka's cluster ids are a random UUID in URL-safe base64 without padding.
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")


class Broker:
    def __init__(self, config: BrokerConfig) -> None:
        self.config = config
        self.node_id = config.node_id
        self.cluster_id = config.cluster_id or new_cluster_id()
        self.topics = TopicManager()
        self.producers = ProducerStateManager()
        # Set by the server once an event loop runs (its timers live on the loop).
        self.coordinator: GroupCoordinator = None  # type: ignore[assignment]
        self.advertised_host = config.advertised_host or config.host
        self.advertised_port = config.advertised_port or config.port
        # Under --data-dir (set by the server): broker.storage.durability.Durability.
        self.durability: Durability | None = None

    def create_startup_topics(self) -> None:
        """``--create-topic``: created unless it exists (it may, loaded from the data dir)."""
        for spec in self.config.create_topics:
            if self.topics.get(spec.name) is None:
                self.topics.check_create(spec.name, spec.partitions, 1, {})
                self.topics.create(spec.name, spec.partitions)

    def state_synced(self) -> asyncio.Future[None] | None:
        """After a coordinator write: a future for it being durable (fsync=always), or None."""
        return self.durability.state_synced() if self.durability is not None else None

    def data_synced(self) -> asyncio.Future[None] | None:
        """After a produce: a future for the batches being durable (fsync=always), or None."""
        return self.durability.data_synced() if self.durability is not None else None

    def start_coordinator(
        self, timers: Timers, sink_factory: Callable[[int], RecordSink] | None = None
    ) -> None:
        c = self.config
        self.coordinator = GroupCoordinator(
            CoordinatorConfig(
                offsets_partitions=c.offsets_partitions,
                initial_rebalance_delay_ms=c.initial_rebalance_delay_ms,
                group_min_session_timeout_ms=c.group_min_session_timeout_ms,
                group_max_session_timeout_ms=c.group_max_session_timeout_ms,
                group_max_size=c.group_max_size,
                offsets_retention_minutes=c.offsets_retention_minutes,
                offset_metadata_max_bytes=c.offset_metadata_max_bytes,
            ),
            timers,
            self.node_id,
            sink_factory,
        )

    def bound(self, port: int) -> None:
        self.advertised_host, self.advertised_port = self.config.advertised(port)
