"""Idempotent producers: id allocation and per-partition sequence tracking (last 5 batches)."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from protocol.errors import ErrorCode

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

    def forget_topic(self, topic: str) -> None:
        for key in [k for k in self._state if k[1] == topic]:
            del self._state[key]
