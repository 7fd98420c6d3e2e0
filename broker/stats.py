"""What the hot path counts for ``/metrics``: plain ints, dicts and bucket lists, one dict
update per request, read by ``kgroupd.broker.http.metrics`` when scraped. No prometheus-client
here: a broker that serves no metrics never imports it.

The coordinator tells of rebalances and commits through its plain ``GroupEvents`` hook, which
``BrokerStats`` implements; the coordinator imports nothing from here.
"""

from __future__ import annotations

import time
from bisect import bisect_left

from kgroupd.broker.coordinator.events import GroupEvents, rebalance_reason

OTHER = "__other__"
REQUEST_BUCKETS: tuple[float, ...] = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01)
REQUEST_BUCKETS += (0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
FIRST_BOUND = REQUEST_BUCKETS[0]
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
        # (kgroupd.broker.net.hot.hot_answer does the same inline: keep them alike)
        hist = self.requests.get(api_key << 8 | version)
        if hist is None or error:
            self.request_rare(api_key, version, error, seconds)
            return
        # most answers take under the first bound (100 µs): no search for them
        hist.counts[0 if seconds < FIRST_BOUND else bisect_left(REQUEST_BUCKETS, seconds)] += 1
        hist.total += seconds

    def request_rare(self, api_key: int, version: int, error: int, seconds: float) -> None:
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
