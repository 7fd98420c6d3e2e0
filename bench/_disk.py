"""The disk under the benchmarks: what a small write plus fsync costs on it, printed next to
the figures of a run that waits for fsync (bench_durability.py, bench_transactions.py)."""

from __future__ import annotations

import os
import statistics
import time
from pathlib import Path


def fsync_probe(directory: Path, n: int = 300) -> tuple[float, float]:
    """Median and 90th percentile ms of write(200 bytes) + fsync on this disk."""
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
