"""Share groups under --data-dir survive kill -9 (a real broker process): an accepted or rejected
record is never delivered again, a released one comes back with its delivery count, records
that were only acquired come back; the share group (its members and epochs), the group
configs and the share-partition start offsets are there after the restart; an altered start
offset and a deleted group stay so. Both --fsync always and the default interval."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest

from tests.support.broker_process import broker_process
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

TOPIC = "durable-sq"
GROUP = "durable-g"


async def join(wire: WireClient, member: str) -> uuid.UUID:
    resp = await heartbeat(wire, GROUP, member, 0, TOPIC)
    assert resp["error_code"] == 0, resp
    return resp["assignment"]["topic_partitions"][0]["topic_id"]


async def start_offsets(wire: WireClient) -> list[tuple[int, int]]:
    resp = await wire.request(90, 1, {"groups": [{"group_id": GROUP, "topics": None}]})
    (g,) = resp["groups"]
    assert g["error_code"] == 0, g
    return [(p["partition_index"], p["start_offset"]) for t in g["topics"] for p in t["partitions"]]


async def describe(wire: WireClient) -> dict[str, Any]:
    resp = await wire.request(77, 1, {"group_ids": [GROUP], "include_authorized_operations": False})
    return resp["groups"][0]


async def group_config(wire: WireClient, name: str) -> str:
    resp = await wire.request(
        32,
        4,
        {
            "resources": [
                {"resource_type": 32, "resource_name": GROUP, "configuration_keys": [name]}
            ],
            "include_synonyms": False,
            "include_documentation": False,
        },
    )
    (entry,) = resp["results"][0]["configs"]
    return str(entry["value"])


@pytest.mark.parametrize("fsync", ["always", "interval"])
async def test_acknowledgements_survive_kill_9(tmp_path: Path, fsync: str) -> None:
    member = uuid.uuid4().hex[:22]
    async with broker_process(tmp_path, args=("--fsync", fsync)) as broker:
        await broker.start()
        async with await WireClient.connect(broker.port) as wire:
            await create_topic(wire, TOPIC, 1, {})
            for i in range(10):
                batch = build_batch([(None, b"%d" % i, [])])
                await wire.request(0, 8, produce_request(TOPIC, 0, batch))
            await set_group_config(wire, GROUP, "share.auto.offset.reset", "earliest")
            topic_id = await join(wire, member)
            assert acquired(await share_fetch(wire, GROUP, member, 0, topic_id, [])) == [(0, 9, 1)]
            # accept 0-2, reject 3, release 4; 5-9 stay acquired
            acks = [ack(0, 2, ACCEPT), ack(3, 3, REJECT), ack(4, 4, RELEASE)]
            resp = await share_fetch(wire, GROUP, member, 1, topic_id, acks)
            assert resp["responses"][0]["partitions"][0]["acknowledge_error_code"] == 0
            # the released record goes out again at once (delivery 2), and is released again
            assert acquired(resp) == [(4, 4, 2)]
            resp = await share_fetch(wire, GROUP, member, 2, topic_id, [ack(4, 4, RELEASE)])
            assert resp["responses"][0]["partitions"][0]["acknowledge_error_code"] == 0
            # killed with the share session open: closing it first would release 4-9 (their
            # deliveries counted), which the broker may or may not write before the kill
            await broker.kill()

        await broker.start()
        async with await WireClient.connect(broker.port) as wire:
            assert await group_config(wire, "share.auto.offset.reset") == "earliest"
            g = await describe(wire)
            assert (g["error_code"], g["group_state"]) == (0, "Stable")
            assert [m["member_id"] for m in g["members"]] == [member]
            assert await start_offsets(wire) == [(0, 4)]
            # the member heartbeats on with its epoch; a new share session fetches
            hb = await heartbeat(wire, GROUP, member, g["members"][0]["member_epoch"])
            assert hb["error_code"] == 0, hb
            got = acquired(await share_fetch(wire, GROUP, member, 0, topic_id, []))
            # 0-3 never again; 4 with its two deliveries kept; 5-9 as if never delivered
            assert got == [(4, 4, 3), (5, 9, 1)]
            resp = await share_fetch(wire, GROUP, member, 1, topic_id, [ack(4, 9, ACCEPT)])
            assert resp["responses"][0]["partitions"][0]["acknowledge_error_code"] == 0
        await broker.kill()

        await broker.start()
        async with await WireClient.connect(broker.port) as wire:
            assert await start_offsets(wire) == [(0, 10)]
            resp = await share_fetch(wire, GROUP, member, 0, topic_id, [])
            assert acquired(resp) == []
            # the member leaves; the group's offsets are reset, then the group deleted
            assert (await heartbeat(wire, GROUP, member, -1))["error_code"] == 0
            altered = await wire.request(
                91,
                0,
                {
                    "group_id": GROUP,
                    "topics": [
                        {
                            "topic_name": TOPIC,
                            "partitions": [{"partition_index": 0, "start_offset": 7}],
                        }
                    ],
                },
            )
            assert altered["error_code"] == 0
        await broker.kill()

        await broker.start()
        async with await WireClient.connect(broker.port) as wire:
            assert (await describe(wire))["group_state"] == "Empty"
            assert await start_offsets(wire) == [(0, 7)]
            deleted = await wire.request(42, 2, {"groups_names": [GROUP]})
            assert deleted["results"][0]["error_code"] == 0
        await broker.kill()

        await broker.start()
        async with await WireClient.connect(broker.port) as wire:
            assert (await describe(wire))["error_code"] == 69  # GROUP_ID_NOT_FOUND
        await broker.stop()
