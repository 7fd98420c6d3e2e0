"""Client quotas (issue 29): DescribeClientQuotas and AlterClientQuotas with Kafka 4.3's
checks, kept in ``quotas.json`` under ``--data-dir``; produce and fetch byte-rate quotas
enforced as Kafka enforces them (KIP-219): the answer carries ``throttle_time_ms``, a fetch
over its quota is answered empty, and the connection reads nothing more until the time is
over, while other clients are served. The Java Admin's alterClientQuotas/describeClientQuotas
run in ``tests/java/KgroupdClusterCheck.java`` (test_cluster_apis.py); confluent-kafka's
producer reports the throttle it was given."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import pytest

from kgroupd.broker.net.server import KafkaServer
from kgroupd.broker.testing import running_server
from tests.support.kafka_wire import (
    WireClient,
    build_batch,
    create_topic,
    encode_request,
    fetch_request,
    only_partition,
    produce_request,
)

INVALID_REQUEST, UNSUPPORTED_VERSION = 42, 35


def _entity(**names: str | None) -> list[dict[str, Any]]:
    return [{"entity_type": k.replace("_", "-"), "entity_name": v} for k, v in names.items()]


def _alter(entity: list[dict[str, Any]], *ops: tuple[str, float | None]) -> dict[str, Any]:
    return {
        "entity": entity,
        "ops": [{"key": k, "value": 0.0 if v is None else v, "remove": v is None} for k, v in ops],
    }


async def _set(wire: WireClient, *entries: dict[str, Any], validate_only: bool = False) -> Any:
    answer = await wire.request(49, 1, {"entries": list(entries), "validate_only": validate_only})
    return [(e["error_code"], e["error_message"]) for e in answer["entries"]]


async def _describe(
    wire: WireClient, *components: tuple[str, int, str | None], strict: bool = False
) -> Any:
    body = {
        "components": [{"entity_type": t, "match_type": m, "match": n} for t, m, n in components],
        "strict": strict,
    }
    answer = await wire.request(48, 1, body)
    if answer["error_code"]:
        return answer["error_code"], answer["error_message"]
    found = [
        (
            tuple((d["entity_type"], d["entity_name"]) for d in e["entity"]),
            {v["key"]: v["value"] for v in e["values"]},
        )
        for e in answer["entries"]
    ]
    return sorted(found, key=repr)


async def test_alter_and_describe_client_quotas_as_kafka(server: KafkaServer) -> None:
    async with await WireClient.connect(server.port) as wire:
        assert (
            await _set(
                wire,
                _alter(_entity(user="alice"), ("producer_byte_rate", 1024.0)),
                _alter(_entity(user="alice", client_id=None), ("request_percentage", 12.5)),
                _alter(_entity(client_id="app"), ("consumer_byte_rate", 2048.0)),
                _alter(_entity(ip="10.0.0.1"), ("connection_creation_rate", 5.0)),
            )
            == [(0, None)] * 4
        )
        refused = await _set(
            wire,
            _alter(_entity(user="bob"), ("producer_byte_rate", 1.5)),
            _alter(_entity(user="carol"), ("producer_byte_rate", -1.0)),
            _alter(_entity(user="dave"), ("no_such_quota", 1.0)),
            _alter(_entity(user="erin", ip="10.0.0.2"), ("producer_byte_rate", 1.0)),
            _alter(_entity(ip="10.0.0.3"), ("producer_byte_rate", 1.0)),
            _alter(_entity(group="g"), ("producer_byte_rate", 1.0)),
            _alter(_entity(user=""), ("producer_byte_rate", 1.0)),
            _alter([], ("producer_byte_rate", 1.0)),
        )
        checked = await _set(
            wire, _alter(_entity(user="frank"), ("producer_byte_rate", 5.0)), validate_only=True
        )
        everything = await _describe(wire)
        alice = await _describe(wire, ("user", 0, "alice"))
        alice_only = await _describe(wire, ("user", 0, "alice"), strict=True)
        defaults = await _describe(wire, ("client-id", 1, None))
        any_client = await _describe(wire, ("client-id", 2, None))
        bad_type = await _describe(wire, ("group", 2, None))
        mixed = await _describe(wire, ("ip", 2, None), ("user", 2, None))
        assert await _set(wire, _alter(_entity(user="alice"), ("producer_byte_rate", None))) == [
            (0, None)
        ]
        after_removal = await _describe(wire, ("user", 0, "alice"), strict=True)
    assert [code for code, _ in refused] == [INVALID_REQUEST] * 8
    assert [message for _, message in refused] == [
        "producer_byte_rate cannot be a fractional value.",
        "Quota producer_byte_rate must be greater than 0",
        "Invalid configuration key no_such_quota",
        "Invalid quota entity combination, IP entity shouldnot be combined with User or ClientId",
        "Invalid configuration key producer_byte_rate",
        "Unhandled client quota entity type: group",
        "Empty user not supported",
        "Invalid empty client quota entity",
    ]
    assert checked == [(0, None)]
    assert everything == [
        ((("client-id", "app"),), {"consumer_byte_rate": 2048.0}),
        ((("client-id", None), ("user", "alice")), {"request_percentage": 12.5}),
        ((("ip", "10.0.0.1"),), {"connection_creation_rate": 5.0}),
        ((("user", "alice"),), {"producer_byte_rate": 1024.0}),
    ]
    assert alice == [everything[1], everything[3]]
    assert alice_only == [everything[3]]
    assert defaults == [everything[1]]
    assert any_client == [everything[0], everything[1]]
    assert bad_type == (UNSUPPORTED_VERSION, "Unsupported entity type group")
    assert mixed == (
        INVALID_REQUEST,
        "Invalid entity filter component combination. IP filter component should not be "
        "used with user or clientId filter component.",
    )
    assert after_removal == []


async def test_quotas_survive_a_restart_with_a_data_dir(tmp_path: Path) -> None:
    async with (
        running_server(log_level="warning", data_dir=str(tmp_path)) as server,
        await WireClient.connect(server.port) as wire,
    ):
        await _set(wire, _alter(_entity(user=None), ("consumer_byte_rate", 4096.0)))
    assert json.loads((tmp_path / "quotas.json").read_text())["entities"]
    async with (
        running_server(log_level="warning", data_dir=str(tmp_path)) as server,
        await WireClient.connect(server.port) as wire,
    ):
        assert await _describe(wire) == [((("user", None),), {"consumer_byte_rate": 4096.0})]


def _connection(server: KafkaServer, client_id: str) -> Any:
    (conn,) = [c for c in server.connections if c.client_id == client_id]
    return conn


async def test_a_producer_over_its_quota_is_throttled_and_muted(server: KafkaServer) -> None:
    quota = 1000.0
    async with await WireClient.connect(server.port, client_id="admin") as admin:
        await create_topic(admin, "quota-in", 1)
        await _set(admin, _alter(_entity(client_id="slow"), ("producer_byte_rate", quota)))
    batch = build_batch([(None, b"x" * 20_000, [])])
    body = produce_request("quota-in", 0, batch)
    size = len(encode_request(0, 9, 1, body, "slow")) - 4  # the request as Kafka counts it
    async with (
        await WireClient.connect(server.port, client_id="slow") as slow,
        await WireClient.connect(server.port, client_id="fast") as fast,
    ):
        answer = await slow.request(0, 9, body)
        # the bytes are taken, the client told to wait: (rate - quota) / quota * 10 s window
        assert only_partition(answer)["error_code"] == 0
        expected = round((size * 1000 / 10_000 - quota) / quota * 10_000)
        assert answer["throttle_time_ms"] == expected > 0
        # the slow connection reads nothing more until then; others are served
        assert _connection(server, "slow").mute.until > time.monotonic()
        await slow.send(18, 0, {})
        served = await fast.request(0, 9, produce_request("quota-in", 0, batch))
        assert (only_partition(served)["error_code"], served["throttle_time_ms"]) == (0, 0)
        assert _connection(server, "slow").mute.until > time.monotonic()


async def test_a_fetch_over_its_quota_is_answered_empty(server: KafkaServer) -> None:
    async with await WireClient.connect(server.port, client_id="admin") as admin:
        await create_topic(admin, "quota-out", 1)
        for _ in range(3):
            batch = build_batch([(None, b"y" * 15_000, [])])
            resp = await admin.request(0, 9, produce_request("quota-out", 0, batch))
            assert only_partition(resp)["error_code"] == 0
        await _set(admin, _alter(_entity(client_id="reader"), ("consumer_byte_rate", 1000.0)))
        free = await admin.request(1, 12, fetch_request("quota-out", 0, 0))
    async with await WireClient.connect(server.port, client_id="reader") as reader:
        throttled = await reader.request(1, 12, fetch_request("quota-out", 0, 0))
    assert len(free["responses"][0]["partitions"][0]["records"]) > 45_000
    assert free["throttle_time_ms"] == 0
    # at most the quota's 10 s of bytes is read (the first batch always), and that is over
    # the quota: nothing is sent, the bytes not counted, the client told to wait
    assert throttled["responses"] == [] and throttled["throttle_time_ms"] > 0


async def test_confluent_producer_is_told_to_slow_down(server: KafkaServer) -> None:
    from confluent_kafka import Producer

    async with await WireClient.connect(server.port, client_id="admin") as admin:
        await create_topic(admin, "quota-ck", 1)
        await _set(admin, _alter(_entity(client_id="ck-slow"), ("producer_byte_rate", 5000.0)))
    stats: list[dict[str, Any]] = []
    producer = Producer(
        {
            "bootstrap.servers": f"127.0.0.1:{server.port}",
            "client.id": "ck-slow",
            "linger.ms": 0,
            "statistics.interval.ms": 100,
            "stats_cb": lambda raw: stats.append(json.loads(raw)),
        }
    )

    def produce() -> int:
        for _ in range(6):
            producer.produce("quota-ck", b"z" * 10_000)
        left = producer.flush(60)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not _throttled(stats):
            producer.poll(0.1)
        return left

    assert await asyncio.to_thread(produce) == 0
    assert _throttled(stats) > 0


def _throttled(stats: list[dict[str, Any]]) -> int:
    """The largest throttle time librdkafka reported for a broker."""
    return max(
        (b["throttle"]["max"] for s in stats for b in s["brokers"].values() if b["nodeid"] >= 0),
        default=0,
    )


async def test_request_time_quota_throttles_a_busy_client(server: KafkaServer) -> None:
    """request_percentage: the broker's time spent on the client's requests, as a share of
    one thread; the throttle is bounded by one quota window (1 s), as Kafka's."""
    async with await WireClient.connect(server.port, client_id="admin") as admin:
        await _set(admin, _alter(_entity(client_id="busy"), ("request_percentage", 0.001)))
    metadata = {"topics": None, "allow_auto_topic_creation": False}
    async with (
        await WireClient.connect(server.port, client_id="busy") as busy,
        await WireClient.connect(server.port, client_id="idle") as idle,
    ):
        throttles = [(await busy.request(3, 12, metadata))["throttle_time_ms"]]
        while not throttles[-1] and len(throttles) < 200:
            throttles.append((await busy.request(3, 12, metadata))["throttle_time_ms"])
        assert 0 < throttles[-1] <= 1000, throttles
        assert _connection(server, "busy").mute.until > 0
        assert (await idle.request(3, 12, metadata))["throttle_time_ms"] == 0


