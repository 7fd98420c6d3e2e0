"""Prometheus metrics: plain counters on the hot path, read at scrape time.

Requests, errors, bytes and fsyncs are counted in plain ints and dicts by ``BrokerStats``
(one dict update per request); groups, lag, offsets and connections are read from the
broker's state when ``/metrics`` is scraped, by ``BrokerCollector`` (a prometheus-client
custom collector). The coordinator tells of rebalances and commits through its plain
``GroupEvents`` hook; it imports nothing from here.
"""

from __future__ import annotations

import time
from bisect import bisect_left
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from kgroupd.broker.api_names import api_name
from kgroupd.broker.coordinator.events import GroupEvents, rebalance_reason
from kgroupd.protocol.errors import ErrorCode

if TYPE_CHECKING:
    from kgroupd.broker.state import Broker

OTHER = "__other__"
REQUEST_BUCKETS: tuple[float, ...] = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01)
REQUEST_BUCKETS += (0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
_FIRST = REQUEST_BUCKETS[0]
REBALANCE_BUCKETS = (0.01, 0.05, 0.1, 0.5, 1.0, 3.0, 5.0, 10.0, 30.0, 60.0, 300.0)
FSYNC_BUCKETS = (0.0001, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5, 1.0, 5.0)


class PlainHistogram:
    """Bucket counts in a list: ``observe`` is a bisect and two additions."""

    __slots__ = ("bounds", "counts", "total")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)
        self.total = 0.0

    def observe(self, value: float) -> None:
        self.counts[bisect_left(self.bounds, value)] += 1
        self.total += value

    def buckets(self) -> list[tuple[str, float]]:
        out: list[tuple[str, float]] = []
        running = 0
        for bound, count in zip(self.bounds, self.counts, strict=False):
            running += count
            out.append((repr(bound), running))
        out.append(("+Inf", running + self.counts[-1]))
        return out


class Names:
    """The label values of at most ``limit`` names (groups or topics), first come first
    kept; any other is ``__other__``."""

    __slots__ = ("kept", "limit")

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.kept: set[str] = set()

    def __call__(self, name: str) -> str:
        kept = self.kept
        if name in kept:
            return name
        if len(kept) < self.limit:
            kept.add(name)
            return name
        return OTHER


class BrokerStats(GroupEvents):
    """What the hot path counts. ``request`` is called once per answered request."""

    def __init__(self, max_names: int) -> None:
        # api key << 8 | version -> its durations (their count: the requests)
        self.requests: dict[int, PlainHistogram] = {}
        self.errors: dict[tuple[int, int], int] = {}
        self.produce_bytes: dict[str, int] = {}
        self.fetch_bytes: dict[str, int] = {}
        self.fsync = PlainHistogram(FSYNC_BUCKETS)
        self.rebalances: dict[tuple[str, str], int] = {}
        self.rebalance_durations = PlainHistogram(REBALANCE_BUCKETS)
        self._rebalancing: dict[str, float] = {}
        self.groups = Names(max_names)
        self.topics = Names(max_names)

    def request(self, api_key: int, version: int, error: int, seconds: float) -> None:
        hist = self.requests.get(api_key << 8 | version)
        if hist is None or error:
            self._request(api_key, version, error, seconds)
            return
        # most answers take under the first bound (100 µs): no search for them
        hist.counts[0 if seconds < _FIRST else bisect_left(REQUEST_BUCKETS, seconds)] += 1
        hist.total += seconds

    def _request(self, api_key: int, version: int, error: int, seconds: float) -> None:
        """``request`` for a first request of its API version, or one answered an error."""
        hist = self.requests.get(api_key << 8 | version)
        if hist is None:
            hist = self.requests[api_key << 8 | version] = PlainHistogram(REQUEST_BUCKETS)
        hist.observe(seconds)
        if error:
            key = (api_key, error)
            self.errors[key] = self.errors.get(key, 0) + 1

    def produced(self, topic: str, size: int) -> None:
        self.produce_bytes[topic] = self.produce_bytes.get(topic, 0) + size

    def fetched(self, topic: str, size: int) -> None:
        self.fetch_bytes[topic] = self.fetch_bytes.get(topic, 0) + size

    # GroupEvents (the coordinator's) ------------------------------------------------------

    def rebalance_started(self, group_id: str, reason: str, consumer: bool = False) -> None:
        key = (self.groups(group_id), rebalance_reason(reason))
        self.rebalances[key] = self.rebalances.get(key, 0) + 1
        if not consumer:
            self._rebalancing[group_id] = time.monotonic()

    def rebalance_completed(self, group_id: str) -> None:
        started = self._rebalancing.pop(group_id, None)
        if started is not None:
            self.rebalance_durations.observe(time.monotonic() - started)


