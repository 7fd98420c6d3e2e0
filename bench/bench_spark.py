"""The PySpark source (issue 6): records/s into a no-op sink, beside a local Parquet copy.

    python bench/bench_spark.py [--records 1000000] [--value-bytes 1024] [--partitions 4]
                                [--per-trigger 100000] [--rounds 3]

A kgroupd broker (subprocess, free loopback port, in memory) gets ``--records`` records of
``--value-bytes`` random bytes (no key) on a ``--partitions``-partition topic, produced with
aiokafka in batches of 1,000. One local[2] SparkSession (driver and executor JVM options as
in the tests: C1 only, serial GC; shuffle partitions 2) then:

- writes a Parquet copy of the same records, read once through the source with
  ``spark.read.format("kgroupd")`` (same schema, ``--records / --per-trigger`` files);
- runs each workload once untimed (warm-up), then ``--rounds`` timed rounds, alternating
  which goes first:
  * **kgroupd**: ``readStream.format("kgroupd")``, startingOffsets earliest,
    ``maxOffsetsPerTrigger`` = ``--per-trigger``, availableNow, ``format("noop")`` sink;
  * **parquet**: ``readStream.parquet`` of the copy, ``maxFilesPerTrigger`` 1 (so the same
    number of micro-batches of the same size), availableNow, the same noop sink.

Records/s = records / wall seconds from ``start()`` to termination (every round checks that
the query read exactly ``--records`` rows). Micro-batch latency = the median
``triggerExecution`` of the round's data batches after its first (the steady state). The
figures are medians over rounds, with min-max. Target: kgroupd within 5x of Parquet.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _harness as h

JAVA_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
TOPIC = "bench-spark"


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


async def produce(bootstrap: str, records: int, value_bytes: int, partitions: int) -> None:
    from aiokafka import AIOKafkaProducer

    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap, max_batch_size=2 * 1024 * 1024, acks=1, linger_ms=0
    )
    await producer.start()
    try:
        value = os.urandom(value_bytes)
        per_batch = 1000
        pending = []
        sent = batches = 0
        while sent < records:
            batch = producer.create_batch()
            n = min(per_batch, records - sent)
            for _ in range(n):
                assert batch.append(key=None, value=value, timestamp=None) is not None
            batch.close()
            partition = batches % partitions
            pending.append(await producer.send_batch(batch, TOPIC, partition=partition))
            sent += n
            batches += 1
            if len(pending) >= 32:
                await asyncio.gather(*pending)
                pending.clear()
        await asyncio.gather(*pending)
    finally:
        await producer.stop()


def session() -> Any:
    from pyspark.sql import SparkSession

    from kgroupd.pipeline.source import KgroupdDataSource

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    spark = (
        SparkSession.builder.master("local[2]")
        .appName("bench-spark")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.driver.extraJavaOptions", JAVA_OPTIONS)
        .config("spark.executor.extraJavaOptions", JAVA_OPTIONS)
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    spark.dataSource.register(KgroupdDataSource)
    return spark


def descendants(pid: int) -> list[int]:
    """Every process below ``pid`` (children of any of its threads, recursively)."""
    found = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            children = (task / "children").read_text().split()
        except OSError:
            continue
        for child in map(int, children):
            found.append(child)
            found.extend(descendants(child))
    return found


def cpu_snapshot(jvm: int, broker: int) -> dict[str, dict[int, float]]:
    """CPU seconds so far of the JVM, the Python workers under it, and the broker."""
    snap: dict[str, dict[int, float]] = {"jvm": {}, "python": {}, "broker": {}}
    for group, pids in (("jvm", [jvm]), ("python", descendants(jvm)), ("broker", [broker])):
        for pid in pids:
            with contextlib.suppress(OSError):
                snap[group][pid] = h.cpu_seconds(pid)
    return snap


def cpu_used(
    before: dict[str, dict[int, float]], after: dict[str, dict[int, float]]
) -> dict[str, float]:
    """CPU seconds each group used between two snapshots (new processes count from 0;
    Python workers that exited in between are missed, so the figure is a lower bound)."""
    return {
        group: sum(t - before[group].get(pid, 0.0) for pid, t in after[group].items())
        for group in after
    }


def run_query(
    df: Any, checkpoint: Path, records: int, jvm: int, broker: int
) -> tuple[float, float, int, dict[str, float]]:
    """(seconds, steady micro-batch latency ms, data batches, CPU seconds by process group)
    of one availableNow run."""
    before = cpu_snapshot(jvm, broker)
    t0 = time.perf_counter()
    query = (
        df.writeStream.format("noop")
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    seconds = time.perf_counter() - t0
    cpu = cpu_used(before, cpu_snapshot(jvm, broker))
    batches = [p for p in query.recentProgress if p["numInputRows"] > 0]
    read = sum(p["numInputRows"] for p in batches)
    if read != records:
        raise RuntimeError(f"the query read {read} rows, expected {records}")
    steady = [p["durationMs"]["triggerExecution"] for p in batches[1:]] or [
        batches[0]["durationMs"]["triggerExecution"]
    ]
    return seconds, h.median(steady), len(batches), cpu


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--value-bytes", type=int, default=1024)
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--per-trigger", type=int, default=100_000)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    header = f"{h.stamp()}, {h.machine()}, {h.kgroupd_revision()}"
    work = Path(tempfile.mkdtemp(prefix="bench-spark-"))
    try:
        with h.BrokerProcess("kgroupd") as broker:
            bootstrap = f"127.0.0.1:{broker.port}"
            h.create_topic(broker.port, TOPIC, args.partitions)
            h.wait_topic_ready(broker.port, TOPIC, args.partitions)
            t0 = time.perf_counter()
            asyncio.run(produce(bootstrap, args.records, args.value_bytes, args.partitions))
            log(f"produced {args.records} records in {time.perf_counter() - t0:.1f} s")

            spark = session()
            options = {"kafka.bootstrap.servers": bootstrap, "subscribe": TOPIC}
            files = max(1, args.records // args.per_trigger)
            copy = work / "parquet"
            t0 = time.perf_counter()
            batch = spark.read.format("kgroupd").options(**options).load()
            batch.repartition(files).write.parquet(str(copy))
            log(f"parquet copy ({files} files) in {time.perf_counter() - t0:.1f} s")
            schema = spark.read.parquet(str(copy)).schema

            def kgroupd_df() -> Any:
                return (
                    spark.readStream.format("kgroupd")
                    .options(**options)
                    .option("startingOffsets", "earliest")
                    .option("maxOffsetsPerTrigger", str(args.per_trigger))
                    .load()
                )

            def parquet_df() -> Any:
                return (
                    spark.readStream.schema(schema)
                    .option("maxFilesPerTrigger", "1")
                    .parquet(str(copy))
                )

            workloads = {"kgroupd": kgroupd_df, "parquet": parquet_df}
            results: dict[str, list[tuple[float, float, int, dict[str, float]]]] = {
                k: [] for k in workloads
            }
            jvm = spark.sparkContext._gateway.proc.pid
            for round_no in range(args.rounds + 1):
                order = list(workloads) if round_no % 2 == 0 else list(reversed(workloads))
                for name in order:
                    checkpoint = work / f"ck-{name}-{round_no}"
                    got = run_query(workloads[name](), checkpoint, args.records, jvm, broker.pid)
                    shutil.rmtree(checkpoint, ignore_errors=True)
                    label = "warm-up" if round_no == 0 else f"round {round_no}"
                    log(
                        f"{label} {name}: {got[0]:.1f} s, {args.records / got[0]:,.0f} rec/s, "
                        f"steady batch {got[1]:.0f} ms, {got[2]} batches, CPU s "
                        + ", ".join(f"{k} {v:.1f}" for k, v in got[3].items())
                    )
                    if round_no > 0:
                        results[name].append(got)
            spark.stop()
    finally:
        shutil.rmtree(work, ignore_errors=True)

    print(f"\n{header}; load avg {os.getloadavg()[0]:.2f} at end\n")
    print(f"`{h.command_line()}`\n")
    mb = args.records * args.value_bytes / h.MB
    print("| source | records/s median (min-max) | MB/s | steady micro-batch ms (min-max) |")
    print("|---|---|---|---|")
    medians = {}
    for name, runs in results.items():
        rates = [args.records / r[0] for r in runs]
        lat = [r[1] for r in runs]
        medians[name] = h.median(rates)
        print(
            f"| {name} | {h.median(rates):,.0f} ({min(rates):,.0f}-{max(rates):,.0f}) | "
            f"{mb / h.median([r[0] for r in runs]):.0f} | "
            f"{h.median(lat):.0f} ({min(lat):.0f}-{max(lat):.0f}) |"
        )
    print("\nCPU seconds per run, median (JVM, Python workers, broker):\n")
    print("| source | JVM | Python workers | broker |")
    print("|---|---|---|---|")
    for name, runs in results.items():
        cells = " | ".join(
            f"{h.median([r[3][g] for r in runs]):.1f}" for g in ("jvm", "python", "broker")
        )
        print(f"| {name} | {cells} |")
    slower = medians["parquet"] / medians["kgroupd"]
    print(f"\nParquet / kgroupd records/s: **{slower:.2f}x** (target: at most 5x)")


if __name__ == "__main__":
    main()
