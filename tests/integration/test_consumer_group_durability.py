"""A KIP-848 consumer group survives kill -9 (and a clean restart) under --data-dir: its
epochs, target assignment and member assignments come back, and members carry on without a
reassignment."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

from tests.support.broker_process import broker_process
from tests.support.kafka_wire import WireClient, create_topic

GROUP, TOPIC = "durable-cg", "dt"


async def heartbeat(wire: WireClient, body: dict[str, Any]) -> dict[str, Any]:
    resp = await wire.request(68, 1, body)
    assert resp["error_code"] == 0, resp
    return resp


def owned(resp: dict[str, Any]) -> list[dict[str, Any]]:
    assert resp["assignment"] is not None
    return list(resp["assignment"]["topic_partitions"])


async def test_a_consumer_group_survives_kill_9(tmp_path: Path) -> None:
    async with broker_process(tmp_path / "data") as broker:
        await broker.start()
        members = [f"member-{i}-{uuid.uuid4()}" for i in range(2)]
        async with await WireClient.connect(broker.port) as wire:
            await create_topic(wire, TOPIC, 4)
            join = {"rebalance_timeout_ms": 30_000, "subscribed_topic_names": [TOPIC]}
            first = await heartbeat(
                wire,
                {
                    "group_id": GROUP,
                    "member_id": members[0],
                    "member_epoch": 0,
                    **join,
                    "topic_partitions": [],
                },
            )
            second = await heartbeat(
                wire,
                {
                    "group_id": GROUP,
                    "member_id": members[1],
                    "member_epoch": 0,
                    **join,
                    "topic_partitions": [],
                },
            )
            # the first member revokes what moves to the second, then both are stable
            step = await heartbeat(
                wire,
                {
                    "group_id": GROUP,
                    "member_id": members[0],
                    "member_epoch": first["member_epoch"],
                    "topic_partitions": owned(first),
                },
            )
            step = await heartbeat(
                wire,
                {
                    "group_id": GROUP,
                    "member_id": members[0],
                    "member_epoch": step["member_epoch"],
                    "topic_partitions": owned(step),
                },
            )
            last = await heartbeat(
                wire,
                {
                    "group_id": GROUP,
                    "member_id": members[1],
                    "member_epoch": second["member_epoch"],
                },
            )
            before = await wire.request(69, 1, {"group_ids": [GROUP]})
        (group,) = before["groups"]
        assert group["group_state"] == "Stable", group
        await broker.kill()
        await broker.start()
        async with await WireClient.connect(broker.port) as wire:
            after = await wire.request(69, 1, {"group_ids": [GROUP]})
            (again,) = after["groups"]
            assert (again["group_epoch"], again["assignment_epoch"]) == (
                group["group_epoch"],
                group["assignment_epoch"],
            )
            assert sorted(again["members"], key=lambda m: m["member_id"]) == sorted(
                group["members"], key=lambda m: m["member_id"]
            )
            # a member carries on at its epoch: no error, no new assignment
            resp = await heartbeat(
                wire,
                {"group_id": GROUP, "member_id": members[1], "member_epoch": last["member_epoch"]},
            )
            assert resp["member_epoch"] == last["member_epoch"] and resp["assignment"] is None
        await broker.stop()  # a clean stop snapshots the group: it comes back from there
        await broker.start()
        async with await WireClient.connect(broker.port) as wire:
            snapshot = await wire.request(69, 1, {"group_ids": [GROUP]})
        (from_snapshot,) = snapshot["groups"]
        assert from_snapshot["group_epoch"] == group["group_epoch"]
        assert len(from_snapshot["members"]) == 2
        await broker.stop()
