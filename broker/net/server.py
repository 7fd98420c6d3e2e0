"""The listener: accepts connections, runs housekeeping, shuts down gracefully."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

import structlog

from kgroupd.broker.config.http import DEFAULT_HTTP_PORT
from kgroupd.broker.config.listeners import Listener, advertised_address
from kgroupd.broker.config.security import TLS_PROTOCOLS
from kgroupd.broker.config.settings import BrokerConfig, new_cluster_id
from kgroupd.broker.config.storage import default_max_memory_bytes, roll_jitter_ms
from kgroupd.broker.coordinator import GroupCoordinator, LoopTimers
from kgroupd.broker.coordinator.events import GroupEvents, TeeEvents
from kgroupd.broker.http.live import LiveEvents
from kgroupd.broker.log.budget import MemoryBudget
from kgroupd.broker.log.consumer_offsets import OFFSETS_TOPIC, OffsetsTopic
from kgroupd.broker.log.partition import now_ms
from kgroupd.broker.log.producers import ProducerStateManager
from kgroupd.broker.log.topics import TopicManager
from kgroupd.broker.net.acceptor import BACKLOG, Acceptor
from kgroupd.broker.net.connection import KafkaConnection
from kgroupd.broker.net.failed_auth import FailedAuthDelay
from kgroupd.broker.net.request_pool import RequestMemoryPool
from kgroupd.broker.security.acls import Authorizer, open_authorizer
from kgroupd.broker.security.credentials import SecuritySetupError, open_store
from kgroupd.broker.state import Broker, TopicsOf, coordinator_config, create_startup_topics
from kgroupd.broker.stats import BrokerStats
from kgroupd.broker.storage.offsets_topic_state import OffsetsTopicState
from kgroupd.broker.transactions import open_transactions

if TYPE_CHECKING:
    import socket
    import ssl

    from kgroupd.broker.http.listener import HttpListener
    from kgroupd.broker.log.cleaner import LogCleaner
    from kgroupd.broker.testing.controls import BrokerControls

log = structlog.get_logger("kgroupd.server")


class ListenerBindError(OSError):
    """A listener's address cannot be bound (in use, or not an address of this host)."""