def _error_name(code: int) -> str:
    try:
        return ErrorCode(code).name
    except ValueError:
        return str(code)


class BrokerCollector(Collector):
    """``kgroupd_*`` metrics of one broker, read when scraped (on the event loop)."""

    def __init__(
        self,
        stats: BrokerStats,
        broker: Callable[[], Broker | None],
        connections: Callable[[], int],
    ) -> None:
        self.stats = stats
        self.broker = broker
        self.connections = connections

    def collect(self) -> Iterator[Metric]:
        s = self.stats
        requests = CounterMetricFamily(
            "kgroupd_requests", "Requests answered, per API and version", labels=["api", "version"]
        )
        per_api: dict[int, list[PlainHistogram]] = {}
        for key, hist in sorted(s.requests.items()):
            requests.add_metric([api_name(key >> 8), str(key & 0xFF)], sum(hist.counts))
            per_api.setdefault(key >> 8, []).append(hist)
        errors = CounterMetricFamily(
            "kgroupd_request_errors",
            "Answers whose top-level error code is not NONE, per API and Kafka error name",
            labels=["api", "error"],
        )
        for (key, code), n in sorted(s.errors.items()):
            errors.add_metric([api_name(key), _error_name(code)], n)
        durations = HistogramMetricFamily(
            "kgroupd_request_duration_seconds",
            "From a request's frame being handled to its answer being ready",
            labels=["api"],
        )
        for api, hists in per_api.items():
            merged = PlainHistogram(REQUEST_BUCKETS)
            for hist in hists:
                merged.counts = [a + b for a, b in zip(merged.counts, hist.counts, strict=True)]
                merged.total += hist.total
            durations.add_metric([api_name(api)], merged.buckets(), merged.total)
        yield from (requests, errors, durations)
        yield GaugeMetricFamily(
            "kgroupd_connections", "Open client connections", value=self.connections()
        )
        yield from self._bytes(s)
        yield _histogram("kgroupd_fsync_duration_seconds", "fsync rounds of the data dir", s.fsync)
        rebalances = CounterMetricFamily(
            "kgroupd_rebalances",
            "Rebalances started (classic groups; consumer groups: epoch bumps), per group "
            "and reason",
            labels=["group", "reason"],
        )
        for (group, reason), n in sorted(s.rebalances.items()):
            rebalances.add_metric([group, reason], n)
        yield rebalances
        yield _histogram(
            "kgroupd_rebalance_duration_seconds",
            "From PreparingRebalance to Stable, classic groups",
            s.rebalance_durations,
        )
        broker = self.broker()
        if broker is not None:  # None while the data dir loads
            yield from _state(broker, s)

    def _bytes(self, s: BrokerStats) -> Iterable[Metric]:
        for name, counts, text in (
            ("kgroupd_produce_bytes", s.produce_bytes, "Record batch bytes appended"),
            ("kgroupd_fetch_bytes", s.fetch_bytes, "Record batch bytes sent to fetchers"),
        ):
            family = CounterMetricFamily(name, text + ", per topic", labels=["topic"])
            for topic, n in _capped(counts.items(), s.topics).items():
                family.add_metric([topic], n)
            yield family


def _histogram(name: str, text: str, hist: PlainHistogram) -> HistogramMetricFamily:
    family = HistogramMetricFamily(name, text)
    family.add_metric([], hist.buckets(), hist.total)
    return family


def _capped(items: Iterable[tuple[str, int]], names: Names) -> dict[str, int]:
    out: dict[str, int] = {}
    for name, n in items:
        label = names(name)
        out[label] = out.get(label, 0) + n
    return out


