"""The fields the newest classic-group versions add, each honoured on the wire (flexible
versions: request header v2, response header v1)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest_asyncio
from structlog.testing import capture_logs

from kgroupd.broker.handlers.authorized import GROUP_OPERATIONS, NOT_REQUESTED
from kgroupd.broker.net.server import KafkaServer
from kgroupd.broker.testing import running_server
from kgroupd.protocol.errors import ErrorCode
from tests.support.kafka_wire import WireClient

FIND_COORDINATOR, JOIN_GROUP, SYNC_GROUP, LEAVE_GROUP = 10, 11, 14, 13
DESCRIBE_GROUPS, LIST_GROUPS = 15, 16


@pytest_asyncio.fixture
async def server() -> AsyncIterator[KafkaServer]:
    async with running_server(log_level="warning", initial_rebalance_delay_ms=0) as srv:
        yield srv


@pytest_asyncio.fixture
async def wire(server: KafkaServer) -> AsyncIterator[WireClient]:
    async with await WireClient.connect(server.port) as client:
        yield client


def join_body(group: str, member_id: str = "", instance: str | None = None, **extra: Any) -> dict:
    return {
        "group_id": group,
        "session_timeout_ms": 10000,
        "rebalance_timeout_ms": 10000,
        "member_id": member_id,
        "group_instance_id": instance,
        "protocol_type": "consumer",
        "protocols": [{"name": "range", "metadata": b"sub"}],
        **extra,
    }


async def stable_group(wire: WireClient, group: str, instance: str | None = None) -> dict:
    """One member joins (JoinGroup v9, with the MEMBER_ID_REQUIRED round when dynamic) and
    syncs (SyncGroup v5): its join answer."""
    joined = await wire.request(JOIN_GROUP, 9, join_body(group, instance=instance))
    if joined["error_code"] == ErrorCode.MEMBER_ID_REQUIRED:
        body = join_body(group, joined["member_id"], instance)
        joined = await wire.request(JOIN_GROUP, 9, body)
    assert joined["error_code"] == 0, joined
    member = joined["member_id"]
    synced = await wire.request(
        SYNC_GROUP,
        5,
        {
            "group_id": group,
            "generation_id": joined["generation_id"],
            "member_id": member,
            "group_instance_id": instance,
            "protocol_type": "consumer",
            "protocol_name": "range",
            "assignments": [{"member_id": member, "assignment": b"mine"}],
        },
    )
    assert (synced["error_code"], synced["assignment"]) == (0, b"mine"), synced
    assert (synced["protocol_type"], synced["protocol_name"]) == ("consumer", "range")
    return joined


async def test_find_coordinator_v4_plus_answers_every_key_of_a_batch(
    server: KafkaServer, wire: WireClient
) -> None:
    resp = await wire.request(FIND_COORDINATOR, 6, {"key_type": 0, "coordinator_keys": ["a", "b"]})
    got = {c["key"]: c for c in resp["coordinators"]}
    assert set(got) == {"a", "b"}
    for c in got.values():
        assert (c["error_code"], c["node_id"], c["port"]) == (0, 0, server.port)
    txn = await wire.request(FIND_COORDINATOR, 6, {"key_type": 1, "coordinator_keys": ["t1", "t2"]})
    assert [c["key"] for c in txn["coordinators"]] == ["t1", "t2"]  # transaction coordinators
    assert all((c["error_code"], c["port"]) == (0, server.port) for c in txn["coordinators"])
    empty = await wire.request(FIND_COORDINATOR, 6, {"key_type": 1, "coordinator_keys": [""]})
    assert empty["coordinators"][0]["error_code"] == ErrorCode.INVALID_REQUEST
    old = await wire.request(FIND_COORDINATOR, 3, {"key": "a", "key_type": 0})
    assert (old["error_code"], old["port"]) == (0, server.port)


async def test_join_group_v9_reason_is_logged_and_skip_assignment_is_honoured(
    wire: WireClient,
) -> None:
    with capture_logs() as logs:
        first = await wire.request(JOIN_GROUP, 9, join_body("g-reason", reason="because I can"))
    assert first["error_code"] == ErrorCode.MEMBER_ID_REQUIRED
    assert any(
        e["event"] == "join_group_reason" and e["reason"] == "because I can" for e in logs
    ), logs
    # A static leader that restarts in Stable with the same protocols: the group stays as it
    # is, and the v9 answer names it leader with SkipAssignment (it must not assign again).
    before = await stable_group(wire, "g-skip", instance="i-1")
    again = await wire.request(JOIN_GROUP, 9, join_body("g-skip", instance="i-1"))
    assert again["error_code"] == 0, again
    assert again["skip_assignment"] is True
    assert again["leader"] == again["member_id"] != before["member_id"]
    assert again["generation_id"] == before["generation_id"]
    assert [m["member_id"] for m in again["members"]] == [again["member_id"]]
    assert (again["protocol_type"], again["protocol_name"]) == ("consumer", "range")


async def test_leave_group_v5_reasons_are_logged(wire: WireClient) -> None:
    joined = await stable_group(wire, "g-leave")
    with capture_logs() as logs:
        resp = await wire.request(
            LEAVE_GROUP,
            5,
            {
                "group_id": "g-leave",
                "members": [
                    {
                        "member_id": joined["member_id"],
                        "group_instance_id": None,
                        "reason": "shutting down",
                    }
                ],
            },
        )
    assert resp["error_code"] == 0 and resp["members"][0]["error_code"] == 0
    assert any(
        e["event"] == "leave_group_reason" and e["reason"] == "shutting down" for e in logs
    ), logs


async def test_list_groups_v5_filters_by_state_and_type(wire: WireClient) -> None:
    await stable_group(wire, "g-listed")

    async def listed(states: list[str], types: list[str]) -> list[tuple[str, str, str]]:
        resp = await wire.request(LIST_GROUPS, 5, {"states_filter": states, "types_filter": types})
        assert resp["error_code"] == 0
        return [(g["group_id"], g["group_state"], g["group_type"]) for g in resp["groups"]]

    assert await listed([], []) == [("g-listed", "Stable", "classic")]
    assert await listed(["STABLE"], ["Classic"]) == [("g-listed", "Stable", "classic")]
    assert await listed(["Empty"], []) == []
    assert await listed([], ["consumer"]) == []


async def test_describe_groups_authorized_operations_and_v6_unknown_group(
    wire: WireClient,
) -> None:
    await stable_group(wire, "g-ops")
    asked = await wire.request(
        DESCRIBE_GROUPS, 5, {"groups": ["g-ops"], "include_authorized_operations": True}
    )
    (g,) = asked["groups"]
    assert (g["error_code"], g["group_state"]) == (0, "Stable")
    assert g["authorized_operations"] == GROUP_OPERATIONS == (1 << 3) | (1 << 6) | (1 << 8)
    not_asked = await wire.request(
        DESCRIBE_GROUPS, 5, {"groups": ["g-ops"], "include_authorized_operations": False}
    )
    assert not_asked["groups"][0]["authorized_operations"] == NOT_REQUESTED
    v5 = await wire.request(DESCRIBE_GROUPS, 5, {"groups": ["nope"]})
    assert (v5["groups"][0]["error_code"], v5["groups"][0]["group_state"]) == (0, "Dead")
    v6 = await wire.request(DESCRIBE_GROUPS, 6, {"groups": ["nope"]})
    assert v6["groups"][0]["error_code"] == ErrorCode.GROUP_ID_NOT_FOUND
