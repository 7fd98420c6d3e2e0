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

    @property
    def offsets_retention_ms(self) -> int:
        return self.offsets_retention_minutes * 60 * 1000
