"""Transactions (issue 11): committed transactions/s, kgroupd in memory and with ``--data-dir
--fsync always`` against Tansu (in memory), side by side in one run.

    python bench/bench_transactions.py [--only produce,ctp] [--rounds 3] [--seconds 3]
        [--producers 1,16] [--processors 1,4] [--ctp-records 40000]
        [--broker kgroupd|tansu|both] [--kgroupd-modes memory,always]

The client is confluent-kafka (librdkafka) for every broker. aiokafka 0.14 cannot start a
transactional producer on Tansu 0.6.0: it sends InitProducerId v0, and Tansu answers v0-v2
with UNKNOWN_SERVER_ERROR (its log: ``producer=None epoch=None``); it answers v3+, which
librdkafka sends. One client for every broker keeps the comparison fair; librdkafka's
threads also wait without the GIL, so one process can drive many producers.

* produce: ``--producers`` transactional producers (a ``Producer`` with its own
  transactional.id each, on its own thread) loop begin_transaction, 10 records of
  ``--value-bytes`` bytes over the 4 partitions of a fresh topic, commit_transaction, for
  ``--seconds``. One producer is bound by round trips (AddPartitionsToTxn, Produce, EndTxn,
  each awaited in turn), not by either process's CPU; 16 of them load the broker. txn/s
  counts the commits acknowledged inside the window. Check: a read_committed consumer reads
  back exactly 10 records per acknowledged commit (those finished after the window too).
* ctp (consume-transform-produce): ``--processors`` members of one group (1: the classic
  single processor; 4: one input partition each), each a read_committed consumer
  (subscribe, enable.auto.commit off) with its own transactional producer, on its own thread.
  Once the group is stable, ``--ctp-records`` records are written to the input topic (4
  partitions, not transactional); then every member takes 100 records at a time, writes 100
  outputs to the same partitions of an output topic, puts the consumed offsets into the
  transaction (send_offsets_to_transaction with the consumer's group metadata) and commits.
  Timed from the start signal (after the pre-fill, which the consumers may already be
  fetching) to the last commit. Checks: the output read with read_committed holds each
  input's output exactly once, the group's committed offsets are the input's end offsets,
  and the group did not rebalance during the run. The consumers use a 2 s session timeout
  (kgroupd's minimum is lowered to 1 s): Tansu holds a JoinGroup for half the session
  timeout (23 s with librdkafka's default 45 s); joins are not timed.

Each case (a count of producers or processors) gets three fresh brokers, running side by
side: kgroupd in memory, kgroupd with ``--data-dir`` on a fresh directory under the
git-ignored .cache/ and ``--fsync always``, and Tansu with ``--storage-engine
memory://tansu/`` (Tansu is measured in memory only). Fresh, because Tansu slows down as
transactions pile up in it (16 producers: ~330 txn/s in its first 3 s, ~110 after 18 s).
Each round rotates which broker goes first, after a warm-up round (``--warmup-seconds`` for
produce). Medians with min-max. A broker that fails a case gets ``failed: <reason>`` in its
row instead of a figure. Progress on stderr, Markdown tables on stdout (BENCHMARKS.md).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _harness as h
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

PARTITIONS = 4
TXN_RECORDS = 10  # records per transaction, produce case
CTP_BATCH = 100  # records per transaction, ctp case
SESSION_MS = 2000  # the ctp consumer's session timeout (kgroupd: minimum lowered to 1000)
CLIENT = "confluent-kafka (librdkafka)"
VARIANTS = ("memory", "always", "tansu")
LABELS = {
    "memory": "kgroupd in memory",
    "always": "kgroupd `--fsync always`",
    "tansu": "Tansu (in memory)",
}


class Failure(Exception):
    pass


def load() -> float:
    return os.getloadavg()[0]


def fsync_probe(directory: Path, n: int = 300) -> tuple[float, float]:
    """Median and 90th percentile ms of write(200 bytes) + fsync on this disk (as in
    bench_durability.py)."""
    path = directory / "fsync-probe"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    times = []
    try:
        for _ in range(n):
            os.write(fd, b"x" * 200)
            t0 = time.perf_counter()
            os.fsync(fd)
            times.append((time.perf_counter() - t0) * 1000)
    finally:
        os.close(fd)
        path.unlink()
    times.sort()
    return statistics.median(times), times[int(n * 0.9)]


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


# ---------------------------------------------------------------------------------------
# produce: N transactional producers, 10-record transactions over 4 partitions


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


# ---------------------------------------------------------------------------------------
# consume-transform-produce: 100-record transactions with the consumed offsets in them


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


# ---------------------------------------------------------------------------------------
# driver


def rotate(items: Sequence[str], rnd: int) -> list[str]:
    shift = rnd % len(items)
    return [*items[shift:], *items[:shift]]


def run_case(
    name: str,
    started: dict[str, h.BrokerProcess],
    series: dict[str, Series],
    rounds: int,
    warmup: int,
    one: Callable[[h.BrokerProcess, str, int, bool], Round],
) -> None:
    """Rounds of one case over every broker, the order rotating; a broker that fails is
    dropped from this case with the reason."""
    variants = list(started)
    for rnd in range(warmup + rounds):
        for v in rotate(variants, rnd):
            s = series[v]
            if s.failed is not None:
                continue
            is_warmup = rnd < warmup
            tag = "warm-up" if is_warmup else f"round {rnd - warmup + 1}"
            try:
                r = one(started[v], v, rnd, is_warmup)
            except (Failure, KafkaException, RuntimeError, OSError) as exc:
                s.failed = short(exc)
                print(f"  {name} {v:7} {tag:8} FAILED: {s.failed}", file=sys.stderr)
                traceback.print_exc(file=sys.stderr)
                continue
            print(
                f"  {name} {v:7} {tag:8} {r.txn_per_s:8.0f} txn/s {r.records_per_s:8.0f}"
                f" records/s (cpu broker {r.broker_cpu:4.0%} client {r.client_cpu:4.0%})"
                f"  load {load():.2f}" + (f"; {r.note}" if r.note else ""),
                file=sys.stderr,
            )
            if not is_warmup:
                s.rounds.append(r)


def spread(values: Sequence[float]) -> str:
    return f"{h.median(values):,.0f} [{min(values):,.0f}-{max(values):,.0f}]"


def table(
    first_col: str, rows: list[tuple[str, dict[str, Series]]], with_records: bool
) -> list[str]:
    head = f"| {first_col} | broker | txn/s median [min-max] |"
    sep = "|---|---|---|"
    if with_records:
        head += " records/s median |"
        sep += "---|"
    head += " broker CPU | client CPU | vs Tansu |"
    sep += "---|---|---|"
    lines = [head, sep]
    for key, series in rows:
        tansu = series.get("tansu")
        t_med = h.median([r.txn_per_s for r in tansu.rounds]) if tansu and tansu.rounds else 0.0
        for v, s in series.items():
            cells = [key, LABELS[v]]
            if s.failed is not None or not s.rounds:
                cells.append(f"failed: {s.failed or 'no round'}")
                cells += [""] * (4 if with_records else 3)
            else:
                txn = [r.txn_per_s for r in s.rounds]
                cells.append(f"**{spread(txn)}**")
                if with_records:
                    cells.append(f"{h.median([r.records_per_s for r in s.rounds]):,.0f}")
                cells.append(f"{h.median([r.broker_cpu for r in s.rounds]):.0%}")
                cells.append(f"{h.median([r.client_cpu for r in s.rounds]):.0%}")
                if v == "tansu":
                    cells.append("1.00" if t_med else "")
                else:
                    cells.append(f"**{h.ratio(h.median(txn), t_med)}**" if t_med else "n/a")
            lines.append("| " + " | ".join(cells) + " |")
    return lines


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    h.add_common_args(ap)
    ap.add_argument("--only", default="produce,ctp", help="produce, ctp or both (comma)")
    ap.add_argument(
        "--kgroupd-modes", default="memory,always", help="kgroupd variants: memory, always"
    )
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--seconds", type=float, default=3.0, help="timed part of a produce round")
    ap.add_argument("--warmup-seconds", type=float, default=1.0)
    ap.add_argument("--producers", default="1,16", help="concurrent transactional producers")
    ap.add_argument("--value-bytes", type=int, default=100)
    ap.add_argument("--ctp-records", type=int, default=40_000)
    ap.add_argument(
        "--processors", default="1,4", help="consume-transform-produce members of the group"
    )
    args = ap.parse_args()
    h.apply_common_args(args)
    only = args.only.split(",")
    for part in only:
        if part not in ("produce", "ctp"):
            ap.error(f"unknown case {part!r}")
    modes = args.kgroupd_modes.split(",")
    variants = [
        v
        for v in VARIANTS
        if (v == "tansu" and args.broker in ("tansu", "both"))
        or (v != "tansu" and args.broker in ("kgroupd", "both") and v in modes)
    ]
    levels = [int(x) for x in args.producers.split(",")]
    ctp_levels = [int(x) for x in args.processors.split(",")]
    if any(not 1 <= n <= PARTITIONS for n in ctp_levels):
        ap.error(f"--processors: 1 to {PARTITIONS} (one partition each at most)")
    machine = h.machine()
    load0 = load()
    t_start = time.monotonic()
    (h.ROOT / ".cache").mkdir(exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix="bench-transactions-", dir=h.ROOT / ".cache"))
    probe = fsync_probe(scratch) if "always" in variants else None
    produce: dict[int, dict[str, Series]] = {n: {v: Series() for v in variants} for n in levels}
    ctp: dict[int, dict[str, Series]] = {n: {v: Series() for v in variants} for n in ctp_levels}
    cases: list[tuple[str, int, dict[str, Series], Callable[..., Round]]] = []
    if "produce" in only:

        def one_produce(b: h.BrokerProcess, v: str, rnd: int, warm: bool, n: int) -> Round:
            secs = args.warmup_seconds if warm else args.seconds
            return produce_round(b, f"txn-{rnd}", n, secs, args.value_bytes, f"{v}-{n}-{rnd}")

        cases += [("produce", n, produce[n], one_produce) for n in levels]
    if "ctp" in only:

        def one_ctp(b: h.BrokerProcess, v: str, rnd: int, _warm: bool, n: int) -> Round:
            tag = f"ctp-{v}-{n}-{rnd}"
            return ctp_round(b, rnd, args.ctp_records, args.value_bytes, tag, n)

        cases += [("ctp", n, ctp[n], one_ctp) for n in ctp_levels]
    try:
        for name, n, series, one in cases:
            print(
                f"# {name}: {n} {'producer' if name == 'produce' else 'processor'}(s)"
                " (fresh brokers)",
                file=sys.stderr,
            )
            # Fresh brokers for every case: Tansu slows down as transactions pile up in it
            # (see BENCHMARKS.md), so a case must not inherit the previous one's.
            started: dict[str, h.BrokerProcess] = {}
            try:
                for v in variants:
                    kind = "tansu" if v == "tansu" else "kgroupd"
                    extra = []
                    if kind == "kgroupd":  # joins are not timed: no need to wait for them
                        extra += ["--initial-rebalance-delay-ms", "0"]
                        extra += ["--group-min-session-timeout-ms", "1000"]
                    if v == "always":
                        data = scratch / f"data-{name}-{n}"
                        extra += ["--data-dir", str(data), "--fsync", "always"]
                    started[v] = h.BrokerProcess(kind, extra=extra).start(timeout=30)
                run_case(name, started, series, args.rounds, args.warmup, partial(one, n=n))
            finally:
                for v, b in started.items():
                    b.stop()
                    if series[v].failed is None:
                        b.cleanup_log()
                    else:
                        print(f"  {v}: broker log kept in {b.log_path}", file=sys.stderr)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    took = time.monotonic() - t_start
    print(f"\n{h.command_line()}")
    print(
        f"{h.stamp()}; {machine}, {load():.2f} at the end; {h.kgroupd_revision()};"
        f" run took {took:.0f} s"
    )
    print(
        f"\nClient: {CLIENT} for every broker. Tansu 0.6.0 runs in memory only"
        " (`--storage-engine memory://tansu/`); kgroupd in memory, and with `--data-dir`"
        " `--fsync always` (answers that wrote coordinator records or data wait for their"
        " fsync; markers wait for the PrepareCommit record's)."
        + (
            f" This disk: write+fsync of 200 bytes {probe[0]:.2f} ms median, {probe[1]:.2f} ms p90."
            if probe
            else ""
        )
        + f" {args.rounds} rounds after {args.warmup} warm-up, the order rotating per round;"
        " CPU shares are CPU-seconds per second over the timed part (client: this process,"
        f" every librdkafka thread; {os.cpu_count()} cores = {100 * (os.cpu_count() or 1)}%);"
        f" load {load0:.2f} at the start."
    )
    if "produce" in only:
        print(
            f"\n### Transactions/s: {TXN_RECORDS}-record transactions over {PARTITIONS}"
            f" partitions ({args.value_bytes}-byte values), {args.seconds:g} s per round\n"
        )
        rows = [(str(n), produce[n]) for n in levels]
        print("\n".join(table("producers", rows, with_records=False)))
    if "ctp" in only:
        print(
            f"\n### Consume-transform-produce: {args.ctp_records} records in {CTP_BATCH}-record"
            f" transactions ({PARTITIONS} partitions in and out, offsets in the transaction)\n"
        )
        rows = [(str(n), ctp[n]) for n in ctp_levels]
        print("\n".join(table("processors", rows, with_records=True)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
