"""Prometheus metrics: plain counters on the hot path, read at scrape time.

Requests, errors, bytes and fsyncs are counted in plain ints and dicts by ``BrokerStats``
(``kgroupd.broker.stats``: one dict update per request); groups, lag, offsets and connections are
read from the
broker's state when ``/metrics`` is scraped, by ``BrokerCollector`` (a prometheus-client
custom collector). The coordinator tells of rebalances and commits through its plain
``GroupEvents`` hook; it imports nothing from here.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector
from prometheus_client.samples import Sample
from prometheus_client.utils import floatToGoString

from kgroupd.broker.http.share_metrics import share_group_states, share_metrics
from kgroupd.broker.stats import REQUEST_BUCKETS, BrokerStats, Names, PlainHistogram
from kgroupd.protocol.api_names import api_name
from kgroupd.protocol.errors import ErrorCode

if TYPE_CHECKING:
    from kgroupd.broker.state import Broker


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
    for gid, state, n, gen in share_group_states(broker):
        counts[(state, "share")] = counts.get((state, "share"), 0) + 1
        row = per_group.setdefault(s.groups(gid), [0, 0])
        row[0] += n
        row[1] += gen
    for (state, kind), n in sorted(counts.items()):
        groups.add_metric([state, kind], n)
    for label, (n, gen) in sorted(per_group.items()):
        members.add_metric([label], n)
        generation.add_metric([label], gen)
    sums: dict[str, int] = {}
    for (group, _topic, _partition), value in lags.items():
        sums[group] = sums.get(group, 0) + value
    lag = Later(
        "kgroupd_consumergroup_lag",
        "Log end offset minus the group's committed offset",
        ["group", "topic", "partition"],
        lambda: (([g, t, str(p)], v) for (g, t, p), v in sorted(lags.items())),
    )
    lag_sum = Later(
        "kgroupd_consumergroup_lag_sum",
        "A group's lag over its partitions",
        ["group"],
        lambda: (([g], v) for g, v in sorted(sums.items())),
    )
    yield from (groups, members, generation, lag, lag_sum)
    yield from share_metrics(broker, s.groups, s.topics)
    commits = CounterMetricFamily(
        "kgroupd_offset_commits", "Partition offsets committed (OffsetCommit)"
    )
    commits.add_metric([], sum(shard.offsets_committed for shard in broker.coordinator.shards))
    yield commits
    # one list of log ends per topic, copied here; labelled, merged and sorted on the
    # scrape's worker thread (a series per partition: 100,000 of them at 100,000 partitions)
    ends = [
        (s.topics(name), [part.high_watermark for part in t.partitions])
        for name, t in topics.topics.items()
    ]
    yield Later(
        "kgroupd_log_end_offset",
        "The next offset of a partition",
        ["topic", "partition"],
        lambda: _log_ends(ends),
    )
    size = GaugeMetricFamily(
        "kgroupd_coordinator_log_bytes",
        "Bytes of the coordinator log since its last snapshot (0 without --data-dir)",
        value=_coordinator_log_bytes(broker),
    )
    yield size


def _log_ends(ends: list[tuple[str, list[int]]]) -> Iterator[tuple[list[str], float]]:
    """Per (topic label, partition), in that order; topics under one label (``__other__``)
    summed partition by partition. Nothing is made per partition but its row."""
    by_label: dict[str, list[list[int]]] = {}
    for label, values in ends:
        by_label.setdefault(label, []).append(values)
    for label in sorted(by_label):
        lists = by_label[label]
        values = lists[0]
        if len(lists) > 1:
            values = [0] * max(len(v) for v in lists)
            for more in lists:
                for index, value in enumerate(more):
                    values[index] += value
        for index, value in enumerate(values):
            yield [label, str(index)], value


class Later(GaugeMetricFamily):
    """A gauge family whose samples are made as they are read: by the scrape's rendering,
    on a worker thread (``kgroupd.broker.http.listener``), from values the event loop copied
    (``rows``: each sample's label values and value; it must read no broker state). Each
    sample is garbage once written, so 100,000 of them never sit in memory together (nor
    make the collector walk them)."""

    def __init__(
        self,
        name: str,
        documentation: str,
        labels: list[str],
        rows: Callable[[], Iterable[tuple[list[str], float]]],
    ) -> None:
        super().__init__(name, documentation, labels=labels)
        self._rows = rows

    @property
    def samples(self) -> list[Sample]:
        return _Samples(self.name, self._labelnames, self._rows)

    @samples.setter
    def samples(self, value: list[Sample]) -> None:
        pass  # made from the rows each time they are read

    def text(self) -> str:
        """The family in the Prometheus text format, as ``generate_latest`` writes it (label
        names in order, values escaped, ``floatToGoString`` values), one line per row and no
        Sample: 0.16 s instead of 0.55 at 100,000 series (measured, in process)."""
        name = self.name
        doc = self.documentation.replace("\\", r"\\").replace("\n", r"\n")
        names = self._labelnames
        order = sorted(range(len(names)), key=names.__getitem__)
        lines = [f"# HELP {name} {doc}\n# TYPE {name} gauge\n"]
        for values, value in self._rows():
            labels = ",".join(f'{names[i]}="{_escape(values[i])}"' for i in order)
            lines.append(f"{name}{{{labels}}} {floatToGoString(value)}\n")
        return "".join(lines)


def _escape(value: str) -> str:
    if "\\" in value or "\n" in value or '"' in value:
        return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")
    return value


class _Samples(list[Sample]):
    """The samples of a ``Later`` family, made one by one as they are iterated."""

    def __init__(
        self,
        name: str,
        labels: Sequence[str],
        rows: Callable[[], Iterable[tuple[list[str], float]]],
    ) -> None:
        super().__init__()
        self._made = (name, labels, rows)

    def __iter__(self) -> Iterator[Sample]:
        name, labels, rows = self._made
        for values, value in rows():
            yield Sample(name, dict(zip(labels, values, strict=True)), value)


def _coordinator_log_bytes(broker: Broker) -> int:
    durability = broker.durability
    store = durability.coordinator_store if durability is not None else None
    return store.size if store is not None else 0
