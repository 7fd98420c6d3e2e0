"""The group coordinator's flags (Kafka's group.* and offsets.* names in the help) and
Kafka's checks on them; appended to the broker's flags by ``kgroupd.broker.config.settings``."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any, Protocol

from kgroupd.broker.config.types import at_least_one, non_negative

SERVER_ASSIGNOR_NAMES = ("uniform", "range")
MIGRATION_POLICIES = ("disabled", "downgrade", "upgrade", "bidirectional")


def _assignors(text: str) -> tuple[str, ...]:
    names = tuple(n.strip() for n in text.split(",") if n.strip())
    if not names:
        raise argparse.ArgumentTypeError("needs at least one assignor")
    for name in names:
        if name not in SERVER_ASSIGNOR_NAMES:
            raise argparse.ArgumentTypeError(
                f"unknown assignor {name!r} (kgroupd has {', '.join(SERVER_ASSIGNOR_NAMES)})"
            )
    return names


def _policy(text: str) -> str:
    value = text.strip().lower()
    if value not in MIGRATION_POLICIES:
        raise argparse.ArgumentTypeError(f"must be one of {', '.join(MIGRATION_POLICIES)}")
    return value


def _between(lo: int, hi: int | None) -> Callable[[str], int]:
    """Kafka's ConfigDef ``between(lo, hi)`` (``atLeast(lo)`` when ``hi`` is None)."""

    def parse(text: str) -> int:
        value = non_negative(text)
        if value < lo or (hi is not None and value > hi):
            bound = f"at least {lo}" if hi is None else f"between {lo} and {hi}"
            raise argparse.ArgumentTypeError(f"{text!r}: value must be {bound}")
        return value

    return parse


# (flag, BrokerConfig field, type, help)
OPTIONS: list[tuple[str, str, Callable[[str], Any], str]] = [
    (
        "--offsets-partitions",
        "offsets_partitions",
        at_least_one,
        "coordinator shards (Kafka: offsets.topic.num.partitions)",
    ),
    (
        "--initial-rebalance-delay-ms",
        "initial_rebalance_delay_ms",
        non_negative,
        "Kafka: group.initial.rebalance.delay.ms",
    ),
    (
        "--group-min-session-timeout-ms",
        "group_min_session_timeout_ms",
        non_negative,
        "Kafka: group.min.session.timeout.ms",
    ),
    (
        "--group-max-session-timeout-ms",
        "group_max_session_timeout_ms",
        non_negative,
        "Kafka: group.max.session.timeout.ms",
    ),
    (
        "--group-max-size",
        "group_max_size",
        at_least_one,
        "Kafka: group.max.size (default: unbounded)",
    ),
    (
        "--group-consumer-session-timeout-ms",
        "group_consumer_session_timeout_ms",
        at_least_one,
        "consumer groups (KIP-848): Kafka: group.consumer.session.timeout.ms",
    ),
    (
        "--group-consumer-min-session-timeout-ms",
        "group_consumer_min_session_timeout_ms",
        at_least_one,
        "Kafka: group.consumer.min.session.timeout.ms",
    ),
    (
        "--group-consumer-max-session-timeout-ms",
        "group_consumer_max_session_timeout_ms",
        at_least_one,
        "Kafka: group.consumer.max.session.timeout.ms",
    ),
    (
        "--group-consumer-heartbeat-interval-ms",
        "group_consumer_heartbeat_interval_ms",
        at_least_one,
        "Kafka: group.consumer.heartbeat.interval.ms",
    ),
    (
        "--group-consumer-min-heartbeat-interval-ms",
        "group_consumer_min_heartbeat_interval_ms",
        at_least_one,
        "Kafka: group.consumer.min.heartbeat.interval.ms",
    ),
    (
        "--group-consumer-max-heartbeat-interval-ms",
        "group_consumer_max_heartbeat_interval_ms",
        at_least_one,
        "Kafka: group.consumer.max.heartbeat.interval.ms",
    ),
    (
        "--group-consumer-max-size",
        "group_consumer_max_size",
        at_least_one,
        "Kafka: group.consumer.max.size (default: unbounded)",
    ),
    (
        "--group-consumer-assignors",
        "group_consumer_assignors",
        _assignors,
        "server assignors, comma-separated, the first the default "
        "(Kafka: group.consumer.assignors)",
    ),
    (
        "--group-consumer-migration-policy",
        "group_consumer_migration_policy",
        _policy,
        "disabled|downgrade|upgrade|bidirectional (Kafka: group.consumer.migration.policy)",
    ),
    (
        "--group-consumer-regex-refresh-interval-ms",
        "group_consumer_regex_refresh_interval_ms",
        _between(10_000, None),
        "how often the topics matching a consumer group's subscribed regular expressions are "
        "resolved again, at least 10000 (Kafka: group.consumer.regex.refresh.interval.ms)",
    ),
    *[
        (
            "--group-share-" + name.replace(".", "-"),
            "group_share_" + name.replace(".", "_"),
            _between(lo, hi),
            f"share groups (KIP-932): Kafka: group.share.{name}",
        )
        for name, lo, hi in [
            ("session.timeout.ms", 1, None),
            ("min.session.timeout.ms", 1, None),
            ("max.session.timeout.ms", 1, None),
            ("heartbeat.interval.ms", 1, None),
            ("min.heartbeat.interval.ms", 1, None),
            ("max.heartbeat.interval.ms", 1, None),
            ("max.size", 1, 1000),
            ("delivery.count.limit", 2, 10),
            ("min.delivery.count.limit", 2, 5),
            ("max.delivery.count.limit", 5, 25),
            ("record.lock.duration.ms", 1000, 3600000),
            ("min.record.lock.duration.ms", 1000, 30000),
            ("max.record.lock.duration.ms", 30000, 3600000),
            ("partition.max.record.locks", 100, 10000),
            ("min.partition.max.record.locks", 100, 10000),
            ("max.partition.max.record.locks", 100, 10000),
            ("max.share.sessions", 1, None),
        ]
    ],
    (
        "--offsets-retention-minutes",
        "offsets_retention_minutes",
        at_least_one,
        "Kafka: offsets.retention.minutes",
    ),
    (
        "--offset-metadata-max-bytes",
        "offset_metadata_max_bytes",
        non_negative,
        "Kafka: offset.metadata.max.bytes",
    ),
]


