"""Start-up of one partition's segment files: read what recovery needs, no more.

Each segment's index file (``kgroupd.broker.storage.segment``) is taken when it matches its segment:
a rolled segment's when the file has the size and mtime it was written with; the last
segment's also when the batch it last saw is still in place, and then only the bytes after
it are read (a crash leaves at most ``CHECKPOINT_BYTES`` after the last index file). A
missing, damaged or stale index file is rebuilt by reading its segment (with the state the
previous segment ended with) and written again.

What is read is checked as before: batches are self-delimiting and carry their own CRC-32C,
so a torn tail (the last batch of the last file cut short, or failing its CRC with nothing
good after it) is cut, and damage elsewhere refuses start-up (``--recover``: cut there and
drop the files after).
"""

from __future__ import annotations

import os
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import structlog

from kgroupd.broker.log.txn import AbortedTxn, TxnIndex
from kgroupd.broker.storage.entries import StorageError
from kgroupd.broker.storage.segment import (
    ProducerEntry,
    Segment,
    boundary_holds,
    read_index,
)
from kgroupd.broker.storage.segment_cleaner import (
    CLEANED,
    COMPACTED,
    DELETED,
    PROGRESS,
    SWAP,
    load_progress,
)
from kgroupd.broker.storage.segment_cleaner import recover as recover_cleaning
from kgroupd.protocol.records import (
    HEADER_SIZE,
    TRANSACTIONAL_BIT,
    BatchHeader,
    CorruptBatch,
    InvalidBatch,
    check_crc,
    parse_header,
)

if TYPE_CHECKING:
    from kgroupd.broker.log.partition import PartitionLog
    from kgroupd.broker.storage.partition_store import PartitionStore

log = structlog.get_logger("kgroupd.storage")

_WINDOW = 16 * 1024 * 1024


@dataclass
class LoadState:
    """The partition as replayed so far: transactions and idempotent producers."""

    txn: TxnIndex = field(default_factory=TxnIndex)
    producers: dict[int, tuple[int, deque[tuple[int, int, int]]]] = field(default_factory=dict)
    batches_read: int = 0  # batches read back from segment files (start-up cost)
    bytes_read: int = 0

    def record(self, pid: int, epoch: int, first: int, last: int, base: int) -> None:
        state = self.producers.get(pid)
        if state is None or epoch > state[0]:
            state = (epoch, deque(maxlen=5))
            self.producers[pid] = state
        state[1].append((first, last, base))

    def entries(self) -> list[ProducerEntry]:
        return [(pid, epoch, list(seqs)) for pid, (epoch, seqs) in sorted(self.producers.items())]

    def adopt(self, ongoing: dict[int, int], producers: list[ProducerEntry]) -> None:
        self.txn.ongoing = dict(ongoing)
        self.producers = {pid: (epoch, deque(seqs, maxlen=5)) for pid, epoch, seqs in producers}


def load_partition(plog: PartitionLog, store: PartitionStore, recover: bool) -> LoadState:
    directory = store.directory
    names = set(os.listdir(directory))  # one listing: what else is looked for is in it
    if any(n.endswith((CLEANED, SWAP, DELETED)) for n in names):
        recover_cleaning(directory)  # a cleaner's pass cut short
        names = set(os.listdir(directory))
    gaps = COMPACTED in names  # cleaned segments have offset gaps
    files = sorted(directory / n for n in names if n.endswith(".log"))
    for orphan in names:
        if orphan.endswith(".idx") and orphan[:-4] + ".log" not in names:
            (directory / orphan).unlink()
    state = LoadState()
    damaged = False
    for i, path in enumerate(files):
        if damaged:
            log.warning("segment_dropped_after_damage", file=str(path))
            path.unlink()
            path.with_suffix(".idx").unlink(missing_ok=True)
            continue
        last_file = i == len(files) - 1
        seg, damaged = _load_segment(path, last_file, state, recover, gaps, store.index_interval)
        store.segments.append(seg)
        store.bases.append(seg.base_offset)
    plog.txn = state.txn
    store.loaded_producers = state.entries()
    checkpoint = directory / "log-start-offset"
    start = int(checkpoint.read_text()) if checkpoint.name in names else 0
    if store.segments:
        start = max(start, store.segments[0].base_offset)
        last = store.segments[-1]
        plog.high_watermark = max(last.base_offset, last.last_offset + 1)
        store.fd = os.open(last.path, os.O_WRONLY | os.O_APPEND)
    plog.log_start_offset = start
    if PROGRESS in names:
        plog.cleaned_to, plog.next_horizon = load_progress(directory)
    plog.size_bytes = store.size
    plog.txn.trim(start)
    return state


