"""Log compaction of a partition's segment files (``kgroupd.broker.log.cleaner`` decides when).

The range cleaned is the closed segments from the first, up to (not including) the first
segment that holds an offset at or past the last stable offset, or a record newer than
``min.compaction.lag.ms`` (Kafka's first uncleanable offset); the active segment is never
touched. As Kafka's ``groupSegmentsBySize``, the range is cut into groups of consecutive
segments whose sizes (before cleaning) add up to at most ``segment.bytes`` and whose offsets
fit a 32-bit offset relative to the group's first; each group is cleaned into one segment
named after its first (``kgroupd.broker.log.compaction`` says what stays), so a compacted log does
not
keep many small segments. A group of one segment that nothing changes is not written.

1. off the event loop (the cleaner's thread, at most ``--log-cleaner-io-max-bytes-per-second``
   read plus written): the range is read once to map each key to its latest offset, then each
   group that changes is written as ``BASE.log.cleaned`` (fsynced) with its index file as
   ``BASE.idx.cleaned`` (the aborted transactions whose marker stays; the producer state the
   index file of the group's last segment held);
2. on the event loop, group by group: one segment's ``.cleaned`` pair is renamed over its
   segment and index file (atomic: a reader sees the old segment or the new). A group of N
   is swapped in three steps, each recoverable: the group's other segments are renamed
   ``BASE.log.deleted`` (their index files deleted); ``BASE.log.cleaned`` is renamed
   ``BASE.log.swap``, the commit point; then the ``.deleted`` files are deleted and the swap
   file and its index are renamed over the first segment's (directory fsyncs between the
   steps, unless ``--fsync never``). The old files' descriptors are dropped and the
   partition's cached batches in the range are forgotten.

Start-up (``recover``): with a ``.swap`` file the swap was committed: the ``.deleted`` files go
and the swap file (and its ``.idx.cleaned``) become the segment; without one, ``.deleted``
files are renamed back (the old group is whole). ``.cleaned`` files left then are a pass cut
short and are deleted. Kafka's cleaner does the same with ``.cleaned``, ``.swap`` and
``.deleted`` files, though it renames the old segments after the commit point and recovers by
the swap segment's offset range; renaming them first tells exactly which go, even when the
group's last segments lost all their records.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from kgroupd.broker.log.compaction import AbortedRanges, Cleaning, OffsetMap, Throttle
from kgroupd.broker.storage.fileio import fsync_dir, write_all
from kgroupd.broker.storage.fsync import NEVER
from kgroupd.broker.storage.segment import Segment, peek, read_index

if TYPE_CHECKING:
    from kgroupd.broker.log.partition import PartitionLog
    from kgroupd.broker.storage.partition_store import PartitionStore

CLEANED = ".cleaned"
SWAP = ".swap"
DELETED = ".deleted"
INT32_MAX = (1 << 31) - 1  # a segment's index holds offsets relative to its base as int32
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
    max_bytes: int = INT32_MAX  # segment.bytes: the most a group of segments may hold


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
    total = sum(s.size for s in taken)
    return Range(taken, end, dirty_bytes, total, first_ts, cleaned_to, store.segment_bytes)


def groups(segments: list[Segment], max_bytes: int) -> list[list[Segment]]:
    """Kafka's LogCleaner.groupSegmentsBySize: consecutive segments whose sizes add up to at
    most ``max_bytes`` and whose offsets fit an int32 relative to the group's base offset."""
    out: list[list[Segment]] = []
    i = 0
    while i < len(segments):
        group = [segments[i]]
        size = segments[i].size
        i += 1
        while i < len(segments):
            seg = segments[i]
            if size + seg.size > max_bytes:
                break
            if seg.size and seg.last_offset - group[0].base_offset > INT32_MAX:
                break
            group.append(seg)
            size += seg.size
            i += 1
        out.append(group)
    return out


@dataclass
class Cleaned:
    old: list[Segment]  # a group of consecutive segments
    new: Segment  # what replaces them, at the first one's base offset


