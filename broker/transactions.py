"""The transaction coordinator wired to the broker: its settings from the command line,
producer ids shared with idempotent producers, and markers written into partition logs (and,
for ``__consumer_offsets`` partitions, to the group coordinator's pending offsets)."""

from __future__ import annotations

from collections.abc import Callable

from broker.config import BrokerConfig
from broker.coordinator import GroupCoordinator
from broker.coordinator.timers import Timers
from broker.coordinator.txn import TransactionCoordinator, TxnConfig, TxnMarkers
from broker.coordinator.txn.core import TxnRecordSink
from broker.log.producers import ProducerStateManager
from broker.log.topics import TopicManager

__all__ = ["OFFSETS_TOPIC", "LogMarkers", "open_transactions", "txn_config"]

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
    """Writes a transaction's commit or abort markers at once: a control batch into each
    data partition, and the end of the producer's pending offsets in each offsets partition
    (the group coordinator's shard of that number)."""

    def __init__(self, topics: TopicManager, groups: GroupCoordinator) -> None:
        self.topics = topics
        self.groups = groups

    def write_markers(self, markers: TxnMarkers, done: Callable[[], None]) -> None:
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
    sink_for: Callable[[int], TxnRecordSink | None] | None = None,
    loaded: bool = True,
) -> TransactionCoordinator:
    return TransactionCoordinator(
        txn_config(config), timers, producers, LogMarkers(topics, groups), sink_for, loaded
    )
