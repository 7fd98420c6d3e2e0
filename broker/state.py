"""The broker's shared state: config, topics, producers; what every handler reaches."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import structlog

from kgroupd.broker.config.settings import BrokerConfig
from kgroupd.broker.coordinator import CoordinatorConfig, GroupCoordinator
from kgroupd.broker.coordinator.txn import TransactionCoordinator
from kgroupd.broker.log.consumer_offsets import OffsetsTopic
from kgroupd.broker.log.producers import ProducerStateManager
from kgroupd.broker.log.topics import TopicManager
from kgroupd.broker.quotas import open_quotas
from kgroupd.broker.security.acls import Authorizer
from kgroupd.broker.security.credentials import CredentialStore
from kgroupd.broker.share.durable import attach, restore, restore_configs
from kgroupd.broker.share.group_config import GroupConfigs
from kgroupd.broker.share.service import ShareService
from kgroupd.broker.telemetry import ClientTelemetry
from kgroupd.broker.throttle import Throttle

if TYPE_CHECKING:
    from kgroupd.broker.nodes import Nodes
    from kgroupd.broker.stats import BrokerStats
    from kgroupd.broker.storage.durability import Durability


class Broker:
    """Everything a handler reaches, built whole by the server once its event loop runs."""

    def __init__(
        self,
        config: BrokerConfig,
        cluster_id: str,
        topics: TopicManager,
        producers: ProducerStateManager,
        coordinator: GroupCoordinator,
        transactions: TransactionCoordinator,
        credentials: CredentialStore,
        durability: Durability | None = None,
        authorizer: Authorizer | None = None,
        offsets_topic: OffsetsTopic | None = None,
    ) -> None:
        self.config = config
        self.node_id = config.node_id
        self.cluster_id = cluster_id
        self.topics = topics
        self.producers = producers
        self.coordinator = coordinator
        self.transactions = transactions
        self.credentials = credentials  # SASL users (kgroupd.broker.security.credentials)
        self.authorizer = authorizer  # --authorizer acl; None: everything is allowed
        self.advertised_host = config.advertised_host or config.host
        self.advertised_port = config.advertised_port or config.port
        # Under --data-dir: kgroupd.broker.storage.durability.Durability.
        self.durability = durability
        # __consumer_offsets, the coordinator's records as Kafka shows them
        self.offsets_topic = offsets_topic or OffsetsTopic(cluster_id, config.offsets_partitions)
        # the GROUP config resource: every group's dynamic configs (KIP-848, KIP-932)
        self.group_configs = GroupConfigs(config)
        self._share: ShareService | None = None
        if durability is not None and durability.share_state is not None:
            # under --data-dir the share groups load with everything else (their sessions'
            # timers are armed once the load is done)
            restore_configs(self.group_configs, durability.share_state)
            self._share = _share_service(self)
        # client quotas (quotas.json under --data-dir) and their enforcement; KIP-714 clients
        self.quotas = open_quotas(config.data_dir)
        self.throttle = Throttle(self.quotas)
        self.telemetry = ClientTelemetry()
        self._pending_syncs: dict[str, asyncio.Future[None]] = {}
        # What the hot path counts for /metrics (kgroupd.broker.http.metrics); None under
        # --no-metrics
        self.stats: BrokerStats | None = None
        # --test-controls: API key -> the injected-error hook (kgroupd.broker.testing.faults);
        # empty unless an error is pending
        self.injected: dict[int, Any] = {}
        # --nodes N > 1: the simulated nodes (kgroupd.broker.nodes); None: one node
        self.nodes: Nodes | None = None

    def state_synced(self) -> asyncio.Future[None] | None:
        """After a coordinator write: a future for it being durable (fsync=always), or None."""
        d = self.durability
        if d is None:
            return None
        if self.config.fsync_mode != "always":
            return None  # written before the answer goes out (``before_send``)
        return self._coalesced("state", d.state_synced)

    def before_send(self) -> None:
        """Called by a connection before it writes answers: under ``--data-dir`` the
        coordinator records emitted so far are written first (one write per batch of
        answers), so an answer never reaches a client before its records reach the file."""
        if self.durability is not None:
            self.durability.write_pending()

    def data_synced(self) -> asyncio.Future[None] | None:
        """After a produce: a future for the batches being durable (fsync=always), or None."""
        d = self.durability
        if d is None or self.config.fsync_mode != "always":
            return None
        return self._coalesced("data", d.data_synced)

    def _coalesced(
        self, kind: str, request: Callable[[], asyncio.Future[None] | None]
    ) -> asyncio.Future[None]:
        """One fsync request for every write of this event-loop turn: the first caller gets a
        future and schedules the request after the current callback (a connection's whole
        read of pipelined requests); every later caller of the turn shares that future, so
        nothing is asked of the fsync thread per request."""
        fut = self._pending_syncs.get(kind)
        if fut is None:
            loop = asyncio.get_running_loop()
            fut = loop.create_future()
            self._pending_syncs[kind] = fut
            loop.call_soon(self._request_sync, kind, request, fut)
        return fut

    def _request_sync(
        self,
        kind: str,
        request: Callable[[], asyncio.Future[None] | None],
        fut: asyncio.Future[None],
    ) -> None:
        del self._pending_syncs[kind]
        try:
            synced = request()
        except OSError as exc:
            fut.set_exception(exc)
            return
        if synced is None:
            fut.set_result(None)
        else:
            synced.add_done_callback(lambda s: _copy_outcome(s, fut))

    def share_synced(self) -> asyncio.Future[None] | None:
        """After a share-state write (acknowledgements, offsets): a future for it being
        durable (fsync=always), or None (written before the answer goes out)."""
        d = self.durability
        if d is None or d.share_store is None or self.config.fsync_mode != "always":
            return None
        return self._coalesced("share", d.share_store.synced)

    @property
    def share(self) -> ShareService:
        """Share groups (KIP-932): their coordinator, partitions and sessions, on first use."""
        if self._share is None:
            self._share = _share_service(self)
        return self._share

    def is_share_group(self, group_id: str) -> bool:
        """Is ``group_id`` a share group's? (False without building the share service.)"""
        return self._share is not None and group_id in self._share.coordinator.groups

    def bound(self, port: int) -> None:
        self.advertised_host, self.advertised_port = self.config.advertised(port)


