"""Record timestamps at produce time (``kgroupd.broker.log.timestamps``), case by case as
Kafka's LogValidator decides them, Java's long arithmetic included."""

from __future__ import annotations

from kgroupd.broker.log.timestamps import LONG_MAX, timestamp_errors
from kgroupd.broker.log.topics import Topic
from kgroupd.protocol.records import TIMESTAMP_TYPE_BIT, parse_header, stamp_log_append_time
from tests.support.kafka_wire import build_batch

NOW = 1_800_000_000_000
HOUR = 3_600_000


def _check(topic: Topic, batch: bytes) -> list[int] | None:
    errors = timestamp_errors(topic, batch, parse_header(batch), NOW)
    return None if errors is None else [i for i, _ in errors]


def _append_time(batch: bytes, max_timestamp: int) -> bytes:
    marked = bytearray(batch)
    stamp_log_append_time(marked, max_timestamp)
    assert parse_header(marked).attributes & TIMESTAMP_TYPE_BIT
    return bytes(marked)


def test_create_time_bounds() -> None:
    topic = Topic("t", [])
    assert _check(topic, build_batch([(None, b"v", [], NOW + HOUR)])) is None  # at the bound
    assert _check(topic, build_batch([(None, b"v", [], NOW + HOUR + 1)])) == [0]
    assert _check(topic, build_batch([(None, b"v", [], 0)])) is None  # no bound before
    assert _check(topic, build_batch([(None, b"v", [], -1)])) is None  # no timestamp
    # Long.MIN_VALUE: now - ts wraps negative in Java, so it is "after" the bound
    assert _check(topic, build_batch([(None, b"v", [], -(2**63))])) == [0]
    bounded = Topic("t", [], {"message.timestamp.before.max.ms": "1000"})
    older_second = build_batch(
        [(None, b"a", [], NOW), (None, b"b", [], NOW - 5000), (None, b"c", [], NOW + 5)]
    )
    assert _check(bounded, older_second) == [1]  # read from the records, not the header
    unbounded_after = Topic("t", [], {"message.timestamp.after.max.ms": str(LONG_MAX)})
    assert _check(unbounded_after, build_batch([(None, b"v", [], 2**62)])) is None


def test_append_time_batches() -> None:
    create_time, append_time = (
        Topic("c", []),
        Topic("a", [], {"message.timestamp.type": "LogAppendTime"}),
    )
    batch = build_batch([(None, b"v", [], NOW), (None, b"w", [], NOW)])
    assert _check(append_time, batch) is None  # the broker stamps its own time
    assert _check(append_time, _append_time(batch, NOW)) == [0, 1]  # not the producer's to set
    assert _check(create_time, _append_time(batch, NOW)) is None  # its max timestamp is checked
    assert _check(create_time, _append_time(batch, NOW + 2 * HOUR)) == [0, 1]
    assert _check(create_time, _append_time(batch, -1)) == [0, 1]


def test_altered_configs_are_read_again() -> None:
    topic = Topic("t", [])
    late = build_batch([(None, b"v", [], NOW + 2 * HOUR)])
    assert _check(topic, late) == [0]
    topic.configs = {"message.timestamp.after.max.ms": str(3 * HOUR)}  # AlterConfigs' way
    assert _check(topic, late) is None
