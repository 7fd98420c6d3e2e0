"""Simulated nodes (``--nodes 3``) with confluent-kafka's ShareConsumer (KIP-932): it fetches
from the leader of each of its partitions (a share session on each node), and keeps consuming
every record when its group's coordinator goes down and comes back, and when a partition
leader does; with every node up, each record is delivered once."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from confluent_kafka import Producer, ShareConsumer

from kgroupd.broker.testing import ThreadedBroker
from tests.integration.test_share_confluent import group_configs

TOPIC, PARTITIONS, GROUP = "shared-nodes", 3, "nodes-share"


@pytest.fixture
def broker() -> Iterator[ThreadedBroker]:
    with ThreadedBroker(nodes=3, create_topics=[f"{TOPIC}:{PARTITIONS}"]) as b:
        yield b


def test_share_consumer_across_its_coordinator_and_a_leader_going_down(
    broker: ThreadedBroker,
) -> None:
    bootstrap = broker.bootstrap_all
    group_configs(broker, GROUP, share_auto_offset_reset="earliest")
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    consumer = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": GROUP})
    consumer.subscribe([TOPIC])
    seen: set[bytes] = set()
    delivered: list[bytes] = []

    def send_round(name: str) -> None:
        for i in range(PARTITIONS * 4):
            producer.produce(TOPIC, f"{name}-{i}".encode(), partition=i % PARTITIONS)
        assert producer.flush(30) == 0

    def read_round(name: str) -> None:
        want = {f"{name}-{i}".encode() for i in range(PARTITIONS * 4)}
        deadline = time.monotonic() + 60  # a bound for a broken run, not a timing check
        while not want <= seen and time.monotonic() < deadline:
            for m in consumer.poll(0.5):
                if m.error() is None and m.value() is not None:
                    seen.add(m.value())
                    delivered.append(m.value())
        assert want <= seen, sorted(want - seen)

    coordinator = broker.controls.coordinator(GROUP)
    leader = next(n for n in (0, 1, 2) if n != coordinator)  # leads partition `leader`
    try:
        send_round("a")
        read_round("a")
        # all nodes up: each record once (a session on one node does not end the member's
        # session on another, which would give back what it holds there)
        assert sorted(delivered) == sorted(seen)
        broker.controls.node_down(coordinator)
        send_round("b")
        read_round("b")
        broker.controls.node_up(coordinator)
        broker.controls.node_down(leader)
        send_round("c")
        read_round("c")
        broker.controls.node_up(leader)
        send_round("d")
        read_round("d")
    finally:
        consumer.close()
