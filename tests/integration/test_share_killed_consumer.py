"""A confluent-kafka ShareConsumer killed (SIGKILL) while it holds records: its share session
ends with its connection, as in Kafka, and its records are available again at once, long
before their acquisition lock would expire; another member gets them with delivery count 2."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest
from confluent_kafka import Message

from kgroupd.broker.testing import ThreadedBroker
from tests.integration.test_share_confluent import consumer, group_configs, poll, produce

TOPIC = "sq"

HOLDER = """
import sys, time
from confluent_kafka import ShareConsumer
c = ShareConsumer({"bootstrap.servers": sys.argv[1], "group.id": sys.argv[2],
                   "share.acknowledgement.mode": "explicit"})
c.subscribe([sys.argv[3]])
while True:
    got = [m for m in c.poll(1.0) if m.error() is None]
    if got:
        print(len(got), flush=True)
        time.sleep(3600)
"""


@pytest.fixture
def broker() -> Iterator[ThreadedBroker]:
    with ThreadedBroker(create_topics=[f"{TOPIC}:1"]) as b:
        yield b


def test_a_killed_consumers_records_come_back_at_once(broker: ThreadedBroker) -> None:
    # a 60 s lock (the broker's longest by default): only the session's end frees them early
    group_configs(
        broker, "killed", share_auto_offset_reset="earliest", share_record_lock_duration_ms="60000"
    )
    produce(broker, 3)
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, broker.bootstrap, "killed", TOPIC],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None
        assert int(holder.stdout.readline()) == 3
        share = broker.server.broker.share  # type: ignore[union-attr]
        ((_key, sp),) = share.partitions.items()
        assert sp.acquired_count() == 3
        os.kill(holder.pid, signal.SIGKILL)
        holder.wait()
        deadline = time.monotonic() + 30
        while [k for k in share.sessions if k[0] == "killed"] and time.monotonic() < deadline:
            time.sleep(0.05)
        # the session went with the connection, and what it held with it (the locks are
        # still far from expiring)
        assert not [k for k in share.sessions if k[0] == "killed"]
        assert sp.acquired_count() == 0
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait()
        if holder.stdout is not None:
            holder.stdout.close()
    other = consumer(broker, "killed")
    again: list[Message] = []
    deadline = time.monotonic() + 30
    while len(again) < 3 and time.monotonic() < deadline:
        again += poll(other)
    assert sorted((m.offset(), m.delivery_count()) for m in again) == [(0, 2), (1, 2), (2, 2)]
    other.close()
