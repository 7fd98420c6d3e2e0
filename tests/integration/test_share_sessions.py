"""Share sessions as Kafka keeps them (ShareSessionCache): a session belongs to the connection
that opened it, and when that connection closes the session goes and its member's records are
available again at once (not after their locks); at most --group-share-max-share-sessions
sessions (SHARE_SESSION_LIMIT_REACHED beyond). share.renew.acknowledge.enable=false refuses
RENEW (INVALID_RECORD_STATE, nothing changed); a renewing ShareFetch must ask for nothing. A
share group's id is not a classic or consumer group's, nor theirs a share group's."""

from __future__ import annotations

import uuid

from kgroupd.broker.net.server import KafkaServer
from kgroupd.broker.testing.brokers import running_server
from tests.support.kafka_wire import WireClient, build_batch, create_topic, produce_request
from tests.support.share_wire import (
    ACCEPT,
    ack,
    acquired,
    heartbeat,
    set_group_config,
    share_fetch,
)

TOPIC = "sess"
RENEW = 4
INVALID_REQUEST, INCONSISTENT_GROUP_PROTOCOL, GROUP_ID_NOT_FOUND = 42, 23, 69
INVALID_RECORD_STATE, SHARE_SESSION_NOT_FOUND, SHARE_SESSION_LIMIT_REACHED = 121, 122, 133


async def setup(wire: WireClient, group: str, records: int = 4) -> uuid.UUID:
    await create_topic(wire, TOPIC, 1, {})
    batch = build_batch([(None, b"%d" % i, []) for i in range(records)])
    await wire.request(0, 8, produce_request(TOPIC, 0, batch))
    await set_group_config(wire, group, "share.auto.offset.reset", "earliest")
    joined = await heartbeat(wire, group, "a" * 22, 0, TOPIC)
    return joined["assignment"]["topic_partitions"][0]["topic_id"]


async def test_a_session_ends_with_its_connection_and_its_records_come_back(
    server: KafkaServer,
) -> None:
    a, b = "a" * 22, "b" * 22
    async with await WireClient.connect(server.port) as wire:
        topic_id = await setup(wire, "g")
        await heartbeat(wire, "g", b, 0, TOPIC)
        # the records are locked for 30 s (the default): only a's connection ending
        # gives them back now
        async with await WireClient.connect(server.port) as wire_a:
            assert acquired(await share_fetch(wire_a, "g", a, 0, topic_id, [])) == [(0, 3, 1)]
        # b waits (a long poll) and is woken by the release
        resp = await share_fetch(wire, "g", b, 0, topic_id, [], max_wait_ms=20_000)
        assert acquired(resp) == [(0, 3, 2)]
        # a's session is gone: its next epoch is unknown; epoch 0 opens a new one
        resp = await share_fetch(wire, "g", a, 1, topic_id, [])
        assert resp["error_code"] == SHARE_SESSION_NOT_FOUND
        assert acquired(await share_fetch(wire, "g", a, 0, topic_id, [])) == []
        # b's session, on this connection, goes on
        resp = await share_fetch(wire, "g", b, 1, topic_id, [ack(0, 3, ACCEPT)])
        assert resp["responses"][0]["partitions"][0]["acknowledge_error_code"] == 0


async def test_a_session_reopened_elsewhere_outlives_the_first_connection(
    server: KafkaServer,
) -> None:
    a = "a" * 22
    async with await WireClient.connect(server.port) as wire:
        topic_id = await setup(wire, "g")
        async with await WireClient.connect(server.port) as first:
            assert acquired(await share_fetch(first, "g", a, 0, topic_id, [])) == [(0, 3, 1)]
            # the member opens its session again on another connection (a reconnect):
            # what it holds stays its own (Kafka releases nothing on a new epoch 0)
            assert acquired(await share_fetch(wire, "g", a, 0, topic_id, [])) == []
        # the first connection closed: the session it no longer holds stays, and the member
        # still holds its records
        resp = await share_fetch(wire, "g", a, 1, topic_id, [ack(0, 3, ACCEPT)])
        assert resp["error_code"] == 0
        assert resp["responses"][0]["partitions"][0]["acknowledge_error_code"] == 0


