"""Idempotent producers: id allocation and per-partition sequence tracking (last 5 batches)."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from kgroupd.protocol.errors import ErrorCode
from kgroupd.protocol.records import parse_header

if TYPE_CHECKING:
    from kgroupd.broker.log.topics import TopicManager

MAX_CACHED_BATCHES = 5


@dataclass(slots=True)
class CachedBatch:
    first_seq: int
    last_seq: int
    base_offset: int


@dataclass(slots=True)
class PartitionProducerState:
    epoch: int
    batches: deque[CachedBatch] = field(default_factory=lambda: deque(maxlen=MAX_CACHED_BATCHES))


class ProducerStateManager:
    def __init__(self) -> None:
        self._next_id = 1000
        self._state: dict[tuple[int, str, int], PartitionProducerState] = {}

    def allocate(self) -> int:
        pid = self._next_id
        self._next_id += 1
        return pid

    def observe(self, producer_id: int) -> None:
        """A producer id seen in a replayed record: never hand it out again."""
        if producer_id >= self._next_id:
            self._next_id = producer_id + 1

    def known(self, producer_id: int) -> bool:
        return 0 < producer_id < self._next_id

    def check(
        self,
        producer_id: int,
        epoch: int,
        topic: str,
        partition: int,
        first_seq: int,
        last_seq: int,
    ) -> tuple[ErrorCode, int | None]:
        """Before appending: (NONE, None) to append; (NONE, offset) for a duplicate."""
        state = self._state.get((producer_id, topic, partition))
        if state is None or epoch > state.epoch:
            if first_seq != 0:
                return ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, None
            return ErrorCode.NONE, None
        if epoch < state.epoch:
            return ErrorCode.INVALID_PRODUCER_EPOCH, None
        for cached in state.batches:
            if cached.first_seq == first_seq and cached.last_seq == last_seq:
                return ErrorCode.NONE, cached.base_offset
        last = state.batches[-1].last_seq if state.batches else -1
        if first_seq != last + 1:
            return ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, None
        return ErrorCode.NONE, None

    def record(
        self,
        producer_id: int,
        epoch: int,
        topic: str,
        partition: int,
        first_seq: int,
        last_seq: int,
        base_offset: int,
    ) -> None:
        key = (producer_id, topic, partition)
        state = self._state.get(key)
        if state is None or epoch > state.epoch:
            state = PartitionProducerState(epoch)
            self._state[key] = state
        state.batches.append(CachedBatch(first_seq, last_seq, base_offset))

    def restore_from(self, topics: TopicManager) -> None:
        """Start-up: rebuild sequence state from the stored batches (as Kafka rebuilds its
        producer state from the log), and never hand out an id seen before."""
        for topic in topics.topics.values():
            for log in topic.partitions:
                loaded = getattr(log.store, "loaded_producers", None)
                if loaded is not None:  # under --data-dir: as the index files and tail had it
                    for pid, epoch, seqs in loaded:
                        for first, last, base in seqs:
                            self.record(pid, epoch, topic.name, log.partition, first, last, base)
                        self._next_id = max(self._next_id, pid + 1)
                    loaded.clear()
                    continue
                for stored in log.batches:
                    h = parse_header(stored.data)
                    if h.producer_id < 0:
                        continue
                    self.record(
                        h.producer_id,
                        h.producer_epoch,
                        topic.name,
                        log.partition,
                        h.base_sequence,
                        h.last_sequence,
                        stored.base_offset,
                    )
                    self._next_id = max(self._next_id, h.producer_id + 1)

    def entries(
        self, topic: str, partition: int
    ) -> list[tuple[int, int, list[tuple[int, int, int]]]]:
        """(producer id, epoch, [(first sequence, last sequence, base offset), ...]) of every
        producer with state in a partition (for its segment's index file)."""
        return [
            (pid, state.epoch, [(b.first_seq, b.last_seq, b.base_offset) for b in state.batches])
            for (pid, t, p), state in self._state.items()
            if t == topic and p == partition
        ]

    def active(self, topic: str, partition: int) -> list[tuple[int, int, int]]:
        """(producer id, epoch, last sequence) of the producers with state in a partition."""
        return [
            (pid, state.epoch, state.batches[-1].last_seq if state.batches else -1)
            for (pid, t, p), state in sorted(self._state.items())
            if t == topic and p == partition
        ]

    def forget_topic(self, topic: str) -> None:
        for key in [k for k in self._state if k[1] == topic]:
            del self._state[key]
