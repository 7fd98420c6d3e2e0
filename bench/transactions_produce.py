"""bench_transactions.py's produce case: N transactional producers, each on its own thread,
committing 10-record transactions over the 4 partitions of a fresh topic."""

from __future__ import annotations

import contextlib
import os
import threading
import time
from typing import Any

import _harness as h
from confluent_kafka import Producer
from transactions_common import (
    PARTITIONS,
    Failure,
    Round,
    bootstrap,
    fresh_topic,
    read_committed,
    short,
)

TXN_RECORDS = 10  # records per transaction, produce case


def _producer_loop(
    b: h.BrokerProcess,
    topic: str,
    txn_id: str,
    value: bytes,
    ready: threading.Barrier,
    stop: threading.Event,
    out: dict[str, Any],
) -> None:
    times: list[float] = []
    out["times"] = times
    try:
        p = Producer(
            {
                "bootstrap.servers": bootstrap(b),
                "transactional.id": txn_id,
                "linger.ms": 0,
                "transaction.timeout.ms": 60000,
            }
        )
        p.init_transactions(20)
        ready.wait(30)
        produce = p.produce
        while not stop.is_set():
            p.begin_transaction()
            for i in range(TXN_RECORDS):
                produce(topic, value, partition=i % PARTITIONS)
            p.commit_transaction(20)
            times.append(time.perf_counter())
    except BaseException as exc:
        out["error"] = exc
        with contextlib.suppress(threading.BrokenBarrierError):
            ready.abort()


def produce_round(
    b: h.BrokerProcess, topic: str, producers: int, seconds: float, value_bytes: int, tag: str
) -> Round:
    fresh_topic(b, topic)
    value = os.urandom(value_bytes)
    ready = threading.Barrier(producers + 1)
    stop = threading.Event()
    outs: list[dict[str, Any]] = [{} for _ in range(producers)]
    threads = [
        threading.Thread(
            target=_producer_loop,
            args=(b, topic, f"bench-{tag}-{i}", value, ready, stop, outs[i]),
            daemon=True,
        )
        for i in range(producers)
    ]
    for t in threads:
        t.start()
    try:
        ready.wait(60)
    except threading.BrokenBarrierError:
        stop.set()
        for t in threads:
            t.join(30)
        errors = [o["error"] for o in outs if "error" in o]
        raise Failure(f"init_transactions: {short(errors[0]) if errors else 'timed out'}") from None
    b0 = h.cpu_seconds(b.pid)
    c0 = time.process_time()
    t0 = time.perf_counter()
    time.sleep(seconds)
    t1 = time.perf_counter()
    broker = h.cpu_seconds(b.pid) - b0
    client = time.process_time() - c0
    stop.set()
    for t in threads:
        t.join(30)
        if t.is_alive():
            raise Failure("a producer hung (commit_transaction not answered in 30 s)")
    for o in outs:
        if "error" in o:
            raise Failure(short(o["error"]))
    committed = sum(len(o["times"]) for o in outs)
    inside = sum(1 for o in outs for x in o["times"] if t0 <= x <= t1)
    got = len(read_committed(b, topic))
    if got != committed * TXN_RECORDS:
        raise Failure(f"read_committed read {got} records for {committed} commits of {TXN_RECORDS}")
    h.delete_topic(b.port, topic)
    elapsed = t1 - t0
    return Round(
        inside / elapsed, broker / elapsed, client / elapsed, inside * TXN_RECORDS / elapsed
    )
