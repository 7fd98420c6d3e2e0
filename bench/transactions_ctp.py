"""bench_transactions.py's ctp case (consume-transform-produce): members of one group, each a
read_committed consumer with its own transactional producer, committing 100-record
transactions with the consumed offsets in them."""

from __future__ import annotations

import contextlib
import threading
import time
from typing import Any

import _harness as h
from confluent_kafka import Consumer, Producer, TopicPartition
from transactions_common import (
    PARTITIONS,
    Failure,
    Round,
    bootstrap,
    fresh_topic,
    read_committed,
    short,
)

CTP_BATCH = 100  # records per transaction, ctp case
SESSION_MS = 2000  # the ctp consumer's session timeout (kgroupd: minimum lowered to 1000)


def prefill(b: h.BrokerProcess, topic: str, records: int, value_bytes: int) -> list[bytes]:
    fresh_topic(b, topic)
    p = Producer({"bootstrap.servers": bootstrap(b), "linger.ms": 5, "acks": "all"})
    errors: list[str] = []

    def delivered(err: Any, _msg: Any) -> None:
        if err is not None:
            errors.append(str(err))

    values = []
    for i in range(records):
        v = f"{i:09d}".encode().ljust(value_bytes, b".")
        values.append(v)
        while True:
            try:
                p.produce(topic, v, partition=i % PARTITIONS, on_delivery=delivered)
                break
            except BufferError:
                p.poll(0.05)
    if p.flush(60) or errors:
        raise Failure(f"pre-fill of {topic}: {errors[:1] or 'not delivered in 60 s'}")
    return values


def transform(v: bytes) -> bytes:
    return b"out-" + v[4:]


class Processor:
    """One consume-transform-produce member: a read_committed consumer subscribed in the
    group and a transactional producer, on its own thread."""

    def __init__(self, b: h.BrokerProcess, inp: str, out: str, group: str, txn_id: str) -> None:
        self.inp, self.out = inp, out
        self.consumer = Consumer(
            {
                "bootstrap.servers": bootstrap(b),
                "group.id": group,
                "isolation.level": "read_committed",
                "enable.auto.commit": False,
                "auto.offset.reset": "earliest",
                # Tansu holds a JoinGroup for half the session timeout (23 s with
                # librdkafka's default 45 s); joins are not timed, but would cost the run.
                "session.timeout.ms": SESSION_MS,
                "heartbeat.interval.ms": SESSION_MS // 3,
            }
        )
        self.producer = Producer(
            {
                "bootstrap.servers": bootstrap(b),
                "transactional.id": txn_id,
                "linger.ms": 0,
                "transaction.timeout.ms": 60000,
            }
        )
        self.parts: frozenset[int] = frozenset()
        self.rebalances = 0
        self.ready = threading.Event()
        self.last = 0.0  # when the last commit was acknowledged
        self.txns = 0
        self.slowest_consume = 0.0  # the longest consume() call
        self.slowest_txn = 0.0  # the longest transaction, begin to commit acknowledged
        self.error: BaseException | None = None

    def _assigned(self, _c: Any, parts: list[TopicPartition]) -> None:
        self.parts = frozenset(tp.partition for tp in parts)
        self.rebalances += 1

    def _revoked(self, _c: Any, _parts: list[TopicPartition]) -> None:
        self.parts = frozenset()

    def run(self, stable: threading.Event, go: threading.Event, ends: dict[int, int]) -> None:
        try:
            self.producer.init_transactions(20)
            self.consumer.subscribe([self.inp], on_assign=self._assigned, on_revoke=self._revoked)
            while not stable.is_set():  # join; the input is still empty
                if self.consumer.consume(1, 0.05):
                    raise Failure("a record before the pre-fill")
            # no consume() until the start: librdkafka fetches the pre-fill in the background
            # meanwhile (pause/resume instead would add 0.5-1 s of fetch back-off)
            mine = self.consumer.assignment()
            self.ready.set()
            go.wait()
            self._process(sum(ends[tp.partition] for tp in mine))
        except BaseException as exc:
            self.error = exc
            self.ready.set()

    def _process(self, target: int) -> None:
        consumer, producer, out = self.consumer, self.producer, self.out
        rebalances = self.rebalances
        done = 0
        deadline = time.monotonic() + 120
        batch: list[Any] = []
        while done < target:
            if time.monotonic() > deadline:
                raise Failure(f"processed {done} of {target} records in 120 s")
            want = min(CTP_BATCH, target - done) - len(batch)
            a = time.perf_counter()
            for m in consumer.consume(want, 0.5):
                if m.error() is not None:
                    raise Failure(f"consume: {m.error()}")
                batch.append(m)
            if self.rebalances != rebalances:
                raise Failure("the group rebalanced during the run")
            self.slowest_consume = max(self.slowest_consume, time.perf_counter() - a)
            if len(batch) < min(CTP_BATCH, target - done):
                continue
            a = time.perf_counter()
            producer.begin_transaction()
            positions: dict[int, int] = {}
            for m in batch:
                producer.produce(out, transform(m.value()), partition=m.partition())
                positions[m.partition()] = m.offset() + 1
            offsets = [TopicPartition(self.inp, p, o) for p, o in sorted(positions.items())]
            producer.send_offsets_to_transaction(offsets, consumer.consumer_group_metadata(), 20)
            producer.commit_transaction(20)
            self.last = time.perf_counter()
            self.slowest_txn = max(self.slowest_txn, self.last - a)
            done += len(batch)
            self.txns += 1
            batch = []