class KafkaServer:
    def __init__(
        self, config: BrokerConfig, sockets: dict[str, socket.socket] | None = None
    ) -> None:
        self.config = config
        # Kafka listeners' sockets already listening, by listener name (kgroupd.broker.cli.main's
        # listen_early); the others are bound here
        self._sockets = dict(sockets or {})
        self._broker: Broker | None = None
        self.connections: set[KafkaConnection] = set()
        self._server: asyncio.base_events.Server | Acceptor | None = None
        self._servers: list[asyncio.base_events.Server | Acceptor] = []
        # --queued-max-request-bytes, shared by every connection
        self.pool = RequestMemoryPool(config.queued_max_request_bytes, config.max_request_bytes)
        # connection.failed.authentication.delay.ms, for every failed SASL connection
        self.failed_auth = FailedAuthDelay(config.connection_failed_authentication_delay_ms)
        self.bound: list[tuple[Listener, int, tuple[str, int]]] = []
        self._housekeeping: asyncio.Task[None] | None = None
        self._sweeper: asyncio.Task[None] | None = None
        self._cleaning: asyncio.Task[None] | None = None
        self.cleaner: LogCleaner | None = None  # --log-cleaner-enable (kgroupd.broker.log.cleaner)
        self.port = config.port
        self._tls: ssl.SSLContext | None = None
        self.stats: BrokerStats | None = None
        self.http: HttpListener | None = None
        # group events for /api/events and the rebalance log lines
        self.live = LiveEvents(lambda: self._broker)
        self.ready = False  # the data dir loaded and the Kafka listeners accept (/readyz)
        self.controls: BrokerControls | None = None  # --test-controls

    @property
    def broker(self) -> Broker:
        if self._broker is None:
            raise RuntimeError("the server has not started")
        return self._broker

    async def start(self) -> None:
        """With ``--data-dir``: the HTTP listener first (``/healthz`` answers, ``/readyz``
        says not yet), then the data dir loads on a worker thread, then the Kafka listeners
        serve (bound here, or already listening: ``sockets``, from kgroupd.broker.cli.main).
        In memory there is nothing to wait for: the Kafka listeners serve first, then
        the HTTP listener (its modules imported on a worker thread while the loop serves
        Kafka clients). Either way ``/readyz`` answers ready once both are done."""
        loop = asyncio.get_running_loop()
        self.timers = LoopTimers(loop)
        listeners = self.config.listener_list()
        if any(listener.protocol in TLS_PROTOCOLS for listener in listeners):
            self._tls = tls_context(self.config)
        self.stats = BrokerStats(self.config.metrics_max_groups) if self.config.metrics else None
        if self.config.http and self.config.data_dir is not None:
            await self._start_http()
        try:
            await self._start(loop, listeners)
        except BaseException:
            if self.http is not None:
                await self.http.stop()
            raise
        self.ready = True
        if self.config.http and self.http is None:
            try:
                await self._start_http()
            except BaseException:
                await self.stop()
                raise

    async def _start_http(self) -> None:
        # aiohttp and prometheus-client take longer to import than the rest of the broker:
        # on a worker thread, so the loop serves meanwhile (an import holds no lock of ours)
        await asyncio.get_running_loop().run_in_executor(None, _import_http)
        http = http_listener(self)
        await http.start()
        self.http = http

    async def _start(self, loop: asyncio.AbstractEventLoop, listeners: list[Listener]) -> None:
        began = time.monotonic()
        if self.config.data_dir is None:
            broker, finish = open_broker(self.config, loop, self.timers)
        else:
            # Off the loop, so /healthz and /readyz answer meanwhile; nothing else touches
            # the topics or the coordinator until the load is done (no Kafka listener yet),
            # and timers scheduled by the load are armed on the loop afterwards.
            self.timers.hold()
            broker, finish = await loop.run_in_executor(
                None, open_broker, self.config, loop, self.timers
            )
        finish()
        self.timers.release()
        self._broker = broker
        if self.config.test_controls:
            from kgroupd.broker.testing.controls import BrokerControls

            self.controls = BrokerControls(broker, self.timers)
        events: GroupEvents = self.live
        if self.stats is not None:
            broker.stats = self.stats
            events = TeeEvents(self.stats, self.live)
            if broker.durability is not None and broker.durability.worker is not None:
                broker.durability.worker.timed = self.stats.fsync.observe
        broker.coordinator.set_events(events)
        log_loaded(self.config, broker, time.monotonic() - began)
        if self.config.nodes > 1:  # --nodes: connections of kgroupd.broker.net.nodes
            from kgroupd.broker.net.nodes import attach_nodes, listen_nodes

            attach_nodes(self, broker)
        try:
            for listener in listeners:
                server = await self._listen(listener)
                port = server.sockets[0].getsockname()[1]
                self._servers.append(server)
                self.bound.append((listener, port, advertised_address(listener, port)))
                if broker.nodes is not None:
                    await listen_nodes(self, listener, port)
        except OSError as exc:
            for server in self._servers:
                server.close()
            raise ListenerBindError(f"cannot listen on {listener.name} {exc}") from None
        self._server = self._servers[0]
        self.port = self.bound[0][1]
        self.broker.bound(self.port)
        self._housekeeping = asyncio.create_task(self._retention_loop())
        self._sweeper = asyncio.create_task(self._sweep_loop())
        if self.config.log_cleaner_enable:
            from kgroupd.broker.log.cleaner import LogCleaner

            c = self.config
            self.cleaner = LogCleaner(
                broker.topics,
                c.log_cleaner_backoff_ms,
                c.log_cleaner_io_max_bytes_per_second,
                c.log_cleaner_dedupe_buffer_size,
                broker.producers,
            )
            self._cleaning = asyncio.create_task(self.cleaner.run())
        for listener, port, (ahost, aport) in self.bound:
            log.info(
                "listening",
                listener=listener.name,
                host=listener.host,
                port=port,
                advertised=f"{ahost}:{aport}",
                node_id=self.broker.node_id,
                cluster_id=self.broker.cluster_id,
            )

    async def _listen(
        self, listener: Listener, node: int = 0
    ) -> asyncio.base_events.Server | Acceptor:
        limit = self.config.max_connections
        factory = self._factory(listener, node)
        sock = self._sockets.pop(listener.name, None) if node == 0 else None
        if sock is not None:
            if limit is not None:
                return Acceptor(sock, factory, self.connections, limit)
            return await asyncio.get_running_loop().create_server(
                factory, sock=sock, backlog=BACKLOG
            )
        if limit is not None:
            return await Acceptor.bind(
                listener.host, listener.port, factory, self.connections, limit
            )
        return await asyncio.get_running_loop().create_server(
            factory,
            listener.host or None,
            listener.port,
            reuse_address=True,
            backlog=BACKLOG,
        )

    def _factory(self, listener: Listener, node: int = 0) -> Callable[[], asyncio.BaseProtocol]:
        def connection() -> KafkaConnection:
            return KafkaConnection(self, self._advertised_for(listener), listener.protocol)

        if self._broker is not None and self._broker.nodes is not None:
            from kgroupd.broker.net.nodes import node_factory

            connection = node_factory(self, listener, self._broker.nodes, node)

        context = self._tls
        if listener.protocol in TLS_PROTOCOLS and context is not None:
            from kgroupd.broker.security.tls import TlsProtocol

            return lambda: TlsProtocol(connection(), context)
        return connection

    def _advertised_for(self, listener: Listener) -> tuple[str, int] | None:
        for bound, _port, advertised in self.bound:
            if bound is listener:
                return advertised
        return None  # accepted before the bind finished: the first listener's

    async def _sweep_loop(self) -> None:
        """Close idle connections and those stuck in an incomplete frame."""
        idle_s = self.config.connections_max_idle_ms / 1000
        incomplete_s = self.config.incomplete_request_timeout_ms / 1000
        period = min(10.0, max(0.05, min(idle_s, incomplete_s) / 4))
        while True:
            await asyncio.sleep(period)
            now = time.monotonic()
            for conn in list(self.connections):
                conn.sweep(now, idle_s, incomplete_s)

    async def _retention_loop(self) -> None:
        """Every --log-retention-check-interval-ms, with each topic's configs of the moment."""
        interval_s = self.config.log_retention_check_interval_ms / 1000
        while True:
            await asyncio.sleep(interval_s)
            dropped = await self.broker.topics.retention_pass(now_ms())
            if dropped:
                log.info("retention", batches_deleted=dropped)

    async def stop(self, grace_s: float = 5.0) -> None:
        """Stop accepting, let in-flight requests finish, close every connection."""
        self.ready = False
        if self.http is not None:
            await self.http.stop()
            self.http = None
        if self._server is None or self._broker is None:
            return
        for server in self._servers:
            server.close()
        for task in (self._housekeeping, self._sweeper, self._cleaning):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        if self.cleaner is not None:
            self.cleaner.close()  # a pass under way stops at its next chunk
        # Parked JoinGroup/SyncGroup are answered (NOT_COORDINATOR) and timers stop; with a
        # data dir, the coordinator's state is snapshotted first.
        self.broker.transactions.shutdown()
        if self.broker.durability is not None:
            await self.broker.durability.close()
            self.broker.offsets_topic.close()
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
        for server in self._servers:
            await server.wait_closed()
        self._server = None
        log.info("stopped")


