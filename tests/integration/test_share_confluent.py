"""Share groups (KIP-932) with confluent-kafka's ShareConsumer against kgroupd: consumers of one
partition share its records; RELEASE redelivers with a higher delivery count; REJECT never
redelivers; an acquisition lock that expires redelivers."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from confluent_kafka import AcknowledgeType, Message, Producer, ShareConsumer
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ResourceType,
)

from kgroupd.broker.testing import ThreadedBroker

TOPIC = "sq"


@pytest.fixture
def broker() -> Iterator[ThreadedBroker]:
    # a 1 s lock is allowed (Kafka's minimum), so a lock expiry is seen quickly
    with ThreadedBroker(
        create_topics=[f"{TOPIC}:1"], group_share_min_record_lock_duration_ms=1000
    ) as b:
        yield b


def group_configs(broker: ThreadedBroker, group: str, **configs: str) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    res = ConfigResource(
        ResourceType.GROUP,
        group,
        incremental_configs=[
            ConfigEntry(k.replace("_", "."), v, incremental_operation=AlterConfigOpType.SET)
            for k, v in configs.items()
        ],
    )
    admin.incremental_alter_configs([res])[res].result(10)


def produce(broker: ThreadedBroker, n: int) -> None:
    p = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0})
    for i in range(n):
        p.produce(TOPIC, value=str(i).encode())
        p.flush(10)  # one batch per record: records of one batch are acquired together
    assert p.flush(10) == 0


def consumer(broker: ThreadedBroker, group: str, explicit: bool = False) -> ShareConsumer:
    config = {"bootstrap.servers": broker.bootstrap, "group.id": group}
    if explicit:
        config["share.acknowledgement.mode"] = "explicit"
    c = ShareConsumer(config)
    c.subscribe([TOPIC])
    return c


def poll(c: ShareConsumer, timeout: float = 1.0) -> list[Message]:
    out = []
    for m in c.poll(timeout):
        assert m.error() is None, m.error()
        out.append(m)
    return out


def test_two_consumers_share_one_partition(broker: ThreadedBroker) -> None:
    group_configs(broker, "shared", share_auto_offset_reset="earliest")
    produce(broker, 20)
    a, b = consumer(broker, "shared", explicit=True), consumer(broker, "shared")
    held: list[Message] = []
    deadline = time.monotonic() + 30
    while not held and time.monotonic() < deadline:
        held = poll(a)
    produce(broker, 20)
    # while a holds its records, b is given the others of the same partition
    got_b: list[int] = []
    deadline = time.monotonic() + 30
    while len(held) + len(got_b) < 40 and time.monotonic() < deadline:
        got_b += [m.offset() for m in poll(b, 0.5)]
    got_a = [m.offset() for m in held]
    assert got_a and got_b
    assert sorted(got_a + got_b) == list(range(40))  # each record to one member only
    for m in held:
        a.acknowledge(m)
    assert poll(a, 0.5) == []  # accepted: never delivered again
    a.close()
    b.close()


def test_release_redelivers_reject_never(broker: ThreadedBroker) -> None:
    group_configs(broker, "acks", share_auto_offset_reset="earliest")
    produce(broker, 4)
    c = consumer(broker, "acks", explicit=True)
    first: list[Message] = []
    deadline = time.monotonic() + 30
    while len(first) < 4 and time.monotonic() < deadline:
        batch = poll(c)
        for m in batch:
            kind = {0: AcknowledgeType.RELEASE, 1: AcknowledgeType.REJECT}.get(m.offset())
            c.acknowledge(m, kind or AcknowledgeType.ACCEPT)
        first += batch
    assert [(m.offset(), m.delivery_count()) for m in first] == [(o, 1) for o in range(4)]
    again: list[Message] = []
    deadline = time.monotonic() + 30
    while not again and time.monotonic() < deadline:
        again = poll(c)
        for m in again:
            c.acknowledge(m, AcknowledgeType.ACCEPT)
    assert [(m.offset(), m.delivery_count()) for m in again] == [(0, 2)]  # 1 was rejected
    for _ in range(3):
        assert poll(c, 0.5) == []
    c.close()
    sp = broker.server.broker.share.partitions  # type: ignore[union-attr]
    ((_key, state),) = sp.items()
    assert (state.start_offset, state.in_flight_count()) == (4, 0)


def test_an_expired_lock_redelivers(broker: ThreadedBroker) -> None:
    group_configs(
        broker, "locks", share_auto_offset_reset="earliest", share_record_lock_duration_ms="1000"
    )
    produce(broker, 1)
    holder = consumer(broker, "locks", explicit=True)
    held: list[Message] = []
    deadline = time.monotonic() + 30
    while not held and time.monotonic() < deadline:
        held = poll(holder)
    assert [(m.offset(), m.delivery_count()) for m in held] == [(0, 1)]
    # the holder never acknowledges; after its lock expires the record goes to another member
    other = consumer(broker, "locks")
    again: list[Message] = []
    deadline = time.monotonic() + 30
    while not again and time.monotonic() < deadline:
        again = poll(other)
    assert [(m.offset(), m.delivery_count()) for m in again] == [(0, 2)]
    other.close()
    holder.close()
