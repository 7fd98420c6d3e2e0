"""What a cleaner pass keeps of each batch (kgroupd.broker.log.compaction), when a partition is
cleaned (kgroupd.broker.log.cleaner) and the compaction topic configs' checks."""

from __future__ import annotations

import pytest
from aiokafka.record.default_records import DefaultRecordBatchBuilder

from kgroupd.broker.log.cleaner import LogCleaner, _clean_memory, _memory_range
from kgroupd.broker.log.compaction import (
    DELETE_HORIZON_BIT,
    AbortedRanges,
    Cleaning,
    OffsetMap,
    keyless_record,
)
from kgroupd.broker.log.partition import PartitionLog, now_ms
from kgroupd.broker.log.topics import TopicError, TopicManager, validate_configs
from kgroupd.protocol.records import (
    build_batch,
    check_crc,
    control_batch,
    parse_header,
    split_batches,
    with_base_offset,
)
from tests.support.kafka_wire import iter_records

NOW = 1_700_000_000_000
WEEK_MS = 604_800_000


def batch(base: int, recs: list[tuple[int, bytes | None, bytes | None]], **kw: int) -> bytes:
    """A batch at ``base`` of (offset delta, key, value) records, written by aiokafka."""
    builder = DefaultRecordBatchBuilder(
        2,
        kw.get("compression", 0),
        kw.get("transactional", 0),
        kw.get("pid", -1),
        0,
        kw.get("seq", -1),
        1 << 20,
    )
    for delta, key, value in recs:
        builder.append(delta, NOW + delta, key, value, [])
    return bytes(with_base_offset(bytes(builder.build()), base))


def clean(
    batches: list[bytes], now: int = NOW, aborted: list[tuple[int, int, int]] | None = None
) -> tuple[list[bytes], Cleaning]:
    offsets = OffsetMap(AbortedRanges.of(aborted or []))
    for b in batches:
        offsets.add(b)
    cleaning = Cleaning(offsets, now, 1000)
    out = [cleaning.clean(b) for b in batches]
    return [bytes(b) for b in out if b is not None], cleaning


def records(data: list[bytes]) -> list[tuple[int, bytes | None, bytes | None, int]]:
    return [(r.offset, r.key, r.value, r.timestamp) for b in data for r in iter_records(b)]


def test_the_latest_of_each_key_stays_at_its_offset_in_its_batch() -> None:
    first = batch(10, [(0, b"a", b"1"), (1, b"b", b"1"), (2, b"a", b"2"), (3, b"c", b"1")])
    second = batch(14, [(0, b"b", b"2"), (1, b"x", b"1"), (2, b"b", b"3")], pid=9, seq=4)
    kept, cleaning = clean([first, second])
    assert records(kept) == [
        (12, b"a", b"2", NOW + 2),
        (13, b"c", b"1", NOW + 3),
        (15, b"x", b"1", NOW + 1),
        (16, b"b", b"3", NOW + 2),
    ]
    h1, h2 = parse_header(kept[0]), parse_header(kept[1])
    # base offset and last offset delta kept (a consumer steps past the batch), and the
    # producer fields: the offsets of removed records are gaps
    assert (h1.base_offset, h1.last_offset_delta, h1.record_count) == (10, 3, 2)
    assert (h2.base_offset, h2.last_offset_delta, h2.producer_id, h2.base_sequence) == (14, 2, 9, 4)
    assert cleaning.records_removed == 3
    for b in kept:
        split_batches(b)
        check_crc(b, 0, parse_header(b))
    # a pass over a clean range changes nothing (the same objects come back)
    offsets = OffsetMap(AbortedRanges())
    for b in kept:
        offsets.add(b)
    again = Cleaning(offsets, NOW, 1000)
    assert all(again.clean(b) is b for b in kept)


def test_tombstones_stay_until_their_delete_horizon_then_go() -> None:
    data = [batch(0, [(0, b"a", b"1"), (1, b"b", b"1")]), batch(2, [(0, b"a", None)])]
    kept, cleaning = clean(data, now=NOW + 5)
    assert records(kept) == [(1, b"b", b"1", NOW + 1), (2, b"a", None, NOW)]
    header = parse_header(kept[1])
    assert header.attributes & DELETE_HORIZON_BIT
    assert header.base_timestamp == NOW + 5 + 1000 == cleaning.next_horizon
    # not yet: the tombstone stays, the horizon with it
    kept2, cleaning2 = clean(kept, now=NOW + 5 + 999)
    assert kept2 == kept and cleaning2.next_horizon == NOW + 1005
    # past it: gone (and its batch, now empty)
    kept3, cleaning3 = clean(kept, now=NOW + 5 + 1000)
    assert records(kept3) == [(1, b"b", b"1", NOW + 1)]
    assert cleaning3.next_horizon is None and cleaning3.batches_removed == 1