def _load_segment(
    path: Path, last_file: bool, state: LoadState, recover: bool, gaps: bool, interval: int
) -> tuple[Segment, bool]:
    seg = Segment(int(path.stem), path, interval=interval)
    fd = os.open(path, os.O_RDWR)
    try:
        st = os.fstat(fd)
        found = read_index(seg)
        if found is not None:
            exact = seg.size == st.st_size and found.mtime_ns == st.st_mtime_ns
            if exact or (last_file and seg.size <= st.st_size and boundary_holds(fd, seg)):
                state.adopt(found.ongoing, found.producers)
                state.txn.aborted.extend(AbortedTxn(*a) for a in found.aborted)
                if exact:
                    return seg, False
            else:
                seg = Segment(seg.base_offset, path, interval=interval)
        start = seg.size
        damaged = _scan(fd, st.st_size, seg, state, last_file, recover, gaps)
        if not last_file or start < seg.size:
            # rebuilt (or caught up after a crash): written again for the next start-up
            aborted = [
                (a.producer_id, a.first_offset, a.last_offset)
                for a in state.txn.aborted
                if seg.base_offset <= a.last_offset <= seg.last_offset
            ]
            try:
                seg.write_index(
                    os.fstat(fd).st_mtime_ns, aborted, state.txn.ongoing, state.entries()
                )
            except OSError as exc:
                log.warning("index_write_failed", file=str(seg.index_path), error=str(exc))
        return seg, damaged
    finally:
        os.close(fd)


def _scan(
    fd: int,
    end: int,
    seg: Segment,
    state: LoadState,
    last_file: bool,
    recover: bool,
    gaps: bool = False,
) -> bool:
    """Read the batches of ``seg`` from its indexed size to ``end``, indexing and replaying
    them; cut a torn tail or damage (``recover``). Returns whether damage was cut."""
    pos = seg.size
    expected = seg.last_offset + 1 if seg.size else seg.base_offset
    want = _WINDOW
    while pos < end:
        data = os.pread(fd, min(want, end - pos), pos)
        n = len(data)
        at = 0
        want = _WINDOW
        problem = None
        while at < n:
            if n - at < HEADER_SIZE and pos + n < end:
                break  # the rest of this header is in the next read
            try:
                header = parse_header(data, at)
                if header.length < HEADER_SIZE or header.magic != 2:
                    raise InvalidBatch("bad batch length or magic")
                if pos + at + header.length > end:
                    # Cut short by a crash, or a damaged length with batches after it.
                    rest = os.pread(fd, end - pos - at, pos + at)
                    problem = "corrupt" if _good_batch_after(rest, 1) else "torn"
                elif at + header.length > n:
                    want = max(header.length, _WINDOW)
                    break  # the rest of this batch is in the next read
                else:
                    check_crc(data, at, header)
                    # outside the CRC: check it here (a compacted partition's have gaps)
                    base = header.base_offset
                    if base < expected if gaps else base != expected:
                        problem = "corrupt"
            except CorruptBatch:
                if pos + at + header.length == end:
                    problem = "torn"
                else:
                    rest = os.pread(fd, end - pos - at, pos + at)
                    problem = "corrupt" if _good_batch_after(rest, 1) else "torn"
            except InvalidBatch:
                problem = "torn" if end - pos - at < HEADER_SIZE else "corrupt"
            if problem is not None:
                return _cut(fd, seg, pos + at, end, problem, last_file, recover)
            transactional = header.attributes & TRANSACTIONAL_BIT
            batch = data[at : at + header.length] if transactional else b""
            _replay(seg, state, pos + at, batch, header)
            at += header.length
            expected = seg.last_offset + 1
        pos += at
    return False


def _replay(
    seg: Segment, state: LoadState, position: int, batch: bytes, header: BatchHeader
) -> None:
    last = header.base_offset + header.last_offset_delta
    seg.on_batch(
        position, header.length, header.base_offset, last, header.max_timestamp, header.crc
    )
    state.batches_read += 1
    state.bytes_read += header.length
    state.txn.on_batch(header, header.base_offset, batch)
    if header.producer_id >= 0:
        state.record(
            header.producer_id,
            header.producer_epoch,
            header.base_sequence,
            header.last_sequence,
            header.base_offset,
        )


def _cut(
    fd: int, seg: Segment, pos: int, end: int, problem: str, last_file: bool, recover: bool
) -> bool:
    path = seg.path
    if problem == "torn" and last_file:
        log.warning("torn_tail_cut", file=str(path), offset=pos, bytes_dropped=end - pos)
        damaged = False
    elif not recover:
        raise StorageError(
            f"{path}: damaged record batch at byte offset {pos} "
            f"({end - pos} bytes from there on); start with --recover to keep "
            "what precedes the damage and drop the rest"
        )
    else:
        log.warning("recovered_damaged_file", file=str(path), offset=pos, bytes_dropped=end - pos)
        damaged = True
    os.ftruncate(fd, pos)
    return damaged


def _good_batch_after(data: bytes, pos: int) -> bool:
    """Whether a complete record batch with a matching CRC starts anywhere after ``pos``."""
    end = len(data)
    for at in range(pos, end - HEADER_SIZE + 1):
        if data[at + 16] != 2:  # magic
            continue
        try:
            header = parse_header(data, at)
        except InvalidBatch:
            return False
        if header.length < HEADER_SIZE or at + header.length > end:
            continue
        try:
            check_crc(data, at, header)
        except CorruptBatch:
            continue
        return True
    return False
