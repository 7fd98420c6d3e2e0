"""Share groups (KIP-932) against a classic consumer group, on the same kgroupd, in one run.

    python bench/bench_share.py [--records 50000] [--rounds 3] [--lock-rounds 5]

* throughput: one topic of one partition holding ``--records`` records (100 bytes each,
  batches of up to 500). Per round, a new share group (share.auto.offset.reset=earliest) is
  read by 1 and then by 4 confluent-kafka ``ShareConsumer``s (librdkafka, implicit
  acknowledgement, one thread each), and a new classic group by one confluent-kafka
  ``Consumer`` (the broker's --initial-rebalance-delay-ms 0, so its join does not wait). A
  run is timed from the consumers' creation (joining included) to every record delivered
  and, for a share group, acknowledged (the share-partition start offset, polled with
  DescribeShareGroupOffsets, at the end); the classic run to its last record. Records per
  second, median of ``--rounds`` rounds (the order of the three runs rotates), and the
  broker's CPU time (user + system, /proc) per record of each run. Goal (issue 25): share
  at least 0.5x classic with 1 consumer, above 1x with 4.
* lock expiry: a share group with share.record.lock.duration.ms=1000 (the broker started
  with --group-share-min-record-lock-duration-ms 1000); an explicit-mode consumer takes the
  one record of a new topic and never acknowledges it while a second consumer polls. Time
  from the lock's expiry (acquisition + 1000 ms) to the second consumer receiving the record
  (delivery count 2). Median and range of ``--lock-rounds`` rounds.

Every run checks what it measures: all offsets delivered (each exactly once in a share group
whose consumers all acknowledge), the start offset at the end, the redelivered record's
delivery count. Figures go to BENCHMARKS.md with this command.
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import _harness as h
from confluent_kafka import Consumer, Producer, ShareConsumer
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ResourceType,
)

TOPIC = "share-bench"
LOCK_MS = 1000
VALUE = b"x" * 100


class Failure(Exception):
    pass


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def set_group(bootstrap: str, group: str, **configs: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    res = ConfigResource(
        ResourceType.GROUP,
        group,
        incremental_configs=[
            ConfigEntry(k.replace("_", "."), v, incremental_operation=AlterConfigOpType.SET)
            for k, v in configs.items()
        ],
    )
    admin.incremental_alter_configs([res])[res].result(10)


def produce(bootstrap: str, topic: str, n: int) -> None:
    p = Producer(
        {"bootstrap.servers": bootstrap, "linger.ms": 5, "batch.num.messages": 500, "acks": 1}
    )
    for i in range(n):
        while True:
            try:
                p.produce(topic, VALUE, partition=0)
                break
            except BufferError:
                p.poll(0.05)
        if i % 1000 == 0:
            p.poll(0)
    if p.flush(30) != 0:
        raise Failure("produce did not finish")


def start_offset(port: int, group: str, topic: str) -> int:
    resp = h.call(
        port,
        90,
        0,
        {"groups": [{"group_id": group, "topics": [{"topic_name": topic, "partitions": [0]}]}]},
    )
    g = resp["groups"][0]
    if g["error_code"]:
        return -1
    return int(g["topics"][0]["partitions"][0]["start_offset"])


def share_run(bootstrap: str, port: int, group: str, consumers: int, n: int) -> float:
    """Records per second delivered and acknowledged by ``consumers`` share consumers."""
    set_group(bootstrap, group, share_auto_offset_reset="earliest")
    seen: dict[int, int] = {}
    lock = threading.Lock()
    first: list[float] = []
    stop = threading.Event()
    errors: list[str] = []

    def work() -> None:
        c = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group})
        c.subscribe([TOPIC])
        try:
            while not stop.is_set():
                got = c.poll(0.2)  # the next poll accepts these (implicit mode)
                if not got:
                    continue
                now = time.perf_counter()
                with lock:
                    if not first:
                        first.append(now)
                    for m in got:
                        if m.error() is not None:
                            errors.append(str(m.error()))
                            continue
                        seen[m.offset()] = seen.get(m.offset(), 0) + 1
        finally:
            c.close()

    threads = [threading.Thread(target=work, daemon=True) for _ in range(consumers)]
    started = time.perf_counter()
    for t in threads:
        t.start()
    deadline = time.perf_counter() + 300
    done_at = None
    while time.perf_counter() < deadline:
        if len(seen) >= n and start_offset(port, group, TOPIC) >= n:
            done_at = time.perf_counter()
            break
        time.sleep(0.01)
    stop.set()
    for t in threads:
        t.join(30)
    if done_at is None or not first:
        raise Failure(f"{group}: {len(seen)} of {n} delivered, start offset not at the end")
    if errors:
        raise Failure(f"{group}: {errors[:3]}")
    again = sum(1 for k in seen.values() if k > 1)
    if again:
        raise Failure(f"{group}: {again} records delivered twice")
    return n / (done_at - started)


def classic_run(bootstrap: str, group: str, n: int) -> float:
    started = time.perf_counter()
    c = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest"}
    )
    c.subscribe([TOPIC])
    got = 0
    first = None
    deadline = time.perf_counter() + 300
    try:
        while got < n and time.perf_counter() < deadline:
            batch = c.consume(500, 0.2)
            if not batch:
                continue
            if first is None:
                first = time.perf_counter()
            got += sum(1 for m in batch if m.error() is None)
        end = time.perf_counter()
    finally:
        c.close()
    if got < n or first is None:
        raise Failure(f"classic {group}: {got} of {n}")
    return n / (end - started)


def lock_round(bootstrap: str, i: int) -> float:
    """Milliseconds from a lock's expiry to the record's redelivery to another consumer."""
    topic, group = f"share-lock-{i}", f"bench-lock-{i}-{os.getpid()}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    from confluent_kafka.admin import NewTopic

    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(10)
    set_group(
        bootstrap,
        group,
        share_auto_offset_reset="earliest",
        share_record_lock_duration_ms=str(LOCK_MS),
    )
    produce(bootstrap, topic, 1)
    holder = ShareConsumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "share.acknowledgement.mode": "explicit",
        }
    )
    holder.subscribe([topic])
    acquired_at = None
    deadline = time.perf_counter() + 30
    while acquired_at is None and time.perf_counter() < deadline:
        for m in holder.poll(0.2):
            if m.error() is None:
                acquired_at = time.perf_counter()
    if acquired_at is None:
        raise Failure("the holder got nothing")
    # the other consumer joins while the holder's lock runs, and polls
    other = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group})
    other.subscribe([topic])
    again = None
    while again is None and time.perf_counter() < deadline + 10:
        for m in other.poll(0.05):
            if m.error() is None:
                again = time.perf_counter()
                if m.delivery_count() != 2:
                    raise Failure(f"redelivered with delivery count {m.delivery_count()}")
    other.close()
    holder.close()
    if again is None:
        raise Failure("never redelivered")
    return (again - acquired_at) * 1000 - LOCK_MS


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--records", type=int, default=100_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--lock-rounds", type=int, default=5)
    h.add_common_args(ap, choices=("kgroupd",))
    args = ap.parse_args()
    h.apply_common_args(args)
    where = h.machine()
    broker = h.BrokerProcess(
        "kgroupd",
        extra=[
            "--group-share-min-record-lock-duration-ms",
            str(LOCK_MS),
            "--initial-rebalance-delay-ms",
            "0",
        ],
    )
    results: dict[str, list[float]] = {"share-1": [], "share-4": [], "classic": []}
    # the broker's CPU time per record of each run (user + system, all its threads): what the
    # broker spends, which moves much less with the machine's load than records/s
    cpu_us: dict[str, list[float]] = {"share-1": [], "share-4": [], "classic": []}
    lock_ms: list[float] = []
    with broker:
        boot = f"127.0.0.1:{broker.port}"
        h.create_topic(broker.port, TOPIC, 1)
        log(f"producing {args.records} records")
        produce(boot, TOPIC, args.records)
        runs: list[tuple[str, Any]] = [
            ("share-1", lambda g: share_run(boot, broker.port, g, 1, args.records)),
            ("share-4", lambda g: share_run(boot, broker.port, g, 4, args.records)),
            ("classic", lambda g: classic_run(boot, g, args.records)),
        ]
        share_run(boot, broker.port, "bench-warmup", 1, args.records)  # untimed
        for r in range(args.rounds):
            order = runs[r % 3 :] + runs[: r % 3]
            for name, run in order:
                cpu0 = h.cpu_seconds(broker.pid)
                rate = run(f"bench-{name}-{r}-{os.getpid()}")
                cpu_us[name].append((h.cpu_seconds(broker.pid) - cpu0) * 1e6 / args.records)
                results[name].append(rate)
                log(f"round {r} {name}: {rate:,.0f} records/s, broker {cpu_us[name][-1]:.2f} µs")
        for i in range(args.lock_rounds):
            ms = lock_round(boot, i)
            lock_ms.append(ms)
            log(f"lock round {i}: {ms:.1f} ms")
    load_end = os.getloadavg()[0]
    print(f"{h.stamp()} · {where}, {load_end:.2f} at end")
    print(f"kgroupd {h.kgroupd_revision()} · `{h.command_line()}`\n")
    classic = h.median(results["classic"])
    print(
        "| consumers | records/s (median) | range | vs classic (1 consumer) "
        "| broker CPU µs/record (median) |"
    )
    print("|---|---|---|---|---|")
    for name, label in (
        ("classic", "classic group, 1"),
        ("share-1", "share group, 1"),
        ("share-4", "share group, 4"),
    ):
        vals = results[name]
        print(
            f"| {label} | {h.median(vals):,.0f} | {min(vals):,.0f}-{max(vals):,.0f} | "
            f"{h.median(vals) / classic:.2f}x | {h.median(cpu_us[name]):.2f} |"
        )
    print()
    print("| lock expiry to redelivery | median | range |")
    print("|---|---|---|")
    print(
        f"| ms after the lock's {LOCK_MS} ms | {h.median(lock_ms):.1f} | "
        f"{min(lock_ms):.1f}-{max(lock_ms):.1f} |"
    )


if __name__ == "__main__":
    main()