async def test_request_time_quota_throttles_hand_encoded_answers(server: KafkaServer) -> None:
    """The hot requests' hand-encoded answers (Heartbeat, OffsetCommit) and ApiVersions' cached
    one carry the request quota's throttle time too, not 0 while the connection is muted."""
    async with await WireClient.connect(server.port, client_id="admin") as admin:
        await _set(admin, _alter(_entity(client_id="busy-hot"), ("request_percentage", 0.001)))
    beat = {"group_id": "q-group", "generation_id": 1, "member_id": "m"}
    commit = {
        "group_id": "q-group",
        "generation_id_or_member_epoch": -1,
        "member_id": "",
        "topics": [{"name": "q-none", "partitions": [{"partition_index": 0}]}],
    }
    async with await WireClient.connect(server.port, client_id="busy-hot") as busy:
        for api_key, version, body in (
            (12, 4, beat),
            (12, 1, beat),
            (8, 8, commit),
            (8, 3, commit),
            # ApiVersions' answer is encoded once per version: not while a quota is on
            (18, 3, {"client_software_name": "t", "client_software_version": "1"}),
            (18, 1, {}),
        ):
            throttles = [(await busy.request(api_key, version, body))["throttle_time_ms"]]
            while not throttles[-1] and len(throttles) < 200:
                throttles.append((await busy.request(api_key, version, body))["throttle_time_ms"])
            assert 0 < throttles[-1] <= 1000, (api_key, version, throttles)
            assert _connection(server, "busy-hot").mute.until > 0