def test_keyless_records_go() -> None:
    keyless = batch(0, [(0, None, b"1"), (1, b"a", b"1")])
    assert keyless_record(keyless)
    assert not keyless_record(batch(0, [(0, b"a", b"1")]))
    kept, _ = clean([keyless])
    assert records(kept) == [(1, b"a", b"1", NOW + 1)]


def test_aborted_records_go_at_once_and_markers_when_their_records_are_gone() -> None:
    pid = 5
    data = [
        batch(0, [(0, b"a", b"aborted")], transactional=1, pid=pid),
        batch(1, [(0, b"b", b"committed")], transactional=1, pid=pid + 1),
        with_base_offset(control_batch(pid, 0, False, 0, NOW), 2),
        with_base_offset(control_batch(pid + 1, 0, True, 0, NOW), 3),
        batch(4, [(0, b"b", b"newer")]),
    ]
    data = [bytes(b) for b in data]
    kept, cleaning = clean(data, aborted=[(pid, 0, 2)])
    # the aborted record goes; its abort marker and the committed one (whose record is now
    # superseded) stay until their horizon
    assert [parse_header(b).base_offset for b in kept] == [2, 3, 4]
    assert all(parse_header(b).attributes & DELETE_HORIZON_BIT for b in kept[:2])
    assert cleaning.removed_markers == []
    later, cleaning = clean(kept, now=NOW + 1000, aborted=[(pid, 0, 2)])
    assert [parse_header(b).base_offset for b in later] == [4]
    assert cleaning.removed_markers == [2, 3]
    # a marker whose transaction still has records stays, whatever the time
    live = [data[1], data[3]]
    assert clean(live, now=NOW + 10**9)[0] == live


def test_compaction_topic_configs_are_checked_as_kafka() -> None:
    ok = {
        "cleanup.policy": "compact,delete",
        "min.cleanable.dirty.ratio": "0.25",
        "min.compaction.lag.ms": "0",
        "max.compaction.lag.ms": "60000",
        "delete.retention.ms": "0",
    }
    assert validate_configs(dict(ok)) == ok
    for key, value in [
        ("min.cleanable.dirty.ratio", "1.5"),
        ("min.cleanable.dirty.ratio", "-0.1"),
        ("min.cleanable.dirty.ratio", "half"),
        ("min.compaction.lag.ms", "-1"),
        ("max.compaction.lag.ms", "0"),
        ("delete.retention.ms", "-1"),
    ]:
        with pytest.raises(TopicError, match=f"Invalid value {value} for configuration {key}"):
            validate_configs({key: value})


def append(log: PartitionLog, data: bytes, ts: int) -> None:
    stored = bytes(with_base_offset(data, log.high_watermark))
    log.append(stored, parse_header(stored), ts)


def test_in_memory_the_newest_segment_bytes_are_the_active_segment() -> None:
    log = PartitionLog("t", 0)
    for i in range(10):
        append(log, build_batch([(0, b"k", b"v" * 100, NOW + i)]), NOW)
    size = len(log.batches[0].data)
    closed = _memory_range(log, 3 * size, WEEK_MS, log.high_watermark, 0, NOW + 100)
    assert [b.base_offset for b in closed] == list(range(7))  # the newest 3 are active
    assert (
        len(_memory_range(log, 1, WEEK_MS, log.high_watermark, 0, NOW + 100)) == 9
    )  # at least one
    # not past the last stable offset, nor records newer than min.compaction.lag.ms
    assert len(_memory_range(log, 1, WEEK_MS, 4, 0, NOW + 100)) == 4
    assert len(_memory_range(log, 1, WEEK_MS, 99, 95, NOW + 100)) == 6


def test_memory_range_rolls_by_segment_ms() -> None:
    """segment.ms: batches appended more than segment.ms before the newest are closed,
    though segment.bytes is far from full."""
    log = PartitionLog("t", 0)
    for i in range(5):
        append(log, build_batch([(0, b"k", b"v", NOW + i)]), NOW + i * 100)
    hw = log.high_watermark
    assert _memory_range(log, 1 << 30, WEEK_MS, hw, 0, NOW + 1000) == []
    closed = _memory_range(log, 1 << 30, 200, hw, 0, NOW + 1000)
    assert [b.base_offset for b in closed] == [0, 1]  # appended at NOW+200.. are active


