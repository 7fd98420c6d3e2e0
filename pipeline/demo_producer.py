"""Produce JSON events for the reference pipeline.

    python -m kgroupd.pipeline.demo_producer --bootstrap-server 127.0.0.1:9092 --count 20000

Each event is ``{"key": "sensor-N", "ts": <epoch ms>, "reading": <float>}``, keyed by its
``key``. Event times advance ``--spacing-ms`` per event from ``--start-ms`` with up to
``--jitter-ms`` of disorder (keep it below the job's watermark delay, or late events are
dropped). The same ``--seed`` makes the same events, so tests and demos can recompute the
expected window counts (``make_events``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import random
import sys
import time
from dataclasses import dataclass

from aiokafka import AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import KafkaConnectionError, KafkaError, TopicAlreadyExistsError


@dataclass(frozen=True)
class Event:
    key: str
    ts: int  # epoch milliseconds
    reading: float

    def encode(self) -> bytes:
        return json.dumps({"key": self.key, "ts": self.ts, "reading": self.reading}).encode()


def make_events(
    count: int,
    *,
    start_ms: int,
    keys: int = 10,
    spacing_ms: int = 100,
    jitter_ms: int = 1000,
    seed: int = 0,
) -> list[Event]:
    """``count`` events, deterministic for a given ``seed``."""
    rng = random.Random(seed)
    events = []
    for i in range(count):
        ts = start_ms + i * spacing_ms + (rng.randrange(jitter_ms) if jitter_ms > 0 else 0)
        events.append(Event(f"sensor-{rng.randrange(keys)}", ts, round(rng.random() * 100, 3)))
    return events


async def ensure_topic(bootstrap: str, topic: str, partitions: int) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(topic, partitions, 1)])
    except TopicAlreadyExistsError:
        pass
    finally:
        await admin.close()


async def produce(bootstrap: str, topic: str, events: list[Event]) -> None:
    """Send every event (key = the event's key) and wait until all are acknowledged."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=5)
    await producer.start()
    try:
        futures = [
            await producer.send(topic, event.encode(), key=event.key.encode()) for event in events
        ]
        await producer.flush()
        for future in futures:
            await future
    finally:
        await producer.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m kgroupd.pipeline.demo_producer", description=__doc__
    )
    parser.add_argument("--bootstrap-server", required=True, help="HOST:PORT of the broker")
    parser.add_argument("--topic", default="events")
    parser.add_argument("--partitions", type=int, default=3, help="when creating the topic")
    parser.add_argument("--count", type=int, default=10_000)
    parser.add_argument("--keys", type=int, default=10)
    parser.add_argument("--start-ms", type=int, default=None, help="default: now")
    parser.add_argument("--spacing-ms", type=int, default=100)
    parser.add_argument("--jitter-ms", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    start_ms = args.start_ms if args.start_ms is not None else int(time.time() * 1000)
    events = make_events(
        args.count,
        start_ms=start_ms,
        keys=args.keys,
        spacing_ms=args.spacing_ms,
        jitter_ms=args.jitter_ms,
        seed=args.seed,
    )

    async def run() -> None:
        await ensure_topic(args.bootstrap_server, args.topic, args.partitions)
        await produce(args.bootstrap_server, args.topic, events)

    # aiokafka logs each failed connection; they are said once, in the error below
    said = _KeepLast()
    aiokafka_log = logging.getLogger("aiokafka")
    aiokafka_log.addHandler(said)
    aiokafka_log.propagate = False
    try:
        asyncio.run(run())
    except KafkaConnectionError as exc:
        print(
            f"{parser.prog}: error: cannot reach a Kafka broker at {args.bootstrap_server} "
            f"({said.last or exc}); is one running there? (./scripts/broker starts one)",
            file=sys.stderr,
        )
        return 1
    except KafkaError as exc:
        print(f"{parser.prog}: error: {exc}", file=sys.stderr)
        return 1
    finally:
        aiokafka_log.removeHandler(said)
        aiokafka_log.propagate = True
    print(f"produced {len(events)} events to {args.topic}", file=sys.stderr)
    return 0


class _KeepLast(logging.Handler):
    """Keeps the last error aiokafka logged instead of printing it."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.last = ""

    def emit(self, record: logging.LogRecord) -> None:
        # 'Unable connect to "%s:%s": %s': the reason is the last argument
        args = record.args if isinstance(record.args, tuple) else ()
        self.last = str(args[-1]) if args else record.getMessage()


if __name__ == "__main__":
    raise SystemExit(main())
