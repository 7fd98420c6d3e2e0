"""Share-group (KIP-932) metrics, read when scraped: share groups per state (in
``kgroupd_groups``, type ``share``), each share partition's in-flight records by state and
its lag, and counters of records delivered, acknowledged (per type), whose lock expired and
archived at the delivery count limit."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from kgroupd.broker.share.partition import RecordState

if TYPE_CHECKING:
    from kgroupd.broker.state import Broker

Names = Callable[[str], str]

EVENTS = (
    ("delivered", "Records delivered to share consumers (each delivery counts)"),
    ("lock_expired", "Acquired records whose acquisition lock expired"),
    ("delivery_limit_archived", "Records archived at the delivery count limit"),
)


def share_group_states(broker: Broker) -> list[tuple[str, str, int, int]]:
    """(group id, state, members, group epoch) of every share group."""
    return [
        (g.group_id, g.state.value, len(g.members), g.group_epoch)
        for g in broker.share.coordinator.groups.values()
    ]


def share_metrics(broker: Broker, groups: Names, topics: Names) -> Iterator[Metric]:
    share = broker.share
    in_flight = GaugeMetricFamily(
        "kgroupd_share_partition_records",
        "In-flight records of a share partition, by state",
        labels=["group", "topic", "partition", "state"],
    )
    lag = GaugeMetricFamily(
        "kgroupd_share_partition_lag",
        "Records of a share partition not yet delivered and settled (Kafka's share lag)",
        labels=["group", "topic", "partition"],
    )
    rows: dict[tuple[str, str, str, str], int] = {}
    lags: dict[tuple[str, str, str], int] = {}
    for (group_id, topic_id, index), sp in share.partitions.items():
        topic = broker.topics.by_id(topic_id)
        if topic is None or index >= len(topic.partitions):
            continue
        key = (groups(group_id), topics(topic.name), str(index))
        states = sp.state_counts()
        for state in RecordState:
            k = (*key, state.name.lower())
            rows[k] = rows.get(k, 0) + states[state]
        log = topic.partitions[index]
        settled = states[RecordState.ACKNOWLEDGED] + states[RecordState.ARCHIVED]
        behind = log.high_watermark - max(sp.start_offset, log.log_start_offset) - settled
        lags[key] = lags.get(key, 0) + max(0, behind)
    for labels, n in sorted(rows.items()):
        in_flight.add_metric(list(labels), n)
    for labels3, n in sorted(lags.items()):
        lag.add_metric(list(labels3), n)
    yield from (in_flight, lag)
    counts = share.counts
    acks = CounterMetricFamily(
        "kgroupd_share_acknowledgements",
        "Share-record acknowledgements, per type",
        labels=["type"],
    )
    for kind in ("accept", "release", "reject", "renew", "gap"):
        acks.add_metric([kind], counts.get(kind, 0))
    yield acks
    for name, text in EVENTS:
        yield CounterMetricFamily(f"kgroupd_share_records_{name}", text, value=counts.get(name, 0))
