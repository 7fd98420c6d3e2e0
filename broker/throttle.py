"""Enforcing client quotas as Kafka's ClientQuotaManager does (KIP-13, KIP-55, KIP-219).

A client's quota is found by Kafka's precedence (user and client id, user and default client,
user, default user and client id, default user and default client, default user, client id,
default client); which entity it came from decides who shares the measure (a user's quota is
shared by all its client ids). Bytes are measured as Kafka's Rate over 11 samples of one
second: a record that takes the rate over the quota gets a throttle time of
``(rate - quota) / quota * window``, the time the rate needs to come back to the quota. The
answer carries it in ``throttle_time_ms`` and the connection reads no request for that long
(Kafka mutes the channel), so one client cannot take the broker.

Produce counts the request's size; a fetch its answer's, and a fetch that would go over the
quota is answered empty, as Kafka answers it (its bytes not counted), with at most
``quota * 10 s`` asked of the log in one fetch.

Partition mutations (``controller_mutation_rate``, KIP-599) are measured as Kafka's
TokenBucket: a bucket of ``quota * 10 s`` tokens, refilled at the quota's rate, each created
or deleted partition taking one; a request finding it below zero is refused (strict: newer
CreateTopics, DeleteTopics and CreatePartitions) or only throttled (older versions), for the
time the bucket needs to come back to zero.

New connections from an IP are measured against its ``connection_creation_rate`` (KIP-612)
over the same samples; one over the quota is not served and is closed once its throttle
time (at most one window) is over, as Kafka's acceptor closes it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kgroupd.broker.quotas import CLIENT_ID, CONNECTION_RATE, IP, USER, Entity, QuotaStore

SAMPLES = 11  # quota.window.num
WINDOW_MS = 1000  # quota.window.size.seconds
IDLE_MS = 3_600_000  # Kafka drops a client's quota sensors after an hour unused
_ABSENT = object()


@dataclass
class Rate:
    """Kafka's Rate over a SampledTotal: samples of [start ms, total]."""

    samples: list[list[float]] = field(default_factory=list)
    current: int = 0
    last_used: float = 0

    def record(self, value: float, now: int) -> None:
        self.last_used = now
        if not self.samples:
            self.samples.append([now, 0.0])
            self.current = 0
        sample = self.samples[self.current]
        if now - sample[0] >= WINDOW_MS:
            self.current = (self.current + 1) % SAMPLES
            if self.current >= len(self.samples):
                self.samples.append([now, 0.0])
            else:
                self.samples[self.current][:] = [now, 0.0]
            sample = self.samples[self.current]
        sample[1] += value

    def window_ms(self, now: int) -> int:
        self._purge(now)
        oldest = min(s[0] for s in self.samples) if self.samples else now
        elapsed = now - oldest
        full = int(elapsed // WINDOW_MS)
        if full < SAMPLES - 1:
            elapsed += (SAMPLES - 1 - full) * WINDOW_MS
        return max(int(elapsed), 1)

    def rate(self, now: int) -> tuple[float, int]:
        """(the rate per second, the window it was measured over in ms)."""
        window = self.window_ms(now)
        return sum(s[1] for s in self.samples) * 1000.0 / window, window

    def _purge(self, now: int) -> None:
        for s in self.samples:
            if now - s[0] >= SAMPLES * WINDOW_MS:
                s[:] = [now, 0.0]


@dataclass
class TokenBucket:
    """Kafka's TokenBucket: tokens left, refilled at the quota's rate up to a burst."""

    tokens: float = 0.0
    last_ms: int = 0
    last_used: float = 0

    def level(self, quota: float, now: int) -> float:
        burst = (SAMPLES - 1) * WINDOW_MS / 1000 * quota
        self.tokens = min(burst, self.tokens + quota * (now - self.last_ms) / 1000)
        self.last_ms = self.last_used = now
        return self.tokens

    def take(self, quota: float, permits: float, now: int) -> float:
        self.level(quota, now)
        self.tokens -= permits
        return self.tokens


# (the quota's key, the user tag, the client id tag): the sensors' identity, as Kafka tags them
SensorKey = tuple[str, str, str]


class Throttle:
    def __init__(self, store: QuotaStore) -> None:
        self.store = store
        self.sensors: dict[SensorKey, Rate] = {}
        self.buckets: dict[SensorKey, TokenBucket] = {}
        self._swept = 0

    def enabled(self, key: str) -> bool:
        """Is a quota of this kind set for anyone? (Kafka records nothing otherwise.)"""
        return key in self.store.keys

    def quota(self, key: str, user: str, client_id: str) -> tuple[SensorKey, float | None]:
        """The sensor measuring this client and its quota (None: unlimited)."""
        quotas = self.store.quotas

        def has(u: object = _ABSENT, c: object = _ABSENT) -> bool:
            return key in quotas.get(_entity(u, c), ())

        tags = (user, client_id)
        if not has(user, client_id) and not has(user, None):
            tags = (user, "")
            if not has(user):
                tags = (user, client_id)
                if not has(None, client_id) and not has(None, None):
                    tags = (user, "") if has(None) else ("", client_id)
        return (key, *tags), self._limit(key, *tags)

    def _limit(self, key: str, user: str, client_id: str) -> float | None:
        quotas = self.store.quotas
        order: list[tuple[object, object]]
        if user and client_id:
            order = [(user, client_id), (user, None), (None, client_id), (None, None)]
        elif user:
            order = [(user, _ABSENT), (None, _ABSENT)]
        elif client_id:
            order = [(_ABSENT, client_id), (_ABSENT, None)]
        else:
            return None
        for u, c in order:
            found = quotas.get(_entity(u, c))
            if found is not None and key in found:
                return found[key]
        return None

    def record(self, key: str, user: str, client_id: str, value: float, now: int) -> int:
        """Record ``value`` for the client; the throttle time in ms it has earned (0: none)."""
        sensor_key, limit = self.quota(key, user, client_id)
        rate = self._sensor(sensor_key, now)
        rate.record(value, now)
        if limit is None:
            return 0
        measured, window = rate.rate(now)
        if measured <= limit:
            return 0
        return round((measured - limit) / limit * window)

    def unrecord(self, key: str, user: str, client_id: str, value: float, now: int) -> None:
        """Take back a recorded value (a throttled fetch returns nothing)."""
        sensor_key, _ = self.quota(key, user, client_id)
        self._sensor(sensor_key, now).record(-value, now)

    def max_in_window(self, key: str, user: str, client_id: str) -> float | None:
        """The most that can be recorded at once without being throttled for sure."""
        _, limit = self.quota(key, user, client_id)
        return None if limit is None else limit * (SAMPLES - 1) * WINDOW_MS / 1000

    def mutate(
        self, key: str, user: str, client_id: str, permits: float, now: int, strict: bool
    ) -> tuple[bool, int]:
        """Take ``permits`` partition mutations: (allowed, throttle time in ms). Strict: refused
        while the bucket is below zero (the mutations that bring it there are allowed)."""
        sensor_key, limit = self.quota(key, user, client_id)
        if limit is None:
            return True, 0
        bucket = self.buckets.get(sensor_key)
        if bucket is None:
            bucket = self.buckets[sensor_key] = TokenBucket()
        if strict:
            tokens = bucket.level(limit, now)
            if tokens < 0:
                return False, round(-tokens / limit * 1000)
            bucket.take(limit, permits, now)
            return True, 0
        tokens = bucket.take(limit, permits, now)
        return True, round(-tokens / limit * 1000) if tokens < 0 else 0

    def accept(self, host: str, now: int) -> int:
        """A new connection from ``host`` against its IP's ``connection_creation_rate``
        (KIP-612: the IP's own quota, else the default IP's): the throttle time in ms (at most
        one window) for which Kafka holds it unserved before closing it; 0: accepted."""
        quotas = self.store.quotas
        limit = quotas.get(((IP, host),), {}).get(CONNECTION_RATE)
        if limit is None:
            limit = quotas.get(((IP, None),), {}).get(CONNECTION_RATE)
        if limit is None:
            return 0
        rate = self._sensor((CONNECTION_RATE, host, ""), now)
        rate.record(1, now)
        measured, window = rate.rate(now)
        if measured <= limit:
            return 0
        rate.record(-1, now)  # not accepted: not counted
        return min(round((measured - limit) / limit * window), WINDOW_MS)

    def _sensor(self, key: SensorKey, now: int) -> Rate:
        rate = self.sensors.get(key)
        if rate is None:
            if len(self.sensors) > 1024 and now - self._swept > 60_000:
                self._swept = now
                for k in [k for k, r in self.sensors.items() if now - r.last_used > IDLE_MS]:
                    del self.sensors[k]
            rate = self.sensors[key] = Rate()
        return rate


def _entity(user: object, client_id: object) -> Entity:
    pairs: list[tuple[str, str | None]] = []
    if client_id is not _ABSENT:
        pairs.append((CLIENT_ID, client_id))  # type: ignore[arg-type]
    if user is not _ABSENT:
        pairs.append((USER, user))  # type: ignore[arg-type]
    return tuple(pairs)
