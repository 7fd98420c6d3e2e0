"""The log cleaner's flags (Kafka's config names in the help), appended to the broker's,
and their ``BrokerConfig`` fields (``CleanerSettings``, a base of ``BrokerConfig``)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kgroupd.broker.config.types import at_least_one, truth


@dataclass(frozen=True)
class CleanerSettings:
    log_cleaner_enable: bool = True  # Kafka: log.cleaner.enable
    log_cleaner_backoff_ms: int = 15_000  # Kafka: log.cleaner.backoff.ms
    # Kafka: log.cleaner.io.max.bytes.per.second (unbounded there too); None: unbounded
    log_cleaner_io_max_bytes_per_second: int | None = None
    # Kafka: log.cleaner.dedupe.buffer.size (its default): the key map of one pass, about
    log_cleaner_dedupe_buffer_size: int = 128 * 1024 * 1024


# (flag, BrokerConfig field, type, help): appended to the broker's flags
OPTIONS: list[tuple[str, str, Callable[[str], Any], str]] = [
    (
        "--log-cleaner-enable",
        "log_cleaner_enable",
        truth,
        "true|false: compact cleanup.policy=compact topics in the background "
        "(Kafka: log.cleaner.enable)",
    ),
    (
        "--log-cleaner-backoff-ms",
        "log_cleaner_backoff_ms",
        at_least_one,
        "how long the log cleaner sleeps when no log needs cleaning "
        "(Kafka: log.cleaner.backoff.ms)",
    ),
    (
        "--log-cleaner-io-max-bytes-per-second",
        "log_cleaner_io_max_bytes_per_second",
        at_least_one,
        "the log cleaner's bytes read plus written a second (Kafka: "
        "log.cleaner.io.max.bytes.per.second)",
    ),
    (
        "--log-cleaner-dedupe-buffer-size",
        "log_cleaner_dedupe_buffer_size",
        at_least_one,
        "the memory of a cleaner pass's key map (about 150 bytes a key); a pass whose dirty "
        "keys pass it cleans up to there, the next pass goes on (Kafka: "
        "log.cleaner.dedupe.buffer.size)",
    ),
]
