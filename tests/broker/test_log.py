"""Partition logs and topics: append, find by offset, read limits, retention."""

from __future__ import annotations

import asyncio

import pytest
from aiokafka.record.default_records import DefaultRecordBatchBuilder

from kgroupd.broker.log.partition import PartitionLog
from kgroupd.broker.log.topics import (
    TopicError,
    TopicManager,
    validate_configs,
    validate_topic_name,
)
from kgroupd.protocol.errors import ErrorCode
from kgroupd.protocol.records import (
    CorruptBatch,
    check_crc,
    parse_header,
    split_batches,
    with_base_offset,
)


def batch(n: int, ts: int = 1000, value: bytes = b"v") -> bytes:
    b = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=0,
        is_transactional=False,
        producer_id=-1,
        producer_epoch=-1,
        base_sequence=-1,
        batch_size=1 << 20,
    )
    for i in range(n):
        b.append(i, timestamp=ts + i, key=None, value=value, headers=[])
    return bytes(b.build())


def filled(*sizes: int, ts: int = 1000) -> PartitionLog:
    log = PartitionLog("t", 0)
    for n in sizes:
        # As the produce path does: the stored batch carries its base offset.
        data = bytes(with_base_offset(batch(n, ts), log.high_watermark))
        log.append(data, parse_header(data), now_ms=ts)
    return log


def test_offsets_are_assigned_per_record_and_found_by_any_offset_in_a_batch() -> None:
    log = filled(3, 1, 5)
    assert [b.base_offset for b in log.batches] == [0, 3, 4]
    assert log.high_watermark == 9
    assert log.find(0) == 0
    assert log.find(2) == 0
    assert log.find(3) == 1
    assert log.find(8) == 2
    assert log.find(9) == 3  # at the end: nothing to read


def test_read_respects_max_bytes_but_returns_at_least_one_batch() -> None:
    log = filled(3, 3, 3)
    size = len(log.batches[0].data)
    data, n = log.read(0, size * 2, at_least_one=True)
    assert n == size * 2 and len(split_batches(data)) == 2
    data, n = log.read(0, 1, at_least_one=True)
    assert n == size  # larger than the limit, returned anyway
    data, n = log.read(0, 1, at_least_one=False)
    assert (data, n) == (b"", 0)
    data, _ = log.read(4, 10**6, at_least_one=True)
    assert parse_header(data).base_offset == 3  # whole batch holding offset 4


def test_retention_by_bytes_drops_whole_batches_from_the_head_and_keeps_the_newest() -> None:
    log = filled(2, 2, 2, 2)
    one = len(log.batches[0].data)
    assert log.apply_retention(-1, one * 2, now_ms=2000) == 2
    assert log.log_start_offset == 4
    assert log.apply_retention(-1, 0, now_ms=2000) == 1
    assert len(log.batches) == 1  # the newest batch always stays
    assert log.high_watermark == 8


def test_retention_by_time_uses_the_largest_timestamp_of_a_batch() -> None:
    log = PartitionLog("t", 0)
    for ts in (1000, 5000, 9000):
        data = batch(1, ts)
        log.append(data, parse_header(data), now_ms=ts)
    assert log.apply_retention(6000, -1, now_ms=10000) == 1  # only 1000 is over 6 s old
    assert log.log_start_offset == 1
    assert log.apply_retention(-1, -1, now_ms=10**9) == 0  # -1: unlimited


def test_topic_retention_config_is_applied() -> None:
    topics = TopicManager()
    topics.create("r", 1, {"retention.bytes": "0"})
    log = topics.partition("r", 0)
    assert log is not None
    for _ in range(3):
        data = batch(1)
        log.append(data, parse_header(data), now_ms=1000)
    assert topics.apply_retention(now_ms=1000) == 2
    assert log.log_start_offset == 2


@pytest.mark.parametrize(
    ("name", "ok"),
    [
        ("a.b_c-D9", True),
        ("", False),
        (".", False),
        ("..", False),
        ("x" * 249, True),
        ("x" * 250, False),
        ("sp ace", False),
        ("ü", False),
    ],
)
def test_topic_names(name: str, ok: bool) -> None:
    if ok:
        validate_topic_name(name)
    else:
        with pytest.raises(TopicError) as exc:
            validate_topic_name(name)
        assert exc.value.code == ErrorCode.INVALID_TOPIC_EXCEPTION


def test_topic_configs_are_validated_with_kafkas_names() -> None:
    assert validate_configs({"retention.ms": "1", "cleanup.policy": "compact, delete"})
    for bad in (
        {"retention.ms": "soon"},
        {"no.such.config": "1"},
        {"message.timestamp.type": "Now"},
        {"retention.bytes": None},
    ):
        with pytest.raises(TopicError) as exc:
            validate_configs(bad)  # type: ignore[arg-type]
        assert exc.value.code == ErrorCode.INVALID_CONFIG


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("retention.ms", "soon", "Not a number of type LONG"),
        ("retention.ms", "1_000", "Not a number of type LONG"),
        ("retention.ms", "-2", "Value must be at least -1"),
        ("segment.bytes", "2147483648", "Not a number of type INT"),
        ("segment.ms", "0", "Value must be at least 1"),
        ("min.insync.replicas", "0", "Value must be at least 1"),
        ("max.message.bytes", "-1", "Value must be at least 0"),
    ],
)
def test_topic_config_values_get_kafkas_messages(key: str, value: str, message: str) -> None:
    with pytest.raises(TopicError) as exc:
        validate_configs({key: value})
    assert exc.value.code == ErrorCode.INVALID_CONFIG
    assert exc.value.message == f"Invalid value {value} for configuration {key}: {message}"


