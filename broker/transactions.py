"""The transaction coordinator wired to the broker: its settings from the command line,
producer ids shared with idempotent producers, and markers written into partition logs (and,
for ``__consumer_offsets`` partitions, to the group coordinator's pending offsets)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING

import structlog

from kgroupd.broker.config.settings import BrokerConfig
from kgroupd.broker.coordinator import GroupCoordinator
from kgroupd.broker.coordinator.timers import Timers
from kgroupd.broker.coordinator.txn import TransactionCoordinator, TxnConfig, TxnMarkers
from kgroupd.broker.log.producers import ProducerStateManager
from kgroupd.broker.log.topics import TopicManager

if TYPE_CHECKING:
    from kgroupd.broker.storage.durability import Durability

__all__ = ["OFFSETS_TOPIC", "LogMarkers", "open_transactions", "txn_config"]

log = structlog.get_logger("kgroupd.transactions")

OFFSETS_TOPIC = "__consumer_offsets"
TRANSACTION_STATE_TOPIC = "__transaction_state"


def txn_config(c: BrokerConfig) -> TxnConfig:
    return TxnConfig(
        transaction_partitions=c.transaction_partitions,
        max_timeout_ms=c.transaction_max_timeout_ms,
        abort_timed_out_interval_ms=c.transaction_abort_timed_out_transaction_cleanup_interval_ms,
        transactional_id_expiration_ms=c.transactional_id_expiration_ms,
        offsets_partitions=c.offsets_partitions,
    )


class LogMarkers:
    """Writes a transaction's commit or abort markers: a control batch into each data
    partition, and the end of the producer's pending offsets in each offsets partition (the
    group coordinator's shard of that number).

    Under ``--data-dir`` the PrepareCommit / PrepareAbort record is written to the
    coordinator log before any marker reaches a segment (so a kill -9 in between leaves the
    coordinator knowing the outcome, and its load writes the markers again), and under
    ``--fsync always`` the markers wait for that record's fsync, as Kafka writes markers
    only once the prepare record is replicated."""

    def __init__(
        self, topics: TopicManager, groups: GroupCoordinator, durability: Durability | None = None
    ) -> None:
        self.topics = topics
        self.groups = groups
        self.durability = durability

    def write_markers(self, markers: TxnMarkers, done: Callable[[], None]) -> None:
        d = self.durability
        if d is not None:
            d.write_pending()
            synced = d.state_synced() if d.config.fsync_mode == "always" else None
            if synced is not None and not synced.done():
                synced.add_done_callback(lambda f: self._after_sync(f, markers, done))
                return
        self._write(markers, done)

    def _after_sync(
        self, synced: asyncio.Future[None], markers: TxnMarkers, done: Callable[[], None]
    ) -> None:
        if synced.cancelled() or synced.exception() is not None:
            # not known to be durable: the markers wait for the next load to write them
            log.error("txn_markers_not_written", transactional_id=markers.transactional_id)
            return
        self._write(markers, done)

    def _write(self, markers: TxnMarkers, done: Callable[[], None]) -> None:
        pid, epoch, commit = markers.producer_id, markers.producer_epoch, markers.commit
        for topic, partition in sorted(markers.partitions):
            if topic == OFFSETS_TOPIC:
                if 0 <= partition < len(self.groups.shards):
                    self.groups.complete_txn_offsets(partition, pid, commit)
                continue
            log = self.topics.partition(topic, partition)
            if log is not None:  # a deleted topic has nothing to mark
                log.write_marker(pid, epoch, commit, coordinator_epoch=0)
        done()


def open_transactions(
    config: BrokerConfig,
    timers: Timers,
    topics: TopicManager,
    producers: ProducerStateManager,
    groups: GroupCoordinator,
    durability: Durability | None = None,
) -> TransactionCoordinator:
    """In memory, or (``durability``) loaded later from the data dir's coordinator log."""
    return TransactionCoordinator(
        txn_config(config),
        timers,
        producers,
        LogMarkers(topics, groups, durability),
        None if durability is None else durability.txn_sink_for,
        loaded=durability is None,
    )
