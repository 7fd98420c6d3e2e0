"""The test controls over HTTP (issue 28), with raw Kafka requests on real sockets: refused
(404) without --test-controls; bad control requests answered 400 with the reason; injected
errors answered, filtered by client id and group, delayed, or closing the connection, then
gone; pending rules listed and cleared; a forced rebalance and an expired member of a real
aiokafka group and of a KIP-848 consumer group, whose silent member a clock move fences."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
import pytest_asyncio
from aiokafka import AIOKafkaConsumer

from kgroupd.broker.config.settings import TopicSpec
from kgroupd.broker.net.server import KafkaServer
from kgroupd.broker.testing import running_server
from kgroupd.protocol.errors import ErrorCode
from tests.support.groups import (
    LIST_GROUPS,
    OFFSET_FETCH,
    RawConnection,
    decode_response,
    wait_until,
)
from tests.support.kafka_wire import WireClient

METADATA = 3
TOPIC = "controls"


@pytest_asyncio.fixture
async def server() -> AsyncIterator[KafkaServer]:
    async with running_server(
        log_level="warning",
        test_controls=True,
        initial_rebalance_delay_ms=0,
        create_topics=(TopicSpec(TOPIC, 2),),
    ) as srv:
        yield srv


async def http(
    server: KafkaServer, method: str, path: str, body: Any = None, raw: str | None = None
) -> tuple[int, Any]:
    assert server.http is not None
    url = f"http://127.0.0.1:{server.http.port}{path}"
    kwargs: dict[str, Any] = {"json": body} if raw is None else {"data": raw}
    async with aiohttp.ClientSession() as session, session.request(method, url, **kwargs) as r:
        text = await r.text()
        try:
            return r.status, await r.json(content_type=None)
        except ValueError:
            return r.status, text


PATHS = [
    ("POST", "/api/test/errors", {"api": "Produce", "error": "NOT_LEADER_OR_FOLLOWER"}),
    ("GET", "/api/test/errors", None),
    ("DELETE", "/api/test/errors", None),
    ("POST", "/api/test/clock", {"advance_ms": 1000}),
    ("POST", "/api/test/groups/g/rebalance", None),
    ("POST", "/api/test/groups/g/members/m/expire", None),
    ("GET", "/api/test/nodes", None),
    ("POST", "/api/test/nodes/0/down", None),
    ("POST", "/api/test/nodes/0/up", None),
]


async def test_the_controls_are_refused_without_the_flag() -> None:
    async with running_server(log_level="warning") as off:
        assert not off.config.test_controls  # off by default
        for method, path, body in PATHS:
            status, _ = await http(off, method, path, body)
            assert status == 404, (method, path)
        assert off.controls is None and not off.broker.injected
        # the rest of the HTTP API still answers
        assert (await http(off, "GET", "/api/groups"))[0] == 200


@pytest.mark.parametrize(
    ("path", "body", "reason"),
    [
        ("/api/test/errors", {"api": "NoSuchApi", "error": 6}, "not an API this broker serves"),
        ("/api/test/errors", {"api": 9999, "error": 6}, "not an API this broker serves"),
        ("/api/test/errors", {"error": 6}, "api is required"),
        ("/api/test/errors", {"api": "Produce", "error": "NOT_AN_ERROR"}, "not a Kafka error"),
        ("/api/test/errors", {"api": "Produce", "error": 12345}, "not a Kafka error"),
        ("/api/test/errors", {"api": "Produce", "error": "NONE"}, "NONE is no error"),
        ("/api/test/errors", {"api": "Produce"}, "give an error, a delay_ms or disconnect"),
        ("/api/test/errors", {"api": "Produce", "error": 6, "count": 0}, "count must be"),
        ("/api/test/errors", {"api": "Produce", "error": 6, "count": "3"}, "count must be"),
        ("/api/test/errors", {"api": "Produce", "error": 6, "delay_ms": -1}, "delay_ms must"),
        ("/api/test/errors", {"api": "Produce", "error": 6, "colour": "red"}, "unknown field"),
        ("/api/test/errors", {"api": "Produce", "error": 6, "topic": 7}, "topic must be"),
        (
            "/api/test/errors",
            {"api": "Produce", "error": 6, "disconnect": True},
            "exclude each other",
        ),
        ("/api/test/errors", [1, 2], "JSON object"),
        ("/api/test/clock", {"advance_ms": -5}, "advance_ms must be"),
        ("/api/test/clock", {"advance_ms": 1.5}, "advance_ms must be"),
        ("/api/test/clock", {"advance": 5}, '{"advance_ms": N}'),
    ],
)
async def test_bad_control_requests_get_400_with_the_reason(
    server: KafkaServer, path: str, body: Any, reason: str
) -> None:
    status, answer = await http(server, "POST", path, body)
    assert status == 400
    assert answer["error"] == "INVALID_REQUEST" and reason in answer["reason"], answer
    assert (await http(server, "GET", "/api/test/errors"))[1] == {"errors": []}
    assert not server.broker.injected


async def test_a_body_that_is_not_json_gets_400(server: KafkaServer) -> None:
    for path in ("/api/test/errors", "/api/test/clock"):
        status, answer = await http(server, "POST", path, raw="{not json")
        assert status == 400 and "not JSON" in answer["reason"]


async def offset_fetch(conn: RawConnection, group: str) -> dict[str, Any]:
    return await conn.call(OFFSET_FETCH, 5, group_id=group, topics=[(TOPIC, [0])])


async def test_injected_errors_are_answered_counted_and_listed(server: KafkaServer) -> None:
    rule = {"api": "OffsetFetch", "error": "COORDINATOR_LOAD_IN_PROGRESS", "count": 2}
    status, answer = await http(server, "POST", "/api/test/errors", rule)
    assert status == 200 and answer["injected"]["error_code"] == 14
    status, listed = await http(server, "GET", "/api/test/errors")
    assert [(e["api"], e["error"], e["count"]) for e in listed["errors"]] == [
        ("OffsetFetch", "COORDINATOR_LOAD_IN_PROGRESS", 2)
    ]
    async with await RawConnection.open(f"127.0.0.1:{server.port}", "app") as conn:
        codes = [(await offset_fetch(conn, "g"))["error_code"] for _ in range(3)]
        assert codes == [14, 14, 0]  # the next two, then answered as usual
        # other APIs were never touched
        assert (await conn.call(LIST_GROUPS, 2))["error_code"] == 0
    assert (await http(server, "GET", "/api/test/errors"))[1] == {"errors": []}
    assert not server.broker.injected  # nothing pending: the connection's look-up is empty


async def test_filters_by_client_id_and_group(server: KafkaServer) -> None:
    rules = [
        {"api": 9, "error": 15, "client_id": "other-app"},  # by key and code
        {"api": "offsetfetch", "error": "NOT_COORDINATOR", "group_id": "target", "count": 5},
    ]
    for rule in rules:
        assert (await http(server, "POST", "/api/test/errors", rule))[0] == 200
    async with await RawConnection.open(f"127.0.0.1:{server.port}", "app") as conn:
        assert (await offset_fetch(conn, "bystander"))["error_code"] == 0
        assert (await offset_fetch(conn, "target"))["error_code"] == ErrorCode.NOT_COORDINATOR
    async with await RawConnection.open(f"127.0.0.1:{server.port}", "other-app") as conn:
        assert (await offset_fetch(conn, "bystander"))["error_code"] == 15
    _, listed = await http(server, "GET", "/api/test/errors")
    assert [(e["group_id"], e["count"]) for e in listed["errors"]] == [("target", 4)]
    assert await http(server, "DELETE", "/api/test/errors") == (200, {"cleared": 1})
    async with await RawConnection.open(f"127.0.0.1:{server.port}", "app") as conn:
        assert (await offset_fetch(conn, "target"))["error_code"] == 0


async def test_a_delay_alone_answers_as_usual_afterwards(server: KafkaServer) -> None:
    rule = {"api": "Metadata", "delay_ms": 200, "count": 2}
    assert (await http(server, "POST", "/api/test/errors", rule))[0] == 200
    async with await RawConnection.open(f"127.0.0.1:{server.port}", "app") as conn:
        # two pipelined requests, both delayed, answered in order and in full
        corr1, frame1 = conn.frame(METADATA, 1, topics=[(TOPIC,)])
        corr2, frame2 = conn.frame(METADATA, 1, topics=[(TOPIC,)])
        conn.writer.write(frame1 + frame2)
        for corr in (corr1, corr2):
            got, body = await conn.read_frame()
            assert got == corr
            answer = decode_response(METADATA, 1, body)
            assert [(t["name"], t["error_code"]) for t in answer["topics"]] == [(TOPIC, 0)]
        meta = await conn.call(METADATA, 1, topics=[(TOPIC,)])
        assert [t["name"] for t in meta["topics"]] == [TOPIC]
    assert (await http(server, "GET", "/api/test/errors"))[1] == {"errors": []}


async def test_delay_then_error_and_disconnect(server: KafkaServer) -> None:
    rules = [
        {"api": "ListGroups", "error": "COORDINATOR_NOT_AVAILABLE", "delay_ms": 100},
        {"api": "ListGroups", "disconnect": True},
    ]
    for rule in rules:
        assert (await http(server, "POST", "/api/test/errors", rule))[0] == 200
    async with await RawConnection.open(f"127.0.0.1:{server.port}", "app") as conn:
        assert (await conn.call(LIST_GROUPS, 2))["error_code"] == 15
        # pipelined behind a request answered as usual, which still gets its answer
        corr, before = conn.frame(OFFSET_FETCH, 5, group_id="g", topics=[(TOPIC, [0])])
        _corr, frame = conn.frame(LIST_GROUPS, 2)
        conn.writer.write(before + frame)
        got, body = await conn.read_frame()
        assert got == corr and decode_response(OFFSET_FETCH, 5, body)["error_code"] == 0
        with pytest.raises(asyncio.IncompleteReadError):
            await conn.read_frame()  # closed, nothing answered
    async with await RawConnection.open(f"127.0.0.1:{server.port}", "app") as conn:
        assert (await conn.call(LIST_GROUPS, 2))["error_code"] == 0  # everyone else served


async def test_forced_rebalance_and_expired_member_of_an_aiokafka_group(
    server: KafkaServer,
) -> None:
    consumer = AIOKafkaConsumer(
        TOPIC,
        bootstrap_servers=f"127.0.0.1:{server.port}",
        group_id="ctl",
        heartbeat_interval_ms=100,
        session_timeout_ms=45_000,
    )
    await consumer.start()
    try:

        async def assigned() -> bool:
            await consumer.getmany(timeout_ms=50)
            return len(consumer.assignment()) == 2

        await wait_until(assigned, 20, "the consumer's assignment")
        group = server.broker.coordinator.shard_for("ctl").groups["ctl"]
        generation = group.generation_id
        status, answer = await http(server, "POST", "/api/test/groups/ctl/rebalance")
        assert status == 200 and answer["type"] == "classic", answer

        async def rejoined() -> bool:
            await consumer.getmany(timeout_ms=50)
            return group.generation_id > generation and group.state.name == "STABLE"

        await wait_until(rejoined, 20, "a new generation after the forced rebalance")
        (member,) = group.members
        generation = group.generation_id
        path = f"/api/test/groups/ctl/members/{member}/expire"
        status, answer = await http(server, "POST", path)
        assert status == 200 and answer["member"] == member
        assert member not in group.members  # gone at once, no 45 s wait

        async def back() -> bool:  # the consumer finds out and joins again as a new member
            await consumer.getmany(timeout_ms=50)
            return bool(group.members) and member not in group.members

        await wait_until(back, 20, "the consumer to rejoin")
        assert (await http(server, "POST", path))[0] == 404  # that member is gone
    finally:
        await consumer.stop()
    status, answer = await http(server, "POST", "/api/test/groups/nope/rebalance")
    assert status == 404 and answer["error"] == "GROUP_ID_NOT_FOUND"


async def test_group_controls_on_a_kip848_consumer_group(server: KafkaServer) -> None:
    async with await WireClient.connect(server.port) as wire:
        body: dict[str, Any] = {
            "group_id": "cg",
            "member_id": "cg-member-0001",
            "member_epoch": 0,
            "rebalance_timeout_ms": 10_000,
            "subscribed_topic_names": [TOPIC],
            "topic_partitions": [],
        }
        first = await wire.request(68, 1, body)
        assert first["error_code"] == 0, first
        epoch = first["member_epoch"]
        status, answer = await http(server, "POST", "/api/test/groups/cg/rebalance")
        assert status == 200 and answer["type"] == "consumer"
        assert answer["group_epoch"] == epoch + 1  # bumped
        steady = {"group_id": "cg", "member_id": "cg-member-0001", "member_epoch": epoch}
        again = await wire.request(68, 1, steady)
        assert again["error_code"] == 0 and again["member_epoch"] == epoch + 1, again
        path = "/api/test/groups/cg/members/cg-member-0001/expire"
        assert (await http(server, "POST", path))[0] == 200
        gone = await wire.request(68, 1, steady | {"member_epoch": epoch + 1})
        assert gone["error_code"] == ErrorCode.UNKNOWN_MEMBER_ID, gone
        # a member that stops heartbeating is fenced by a clock move past its session (45 s)
        rejoined = await wire.request(68, 1, body | {"member_id": "cg-member-0002"})
        assert rejoined["error_code"] == 0
        moved = await http(server, "POST", "/api/test/clock", {"advance_ms": 46_000})
        assert moved[0] == 200 and moved[1]["fired"] >= 1
        late = {"group_id": "cg", "member_id": "cg-member-0002", "member_epoch": 0}
        late["member_epoch"] = rejoined["member_epoch"]
        fenced = await wire.request(68, 1, late)
        assert fenced["error_code"] == ErrorCode.UNKNOWN_MEMBER_ID, fenced