def test_delete_records_moves_the_start_and_retention_goes_on_from_it() -> None:
    log = filled(2, 3, 2)  # batches 0-1, 2-4, 5-6
    assert log.delete_records(3) == 3
    assert [b.base_offset for b in log.batches] == [2, 5]  # the batch holding 3 stays
    assert log.delete_records(1) == 3  # lower: unchanged
    assert log.apply_retention(-1, -1, now_ms=1000) == 0
    assert log.log_start_offset == 3
    log.delete_records(4)
    one = len(log.batches[-1].data)
    assert log.apply_retention(-1, one, now_ms=1000) == 1  # drops 2-4: start is 5
    assert log.log_start_offset == 5
    assert log.delete_records(7) == 7  # the high watermark: the newest batch stays
    assert len(log.batches) == 1 and log.high_watermark == 7


def test_altered_configs_replace_the_dynamic_ones() -> None:
    topics = TopicManager()
    topics.create("a", 1, {"retention.ms": "5"})
    topics.set_configs("a", {"retention.bytes": "0"})
    topic = topics.get("a")
    assert topic is not None
    assert topic.config("retention.ms") == "604800000"  # back to the default
    assert topic.config("retention.bytes") == "0"


def test_create_checks() -> None:
    topics = TopicManager()
    topics.create("x", 1)
    cases = [
        ("x", 1, 1, ErrorCode.TOPIC_ALREADY_EXISTS),
        ("y", 0, 1, ErrorCode.INVALID_PARTITIONS),
        ("y", 1, 0, ErrorCode.INVALID_REPLICATION_FACTOR),
        ("y", 1, 3, ErrorCode.INVALID_REPLICATION_FACTOR),
    ]
    for name, parts, repl, code in cases:
        with pytest.raises(TopicError) as exc:
            topics.check_create(name, parts, repl, {})
        assert exc.value.code == code


def test_crc_check_detects_a_flipped_byte() -> None:
    data = bytearray(batch(2))
    check_crc(bytes(data), 0, parse_header(data))
    data[-1] ^= 0x01
    with pytest.raises(CorruptBatch, match="CRC"):
        check_crc(bytes(data), 0, parse_header(data))


def _three_batches(topics: TopicManager, name: str, partitions: int) -> None:
    for p in range(partitions):
        log = topics.partition(name, p)
        assert log is not None
        for _ in range(3):
            data = bytes(with_base_offset(batch(1), log.high_watermark))
            log.append(data, parse_header(data), now_ms=1000)


async def test_the_retention_pass_gives_the_loop_back_and_skips_a_topic_deleted_meanwhile() -> None:
    """The periodic pass (``retention_pass``) over every partition yields to the event loop
    between slices (here after every partition); a topic deleted during the pass is left
    alone from then on, the others all get retention; a compact topic is skipped."""
    topics = TopicManager()
    for name in ("a", "b", "c"):
        topics.create(name, 4, {"retention.bytes": "0"})
        _three_batches(topics, name, 4)
    topics.create("kept", 2, {"retention.bytes": "0", "cleanup.policy": "compact"})
    _three_batches(topics, "kept", 2)
    turns = 0
    b = topics.topics["b"]

    async def other_work() -> None:
        nonlocal turns
        while True:
            turns += 1
            if turns == 6:  # the pass did a's 4 partitions and b's first: "b" goes
                assert topics.delete("b") is b
            await asyncio.sleep(0)

    bystander = asyncio.create_task(other_work())
    await asyncio.sleep(0)  # turn 1
    dropped = await topics.retention_pass(now_ms=1000, slice_s=0)
    bystander.cancel()
    assert turns >= 8  # the loop ran other work between partitions
    starts = {
        (t.name, log.partition): log.log_start_offset
        for t in [topics.topics[n] for n in ("a", "c", "kept")]
        for log in t.partitions
    }
    assert starts == {
        **dict.fromkeys([("a", p) for p in range(4)] + [("c", p) for p in range(4)], 2),
        ("kept", 0): 0,
        ("kept", 1): 0,
    }
    assert [log.log_start_offset for log in b.partitions] == [2, 0, 0, 0]
    assert dropped == 8 * 2 + 2  # a and c whole, b's first partition before it went


async def test_partition_count_follows_topics_as_they_come_grow_and_go() -> None:
    """What --max-partitions bounds: every topic's partitions but ``__...`` ones, and those
    being made in slices (kept as a running count, not summed over every topic)."""
    topics = TopicManager()
    topics.create("a", 3)
    topics.create("__mine", 5)
    assert topics.partition_count() == 3
    topics.add_partitions("a", 7)
    await topics.create_in_slices("b", 4, {}, step=1)
    await topics.add_partitions_in_slices("b", 6, step=1)
    assert topics.partition_count() == 13
    topics.delete("a")
    topics.delete("__mine")
    assert topics.partition_count() == 6
    topics.delete("b")
    assert topics.partition_count() == 0


async def test_a_retention_pass_of_one_topic_leaves_the_others() -> None:
    """AlterConfigs of a topic's retention applies it to that topic at once (``only``)."""
    topics = TopicManager()
    for name in ("a", "b"):
        topics.create(name, 2, {"retention.bytes": "0"})
        _three_batches(topics, name, 2)
    assert await topics.retention_pass(now_ms=1000, slice_s=0, only="a") == 4
    assert await topics.retention_pass(now_ms=1000, only="gone") == 0
    starts = {
        (t.name, log.log_start_offset) for t in topics.topics.values() for log in t.partitions
    }
    assert starts == {("a", 2), ("b", 0)}