async def test_the_session_cache_is_bounded() -> None:
    members = [c * 22 for c in "abc"]
    async with (
        running_server(log_level="warning", group_share_max_share_sessions=2) as server,
        await WireClient.connect(server.port) as wire,
    ):
        topic_id = await setup(wire, "g")
        for m in members[1:]:
            await heartbeat(wire, "g", m, 0, TOPIC)
        async with await WireClient.connect(server.port) as other:
            for m in members[:2]:
                assert (await share_fetch(other, "g", m, 0, topic_id, []))["error_code"] == 0
            resp = await share_fetch(wire, "g", members[2], 0, topic_id, [])
            assert resp["error_code"] == SHARE_SESSION_LIMIT_REACHED
            # a member's own session is replaced, not counted twice
            assert (await share_fetch(wire, "g", members[0], 0, topic_id, []))["error_code"] == 0
        # the other connection closed: b's session went with it, so c's fits
        assert (await share_fetch(wire, "g", members[2], 0, topic_id, []))["error_code"] == 0


def renew_request(group: str, member: str, epoch: int, topic_id: uuid.UUID) -> dict:
    return {
        "group_id": group,
        "member_id": member,
        "share_session_epoch": epoch,
        "is_renew_ack": True,
        "topics": [
            {
                "topic_id": topic_id,
                "partitions": [
                    {
                        "partition_index": 0,
                        "acknowledgement_batches": [
                            {"first_offset": 0, "last_offset": 3, "acknowledge_types": [RENEW]}
                        ],
                    }
                ],
            }
        ],
    }


async def test_renew_needs_the_group_to_allow_it(server: KafkaServer) -> None:
    a = "a" * 22
    async with await WireClient.connect(server.port) as wire:
        topic_id = await setup(wire, "g")
        assert acquired(await share_fetch(wire, "g", a, 0, topic_id, [])) == [(0, 3, 1)]
        resp = await wire.request(79, 2, renew_request("g", a, 1, topic_id))
        assert resp["responses"][0]["partitions"][0]["error_code"] == 0  # allowed (default)
        await set_group_config(wire, "g", "share.renew.acknowledge.enable", "false")
        resp = await wire.request(79, 2, renew_request("g", a, 2, topic_id))
        assert resp["error_code"] == 0
        assert resp["responses"][0]["partitions"][0]["error_code"] == INVALID_RECORD_STATE
        # a renewing fetch asks for nothing: refused whole
        fetch = renew_request("g", a, 3, topic_id) | {
            "max_wait_ms": 0,
            "min_bytes": 0,
            "max_bytes": 1 << 20,
            "max_records": 100,
            "batch_size": 100,
            "forgotten_topics_data": [],
        }
        resp = await wire.request(78, 2, fetch)
        assert resp["error_code"] == INVALID_REQUEST
        # nothing changed: a still holds all four
        resp = await share_fetch(wire, "g", a, 3, topic_id, [ack(0, 3, ACCEPT)])
        assert resp["responses"][0]["partitions"][0]["acknowledge_error_code"] == 0


async def test_group_types_do_not_share_ids(server: KafkaServer) -> None:
    async with await WireClient.connect(server.port) as wire:
        await setup(wire, "shared")
        join = {
            "group_id": "shared",
            "session_timeout_ms": 10_000,
            "rebalance_timeout_ms": 10_000,
            "member_id": "",
            "group_instance_id": None,
            "protocol_type": "consumer",
            "protocols": [{"name": "range", "metadata": b""}],
        }
        resp = await wire.request(11, 5, join)
        assert (resp["error_code"], resp["member_id"]) == (INCONSISTENT_GROUP_PROTOCOL, "")
        body = {
            "group_id": "shared",
            "member_id": "m" * 22,
            "member_epoch": 0,
            "rebalance_timeout_ms": 10_000,
            "subscribed_topic_names": [TOPIC],
            "topic_partitions": [],
        }
        resp = await wire.request(68, 1, body)
        assert (resp["error_code"], resp["error_message"]) == (
            GROUP_ID_NOT_FOUND,
            "Group shared is not a consumer group.",
        )
        # and the other way: a consumer group's id is no share group's
        assert (await wire.request(68, 1, body | {"group_id": "cg"}))["error_code"] == 0
        resp = await heartbeat(wire, "cg", "s" * 22, 0, TOPIC)
        assert (resp["error_code"], resp["error_message"]) == (
            GROUP_ID_NOT_FOUND,
            "Group cg is not a share group.",
        )
        # the share group is untouched
        assert (await heartbeat(wire, "shared", "t" * 22, 0, TOPIC))["error_code"] == 0