def log_loaded(config: BrokerConfig, broker: Broker, seconds: float) -> None:
    """The start-up summary: what was recovered (from --data-dir) or created, and how long
    it took."""
    groups = offsets = static = 0
    for shard in broker.coordinator.shards:
        groups += len(shard.groups) + len(shard.consumer_groups)
        offsets += sum(len(parts) for t in shard.offsets.values() for parts in t.values())
        static += sum(len(g.static_members) for g in shard.groups.values())
        static += sum(len(g.static_members) for g in shard.consumer_groups.values())
    log.info(
        "loaded",
        data_dir=config.data_dir,
        fsync=config.fsync_mode if config.data_dir is not None else None,
        topics=len(broker.topics.topics),
        partitions=broker.topics.partition_count(),
        groups=groups,
        committed_offsets=offsets,
        static_members=static,
        load_ms=round(seconds * 1000, 1),
    )


def tls_context(config: BrokerConfig) -> ssl.SSLContext:
    """The SSL and SASL_SSL listeners' context; a file that cannot be used stops start-up
    with one line naming it."""
    import ssl

    from kgroupd.broker.security.tls import server_context

    assert config.ssl_certfile is not None  # config.validate insists
    try:
        return server_context(
            config.ssl_certfile, config.ssl_keyfile, config.ssl_cafile, config.ssl_client_auth
        )
    except (OSError, ssl.SSLError) as exc:
        names = [config.ssl_certfile, config.ssl_keyfile, config.ssl_cafile]
        files = ", ".join(n for n in names if n)
        raise SecuritySetupError(f"cannot use the TLS files {files}: {exc}") from None


def _import_http() -> None:
    """What the HTTP listener needs (aiohttp, prometheus-client), imported ahead."""
    import kgroupd.broker.http.listener
    import kgroupd.broker.http.metrics  # noqa: F401


def http_listener(server: KafkaServer) -> HttpListener:
    """``--http-host`` (default: the first Kafka listener's host, 127.0.0.1 when a Kafka
    listener is secured), ``--http-port`` (default: 8080, or a free port when 8080 is taken)
    and who may use it; with metrics on, this broker's collector."""
    from kgroupd.broker.http.api import Api
    from kgroupd.broker.http.auth import http_settings
    from kgroupd.broker.http.listener import HttpListener
    from kgroupd.broker.http.metrics import BrokerCollector
    from kgroupd.broker.http.test_controls import TestControlsApi

    config = server.config
    collect = None
    if server.stats is not None:
        collector = BrokerCollector(
            server.stats, lambda: server._broker, lambda: len(server.connections)
        )
        collect = collector.collect

    def not_ready() -> str | None:
        if server.ready:
            return None
        return "loading the data dir" if server._broker is None else "starting the listeners"

    host, security = http_settings(config)
    controls = TestControlsApi(lambda: server.controls) if config.test_controls else None
    api = Api(lambda: server._broker, server.live, controls)
    if config.http_port is None:  # not given: 8080, or a free port when 8080 is taken
        return HttpListener(
            host, DEFAULT_HTTP_PORT, not_ready, collect, api, security, fallback=True
        )
    return HttpListener(host, config.http_port, not_ready, collect, api, security)


