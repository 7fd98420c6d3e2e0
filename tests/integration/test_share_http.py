"""Share groups on the HTTP listener: /api/groups and /api/groups/{id} show a share group's
members with their partitions and, per share partition, its start offset, lag and in-flight
records by state with their delivery counts; /metrics counts share groups and their records."""

from __future__ import annotations

import uuid
from typing import Any

import aiohttp

from kgroupd.broker.net.server import KafkaServer
from kgroupd.broker.testing import running_server
from tests.support.kafka_wire import WireClient, build_batch, create_topic, produce_request
from tests.support.share_wire import (
    ACCEPT,
    REJECT,
    RELEASE,
    ack,
    acquired,
    heartbeat,
    set_group_config,
    share_fetch,
)

TOPIC, GROUP = "web-sq", "web-g"


async def get(server: KafkaServer, path: str) -> tuple[int, Any]:
    assert server.http is not None
    async with (
        aiohttp.ClientSession() as http,
        http.get(f"http://127.0.0.1:{server.http.port}{path}") as resp,
    ):
        if path == "/metrics":
            return resp.status, await resp.text()
        return resp.status, await resp.json(content_type=None)


async def test_share_groups_on_the_api_and_in_the_metrics() -> None:
    member = uuid.uuid4().hex[:22]
    async with (
        running_server(log_level="warning") as server,
        await WireClient.connect(server.port) as wire,
    ):
        await create_topic(wire, TOPIC, 1, {})
        for i in range(6):
            await wire.request(
                0, 8, produce_request(TOPIC, 0, build_batch([(None, b"%d" % i, [])]))
            )
        await set_group_config(wire, GROUP, "share.auto.offset.reset", "earliest")
        hb = await heartbeat(wire, GROUP, member, 0, TOPIC)
        topic_id = hb["assignment"]["topic_partitions"][0]["topic_id"]
        assert acquired(await share_fetch(wire, GROUP, member, 0, topic_id, [])) == [(0, 5, 1)]
        acks = [ack(0, 1, ACCEPT), ack(2, 2, REJECT), ack(3, 3, RELEASE)]
        resp = await share_fetch(wire, GROUP, member, 1, topic_id, acks)
        assert acquired(resp) == [(3, 3, 2)]  # released, delivered again
        # (read with the member's connection open: its share session ends with it)

        status, body = await get(server, "/api/groups")
        assert status == 200
        (view,) = [g for g in body["groups"] if g["group"] == GROUP]
        assert (view["type"], view["state"], view["protocol_type"]) == ("share", "Stable", "share")
        (m,) = view["members"]
        assert m["member_id"] == member
        assert m["partitions"] == [{"topic": TOPIC, "partition": 0}]
        (row,) = view["offsets"]
        # 0-2 settled: start 3; 3 (twice delivered), 4, 5 acquired
        assert (row["start_offset"], row["log_end"], row["lag"]) == (3, 6, 3)
        assert (row["in_flight"], row["acquired"], row["available"]) == (3, 3, 0)
        assert row["delivery_counts"] == {"1": 2, "2": 1}
        assert view["lag"] == 3
        status, one = await get(server, f"/api/groups/{GROUP}")
        assert (status, one) == (200, view)

        status, text = await get(server, "/metrics")
        assert status == 200
        lines = set(text.splitlines())
        assert 'kgroupd_groups{state="Stable",type="share"} 1.0' in lines
        labels = f'group="{GROUP}",partition="0",topic="{TOPIC}"'
        assert f"kgroupd_share_partition_lag{{{labels}}} 3.0" in lines
        acquired_labels = f'group="{GROUP}",partition="0",state="acquired",topic="{TOPIC}"'
        assert f"kgroupd_share_partition_records{{{acquired_labels}}} 3.0" in lines
        assert 'kgroupd_share_acknowledgements_total{type="accept"} 2.0' in lines
        assert 'kgroupd_share_acknowledgements_total{type="reject"} 1.0' in lines
        assert "kgroupd_share_records_delivered_total 7.0" in lines
