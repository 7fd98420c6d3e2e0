"""Coordinator settings (Kafka broker config names in comments)."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["CoordinatorConfig"]


@dataclass(frozen=True, slots=True)
class CoordinatorConfig:
    offsets_partitions: int = 50  # offsets.topic.num.partitions
    initial_rebalance_delay_ms: int = 3000  # group.initial.rebalance.delay.ms
    group_min_session_timeout_ms: int = 6000  # group.min.session.timeout.ms
    group_max_session_timeout_ms: int = 1800000  # group.max.session.timeout.ms
    group_max_size: int | None = None  # group.max.size (None: unbounded, Kafka's MAX_INT)
    offsets_retention_minutes: int = 10080  # offsets.retention.minutes
    offset_metadata_max_bytes: int = 4096  # offset.metadata.max.bytes
    new_member_join_timeout_ms: int = 300000  # group.classic... new member join timeout
    offsets_retention_check_interval_ms: int = 600000  # offsets.retention.check.interval.ms
    # --- KIP-848 consumer groups (Kafka 4 GroupCoordinatorConfig defaults) ----------------
    consumer_session_timeout_ms: int = 45000  # group.consumer.session.timeout.ms
    consumer_min_session_timeout_ms: int = 45000  # group.consumer.min.session.timeout.ms
    consumer_max_session_timeout_ms: int = 60000  # group.consumer.max.session.timeout.ms
    consumer_heartbeat_interval_ms: int = 5000  # group.consumer.heartbeat.interval.ms
    consumer_min_heartbeat_interval_ms: int = 5000  # group.consumer.min.heartbeat.interval.ms
    consumer_max_heartbeat_interval_ms: int = 15000  # group.consumer.max.heartbeat.interval.ms
    consumer_max_size: int | None = None  # group.consumer.max.size (None: Kafka's MAX_INT)
    # group.consumer.assignors: the first is the default when a member names none
    consumer_assignors: tuple[str, ...] = ("uniform", "range")
    # group.consumer.migration.policy: disabled | upgrade | downgrade | bidirectional
    consumer_migration_policy: str = "bidirectional"
    # group.consumer.regex.refresh.interval.ms (Kafka's internal config, at least 10000)
    consumer_regex_refresh_interval_ms: int = 600_000

    @property
    def offsets_retention_ms(self) -> int:
        return self.offsets_retention_minutes * 60 * 1000
