"""Bad share-group input on the wire gets Kafka's error codes, and the connection and the group
go on: a share session that does not exist (SHARE_SESSION_NOT_FOUND), a wrong session epoch
(INVALID_SHARE_SESSION_EPOCH), acknowledgements in an initial fetch (INVALID_REQUEST),
acknowledging records not acquired or held by another member (INVALID_RECORD_STATE, nothing
changed), unknown members and stale member epochs (UNKNOWN_MEMBER_ID, FENCED_MEMBER_EPOCH)."""

from __future__ import annotations

import uuid

from kgroupd.broker.net.server import KafkaServer
from tests.support.kafka_wire import WireClient, build_batch, create_topic, produce_request
from tests.support.share_wire import (
    ACCEPT,
    ack,
    acquired,
    heartbeat,
    set_group_config,
    share_acknowledge,
    share_fetch,
)

TOPIC, GROUP = "bad-sq", "bad-g"
INVALID_REQUEST, UNKNOWN_MEMBER_ID, FENCED_MEMBER_EPOCH = 42, 25, 110
INVALID_RECORD_STATE, SHARE_SESSION_NOT_FOUND, INVALID_SHARE_SESSION_EPOCH = 121, 122, 123


def ack_error(resp: dict) -> int:
    return int(resp["responses"][0]["partitions"][0]["acknowledge_error_code"])


async def test_bad_share_input_gets_kafkas_errors(server: KafkaServer) -> None:
    a, b = uuid.uuid4().hex[:22], uuid.uuid4().hex[:22]
    async with await WireClient.connect(server.port) as wire:
        await create_topic(wire, TOPIC, 1, {})
        for i in range(4):
            await wire.request(
                0, 8, produce_request(TOPIC, 0, build_batch([(None, b"%d" % i, [])]))
            )
        await set_group_config(wire, GROUP, "share.auto.offset.reset", "earliest")
        joined = await heartbeat(wire, GROUP, a, 0, TOPIC)
        topic_id = joined["assignment"]["topic_partitions"][0]["topic_id"]
        await heartbeat(wire, GROUP, b, 0, TOPIC)

        # no session yet: only epoch 0 opens one
        resp = await share_fetch(wire, GROUP, a, 5, topic_id, [])
        assert resp["error_code"] == SHARE_SESSION_NOT_FOUND
        resp = await share_fetch(wire, GROUP, a, 0, topic_id, [ack(0, 0, ACCEPT)])
        assert resp["error_code"] == INVALID_REQUEST  # acknowledgements in an initial fetch
        assert acquired(await share_fetch(wire, GROUP, a, 0, topic_id, [])) == [(0, 3, 1)]
        resp = await share_fetch(wire, GROUP, a, 3, topic_id, [])
        assert resp["error_code"] == INVALID_SHARE_SESSION_EPOCH  # the next one is 1
        resp = await share_acknowledge(wire, GROUP, a, 0, topic_id, [ack(0, 0, ACCEPT)])
        assert resp["error_code"] == INVALID_SHARE_SESSION_EPOCH  # ShareAcknowledge never opens

        # b holds nothing: acknowledging a's records is refused and changes nothing
        assert acquired(await share_fetch(wire, GROUP, b, 0, topic_id, [])) == []
        resp = await share_acknowledge(wire, GROUP, b, 1, topic_id, [ack(0, 1, ACCEPT)])
        assert resp["responses"][0]["partitions"][0]["error_code"] == INVALID_RECORD_STATE
        # a acknowledges past what it acquired: refused whole, nothing settled
        resp = await share_fetch(wire, GROUP, a, 1, topic_id, [ack(2, 9, ACCEPT)])
        assert ack_error(resp) == INVALID_RECORD_STATE
        resp = await share_fetch(wire, GROUP, a, 2, topic_id, [ack(0, 3, ACCEPT)])
        assert ack_error(resp) == 0  # all four were still a's

        # membership: an unknown member, a stale epoch, an empty member id
        resp = await heartbeat(wire, GROUP, "nobody", 3)
        assert resp["error_code"] == UNKNOWN_MEMBER_ID
        epoch = (await heartbeat(wire, GROUP, a, joined["member_epoch"]))["member_epoch"]
        resp = await heartbeat(wire, GROUP, a, epoch + 7)
        assert resp["error_code"] == FENCED_MEMBER_EPOCH
        resp = await heartbeat(wire, GROUP, "", 0, TOPIC)
        assert (resp["error_code"], resp["error_message"]) == (
            INVALID_REQUEST,
            "MemberId can't be empty.",
        )
        # the connection and the group go on
        assert (await heartbeat(wire, GROUP, a, epoch))["error_code"] == 0
