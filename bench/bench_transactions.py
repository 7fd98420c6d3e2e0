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
import os
import shutil
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _harness as h
from _disk import fsync_probe
from confluent_kafka import KafkaException
from transactions_common import PARTITIONS, Failure, Round, Series, short
from transactions_ctp import CTP_BATCH, ctp_round
from transactions_produce import TXN_RECORDS, produce_round

CLIENT = "confluent-kafka (librdkafka)"
VARIANTS = ("memory", "always", "tansu")
LABELS = {
    "memory": "kgroupd in memory",
    "always": "kgroupd `--fsync always`",
    "tansu": "Tansu (in memory)",
}


def load() -> float:
    return os.getloadavg()[0]


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
