"""What bench_transactions.py's cases share: the topic shape, a round's figures, and a
read_committed read-back of a whole topic (confluent-kafka, as every client of the bench)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import _harness as h
from confluent_kafka import Consumer, KafkaError, TopicPartition

PARTITIONS = 4


class Failure(Exception):
    pass


def short(exc: BaseException) -> str:
    text = str(exc).replace("|", "/").replace("\n", " ").strip()
    return (f"{type(exc).__name__}: {text}" if text else type(exc).__name__)[:160]


@dataclass
class Round:
    txn_per_s: float
    broker_cpu: float  # broker CPU-seconds per second of the timed part
    client_cpu: float  # this process (every librdkafka thread) likewise
    records_per_s: float = 0.0
    note: str = ""


@dataclass
class Series:
    rounds: list[Round] = field(default_factory=list)
    failed: str | None = None


def bootstrap(b: h.BrokerProcess) -> str:
    return f"127.0.0.1:{b.port}"


def fresh_topic(b: h.BrokerProcess, name: str) -> None:
    h.create_topic(b.port, name, PARTITIONS)
    h.wait_topic_ready(b.port, name, PARTITIONS)


def read_committed(b: h.BrokerProcess, topic: str, timeout: float = 60.0) -> list[bytes]:
    """Every value of ``topic`` that a read_committed consumer returns, from offset 0 to the
    end of each partition (partition EOF, which comes at the last stable offset)."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap(b),
            "group.id": f"bench-check-{topic}",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
        }
    )
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
        values: list[bytes] = []
        at_end: set[int] = set()
        deadline = time.monotonic() + timeout
        while len(at_end) < PARTITIONS:
            if time.monotonic() > deadline:
                raise Failure(f"read back {topic}: only {len(values)} records in {timeout:.0f} s")
            for m in consumer.consume(10_000, 0.2):
                err = m.error()
                if err is None:
                    values.append(m.value() or b"")
                elif err.code() == KafkaError._PARTITION_EOF:
                    at_end.add(m.partition() or 0)
                else:
                    raise Failure(f"read back {topic}: {err}")
        return values
    finally:
        consumer.close()