class GroupSettings(Protocol):
    @property
    def group_min_session_timeout_ms(self) -> int: ...
    @property
    def group_max_session_timeout_ms(self) -> int: ...
    @property
    def group_consumer_session_timeout_ms(self) -> int: ...
    @property
    def group_consumer_min_session_timeout_ms(self) -> int: ...
    @property
    def group_consumer_max_session_timeout_ms(self) -> int: ...
    @property
    def group_consumer_heartbeat_interval_ms(self) -> int: ...
    @property
    def group_consumer_min_heartbeat_interval_ms(self) -> int: ...
    @property
    def group_consumer_max_heartbeat_interval_ms(self) -> int: ...
    @property
    def group_share_session_timeout_ms(self) -> int: ...
    @property
    def group_share_min_session_timeout_ms(self) -> int: ...
    @property
    def group_share_max_session_timeout_ms(self) -> int: ...
    @property
    def group_share_heartbeat_interval_ms(self) -> int: ...
    @property
    def group_share_min_heartbeat_interval_ms(self) -> int: ...
    @property
    def group_share_max_heartbeat_interval_ms(self) -> int: ...
    @property
    def group_share_delivery_count_limit(self) -> int: ...
    @property
    def group_share_min_delivery_count_limit(self) -> int: ...
    @property
    def group_share_max_delivery_count_limit(self) -> int: ...
    @property
    def group_share_record_lock_duration_ms(self) -> int: ...
    @property
    def group_share_min_record_lock_duration_ms(self) -> int: ...
    @property
    def group_share_max_record_lock_duration_ms(self) -> int: ...
    @property
    def group_share_partition_max_record_locks(self) -> int: ...
    @property
    def group_share_min_partition_max_record_locks(self) -> int: ...
    @property
    def group_share_max_partition_max_record_locks(self) -> int: ...


def check(c: GroupSettings) -> str | None:
    """Kafka's GroupCoordinatorConfig checks: why these settings cannot be used, or None."""
    checks = [
        (
            c.group_min_session_timeout_ms <= c.group_max_session_timeout_ms,
            "--group-min-session-timeout-ms is above --group-max-session-timeout-ms",
        ),
        (
            c.group_consumer_min_session_timeout_ms
            <= c.group_consumer_session_timeout_ms
            <= c.group_consumer_max_session_timeout_ms,
            "--group-consumer-session-timeout-ms must lie within "
            "--group-consumer-min-session-timeout-ms and --group-consumer-max-session-timeout-ms",
        ),
        (
            c.group_consumer_min_heartbeat_interval_ms
            <= c.group_consumer_heartbeat_interval_ms
            <= c.group_consumer_max_heartbeat_interval_ms,
            "--group-consumer-heartbeat-interval-ms must lie within "
            "--group-consumer-min-heartbeat-interval-ms and "
            "--group-consumer-max-heartbeat-interval-ms",
        ),
        (
            c.group_consumer_heartbeat_interval_ms < c.group_consumer_session_timeout_ms,
            "--group-consumer-heartbeat-interval-ms must be less than "
            "--group-consumer-session-timeout-ms",
        ),
        *_share_checks(c),
    ]
    for ok, message in checks:
        if not ok:
            return message
    return None


def _share_checks(c: GroupSettings) -> list[tuple[bool, str]]:
    """Kafka's GroupCoordinatorConfig and ShareGroupConfig checks of the group.share.* settings:
    each default lies within its min and max, the heartbeat below the session timeout."""
    out = []
    for name in (
        "session_timeout_ms",
        "heartbeat_interval_ms",
        "delivery_count_limit",
        "record_lock_duration_ms",
        "partition_max_record_locks",
    ):
        value = getattr(c, "group_share_" + name)
        lo = getattr(c, "group_share_min_" + name)
        hi = getattr(c, "group_share_max_" + name)
        flag = "--group-share-" + name.replace("_", "-")
        out.append(
            (
                lo <= value <= hi,
                f"{flag} must lie within --group-share-min-{flag[14:]} and "
                f"--group-share-max-{flag[14:]}",
            )
        )
    out.append(
        (
            c.group_share_heartbeat_interval_ms < c.group_share_session_timeout_ms,
            "--group-share-heartbeat-interval-ms must be less than "
            "--group-share-session-timeout-ms",
        )
    )
    return out
