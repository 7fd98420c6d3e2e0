"""What a transaction shard needs from outside: producer ids and marker writing.

``ProducerIdAllocator``
    ``allocate() -> int`` a producer id never handed out before (Kafka's ProducerIdManager),
    raising ``ProducerIdUnavailable(error)`` when none can be had now (the shard answers
    that error); ``observe(producer_id)`` tells it about ids replayed from the log.
``MarkerWriter``
    ``write_markers(markers, done)``: write the commit/abort markers of ``markers`` into the
    logs of its partitions and call ``done()`` once all are written (retrying as long as it
    takes; Kafka's marker channel never gives up). The shard then logs CompleteCommit /
    CompleteAbort.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from kgroupd.protocol.errors import ErrorCode

__all__ = [
    "MarkerWriter",
    "ProducerIdAllocator",
    "ProducerIdUnavailable",
    "SequentialProducerIds",
    "TxnMarkers",
]


class ProducerIdUnavailable(Exception):
    """No producer id can be allocated now; ``error`` is what the request is answered."""

    def __init__(self, error: ErrorCode) -> None:
        super().__init__(error.name)
        self.error = error


class ProducerIdAllocator(Protocol):
    def allocate(self) -> int: ...

    def observe(self, producer_id: int) -> None: ...


class SequentialProducerIds:
    """Producer ids from ``start`` up, never one at or below an observed id. ``limit``
    (exclusive; None: unbounded) makes allocation fail with COORDINATOR_LOAD_IN_PROGRESS
    past it, as Kafka's manager answers while it waits for a new block."""

    def __init__(self, start: int = 0, limit: int | None = None) -> None:
        self.next_id = start
        self.limit = limit

    def allocate(self) -> int:
        if self.limit is not None and self.next_id >= self.limit:
            raise ProducerIdUnavailable(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS)
        pid = self.next_id
        self.next_id += 1
        return pid

    def observe(self, producer_id: int) -> None:
        if producer_id >= self.next_id:
            self.next_id = producer_id + 1


@dataclass(frozen=True, slots=True)
class TxnMarkers:
    """The markers ending one transaction: ``commit`` or abort, at ``producer_epoch`` (the
    epoch of the PrepareCommit / PrepareAbort), on ``partitions``."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    commit: bool
    partitions: frozenset[tuple[str, int]]
    transaction_version: int


class MarkerWriter(Protocol):
    def write_markers(self, markers: TxnMarkers, done: Callable[[], None]) -> None: ...
