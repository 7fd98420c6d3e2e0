"""What produce's batch validation costs (``kgroupd.broker.log.validate``), in process.

    python bench/bench_validate.py [--rounds 9]

Times ``validate_batch`` (the CRC-32C, the header checks, the record walk; a compressed batch
decompressed first) against the CRC-32C alone, which is all produce checked before it, on
batches of 1 KiB records as ``bench_throughput.py`` sends (15 in 16 KiB, 1,014 in 1 MiB) and of
100-byte records (the walk's cost is per record), uncompressed and with each codec. Each
figure is the best of ``--rounds`` timed loops (a fresh copy of the batch each call, as a
request brings it), in microseconds a batch and nanoseconds a record; MB/s counts the records'
values, uncompressed (10**6 bytes a second).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _harness as h
from aiokafka.record.default_records import DefaultRecordBatchBuilder

from kgroupd.broker.log.validate import validate_batch
from kgroupd.protocol.records import check_crc, parse_header

CODECS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}
TIMESTAMP = 1_700_000_000_000


def batch_of(value_size: int, target: int, codec: int) -> tuple[bytes, int]:
    """As many records of ``value_size`` bytes (no key) as fit uncompressed in ``target``."""
    value = bytes(range(256)) * (value_size // 256) + bytes(range(value_size % 256))
    count = 0
    probe = DefaultRecordBatchBuilder(2, 0, 0, -1, -1, -1, 2**31 - 1)
    while True:
        probe.append(count, TIMESTAMP, None, value, [])
        if probe.size() > target:
            break
        count += 1
    builder = DefaultRecordBatchBuilder(2, codec, 0, -1, -1, -1, 2**31 - 1)
    for i in range(count):
        builder.append(i, TIMESTAMP, None, value, [])
    return bytes(builder.build()), count


def best(fn: Callable[[bytes], object], batch: bytes, rounds: int) -> float:
    """Seconds a call, the best of ``rounds`` loops of about 50 ms."""
    calls = max(1, int(0.05 / max(_once(fn, batch), 1e-7)))
    out = float("inf")
    for _ in range(rounds):
        copies = [bytes(bytearray(batch)) for _ in range(calls)]
        t0 = time.perf_counter()
        for copy in copies:
            fn(copy)
        out = min(out, (time.perf_counter() - t0) / calls)
    return out


def _once(fn: Callable[[bytes], object], batch: bytes) -> float:
    t0 = time.perf_counter()
    fn(batch)
    return time.perf_counter() - t0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--rounds", type=int, default=9)
    args = ap.parse_args()
    print(f"# {h.command_line()}\n{h.stamp()}; {h.machine()}\n")
    print(
        "| records | codec | batch bytes | CRC only: us | validate: us (ns/record) "
        "| validate MB/s of records | validate / CRC |"
    )
    print("|---|---|---|---|---|---|---|")
    for value_size, target in ((1024, 16384), (1024, 1 << 20), (100, 16384), (100, 1 << 20)):
        for name, codec in CODECS.items():
            batch, count = batch_of(value_size, target, codec)
            header = parse_header(batch)

            def crc(data: bytes, header: object = header) -> None:
                check_crc(data, 0, header)  # type: ignore[arg-type]

            def validate(data: bytes, header: object = header) -> None:
                validate_batch(data, header, "t", 0)  # type: ignore[arg-type]

            crc_s = best(crc, batch, args.rounds)
            val_s = best(validate, batch, args.rounds)
            per_record = val_s / count * 1e9
            mb_s = count * value_size / val_s / 1e6  # the records' values, uncompressed
            print(
                f"| {count:,} x {value_size} B | {name} | {len(batch):,} | {crc_s * 1e6:.1f} "
                f"| {val_s * 1e6:.1f} ({per_record:.0f}) | {mb_s:,.0f} | {val_s / crc_s:.1f}x |",
                flush=True,
            )
    print(f"\n{h.stamp()}: end, load avg {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