async def test_partition_mutations_are_throttled(server: KafkaServer) -> None:
    """controller_mutation_rate (KIP-599): CreateTopics v6+ refuses a topic while the
    client's bucket is empty; DeleteTopics v4 (permissive) deletes and throttles."""
    async with await WireClient.connect(server.port, client_id="admin") as admin:
        await _set(admin, _alter(_entity(client_id="creator"), ("controller_mutation_rate", 1.0)))

    def topic(name: str, partitions: int) -> dict[str, Any]:
        return {
            "name": name,
            "num_partitions": partitions,
            "replication_factor": 1,
            "assignments": [],
            "configs": [],
        }

    async with await WireClient.connect(server.port, client_id="creator") as creator:
        created = await creator.request(
            19,
            7,
            {
                "topics": [topic("mut-a", 8), topic("mut-b", 8), topic("mut-c", 1)],
                "timeout_ms": 10_000,
                "validate_only": False,
            },
        )
    async with await WireClient.connect(server.port, client_id="creator") as again:
        deleted = await again.request(20, 4, {"topic_names": ["mut-a"], "timeout_ms": 10_000})
    codes = [(t["name"], t["error_code"], t["error_message"]) for t in created["topics"]]
    # a burst of 10 partitions: a takes 8, b finds 2 left and takes 8, c finds -6
    assert codes[:2] == [("mut-a", 0, None), ("mut-b", 0, None)]
    assert codes[2] == ("mut-c", 89, "The throttling quota has been exceeded.")
    assert 5000 < created["throttle_time_ms"] <= 6000
    assert server.broker.topics.get("mut-c") is None
    assert deleted["responses"][0]["error_code"] == 0 and server.broker.topics.get("mut-a") is None
    assert 13_000 < deleted["throttle_time_ms"] <= 14_000


async def test_connections_over_an_ips_rate_are_held_then_closed(server: KafkaServer) -> None:
    """connection_creation_rate (KIP-612): a new connection over its IP's rate is not served
    and is closed once its throttle time is over; the IP's own quota beats the default."""
    async with await WireClient.connect(server.port, client_id="admin") as admin:
        await _set(admin, _alter(_entity(ip=None), ("connection_creation_rate", 1000.0)))
        await _set(admin, _alter(_entity(ip="127.0.0.1"), ("connection_creation_rate", 1.0)))
    # the admin's connection was taken before the quota: 10 more fit 1/s over a 10 s window
    opened = [await WireClient.connect(server.port, client_id=f"c{i}") for i in range(11)]
    try:
        answers = [await c.request(18, 0, {}) for c in opened[:10]]
        assert all(a["error_code"] == 0 for a in answers)
        held = opened[10]
        await held.send(18, 0, {})
        with pytest.raises(asyncio.IncompleteReadError):  # closed unanswered
            await held.read_frame()
        assert len(server.connections) == 10
    finally:
        for c in opened:
            await c.close()