def _copy_outcome(source: asyncio.Future[None], target: asyncio.Future[None]) -> None:
    if target.done():
        return
    if source.cancelled():
        target.cancel()
    elif (exc := source.exception()) is not None:
        target.set_exception(exc)
    else:
        target.set_result(None)


def coordinator_config(c: BrokerConfig) -> CoordinatorConfig:
    return CoordinatorConfig(
        offsets_partitions=c.offsets_partitions,
        initial_rebalance_delay_ms=c.initial_rebalance_delay_ms,
        group_min_session_timeout_ms=c.group_min_session_timeout_ms,
        group_max_session_timeout_ms=c.group_max_session_timeout_ms,
        group_max_size=c.group_max_size,
        offsets_retention_minutes=c.offsets_retention_minutes,
        offset_metadata_max_bytes=c.offset_metadata_max_bytes,
        consumer_session_timeout_ms=c.group_consumer_session_timeout_ms,
        consumer_min_session_timeout_ms=c.group_consumer_min_session_timeout_ms,
        consumer_max_session_timeout_ms=c.group_consumer_max_session_timeout_ms,
        consumer_heartbeat_interval_ms=c.group_consumer_heartbeat_interval_ms,
        consumer_min_heartbeat_interval_ms=c.group_consumer_min_heartbeat_interval_ms,
        consumer_max_heartbeat_interval_ms=c.group_consumer_max_heartbeat_interval_ms,
        consumer_max_size=c.group_consumer_max_size,
        consumer_assignors=c.group_consumer_assignors,
        consumer_migration_policy=c.group_consumer_migration_policy,
        consumer_regex_refresh_interval_ms=c.group_consumer_regex_refresh_interval_ms,
    )


def _share_service(broker: Broker) -> ShareService:
    coordinator = broker.coordinator

    def other_group_exists(group_id: str) -> bool:
        shard = coordinator.shard_for(group_id)
        return group_id in shard.groups or group_id in shard.consumer_groups

    service = ShareService(
        coordinator.timers,
        TopicsOf(broker.topics),
        broker.group_configs,
        broker.config.group_share_max_size,
        other_group_exists,
        broker.config.group_share_max_share_sessions,
    )
    broker.topics.listeners.append(service.coordinator.on_topics_changed)
    d = broker.durability
    if d is not None and d.share_store is not None:
        if d.share_state is not None:
            restore(service, d.share_state)
            d.share_state = None
        d.share_store.snapshot_source = attach(service, broker.group_configs, d.share_store.append)
    return service


class TopicsOf:
    """The coordinator's view of the broker's topics (``kgroupd.broker.coordinator.TopicsView``)."""

    def __init__(self, topics: TopicManager) -> None:
        self._topics = topics

    def topics(self) -> dict[str, tuple[uuid.UUID, int]]:
        return self._topics.view()


def create_startup_topics(config: BrokerConfig, topics: TopicManager) -> None:
    """``--create-topic``: created unless it exists (it may, loaded from the data dir)."""
    for spec in config.create_topics:
        found = topics.get(spec.name)
        if found is None:
            topics.check_create(spec.name, spec.partitions, 1, {})
            topics.create(spec.name, spec.partitions)
        elif len(found.partitions) != spec.partitions:
            structlog.get_logger("kgroupd.server").warning(
                "create_topic_mismatch",
                topic=spec.name,
                requested_partitions=spec.partitions,
                existing_partitions=len(found.partitions),
                kept="existing",
            )
