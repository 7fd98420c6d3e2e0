"""Share fetches (KIP-932) with confluent-kafka's ShareConsumer: records read from the segment
files under --data-dir (no cache), share.isolation.level=read_committed never delivering an
aborted transaction's records (read_uncommitted delivers them; markers never), and
share.auto.offset.reset=by_duration starting at the first record that recent."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Producer

from kgroupd.broker.testing import ThreadedBroker
from tests.support.share_clients import poll_until, produce, set_group_configs, share_consumer

TOPIC = "sq"


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[ThreadedBroker]:
    # no cache: every batch a share fetch reads comes from the segment files
    with ThreadedBroker(create_topics=[f"{TOPIC}:1"], data_dir=tmp_path, log_cache_bytes=0) as b:
        yield b


def share_state(broker: ThreadedBroker, group: str, expected: tuple[int, int]) -> tuple[int, int]:
    """(share-partition start offset, records in flight) of the group's one partition, once
    it is ``expected`` (the consumer's last acknowledgements may still be on their way) or
    after a deadline."""
    share = broker.server.broker.share  # type: ignore[union-attr]
    deadline = time.monotonic() + 10
    while True:
        ((_key, sp),) = [(k, v) for k, v in share.partitions.items() if k[0] == group]
        got = (sp.start_offset, sp.in_flight_count())
        if got == expected or time.monotonic() > deadline:
            return got
        time.sleep(0.05)


def test_records_are_read_from_the_segment_files(broker: ThreadedBroker) -> None:
    set_group_configs(broker.bootstrap, "files", share_auto_offset_reset="earliest")
    produce(broker.bootstrap, TOPIC, [b"%d" % i for i in range(30)])
    c = share_consumer(broker.bootstrap, "files", TOPIC)
    got = poll_until(c, lambda ms: len(ms) >= 30)
    assert sorted(m.offset() for m in got) == list(range(30))
    assert [m.value() for m in sorted(got, key=lambda m: m.offset())] == [
        b"%d" % i for i in range(30)
    ]
    poll_until(c, lambda ms: False, deadline_s=1)  # the next poll accepts (implicit mode)
    c.close()
    assert share_state(broker, "files", (30, 0)) == (30, 0)


def transactions(bootstrap: str) -> None:
    """committed c1 c2 | aborted a1 a2 | plain p1 | committed c3: with their markers."""
    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": "share-txn"})
    p.init_transactions(10)
    p.begin_transaction()
    p.produce(TOPIC, b"c1")
    p.produce(TOPIC, b"c2")
    p.commit_transaction(10)
    p.begin_transaction()
    p.produce(TOPIC, b"a1")
    p.produce(TOPIC, b"a2")
    p.flush(10)
    p.abort_transaction(10)
    produce(bootstrap, TOPIC, [b"p1"])
    p.begin_transaction()
    p.produce(TOPIC, b"c3")
    p.commit_transaction(10)


@pytest.mark.parametrize(
    ("level", "expected"),
    [
        ("read_committed", [b"c1", b"c2", b"p1", b"c3"]),
        ("read_uncommitted", [b"c1", b"c2", b"a1", b"a2", b"p1", b"c3"]),
    ],
)
def test_isolation_level(broker: ThreadedBroker, level: str, expected: list[bytes]) -> None:
    group = level.replace("_", "-")
    set_group_configs(
        broker.bootstrap,
        group,
        share_auto_offset_reset="earliest",
        share_isolation_level=level,
    )
    transactions(broker.bootstrap)
    log = broker.server.broker.topics.partition(TOPIC, 0)  # type: ignore[union-attr]
    end = log.high_watermark
    assert end == 9  # six records, three markers
    c = share_consumer(broker.bootstrap, group, TOPIC)
    got = poll_until(c, lambda ms: len(ms) >= len(expected))
    got += poll_until(c, lambda ms: False, deadline_s=1.5)  # nothing more comes; all accepted
    assert [m.value() for m in sorted(got, key=lambda m: m.offset())] == expected
    c.close()
    # every offset settled: the delivered accepted, the markers and aborted ones archived
    assert share_state(broker, group, (end, 0)) == (end, 0)


def test_by_duration_starts_at_the_first_record_that_recent(broker: ThreadedBroker) -> None:
    two_hours_ago = int(time.time() * 1000) - 2 * 3600 * 1000
    produce(broker.bootstrap, TOPIC, [b"old-1", b"old-2"], timestamp=two_hours_ago)
    produce(broker.bootstrap, TOPIC, [b"new-1", b"new-2"])
    set_group_configs(broker.bootstrap, "recent", share_auto_offset_reset="by_duration:PT1H")
    set_group_configs(broker.bootstrap, "day", share_auto_offset_reset="by_duration:P1D")
    recent = share_consumer(broker.bootstrap, "recent", TOPIC)
    got = poll_until(recent, lambda ms: len(ms) >= 2)
    got += poll_until(recent, lambda ms: False, deadline_s=1.5)
    assert sorted(m.value() for m in got) == [b"new-1", b"new-2"]
    recent.close()
    day = share_consumer(broker.bootstrap, "day", TOPIC)
    got = poll_until(day, lambda ms: len(ms) >= 4)
    assert sorted(m.offset() for m in got) == [0, 1, 2, 3]
    day.close()