def ctp_round(
    b: h.BrokerProcess, rnd: int, records: int, value_bytes: int, tag: str, n: int
) -> Round:
    inp, out, group = f"ctp-in-{n}-{rnd}", f"ctp-out-{n}-{rnd}", f"ctp-group-{n}-{rnd}"
    fresh_topic(b, inp)
    fresh_topic(b, out)
    procs = [Processor(b, inp, out, group, f"bench-{tag}-{i}") for i in range(n)]
    ends = {p: len(range(p, records, PARTITIONS)) for p in range(PARTITIONS)}
    stable, go = threading.Event(), threading.Event()
    threads = [
        threading.Thread(target=pr.run, args=(stable, go, ends), daemon=True) for pr in procs
    ]
    t_join = time.perf_counter()
    try:
        for t in threads:
            t.start()
        # the group is stable when every member holds a share and the shares cover the topic
        deadline = time.monotonic() + 60
        while not stable.is_set():
            errors = [pr.error for pr in procs if pr.error is not None]
            if errors:
                raise Failure(f"join: {short(errors[0])}")
            if time.monotonic() > deadline:
                raise Failure(f"group not stable in 60 s: {[sorted(pr.parts) for pr in procs]}")
            shares = [pr.parts for pr in procs]
            if all(shares) and sum(map(len, shares)) == PARTITIONS == len(frozenset.union(*shares)):
                time.sleep(0.2)
                if [pr.parts for pr in procs] == shares:
                    stable.set()
                    continue
            time.sleep(0.02)
        joined = time.perf_counter() - t_join
        for pr in procs:
            pr.ready.wait(30)
        errors = [pr.error for pr in procs if pr.error is not None]
        if errors:
            raise Failure(short(errors[0]))
        t_fill = time.perf_counter()
        values = prefill(b, inp, records, value_bytes)
        filled = time.perf_counter() - t_fill
        b0, c0, t_go = h.cpu_seconds(b.pid), time.process_time(), time.perf_counter()
        go.set()
        for t in threads:
            t.join(150)
            if t.is_alive():
                raise Failure("a processor hung")
        # CPU shares from the start signal until every processor is done
        window = time.perf_counter() - t_go
        broker = (h.cpu_seconds(b.pid) - b0) / window
        client = (time.process_time() - c0) / window
        errors = [pr.error for pr in procs if pr.error is not None]
        if errors:
            raise Failure(short(errors[0]))
        committed = procs[0].consumer.committed(
            [TopicPartition(inp, p) for p in range(PARTITIONS)], timeout=20
        )
    finally:
        stable.set()
        go.set()
        for pr in procs:
            with contextlib.suppress(Exception):
                pr.consumer.close()
    elapsed = max(pr.last for pr in procs) - t_go
    got_offsets = {tp.partition: tp.offset for tp in committed}
    if got_offsets != ends:
        raise Failure(f"group offsets {got_offsets}, input ends {ends}")
    outputs = read_committed(b, out)
    if sorted(outputs) != sorted(transform(v) for v in values):
        raise Failure(
            f"output: {len(outputs)} records ({len(set(outputs))} distinct) for {records} inputs"
        )
    h.delete_topic(b.port, inp)
    h.delete_topic(b.port, out)
    txns = sum(pr.txns for pr in procs)
    note = (
        f"join {joined * 1000:.0f} ms, pre-fill {filled:.2f} s, slowest consume"
        f" {max(pr.slowest_consume for pr in procs) * 1000:.0f} ms, slowest transaction"
        f" {max(pr.slowest_txn for pr in procs) * 1000:.0f} ms"
    )
    return Round(txns / elapsed, broker, client, records / elapsed, note)
