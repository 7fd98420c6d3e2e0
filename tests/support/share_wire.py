"""Raw share-group requests for tests: ShareGroupHeartbeat v1 and ShareFetch v1 on a
``WireClient``, and the acknowledgement batches they carry."""

from __future__ import annotations

import uuid
from typing import Any

from tests.support.kafka_wire import WireClient

ACCEPT, RELEASE, REJECT = 1, 2, 3


def ack(first: int, last: int, kind: int) -> dict[str, Any]:
    return {"first_offset": first, "last_offset": last, "acknowledge_types": [kind]}


async def heartbeat(
    wire: WireClient, group: str, member: str, epoch: int, topic: str = ""
) -> dict[str, Any]:
    return await wire.request(
        76,
        1,
        {
            "group_id": group,
            "member_id": member,
            "member_epoch": epoch,
            "rack_id": None,
            "subscribed_topic_names": [topic] if epoch == 0 else None,
        },
    )


async def share_fetch(
    wire: WireClient,
    group: str,
    member: str,
    epoch: int,
    topic_id: uuid.UUID,
    acks: list,
    max_wait_ms: int = 0,
) -> dict[str, Any]:
    return await wire.request(
        78,
        1,
        {
            "group_id": group,
            "member_id": member,
            "share_session_epoch": epoch,
            "max_wait_ms": max_wait_ms,
            "min_bytes": 1,
            "max_bytes": 1 << 20,
            "max_records": 100,
            "batch_size": 100,
            "topics": [
                {
                    "topic_id": topic_id,
                    "partitions": [
                        {
                            "partition_index": 0,
                            "partition_max_bytes": 1 << 20,
                            "acknowledgement_batches": acks,
                        }
                    ],
                }
            ],
            "forgotten_topics_data": [],
        },
    )


async def set_group_config(wire: WireClient, group: str, name: str, value: str) -> None:
    """IncrementalAlterConfigs SET of one GROUP config."""
    resp = await wire.request(
        44,
        1,
        {
            "resources": [
                {
                    "resource_type": 32,
                    "resource_name": group,
                    "configs": [{"name": name, "config_operation": 0, "value": value}],
                }
            ],
            "validate_only": False,
        },
    )
    assert resp["responses"][0]["error_code"] == 0, resp


def acquired(resp: dict[str, Any]) -> list[tuple[int, int, int]]:
    """(first, last, delivery count) of what a ShareFetch answer acquired."""
    assert resp["error_code"] == 0, resp
    return [
        (a["first_offset"], a["last_offset"], a["delivery_count"])
        for t in resp["responses"]
        for p in t["partitions"]
        for a in p["acquired_records"]
    ]


async def share_acknowledge(
    wire: WireClient, group: str, member: str, epoch: int, topic_id: uuid.UUID, acks: list
) -> dict[str, Any]:
    return await wire.request(
        79,
        1,
        {
            "group_id": group,
            "member_id": member,
            "share_session_epoch": epoch,
            "topics": [
                {
                    "topic_id": topic_id,
                    "partitions": [{"partition_index": 0, "acknowledgement_batches": acks}],
                }
            ],
        },
    )
