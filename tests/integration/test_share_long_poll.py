"""A share fetch that waits for records (MaxWaitMs) is answered when another member releases
records it could take, not only when new records arrive or its wait ends; a wake-up that
finds nothing to take waits on."""

from __future__ import annotations

import asyncio
import uuid

from kgroupd.broker.net.server import KafkaServer
from tests.support.kafka_wire import WireClient, build_batch, create_topic, produce_request
from tests.support.share_wire import (
    RELEASE,
    ack,
    acquired,
    heartbeat,
    set_group_config,
    share_acknowledge,
    share_fetch,
)

TOPIC, GROUP = "poll-sq", "poll-g"
LONG_WAIT_MS = 600_000  # far longer than the test's deadline: only a wake-up answers it


async def test_a_release_wakes_a_waiting_share_fetch(server: KafkaServer) -> None:
    a, b = uuid.uuid4().hex[:22], uuid.uuid4().hex[:22]
    async with (
        await WireClient.connect(server.port) as wa,
        await WireClient.connect(server.port) as wb,
    ):
        await create_topic(wa, TOPIC, 1, {})
        for i in range(3):
            await wa.request(0, 8, produce_request(TOPIC, 0, build_batch([(None, b"%d" % i, [])])))
        await set_group_config(wa, GROUP, "share.auto.offset.reset", "earliest")
        topic_id = (await heartbeat(wa, GROUP, a, 0, TOPIC))["assignment"]["topic_partitions"][0][
            "topic_id"
        ]
        await heartbeat(wb, GROUP, b, 0, TOPIC)
        assert acquired(await share_fetch(wa, GROUP, a, 0, topic_id, [])) == [(0, 2, 1)]
        # b opens its session (nothing to take), then waits
        assert acquired(await share_fetch(wb, GROUP, b, 0, topic_id, [])) == []
        waiting = asyncio.ensure_future(
            share_fetch(wb, GROUP, b, 1, topic_id, [], max_wait_ms=LONG_WAIT_MS)
        )
        await asyncio.sleep(0.2)
        assert not waiting.done()
        # a releases them (ShareAcknowledge: it takes nothing new); b is woken and takes them
        released = await share_acknowledge(wa, GROUP, a, 1, topic_id, [ack(0, 2, RELEASE)])
        assert released["responses"][0]["partitions"][0]["error_code"] == 0
        got = await asyncio.wait_for(waiting, 60)
        assert acquired(got) == [(0, 2, 2)]


async def test_a_wake_up_with_nothing_to_take_waits_on(server: KafkaServer) -> None:
    a, b = uuid.uuid4().hex[:22], uuid.uuid4().hex[:22]
    group = GROUP + "-2"
    async with (
        await WireClient.connect(server.port) as wa,
        await WireClient.connect(server.port) as wb,
    ):
        await create_topic(wa, TOPIC + "-2", 1, {})
        topic = TOPIC + "-2"
        await wa.request(0, 8, produce_request(topic, 0, build_batch([(None, b"x", [])])))
        await set_group_config(wa, group, "share.auto.offset.reset", "earliest")
        topic_id = (await heartbeat(wa, group, a, 0, topic))["assignment"]["topic_partitions"][0][
            "topic_id"
        ]
        await heartbeat(wb, group, b, 0, topic)
        assert acquired(await share_fetch(wa, group, a, 0, topic_id, [])) == [(0, 0, 1)]
        assert acquired(await share_fetch(wb, group, b, 0, topic_id, [])) == []
        waiting = asyncio.ensure_future(
            share_fetch(wb, group, b, 1, topic_id, [], max_wait_ms=LONG_WAIT_MS)
        )
        await asyncio.sleep(0.2)
        # a releases the record and takes it again in the same ShareFetch: b, woken, finds
        # nothing to take and goes on waiting
        again = await share_fetch(wa, group, a, 1, topic_id, [ack(0, 0, RELEASE)])
        assert acquired(again) == [(0, 0, 2)]
        await asyncio.sleep(0.2)
        assert not waiting.done()
        # a new record ends b's wait
        await wa.request(0, 8, produce_request(topic, 0, build_batch([(None, b"y", [])])))
        got = await asyncio.wait_for(waiting, 60)
        assert acquired(got) == [(1, 1, 1)]