def _state(broker: Broker, s: BrokerStats) -> Iterator[Metric]:
    """Groups, lag, log ends and the coordinator log, read from the broker now."""
    groups = GaugeMetricFamily(
        "kgroupd_groups", "Groups per state and type", labels=["state", "type"]
    )
    members = GaugeMetricFamily("kgroupd_group_members", "Members of a group", labels=["group"])
    generation = GaugeMetricFamily(
        "kgroupd_group_generation",
        "A group's generation (consumer groups: epoch)",
        labels=["group"],
    )
    lag = GaugeMetricFamily(
        "kgroupd_consumergroup_lag",
        "Log end offset minus the group's committed offset",
        labels=["group", "topic", "partition"],
    )
    lag_sum = GaugeMetricFamily(
        "kgroupd_consumergroup_lag_sum", "A group's lag over its partitions", labels=["group"]
    )
    counts: dict[tuple[str, str], int] = {}
    per_group: dict[str, list[int]] = {}  # label -> [members, generation]
    lags: dict[tuple[str, str, int], int] = {}
    topics = broker.topics
    for shard in broker.coordinator.shards:
        if not shard.owned or shard.loading:
            continue
        found: list[tuple[str, str, str, int, int]] = [
            (g.group_id, g.state.value, "classic", len(g.members), g.generation_id)
            for g in shard.groups.values()
        ]
        found += [
            (g.group_id, g.state.value, "consumer", len(g.members), g.group_epoch)
            for g in shard.consumer_groups.values()
        ]
        for gid, state, kind, n, gen in found:
            counts[(state, kind)] = counts.get((state, kind), 0) + 1
            row = per_group.setdefault(s.groups(gid), [0, 0])
            row[0] += n
            row[1] += gen
        for gid, committed in shard.offsets.items():
            label = s.groups(gid)
            for topic, parts in committed.items():
                known = topics.get(topic)
                if known is None:
                    continue
                logs, tlabel = known.partitions, s.topics(topic)
                count = len(logs)
                for partition, om in parts.items():
                    if partition < count:
                        key = (label, tlabel, partition)
                        behind = logs[partition].high_watermark - om[0]
                        lags[key] = lags.get(key, 0) + (behind if behind > 0 else 0)
    for (state, kind), n in sorted(counts.items()):
        groups.add_metric([state, kind], n)
    for label, (n, gen) in sorted(per_group.items()):
        members.add_metric([label], n)
        generation.add_metric([label], gen)
    sums: dict[str, int] = {}
    for (group, topic, partition), value in sorted(lags.items()):
        lag.add_metric([group, topic, str(partition)], value)
        sums[group] = sums.get(group, 0) + value
    for group, value in sorted(sums.items()):
        lag_sum.add_metric([group], value)
    yield from (groups, members, generation, lag, lag_sum)
    commits = CounterMetricFamily(
        "kgroupd_offset_commits", "Partition offsets committed (OffsetCommit)"
    )
    commits.add_metric([], sum(shard.offsets_committed for shard in broker.coordinator.shards))
    yield commits
    ends: dict[tuple[str, int], int] = {}
    for name, found_topic in topics.topics.items():
        tlabel = s.topics(name)
        for index, part in enumerate(found_topic.partitions):
            end_key = (tlabel, index)
            ends[end_key] = ends.get(end_key, 0) + part.high_watermark
    log_end = GaugeMetricFamily(
        "kgroupd_log_end_offset", "The next offset of a partition", labels=["topic", "partition"]
    )
    for (label, index), value in sorted(ends.items()):
        log_end.add_metric([label, str(index)], value)
    yield log_end
    size = GaugeMetricFamily(
        "kgroupd_coordinator_log_bytes",
        "Bytes of the coordinator log since its last snapshot (0 without --data-dir)",
        value=_coordinator_log_bytes(broker),
    )
    yield size


def _coordinator_log_bytes(broker: Broker) -> int:
    durability = broker.durability
    store = durability.coordinator_store if durability is not None else None
    return store.size if store is not None else 0
