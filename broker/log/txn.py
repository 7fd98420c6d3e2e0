"""A partition's transactions: the open ones (their first offsets set the last stable
offset) and the aborted ones (Kafka's aborted-transaction index, kept beside the batches).

Both follow from the batches alone, so they are rebuilt by replaying the log at start-up:
a transactional data batch opens its producer's transaction at its base offset (if none is
open), a control batch (commit or abort marker) closes it; an abort records
``(producer id, first offset, marker offset)``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

from kgroupd.protocol.records import CONTROL_BIT, TRANSACTIONAL_BIT, BatchHeader, control_marker

__all__ = ["AbortedTxn", "TxnIndex"]


class AbortedTxn(NamedTuple):
    producer_id: int
    first_offset: int
    last_offset: int  # the abort marker's offset


@dataclass(slots=True)
class TxnIndex:
    ongoing: dict[int, int] = field(default_factory=dict)  # producer id -> first offset
    aborted: list[AbortedTxn] = field(default_factory=list)  # by marker offset

    def on_batch(self, header: BatchHeader, base_offset: int, data: bytes) -> None:
        """After a batch is appended (or restored) at ``base_offset``."""
        attributes = header.attributes
        if not attributes & TRANSACTIONAL_BIT:
            return
        pid = header.producer_id
        if attributes & CONTROL_BIT:
            commit, _epoch = control_marker(data)
            first = self.ongoing.pop(pid, None)
            if not commit and first is not None:
                self.aborted.append(AbortedTxn(pid, first, base_offset))
        else:
            self.ongoing.setdefault(pid, base_offset)

    def is_open(self, producer_id: int) -> bool:
        return producer_id in self.ongoing

    def last_stable_offset(self, high_watermark: int) -> int:
        """The first offset of the earliest open transaction, else the high watermark."""
        if not self.ongoing:
            return high_watermark
        return min(min(self.ongoing.values()), high_watermark)

    def aborted_between(self, start: int, end: int) -> list[tuple[int, int]]:
        """(producer id, first offset) of aborted transactions a read of [start, end) may
        meet: those that end at or after ``start`` and begin before ``end``."""
        return [
            (a.producer_id, a.first_offset)
            for a in self.aborted
            if a.last_offset >= start and a.first_offset < end
        ]

    def trim(self, log_start_offset: int) -> None:
        """Forget aborted transactions wholly below the log start offset."""
        if self.aborted and self.aborted[0].last_offset < log_start_offset:
            self.aborted = [a for a in self.aborted if a.last_offset >= log_start_offset]