def clean_range(
    work: Range,
    aborted: list[tuple[int, int, int]],
    now_ms: int,
    delete_retention_ms: int,
    throttle: Throttle,
    map_limit: int = 1 << 62,
    retain: frozenset[int] = frozenset(),
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
    cleaning = Cleaning(offsets, now_ms, delete_retention_ms, retain)
    out: list[Cleaned] = []
    for group in groups(segments, work.max_bytes):
        new = _clean_group(group, cleaning, aborted, throttle)
        if new is not None:
            out.append(Cleaned(group, new))
    return out, cleaning, end


def _clean_group(
    group: list[Segment],
    cleaning: Cleaning,
    aborted: list[tuple[int, int, int]],
    throttle: Throttle,
) -> Segment | None:
    """Write ``group`` cleaned as one ``.cleaned`` segment; None if it is one segment that
    nothing changes (nothing written)."""
    first, last_seg = group[0], group[-1]
    tmp = _cleaned(first.path)
    new = Segment(first.base_offset, first.path, interval=first.interval)
    changed = done = False
    unchanged = 0  # bytes of the segment up to its first batch that changes: copied as they are
    out = -1
    try:
        if len(group) > 1:  # merged: always written
            changed = True
            out = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        pending: list[bytes | memoryview] = []
        pending_bytes = 0
        for seg in group:
            fd = os.open(seg.path, os.O_RDONLY)
            try:
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
            finally:
                os.close(fd)
        if not changed:
            return None  # as it was: nothing written
        if pending:
            write_all(out, b"".join(pending))
            throttle.take(pending_bytes)
        os.fsync(out)
        done = True
    finally:
        if out >= 0:
            os.close(out)
            if not done:  # failed (a full disk...) or stopped: nothing left behind
                tmp.unlink(missing_ok=True)
    removed = set(cleaning.removed_markers)
    lo, hi = first.base_offset, last_seg.last_offset
    mine = [a for a in aborted if lo <= a[2] <= hi and a[2] not in removed]
    # the producer state as of the group's end: what its last segment's index file held
    scratch = Segment(last_seg.base_offset, last_seg.path)
    found = read_index(scratch)
    ongoing = {} if found is None else found.ongoing
    producers = [] if found is None else found.producers
    data = new.encode_index(os.stat(tmp).st_mtime_ns, mine, ongoing, producers)
    idx_tmp = _cleaned(first.index_path)
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


def _swap(path: Path) -> Path:
    return path.with_name(path.name + SWAP)


def _deleted(path: Path) -> Path:
    return path.with_name(path.name + DELETED)


def swap(plog: PartitionLog, store: PartitionStore, cleaned: list[Cleaned]) -> int:
    """Step 2 (the event loop): put the cleaned segments in. Returns how many old segments
    they replaced."""
    swapped = 0
    marker = store.directory / COMPACTED
    if cleaned and not marker.exists():
        fd = os.open(marker, os.O_WRONLY | os.O_CREAT, 0o644)
        os.fsync(fd)
        os.close(fd)
        fsync_dir(store.directory)
    durable = store.worker.mode != NEVER
    for c in cleaned:
        n = len(c.old)
        try:
            i = store.segments.index(c.old[0])
        except ValueError:  # deleted meanwhile (retention, DeleteRecords)
            discard([c])
            continue
        if store.segments[i : i + n] != c.old:
            discard([c])
            continue
        if n == 1:
            os.replace(_cleaned(c.new.path), c.new.path)
            os.replace(_cleaned(c.new.index_path), c.new.index_path)
        else:
            _swap_group(store.directory, c, durable)
        for seg in c.old:
            store.read_fds.drop(seg)
        store.segments[i : i + n] = [c.new]
        store.bases[i : i + n] = [c.new.base_offset]
        swapped += n
    if swapped:
        store.worker.dirty_dir(store.directory)
        plog.size_bytes = store.size
    return swapped


def _swap_group(directory: Path, c: Cleaned, durable: bool) -> None:
    """A group of segments replaced by its cleaned one, in steps start-up can finish or undo
    (see the module docstring)."""
    rest = c.old[1:]
    for seg in rest:
        os.replace(seg.path, _deleted(seg.path))
        seg.index_path.unlink(missing_ok=True)
    if durable:
        fsync_dir(directory)
    os.replace(_cleaned(c.new.path), _swap(c.new.path))  # the commit point
    if durable:
        fsync_dir(directory)
    for seg in rest:
        _deleted(seg.path).unlink()
    os.replace(_cleaned(c.new.index_path), c.new.index_path)
    os.replace(_swap(c.new.path), c.new.path)


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
        _cleaned(c.new.path).unlink(missing_ok=True)
        _cleaned(c.new.index_path).unlink(missing_ok=True)


def recover(directory: Path) -> None:
    """Start-up: finish a group swap that reached its commit point (a ``.swap`` file), undo
    one that did not (``.deleted`` files renamed back), then delete the ``.cleaned`` files of
    a pass cut short (kill -9): the segments they were for are whole."""
    swaps = sorted(directory.glob("*.log" + SWAP))
    for old in directory.glob("*.log" + DELETED):
        if swaps:
            old.unlink()
        else:
            os.replace(old, old.with_name(old.name.removesuffix(DELETED)))
    for found in swaps:
        path = found.with_name(found.name.removesuffix(SWAP))
        index = _cleaned(path.with_suffix(".idx"))
        if index.exists():
            os.replace(index, path.with_suffix(".idx"))
        os.replace(found, path)
    for leftover in directory.glob("*" + CLEANED):
        leftover.unlink()
    if swaps:
        fsync_dir(directory)
