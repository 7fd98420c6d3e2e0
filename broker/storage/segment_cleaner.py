"""Log compaction of a partition's segment files (``broker.log.cleaner`` decides when).

The range cleaned is the closed segments from the first, up to (not including) the first
segment that holds an offset at or past the last stable offset, or a record newer than
``min.compaction.lag.ms`` (Kafka's first uncleanable offset); the active segment is never
touched. Each segment is cleaned into one of its own (``broker.log.compaction`` says what
stays), so a segment keeps its base offset and file name:

1. off the event loop (the cleaner's thread, at most ``--log-cleaner-io-max-bytes-per-second``
   read plus written): the range is read once to map each key to its latest offset, then each
   segment that changes is written as ``BASE.log.cleaned`` (fsynced) with its index file as
   ``BASE.idx.cleaned`` (the aborted transactions whose marker stays; the producer state the
   old index file held);
2. on the event loop: each ``.cleaned`` pair is renamed over its segment and index file (the
   rename is atomic: a reader sees the old segment or the new), the old file's descriptor is
   dropped and the partition's cached batches in the range are forgotten.

A crash before a rename leaves a ``.cleaned`` file that start-up deletes (the old segment is
whole); a crash between the two renames leaves an index file that does not match its segment,
rebuilt at start-up by reading the segment.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from broker.log.compaction import AbortedRanges, Cleaning, OffsetMap, Throttle
from broker.storage.fileio import fsync_dir, write_all
from broker.storage.segment import Segment, peek, read_index

if TYPE_CHECKING:
    from broker.log.partition import PartitionLog
    from broker.storage.topic_store import PartitionStore

CLEANED = ".cleaned"
# In a partition's directory once a cleaned segment was swapped in: its segments may have
# offset gaps (start-up refuses them in any other partition, as damage).
COMPACTED = "compacted"
PROGRESS = "cleaner-offset"


@dataclass
class Range:
    """What a pass cleans: the first ``count`` segments, ending at ``end`` (an offset)."""

    segments: list[Segment]
    end: int
    dirty_bytes: int
    total_bytes: int
    first_dirty_ts: int  # the max timestamp of the first dirty batch (-1: none)
    cleaned_to: int = 0  # segments from this offset on are dirty


def cleanable(store: PartitionStore, cleaned_to: int, lso: int, lag_ms: int, now: int) -> Range:
    """The closed segments a pass may clean (see the module docstring)."""
    taken: list[Segment] = []
    for i, seg in enumerate(store.segments[:-1]):
        if seg.last_offset >= lso or (seg.size and seg.max_ts > now - lag_ms):
            break
        taken.append(seg)
        end = store.segments[i + 1].base_offset
    if not taken:
        return Range([], 0, 0, 0, -1)
    dirty = [s for s in taken if s.base_offset >= cleaned_to]
    first_ts = -1
    for seg in dirty:
        if seg.size:
            head = os.pread(store.read_fds.get(seg), 61, 0)
            first_ts = peek(head, 0)[3]
            break
    dirty_bytes = sum(s.size for s in dirty)
    return Range(taken, end, dirty_bytes, sum(s.size for s in taken), first_ts, cleaned_to)


@dataclass
class Cleaned:
    old: Segment
    new: Segment


def clean_range(
    work: Range,
    aborted: list[tuple[int, int, int]],
    now_ms: int,
    delete_retention_ms: int,
    throttle: Throttle,
    map_limit: int = 1 << 62,
) -> tuple[list[Cleaned], Cleaning, int]:
    """Step 1 (the cleaner's thread): the ``.cleaned`` files of the segments that change.
    The key map is built from the dirty segments only, as far as ``map_limit`` allows (at
    least one); returns the offset the pass cleaned up to."""
    offsets = OffsetMap(AbortedRanges.of(aborted), map_limit)
    segments, end = work.segments, work.end
    for i, seg in enumerate(segments):
        if seg.base_offset < work.cleaned_to:
            continue
        if offsets.full and seg.base_offset > work.cleaned_to:
            segments, end = segments[:i], seg.base_offset
            break
        fd = os.open(seg.path, os.O_RDONLY)
        try:
            for _b, _l, _t, view in seg.batches_from(fd, 0):
                offsets.add(view)
                throttle.take(len(view))
        finally:
            os.close(fd)
    cleaning = Cleaning(offsets, now_ms, delete_retention_ms)
    out: list[Cleaned] = []
    for seg in segments:
        new = _clean_segment(seg, cleaning, aborted, throttle)
        if new is not None:
            out.append(Cleaned(seg, new))
    return out, cleaning, end


def _clean_segment(
    seg: Segment, cleaning: Cleaning, aborted: list[tuple[int, int, int]], throttle: Throttle
) -> Segment | None:
    tmp = _cleaned(seg.path)
    new = Segment(seg.base_offset, seg.path, interval=seg.interval)
    changed = done = False
    unchanged = 0  # bytes of the segment up to its first batch that changes: copied as they are
    fd = os.open(seg.path, os.O_RDONLY)
    out = -1
    try:
        pending: list[bytes | memoryview] = []
        pending_bytes = 0
        for _b, _l, _t, view in seg.batches_from(fd, 0):
            throttle.take(len(view))
            kept = cleaning.clean(view)
            if kept is not view and not changed:
                changed = True
                out = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
                _copy(fd, out, unchanged, throttle)
            if not changed:
                unchanged += len(view)
            if kept is None:
                continue
            base, length, last, max_ts, crc = peek(kept, 0)
            new.on_batch(new.size, length, base, last, max_ts, crc)
            if changed:
                pending.append(kept)
                pending_bytes += length
            if pending_bytes >= 1 << 20:
                write_all(out, b"".join(pending))
                throttle.take(pending_bytes)
                pending, pending_bytes = [], 0
        if not changed:
            return None  # as it was: nothing written
        if pending:
            write_all(out, b"".join(pending))
            throttle.take(pending_bytes)
        os.fsync(out)
        done = True
    finally:
        os.close(fd)
        if out >= 0:
            os.close(out)
            if not done:  # failed (a full disk...) or stopped: nothing left behind
                tmp.unlink(missing_ok=True)
    removed = set(cleaning.removed_markers)
    mine = [
        a for a in aborted if seg.base_offset <= a[2] <= seg.last_offset and a[2] not in removed
    ]
    scratch = Segment(seg.base_offset, seg.path)
    found = read_index(scratch)
    ongoing = {} if found is None else found.ongoing
    producers = [] if found is None else found.producers
    data = new.encode_index(os.stat(tmp).st_mtime_ns, mine, ongoing, producers)
    idx_tmp = _cleaned(seg.index_path)
    with open(idx_tmp, "wb") as f:
        f.write(data)
    return new


def _copy(src: int, dst: int, nbytes: int, throttle: Throttle) -> None:
    """The first ``nbytes`` of ``src`` (a segment's unchanged head) to ``dst``."""
    pos = 0
    while pos < nbytes:
        chunk = os.pread(src, min(1 << 20, nbytes - pos), pos)
        if not chunk:
            raise OSError(f"segment shorter than {nbytes} bytes")
        write_all(dst, chunk)
        throttle.take(2 * len(chunk))
        pos += len(chunk)


def _cleaned(path: Path) -> Path:
    return path.with_name(path.name + CLEANED)


def swap(plog: PartitionLog, store: PartitionStore, cleaned: list[Cleaned]) -> int:
    """Step 2 (the event loop): rename the cleaned segments in. Returns how many."""
    swapped = 0
    marker = store.directory / COMPACTED
    if cleaned and not marker.exists():
        fd = os.open(marker, os.O_WRONLY | os.O_CREAT, 0o644)
        os.fsync(fd)
        os.close(fd)
        fsync_dir(store.directory)
    for c in cleaned:
        try:
            i = store.segments.index(c.old)
        except ValueError:  # deleted meanwhile (retention, DeleteRecords)
            _cleaned(c.old.path).unlink(missing_ok=True)
            _cleaned(c.old.index_path).unlink(missing_ok=True)
            continue
        os.replace(_cleaned(c.old.path), c.old.path)
        os.replace(_cleaned(c.old.index_path), c.old.index_path)
        store.read_fds.drop(c.old)
        store.segments[i] = c.new
        swapped += 1
    if swapped:
        store.worker.dirty_dir(store.directory)
        plog.size_bytes = store.size
    return swapped


def save_progress(directory: Path, cleaned_to: int, next_horizon: int | None) -> None:
    """Where the partition was cleaned to and its earliest delete horizon (Kafka's
    cleaner-offset-checkpoint): a temp file renamed, not fsynced (lost, the next pass just
    reads the whole range again)."""
    path = directory / PROGRESS
    tmp = path.with_suffix(".tmp")
    tmp.write_text(f"{cleaned_to} {-1 if next_horizon is None else next_horizon}")
    os.replace(tmp, path)


def load_progress(directory: Path) -> tuple[int, int | None]:
    try:
        cleaned_to, horizon = (int(x) for x in (directory / PROGRESS).read_text().split())
    except (OSError, ValueError):
        return 0, None
    return cleaned_to, None if horizon < 0 else horizon


def discard(cleaned: list[Cleaned]) -> None:
    for c in cleaned:
        _cleaned(c.old.path).unlink(missing_ok=True)
        _cleaned(c.old.index_path).unlink(missing_ok=True)


def remove_leftovers(directory: Path) -> None:
    """Start-up: a clean cut short (kill -9) leaves ``.cleaned`` files; the segments they
    were for are whole."""
    for leftover in directory.glob("*" + CLEANED):
        leftover.unlink()