def open_broker(
    config: BrokerConfig, loop: asyncio.AbstractEventLoop, timers: LoopTimers
) -> tuple[Broker, Callable[[], None]]:
    """Topics, producers and the coordinator, loaded from ``--data-dir`` when given (on a
    worker thread then); with what completes the load on the event loop."""
    topics = TopicManager()
    if config.log_index_interval_bytes is not None:
        topics.defaults["index.interval.bytes"] = str(config.log_index_interval_bytes)
    if config.log_roll_ms is not None:
        topics.defaults["segment.ms"] = str(config.log_roll_ms)
    elif config.log_roll_hours != 168:
        topics.defaults["segment.ms"] = str(config.log_roll_hours * 3_600_000)
    if config.log_roll_jitter_ms is not None or config.log_roll_jitter_hours:
        topics.defaults["segment.jitter.ms"] = str(
            roll_jitter_ms(config.log_roll_jitter_ms, config.log_roll_jitter_hours)
        )
    producers = ProducerStateManager()
    if config.data_dir is None:
        topics.budget = MemoryBudget(config.max_memory_bytes or default_max_memory_bytes())
    else:
        topics.budget = MemoryBudget(config.log_cache_bytes)
    if config.data_dir is None:
        create_startup_topics(config, topics)
        cluster_id = config.cluster_id or new_cluster_id()
        offsets = offsets_topic(topics, cluster_id, config.offsets_partitions)
        coordinator = GroupCoordinator(
            coordinator_config(config),
            timers,
            config.node_id,
            lambda p: offsets.sink(p, None),
            topics=TopicsOf(topics),
        )
        topics.listeners.append(coordinator.on_topics_changed)
        transactions = open_transactions(config, timers, topics, producers, coordinator)
        credentials = open_store(None, config.sasl_users)
        return (
            Broker(
                config,
                cluster_id,
                topics,
                producers,
                coordinator,
                transactions,
                credentials,
                authorizer=authorizer_for(config),
                offsets_topic=offsets,
            ),
            lambda: None,
        )
    from kgroupd.broker.storage.durability import Durability

    durability = Durability(config, loop)
    cluster_id, records = durability.open(topics, producers)
    create_startup_topics(config, topics)
    state = OffsetsTopicState(config.data_dir, config.offsets_partitions)
    start = state.load()
    offsets = offsets_topic(topics, cluster_id, config.offsets_partitions, start, state.save)
    coordinator = GroupCoordinator(
        coordinator_config(config),
        timers,
        config.node_id,
        lambda p: offsets.sink(p, durability.sink_for(p)),
        TopicsOf(topics),
    )
    topics.listeners.append(coordinator.on_topics_changed)
    transactions = open_transactions(config, timers, topics, producers, coordinator, durability)
    finish = durability.attach(coordinator, records, transactions)
    if start is not None or any(s.groups or s.consumer_groups for s in coordinator.shards):
        offsets.create()  # the topic existed, or groups do
    credentials = open_store(config.data_dir, config.sasl_users)
    broker = Broker(
        config,
        cluster_id,
        topics,
        producers,
        coordinator,
        transactions,
        credentials,
        durability,
        authorizer_for(config),
        offsets,
    )
    return broker, finish


def offsets_topic(
    topics: TopicManager,
    cluster_id: str,
    partitions: int,
    start: list[int] | None = None,
    persist: Callable[[list[int], bool], None] | None = None,
) -> OffsetsTopic:
    """``__consumer_offsets``, listed among the internal topics once created."""
    offsets = OffsetsTopic(cluster_id, partitions, start, persist)

    def created() -> None:
        topics.internal[OFFSETS_TOPIC] = offsets.topic
        topics.internal_readers[OFFSETS_TOPIC] = offsets.materialize
        topics.version += 1  # metadata caches

    offsets.on_create.append(created)
    return offsets


def authorizer_for(config: BrokerConfig) -> Authorizer | None:
    try:
        return open_authorizer(
            config.authorizer,
            config.super_users,
            config.allow_everyone_if_no_acl_found,
            config.data_dir,
        )
    except (OSError, ValueError, TypeError) as exc:
        raise SecuritySetupError(f"{config.data_dir}: unreadable ACLs: {exc}") from None
