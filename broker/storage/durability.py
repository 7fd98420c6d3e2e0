"""What ``--data-dir`` adds to a running broker, in one place for the server to drive."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from kgroupd.broker.coordinator.core import OffsetAndMetadata
from kgroupd.broker.coordinator.placement import partition_for
from kgroupd.broker.coordinator.records import RecordSink
from kgroupd.broker.coordinator.txn import TransactionCoordinator
from kgroupd.broker.coordinator.txn.core import TxnRecordSink
from kgroupd.broker.coordinator.txn.records import TxnRecord
from kgroupd.broker.storage.coordinator_store import (
    TXN_RECORD_CLASSES,
    CoordinatorStore,
    StoredRecord,
)
from kgroupd.broker.storage.datadir import DataDir
from kgroupd.broker.storage.fsync import FsyncWorker
from kgroupd.broker.storage.share_store import ShareStore
from kgroupd.broker.storage.topic_store import TopicStore

if TYPE_CHECKING:
    from kgroupd.broker.config.settings import BrokerConfig
    from kgroupd.broker.coordinator import CoordinatorShard, GroupCoordinator
    from kgroupd.broker.log.producers import ProducerStateManager
    from kgroupd.broker.log.topics import TopicManager
    from kgroupd.broker.share.records import ShareState


class _Loader:
    """Start-up: a group coordinator shard's records to it, transaction records set aside
    for the transaction coordinator's shard of their id."""

    def __init__(
        self,
        shard: CoordinatorShard,
        transactions: TransactionCoordinator | None,
        txn_records: dict[int, list[TxnRecord]],
    ) -> None:
        self.shard = shard
        self.transactions = transactions
        self.txn_records = txn_records

    def replay(self, record: StoredRecord) -> None:
        if isinstance(record, TXN_RECORD_CLASSES):
            if self.transactions is not None:
                p = self.transactions.partition_for(record.transactional_id)
                self.txn_records.setdefault(p, []).append(record)
            return
        self.shard.replay(record)

    def load_offsets(
        self, group_id: str, topic: str, offsets: dict[int, OffsetAndMetadata]
    ) -> None:
        self.shard.load_offsets(group_id, topic, offsets)


class Durability:
    def __init__(self, config: BrokerConfig, loop: asyncio.AbstractEventLoop) -> None:
        assert config.data_dir is not None
        self.config = config
        self.datadir = DataDir(config.data_dir)
        self.loop = loop
        self.worker: FsyncWorker | None = None
        self.topic_store: TopicStore | None = None
        self.coordinator_store: CoordinatorStore | None = None
        self.coordinator: GroupCoordinator | None = None
        # share groups (KIP-932): their store and the state it loaded (restored by the broker)
        self.share_store: ShareStore | None = None
        self.share_state: ShareState | None = None

    def open(
        self, topics: TopicManager, producers: ProducerStateManager
    ) -> tuple[str, CoordinatorStore]:
        """Lock and check the directory, load topic data; returns the cluster id and the
        coordinator store, whose shards ``attach`` loads."""
        c = self.config
        cluster_id = self.datadir.open(c.cluster_id, c.offsets_partitions, c.node_id)
        self.worker = FsyncWorker(self.loop, c.fsync_mode, c.fsync_interval_ms)
        self.topic_store = TopicStore(self.datadir.path, self.worker, c.recover)
        self.topic_store.load(topics)
        topics.store = self.topic_store
        producers.restore_from(topics)
        self.topic_store.producers = producers
        self.coordinator_store = CoordinatorStore(
            self.datadir.path,
            c.offsets_partitions,
            self.worker,
            c.snapshot_log_bytes,
            c.recover,
        )
        self.share_store = ShareStore(self.datadir.path, self.worker, c.snapshot_log_bytes)
        self.share_state = self.share_store.load()
        return cluster_id, self.coordinator_store

    def sink_for(self, shard: int) -> RecordSink:
        assert self.coordinator_store is not None
        return self.coordinator_store.sink_for(shard)

    def txn_sink_for(self, _txn_partition: int) -> TxnRecordSink:
        """A transaction shard's records go to the file shard of their transactional id's
        hash (the log and snapshots are shared with the group coordinator's records)."""
        store = self.coordinator_store
        assert store is not None
        partitions = self.config.offsets_partitions

        def sink(record: TxnRecord) -> None:
            store.sink_for(partition_for(record.transactional_id, partitions))(record)

        return sink

    def attach(
        self,
        coordinator: GroupCoordinator,
        store: CoordinatorStore,
        transactions: TransactionCoordinator | None = None,
    ) -> Callable[[], None]:
        """Load every group coordinator shard from its snapshot and logs (streamed, shard
        by shard; on a worker thread at start-up); returns what completes the load on the
        event loop: the transaction coordinator's shards, whose load writes again the
        markers of transactions left preparing."""
        self.coordinator = coordinator
        store.offsets_of = self._offsets_of
        for shard in coordinator.shards:
            shard.loading = True
        txn_records: dict[int, list[TxnRecord]] = {}
        loaders = [_Loader(shard, transactions, txn_records) for shard in coordinator.shards]
        store.load(loaders)
        for shard in coordinator.shards:
            shard.complete_loading()

        def finish() -> None:
            if transactions is not None:
                for txn_shard in transactions.shards:
                    txn_shard.load(txn_records.get(txn_shard.partition, []))

        return finish

    def _offsets_of(self, partition: int) -> list[tuple[str, str, Mapping[int, OffsetAndMetadata]]]:
        """A shard's committed offsets per (group, topic), copied (for a snapshot)."""
        assert self.coordinator is not None
        shard = self.coordinator.shards[partition]
        return [
            (group_id, topic, dict(parts))
            for group_id, topics in shard.offsets.items()
            for topic, parts in topics.items()
        ]

    def state_synced(self) -> asyncio.Future[None] | None:
        """After a coordinator write: under fsync=always, a future for it being on disk."""
        assert self.coordinator_store is not None
        return self.coordinator_store.flush()

    def write_pending(self) -> None:
        """Write the coordinator records emitted so far (before answers go out)."""
        assert self.coordinator_store is not None
        self.coordinator_store.write_pending()
        if self.share_store is not None:
            self.share_store.write_pending()

    def data_synced(self) -> asyncio.Future[None] | None:
        """After a produce: under fsync=always, a future for the appended batches' fsync."""
        assert self.worker is not None
        return self.worker.sync()

    async def close(self) -> None:
        """Clean shutdown: snapshot the coordinator (before it unloads), fsync, unlock."""
        assert self.coordinator_store is not None and self.coordinator is not None
        final = self.coordinator_store.capture()
        self.coordinator.shutdown()
        await self.coordinator_store.finish(final)
        if self.topic_store is not None:
            self.topic_store.close()
        if self.share_store is not None:
            self.share_store.close()
        if self.worker is not None:
            self.worker.close()
        if self.share_store is not None:
            self.share_store.close_fd()
        self.datadir.close()
