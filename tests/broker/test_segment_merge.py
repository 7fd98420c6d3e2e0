"""Merging segments in the log cleaner (kgroupd.broker.storage.segment_cleaner): consecutive closed
segments are cleaned into one, as Kafka's groupSegmentsBySize groups them, and a swap of N
segments into 1 cut short at any step (a crash: nothing after it happens) leaves a data
directory that start-up completes or undoes, losing nothing."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

from kgroupd.broker.log.cleaner import LogCleaner
from kgroupd.broker.log.partition import PartitionLog, now_ms
from kgroupd.broker.storage import segment_cleaner as sc
from kgroupd.broker.storage.segment import Segment
from kgroupd.broker.testing import running_server
from kgroupd.protocol.records import build_batch, parse_header, with_base_offset
from tests.integration.test_compaction import TOPIC, read_log
from tests.support.kafka_wire import WireClient, create_topic

KEYS = 10
BATCHES = 24  # of 5 records (~280 bytes): 4 segments of 1,800 bytes


def seg(base: int, size: int, last: int) -> Segment:
    s = Segment(base, Path(f"{base:020d}.log"))
    s.size, s.last_offset = size, last
    return s


def test_segments_are_grouped_as_kafka_groups_them() -> None:
    segs = [seg(0, 400, 9), seg(10, 300, 19), seg(20, 0, 19), seg(20, 200, 29), seg(30, 900, 39)]
    assert [[s.base_offset for s in g] for g in sc.groups(segs, 1000)] == [
        [0, 10, 20, 20],  # 1,800 with the next: over segment.bytes
        [30],
    ]
    assert [len(g) for g in sc.groups(segs, 450)] == [1, 2, 1, 1]
    # offsets relative to the group's base must fit an int32 (the index's)
    far = [seg(0, 10, 5), seg(6, 10, 2**31 - 1), seg(2**31, 10, 2**31 + 5)]
    assert [len(g) for g in sc.groups(far, 1000)] == [2, 1]


def updates(now: int) -> list[bytes]:
    """Round after round of updates of KEYS keys, 5 records a batch, then a batch larger than
    segment.bytes (the active segment: never cleaned)."""
    out = []
    n = 0
    for _ in range(BATCHES):
        recs = []
        for j in range(5):
            k = b"k%d" % (n % KEYS)
            recs.append((j, k, k + b"=%04d" % n + b"." * 20, now))
            n += 1
        out.append(build_batch(recs))
    out.append(build_batch([(0, b"~roll", b"x" * 2500, now)]))
    return out


def latest(now: int) -> dict[bytes, tuple[int, bytes]]:
    """key -> (offset, value) of its last update."""
    want: dict[bytes, tuple[int, bytes]] = {}
    offset = 0
    for b in updates(now)[:-1]:
        for r in _records(b):
            want[r[0]] = (offset, r[1])
            offset += 1
    return want


def _records(batch: bytes) -> list[tuple[bytes, bytes]]:
    from tests.support.kafka_wire import iter_records

    return [(r.key, r.value) for r in iter_records(batch)]


def append(plog: PartitionLog, batch: bytes) -> None:
    stored = bytes(with_base_offset(batch, plog.high_watermark))
    plog.append(stored, parse_header(stored), now_ms())


class Crash(Exception):
    pass


@contextmanager
def crash_after(steps: int) -> Iterator[list[str]]:
    """os.replace and os.unlink fail (nothing done) from the ``steps``+1-th call on: a crash
    there. Yields the calls made."""
    done: list[str] = []
    real = {"replace": os.replace, "unlink": os.unlink}

    def wrap(name: str) -> Callable[..., Any]:
        def call(*args: Any, **kw: Any) -> Any:
            if len(done) >= steps:
                raise Crash(name)
            done.append(f"{name} {Path(args[0]).name}")
            return real[name](*args, **kw)

        return call

    os.replace = wrap("replace")  # type: ignore[assignment]
    os.unlink = wrap("unlink")  # type: ignore[assignment]
    try:
        yield done
    finally:
        os.replace, os.unlink = real["replace"], real["unlink"]  # type: ignore[assignment]


def part_files(data: Path) -> list[str]:
    return sorted(p.name for p in (data / "topics" / f"{TOPIC}-0").iterdir())


async def merge(data: Path, steps: int | None) -> tuple[list[str], int]:
    """Write the log (4 closed segments), raise segment.bytes so they make one group, and run
    one pass that crashes after ``steps`` file operations of its swap (None: no crash).
    Returns the swap's file operations and the number of closed segments before."""
    settings: dict[str, Any] = {"data_dir": data, "log_cleaner_enable": False}
    now = now_ms()
    async with running_server(**settings, log_level="warning") as server:
        async with await WireClient.connect(server.port) as wire:
            configs = {"cleanup.policy": "compact", "segment.bytes": "1800"}
            await create_topic(wire, TOPIC, 1, configs)
        plog = server.broker.topics.partition(TOPIC, 0)
        assert plog is not None and plog.store is not None
        for b in updates(now):
            append(plog, b)
        closed = len(plog.store.segments) - 1  # type: ignore[attr-defined]
        server.broker.topics.set_configs(TOPIC, configs | {"segment.bytes": "100000"})
        cleaner = LogCleaner(server.broker.topics, 50, None)
        try:
            if steps is None:
                assert await cleaner.clean_once(now)
                return [], closed
            with crash_after(steps) as done, suppress(Crash):
                await cleaner.clean_once(now)
            return done, closed
        finally:
            cleaner.close()