async def test_a_partition_is_cleaned_once_its_dirty_ratio_reaches_the_minimum() -> None:
    topics = TopicManager()
    topics.create("t", 1, {"cleanup.policy": "compact", "segment.bytes": "1"})
    log = topics.partition("t", 0)
    assert log is not None
    now = now_ms()
    for i in range(4):
        append(log, build_batch([(0, b"k%d" % i, b"v", now)]), now)
    cleaner = LogCleaner(topics, 10, None)
    try:
        (found,) = cleaner.candidates(now)
        assert found.ratio == 1.0 and found.end == 3
        assert await cleaner.clean_once(now)
        assert log.cleaned_to == 3 and not cleaner.candidates(now)
        # two more closed batches over three clean ones: 2/5 dirty, under 0.5
        append(log, build_batch([(0, b"k0", b"v", now)]), now)
        append(log, build_batch([(0, b"k9", b"v", now)]), now)
        assert not cleaner.candidates(now)
        configs = {"cleanup.policy": "compact", "segment.bytes": "1"}
        topics.set_configs("t", configs | {"min.cleanable.dirty.ratio": "0.2"})
        assert await cleaner.clean_once(now)
        assert [b.base_offset for b in log.batches] == [1, 2, 3, 4, 5]  # k0's first went
        # max.compaction.lag.ms takes a partition whatever its ratio
        topics.set_configs("t", configs | {"max.compaction.lag.ms": "1000"})
        append(log, build_batch([(0, b"k1", b"v", now)]), now)
        assert not cleaner.candidates(now)
        assert cleaner.candidates(now + 2000)
    finally:
        cleaner.close()


def test_a_full_key_map_cleans_up_to_where_it_filled_and_the_next_pass_goes_on() -> None:
    from kgroupd.broker.log.compaction import ENTRY_BYTES, Throttle

    log = PartitionLog("t", 0)
    for i in range(6):  # keys k0, k1, k2 twice: batches 3-5 supersede batches 0-2
        append(log, build_batch([(0, b"k%d" % (i % 3), b"v%d" % i, NOW)]), NOW)
    old = list(log.batches)
    # room for two keys: the map stops after the second batch (batch boundaries)
    new, cleaning, count = _clean_memory(old, 0, [], NOW, 1000, Throttle(None), 2 * ENTRY_BYTES)
    assert count == 2 and new == old[:2]  # nothing superseded within the first two
    assert cleaning.offsets.full
    new, cleaning, count = _clean_memory(old, 0, [], NOW, 1000, Throttle(None))
    assert count == 6 and [b.base_offset for b in new] == [3, 4, 5]
    # from where the last pass ended, a key map of the dirty batches alone cleans the clean
    # part too (a key the map lacks is kept there)
    new2, _, count = _clean_memory(new + old[6:], 4, [], NOW, 1000, Throttle(None))
    assert count == 3 and new2 == new


async def test_in_memory_the_bound_still_holds_and_frees_what_the_cleaner_replaced() -> None:
    from kgroupd.broker.log.budget import MemoryBudget

    topics = TopicManager()
    budget = topics.budget = MemoryBudget(1 << 30)
    topics.create("t", 1, {"cleanup.policy": "compact", "segment.bytes": "1"})
    log = topics.partition("t", 0)
    assert log is not None
    now = now_ms()
    cleaner = LogCleaner(topics, 10, None)
    try:
        for _round in range(30):
            for i in range(100):
                append(log, build_batch([(0, b"k%d" % i, b"v" * 100, now)]), now)
            assert await cleaner.clean_once(now)
            held = sum(len(b.data) for b in log.batches)
            assert budget.total == held == log.size_bytes
            # the queue holds each held batch once, plus at most as many stale entries
            assert len(budget._fifo) <= 2 * len(log.batches) + 1100
        assert len(log.batches) == 101  # the latest of each key, and the active batch
        # the bound still evicts this partition's oldest batches first
        budget.limit = held // 2
        append(log, build_batch([(0, b"k0", b"v", now)]), now)
        assert budget.total <= budget.limit and log.batches[0].base_offset > 2900
    finally:
        cleaner.close()
