"""Client quotas as Kafka's ClientQuotaManager applies them (``kgroupd.broker.throttle``), on a
manual clock: which entity's quota a client gets and who shares its measure, Kafka's Rate
over 11 one-second samples, and the throttle time ``(rate - quota) / quota * window``."""

from __future__ import annotations

from kgroupd.broker.quotas import PRODUCE, Alteration, QuotaStore, entity_of
from kgroupd.broker.throttle import Rate, Throttle


def _store(*quotas: tuple[dict[str, str | None], float]) -> QuotaStore:
    store = QuotaStore()
    results = store.alter(
        [Alteration(entity_of(e.items()), [(PRODUCE, v, False)]) for e, v in quotas], False
    )
    assert all(r is None for r in results.values()), results
    return store


def test_precedence_and_shared_measures_follow_kafka() -> None:
    store = _store(
        ({"user": "alice", "client-id": "app"}, 100.0),
        ({"user": "alice"}, 200.0),
        ({"user": None, "client-id": None}, 300.0),
        ({"user": None}, 400.0),
        ({"client-id": "tool"}, 500.0),
        ({"client-id": None}, 600.0),
    )
    throttle = Throttle(store)
    q = throttle.quota
    assert q(PRODUCE, "alice", "app") == ((PRODUCE, "alice", "app"), 100.0)
    assert q(PRODUCE, "alice", "other") == ((PRODUCE, "alice", ""), 200.0)  # shared by alice
    # a user with no quota of its own: the default user and default client's, per client
    assert q(PRODUCE, "bob", "tool") == ((PRODUCE, "bob", "tool"), 300.0)
    store.alter(
        [Alteration(entity_of({"user": None, "client-id": None}.items()), [(PRODUCE, 0, True)])],
        False,
    )
    assert q(PRODUCE, "bob", "tool") == ((PRODUCE, "bob", ""), 400.0)  # the default user's
    store.alter([Alteration(entity_of({"user": None}.items()), [(PRODUCE, 0, True)])], False)
    assert q(PRODUCE, "bob", "tool") == ((PRODUCE, "", "tool"), 500.0)  # the client id's
    assert q(PRODUCE, "bob", "x") == ((PRODUCE, "", "x"), 600.0)  # the default client's
    assert not throttle.enabled("consumer_byte_rate")
    assert throttle.enabled(PRODUCE)


def test_the_rate_window_grows_to_eleven_samples() -> None:
    rate = Rate()
    rate.record(10_000, 0)
    assert rate.rate(0) == (1000.0, 10_000)  # one sample counts as ten full windows
    rate.record(10_000, 5_500)
    # 5 full windows elapsed: counted as 10 (Kafka's minimum of samples - 1)
    assert rate.rate(5_500) == (20_000 * 1000 / 10_500, 10_500)
    assert rate.rate(10_900) == (20_000 * 1000 / 10_900, 10_900)
    # the first sample is 11 s old: purged
    assert rate.rate(11_000) == (10_000 * 1000 / 10_500, 10_500)


def test_throttle_time_is_what_brings_the_rate_back_to_the_quota() -> None:
    throttle = Throttle(_store(({"client-id": "slow"}, 1000.0)))
    assert throttle.record(PRODUCE, "ANONYMOUS", "slow", 5_000, 0) == 0  # 500 B/s over 10 s
    # 25 kB in 10 s: 2500 B/s, 1.5 times over the quota, so 15 s more of window
    assert throttle.record(PRODUCE, "ANONYMOUS", "slow", 20_000, 0) == 15_000
    assert throttle.record(PRODUCE, "ANONYMOUS", "fast", 10**9, 0) == 0  # no quota
    throttle.unrecord(PRODUCE, "ANONYMOUS", "slow", 20_000, 0)
    assert throttle.record(PRODUCE, "ANONYMOUS", "slow", 1, 0) == 0
    assert throttle.max_in_window(PRODUCE, "ANONYMOUS", "slow") == 10_000.0
    assert throttle.max_in_window(PRODUCE, "ANONYMOUS", "other") is None


def test_partition_mutations_use_kafkas_token_bucket() -> None:
    from kgroupd.broker.quotas import MUTATION

    store = QuotaStore()
    store.alter(
        [Alteration(entity_of({"client-id": "c"}.items()), [(MUTATION, 2.0, False)])], False
    )
    throttle = Throttle(store)
    T = 1_800_000_000_000  # epoch ms: a new bucket starts full
    # a full bucket holds 10 s of the quota: 20 partitions
    assert throttle.mutate(MUTATION, "u", "c", 15, T + 1000, strict=True) == (True, 0)
    assert throttle.mutate(MUTATION, "u", "c", 15, T + 1000, strict=True) == (True, 0)  # 5 left
    # now at -10: refused while below zero, for the time to refill to zero
    assert throttle.mutate(MUTATION, "u", "c", 1, T + 1000, strict=True) == (False, 5000)
    assert throttle.mutate(MUTATION, "u", "c", 1, T + 4000, strict=True) == (False, 2000)
    assert throttle.mutate(MUTATION, "u", "c", 1, T + 6000, strict=True) == (True, 0)
    # permissive: always taken, throttled while below zero
    assert throttle.mutate(MUTATION, "u", "c", 4, T + 6000, strict=False) == (True, 2500)
    assert throttle.mutate(MUTATION, "u", "other", 99, T + 6000, strict=True) == (True, 0)