async def check(data: Path, merged: bool | None = None, read_back: bool = True) -> None:
    """Start-up on ``data``: no leftover file; every key's latest update at its offset, and
    nothing a cleaner could not have kept; the closed segments one (merged) or as before."""
    now = now_ms()
    async with running_server(data_dir=data, log_cleaner_enable=False, log_level="warning") as s:
        leftovers = [f for f in part_files(data) if f.endswith((".cleaned", ".swap", ".deleted"))]
        assert leftovers == []
        records = await read_log(s.port)
        plog = s.broker.topics.partition(TOPIC, 0)
        assert plog is not None and plog.store is not None
        segments = plog.store.segments  # type: ignore[attr-defined]
        logs = [f for f in part_files(data) if f.endswith(".log")]
        assert logs == [x.path.name for x in segments]
        if merged is not None:
            assert (len(segments) == 2) is merged, logs
        if not read_back:  # every index file taken as it is (the merged one's too)
            assert s.broker.topics.store is not None
            assert s.broker.topics.store.batches_read == 0
    got = {k: (o, v) for o, k, v in records if k != b"~roll"}
    assert got == latest(now)
    everything = {(o, k, v) for k, (o, v) in latest(now).items()}
    if len(records) == KEYS + 1:
        assert {r for r in records if r[1] != b"~roll"} == everything
    else:
        assert len(records) == BATCHES * 5 + 1  # the old segments, whole


async def test_a_group_of_segments_is_cleaned_into_one(tmp_path: Path) -> None:
    _, closed = await merge(tmp_path, None)
    assert closed == 4
    await check(tmp_path, merged=True, read_back=False)


async def test_a_swap_of_segments_cut_short_at_any_step_loses_nothing(tmp_path: Path) -> None:
    full, _ = await merge(tmp_path / "whole", 1000)  # counts the steps (none fails)
    # three segments renamed .deleted (their index files deleted), the swap, three deletes,
    # the index and the segment in place; then the cleaner's progress file
    assert len(full) == 3 + 3 + 1 + 3 + 2 + 1, full
    for k in range(len(full)):
        data = tmp_path / f"crash-{k}"
        done, _ = await merge(data, k)
        assert len(done) == k
        await check(data, merged=k >= 7)  # from the swap file's rename on: committed
