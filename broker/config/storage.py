"""The storage flags (Kafka's config names in the help): fsync, the coordinator log, the
cache of topic data under --data-dir and the bound on it in memory."""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable
from typing import Any

from kgroupd.broker.config.types import at_least_one, non_negative

DEFAULT_LOG_CACHE_BYTES = 64 * 1024 * 1024


def default_max_memory_bytes() -> int:
    """A quarter of the machine's memory."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 4
    except (ValueError, OSError):
        return 1024 * 1024 * 1024


def index_interval(text: str) -> int:
    """A Java int of at least 0 (Kafka's log.index.interval.bytes: INT, atLeast(0))."""
    value = non_negative(text)
    if value >= 2**31:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of type INT")
    return value


def roll_jitter_ms(jitter_ms: int | None, jitter_hours: int) -> int:
    """The broker default of segment.jitter.ms: Kafka's log.roll.jitter.ms, else
    log.roll.jitter.hours in milliseconds."""
    return jitter_ms if jitter_ms is not None else jitter_hours * 3_600_000


# (flag, BrokerConfig field, type, help): appended to the broker's flags
OPTIONS: list[tuple[str, str, Callable[[str], Any], str]] = [
    (
        "--fsync",
        "fsync",
        str,
        "when acknowledged writes reach the disk: always (before the answer), interval "
        "(every --fsync-interval-ms) or never (left to the OS); needs --data-dir [always]",
    ),
    (
        "--fsync-interval-ms",
        "fsync_interval_ms",
        at_least_one,
        "fsync period for --fsync interval",
    ),
    (
        "--snapshot-log-bytes",
        "snapshot_log_bytes",
        at_least_one,
        "the size of the coordinator log (shared by every group and transaction shard) that "
        "starts a new log and a snapshot of each shard written to since the last one",
    ),
    (
        "--log-cache-bytes",
        "log_cache_bytes",
        non_negative,
        "with --data-dir: the newest record batches kept in memory, shared by every "
        "partition; older ones are read from the segment files",
    ),
    (
        "--log-index-interval-bytes",
        "log_index_interval_bytes",
        index_interval,
        "the default index.interval.bytes of topics (Kafka: log.index.interval.bytes; unset: "
        "4096): bytes of log between two entries of a segment's sparse offset and time index",
    ),
    (
        "--log-roll-ms",
        "log_roll_ms",
        at_least_one,
        "the default segment.ms of topics (Kafka: log.roll.ms; unset: --log-roll-hours): a "
        "segment rolls at the first append this long after its first batch",
    ),
    (
        "--log-roll-hours",
        "log_roll_hours",
        at_least_one,
        "the default segment.ms of topics in hours, when --log-roll-ms is unset (Kafka: "
        "log.roll.hours)",
    ),
    (
        "--log-roll-jitter-ms",
        "log_roll_jitter_ms",
        non_negative,
        "the default segment.jitter.ms of topics (Kafka: log.roll.jitter.ms; unset: "
        "--log-roll-jitter-hours): the most a segment's roll time is shortened by, at random",
    ),
    (
        "--log-roll-jitter-hours",
        "log_roll_jitter_hours",
        non_negative,
        "the default segment.jitter.ms of topics in hours, when --log-roll-jitter-ms is unset "
        "(Kafka: log.roll.jitter.hours)",
    ),
    (
        "--max-memory-bytes",
        "max_memory_bytes",
        at_least_one,
        "without --data-dir: the topic data kept in memory; over it the oldest batches are "
        "deleted first (memory_bound_deleted is logged) (default: a quarter of the "
        "machine's memory)",
    ),
]
