"""The lane of the hot requests (``kgroupd.broker.net.hot``) answers exactly as the general path.

A request whose header has a client id goes down the lane (Heartbeat, OffsetCommit, a steady
ConsumerGroupHeartbeat); the same request with a null client id takes the general path (the
decoder into a dict, the handler with its context). Every version is sent both ways to a real
broker over a socket and the two answers must be byte-equal, for answers of every kind: NONE
from a Stable group, errors, refused partitions.
"""

from __future__ import annotations

import asyncio
import dataclasses
import struct
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from kgroupd.broker.config.settings import TopicSpec
from kgroupd.broker.handlers.registry import HANDLERS, entry_for
from kgroupd.broker.net.server import KafkaServer
from kgroupd.broker.testing import running_server
from kgroupd.protocol.fast import commit as commit_module
from kgroupd.protocol.messages import lookup
from tests.integration.test_http import http_port, scrape, value

TOPIC = "lane-topic"


@pytest_asyncio.fixture
async def server() -> AsyncIterator[KafkaServer]:
    async with running_server(
        log_level="warning", initial_rebalance_delay_ms=0, create_topics=(TopicSpec(TOPIC, 4),)
    ) as srv:
        yield srv


class Wire:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer, self.corr = reader, writer, 0

    async def raw(self, api_key: int, version: int, client: str | None, **fields: Any) -> bytes:
        """The answer's body after its header, for a request with this client id."""
        spec = lookup(api_key, version)
        assert spec is not None
        self.corr += 1
        cid = b"\xff\xff" if client is None else struct.pack(">h", len(client)) + client.encode()
        header = struct.pack(">hhi", api_key, version, self.corr) + cid
        if spec.flexible:
            header += b"\x00"
        payload = header + spec.encode_request(fields)
        self.writer.write(struct.pack(">i", len(payload)) + payload)
        size = struct.unpack(">i", await asyncio.wait_for(self.reader.readexactly(4), 10))[0]
        data = await asyncio.wait_for(self.reader.readexactly(size), 10)
        assert struct.unpack(">i", data[:4])[0] == self.corr
        return data[5:] if spec.response_header_v1 else data[4:]

    async def both(self, api_key: int, version: int, **fields: Any) -> dict[str, Any]:
        """The request down the lane and down the general path: equal answers, decoded."""
        lane = await self.raw(api_key, version, "lane", **fields)
        general = await self.raw(api_key, version, None, **fields)
        assert lane == general, (api_key, version, lane, general)
        spec = lookup(api_key, version)
        assert spec is not None
        return spec.decode_response(lane)


@pytest_asyncio.fixture
async def wire(server: KafkaServer) -> AsyncIterator[Wire]:
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    yield Wire(reader, writer)
    writer.close()


async def _classic_member(wire: Wire, group: str) -> tuple[str, int]:
    sub = struct.pack(">hih", 0, 1, len(TOPIC)) + TOPIC.encode() + struct.pack(">i", -1)
    join = {
        "group_id": group,
        "session_timeout_ms": 30000,
        "rebalance_timeout_ms": 30000,
        "member_id": "",
        "protocol_type": "consumer",
        "protocols": [{"name": "range", "metadata": sub}],
    }
    spec = lookup(11, 1)
    assert spec is not None
    joined = spec.decode_response(await wire.raw(11, 1, "setup", **join))
    assert joined["error_code"] == 0
    member, generation = joined["member_id"], joined["generation_id"]
    spec = lookup(14, 0)
    assert spec is not None
    sync = {
        "group_id": group,
        "generation_id": generation,
        "member_id": member,
        "assignments": [{"member_id": member, "assignment": b""}],
    }
    assert spec.decode_response(await wire.raw(14, 0, "setup", **sync))["error_code"] == 0
    return member, generation


@pytest.mark.asyncio
async def test_heartbeat_every_version(wire: Wire) -> None:
    member, generation = await _classic_member(wire, "lane-hb")
    for version in range(5):
        ok = {"group_id": "lane-hb", "generation_id": generation, "member_id": member}
        assert (await wire.both(12, version, **ok))["error_code"] == 0
        stale = {**ok, "generation_id": generation + 1}
        assert (await wire.both(12, version, **stale))["error_code"] == 22  # ILLEGAL_GENERATION
        unknown = {**ok, "member_id": "nobody"}
        assert (await wire.both(12, version, **unknown))["error_code"] == 25
        nogroup = {**ok, "group_id": "lane-none"}
        assert (await wire.both(12, version, **nogroup))["error_code"] == 25


@pytest.mark.asyncio
async def test_offset_commit_every_version(server: KafkaServer, wire: Wire) -> None:
    topic_id = server.broker.topics.topics[TOPIC].topic_id
    for version in range(11):
        parts = [
            {"partition_index": p, "committed_offset": 10 * version + p, "committed_metadata": "m"}
            for p in (0, 3, 9)  # 9: beyond the topic's partitions
        ]
        topics = [
            {"name": TOPIC, "topic_id": topic_id, "partitions": parts},
            {"name": "lane-missing", "topic_id": uuid.uuid4(), "partitions": parts[:1]},
        ]
        body = {
            "group_id": f"lane-commit-{version}",
            "generation_id_or_member_epoch": -1,
            "member_id": "",
            "topics": topics,
        }
        answer = await wire.both(8, version, **body)
        codes = [[p["error_code"] for p in t["partitions"]] for t in answer["topics"]]
        assert codes[0] == [0, 0, 3], (version, answer)
        assert codes[1] == [100 if version >= 10 else 3], (version, answer)
        stored = server.broker.coordinator.shard_for(f"lane-commit-{version}").offsets
        assert stored[f"lane-commit-{version}"][TOPIC][3].offset == 10 * version + 3


@pytest.mark.asyncio
async def test_repeated_all_clear_commits_answer_what_they_asked(wire: Wire) -> None:
    """The encoded answer of an all-clear commit is reused for the same answer: each commit
    still gets its own partitions, version and errors back."""
    for version in (2, 8, 2, 9):
        for asked, generation in (([0, 1], -1), ([0, 1], -1), ([1, 2, 0], -1), ([0, 1], 5)):
            body = {
                "group_id": f"lane-again-{version}",
                "generation_id_or_member_epoch": generation,
                "member_id": "",
                "topics": [
                    {
                        "name": TOPIC,
                        "partitions": [
                            {"partition_index": p, "committed_offset": p, "committed_metadata": ""}
                            for p in asked
                        ],
                    }
                ],
            }
            answer = await wire.both(8, version, **body)
            got = [
                (p["partition_index"], p["error_code"]) for p in answer["topics"][0]["partitions"]
            ]
            # a generation for the simple group the first commit made: UNKNOWN_MEMBER_ID
            error = 0 if generation < 0 else 25
            assert got == [(p, error) for p in asked], (version, asked, answer)


@pytest.mark.asyncio
async def test_steady_consumer_group_heartbeat(server: KafkaServer, wire: Wire) -> None:
    topic_id = server.broker.topics.topics[TOPIC].topic_id
    for version in (0, 1):
        group = f"lane-cg-{version}"
        spec = lookup(68, version)
        assert spec is not None
        join = {
            "group_id": group,
            "member_id": str(uuid.uuid4()) if version else "",
            "member_epoch": 0,
            "rebalance_timeout_ms": 30000,
            "subscribed_topic_names": [TOPIC],
            "topic_partitions": [],
        }
        got = spec.decode_response(await wire.raw(68, version, "setup", **join))
        assert got["error_code"] == 0, got
        member, epoch = got["member_id"], got["member_epoch"]
        owned = [{"topic_id": topic_id, "partitions": [0, 1, 2, 3]}]
        ack = {"group_id": group, "member_id": member, "member_epoch": epoch}
        got = spec.decode_response(
            await wire.raw(68, version, "setup", **ack, topic_partitions=owned)
        )
        assert got["error_code"] == 0, got
        steady = {"group_id": group, "member_id": member, "member_epoch": got["member_epoch"]}
        answer = await wire.both(68, version, **steady)
        assert answer["error_code"] == 0 and answer["assignment"] is None, answer
        fenced = {**steady, "member_epoch": steady["member_epoch"] + 5}
        assert (await wire.both(68, version, **fenced))["error_code"] == 110  # FENCED_MEMBER_EPOCH
        assert (await wire.both(68, version, **steady))["error_code"] == 0


@pytest.mark.asyncio
async def test_the_lane_asks_the_authorizer() -> None:
    """Under ``--authorizer acl`` the lane serves what the ACLs allow, answering as the
    general path does, and a group its principal may not read is refused as there, also
    after a decision kept by the connection changes."""
    async with running_server(
        log_level="warning",
        initial_rebalance_delay_ms=0,
        create_topics=(TopicSpec(TOPIC, 4),),
        authorizer="acl",
        allow_everyone_if_no_acl_found=True,
    ) as srv:
        reader, writer = await asyncio.open_connection("127.0.0.1", srv.port)
        wire = Wire(reader, writer)
        deny = {  # DENY READ on the group "lane-denied" to everyone (ANONYMOUS here)
            "resource_type": 3,
            "resource_name": "lane-denied",
            "resource_pattern_type": 3,
            "principal": "User:*",
            "host": "*",
            "operation": 3,
            "permission_type": 2,
        }
        spec = lookup(30, 1)
        assert spec is not None
        created = spec.decode_response(await wire.raw(30, 1, "setup", creations=[deny]))
        assert created["results"][0]["error_code"] == 0, created
        member, generation = await _classic_member(wire, "lane-acl")
        ok = {"group_id": "lane-acl", "generation_id": generation, "member_id": member}
        for version in range(5):
            assert (await wire.both(12, version, **ok))["error_code"] == 0
            denied = {**ok, "group_id": "lane-denied"}
            assert (await wire.both(12, version, **denied))["error_code"] == 30
        parts = [{"partition_index": 0, "committed_offset": 5, "committed_metadata": ""}]

        async def commits(expected: tuple[int, int]) -> None:
            # again and again: the lane reads them from their shape, and still asks
            for _ in range(3):
                for group, code in zip(("lane-acl-commit", "lane-denied"), expected, strict=True):
                    body = {
                        "group_id": group,
                        "generation_id_or_member_epoch": -1,
                        "member_id": "",
                        "topics": [{"name": TOPIC, "partitions": parts}],
                    }
                    answer = await wire.both(8, 2, **body)
                    assert answer["topics"][0]["partitions"][0]["error_code"] == code, answer

        await commits((0, 30))
        # decisions are kept per connection until the ACLs change: a DENY on the group
        # allowed so far refuses its next beat and commit, and its removal allows them again
        commit = {
            "group_id": "lane-acl",
            "generation_id_or_member_epoch": generation,
            "member_id": member,
            "topics": [{"name": TOPIC, "partitions": parts}],
        }
        for permission, code in ((2, 30), (0, 0)):
            if permission:
                acl = {**deny, "resource_name": "lane-acl"}
                answer = spec.decode_response(await wire.raw(30, 1, "setup", creations=[acl]))
                assert answer["results"][0]["error_code"] == 0, answer
            else:
                wanted = {
                    "resource_type_filter": 3,
                    "resource_name_filter": "lane-acl",
                    "pattern_type_filter": 3,
                    "principal_filter": None,
                    "host_filter": None,
                    "operation": 1,
                    "permission_type": 1,
                }
                removal = lookup(31, 1)
                assert removal is not None
                raw = await wire.raw(31, 1, "setup", filters=[wanted])
                answer = removal.decode_response(raw)
                assert answer["filter_results"][0]["matching_acls"], answer
            assert (await wire.both(12, 1, **ok))["error_code"] == code
            answer = await wire.both(8, 2, **commit)
            assert answer["topics"][0]["partitions"][0]["error_code"] == code, answer
        topic_denied = {**deny, "resource_type": 2, "resource_name": TOPIC}  # READ on the topic
        created = spec.decode_response(await wire.raw(30, 1, "setup", creations=[topic_denied]))
        assert created["results"][0]["error_code"] == 0, created
        await commits((29, 30))  # TOPIC_AUTHORIZATION_FAILED: the group is asked first
        writer.close()


@pytest.mark.asyncio
async def test_commits_of_a_known_shape(server: KafkaServer, wire: Wire) -> None:
    """A consumer's commit again (the same bytes but its offsets) is read from the shape the
    lane learned, and still answers as the general path: every version by name, then a topic
    deleted, recreated with fewer partitions, and a metadata over the limit."""
    topics = server.broker.topics
    topics.create("lane-shape", 2)
    shard = server.broker.coordinator.shard_for
    for version in range(10):
        group = f"lane-shape-{version}"
        for round_ in range(3):
            body = {
                "group_id": group,
                "generation_id_or_member_epoch": -1,
                "member_id": "",
                "topics": [
                    {
                        "name": "lane-shape",
                        "partitions": [
                            {"partition_index": p, "committed_offset": 100 * round_ + p}
                            for p in (1, 0)
                        ],
                    }
                ],
            }
            answer = await wire.both(8, version, **body)
            assert [p["error_code"] for p in answer["topics"][0]["partitions"]] == [0, 0]
            assert shard(group).offsets[group]["lane-shape"][1].offset == 100 * round_ + 1
            if version >= 6:
                assert shard(group).offsets[group]["lane-shape"][0].leader_epoch == -1
    # the lane did read them from their shapes (the broker's checks of the topic kept there)
    shapes = [s for s in commit_module._shapes.values() if s.name == "lane-shape"]
    assert {s.version for s in shapes if s.state is not None} == set(range(10))
    body = {
        "group_id": "lane-shape-gone",
        "generation_id_or_member_epoch": -1,
        "member_id": "",
        "topics": [
            {
                "name": "lane-shape",
                "partitions": [{"partition_index": p, "committed_offset": 7} for p in (0, 1)],
            }
        ],
    }
    for _ in range(2):  # learned
        await wire.both(8, 2, **body)
    topics.delete("lane-shape")
    answer = await wire.both(8, 2, **body)
    assert [p["error_code"] for p in answer["topics"][0]["partitions"]] == [3, 3]
    topics.create("lane-shape", 1)
    answer = await wire.both(8, 2, **body)
    assert [p["error_code"] for p in answer["topics"][0]["partitions"]] == [0, 3]
    # a simple group's commit with a generation: UNKNOWN_MEMBER_ID for each partition
    errors = {**body, "generation_id_or_member_epoch": 3}
    for _ in range(2):
        answer = await wire.both(8, 2, **errors)
        assert [p["error_code"] for p in answer["topics"][0]["partitions"]] == [25, 3]


@pytest.mark.asyncio
async def test_consumer_group_member_commits_of_a_shape(server: KafkaServer, wire: Wire) -> None:
    """A KIP-848 member commits with its member epoch, again and again (from its shape), and
    a stale epoch is refused as the general path refuses it."""
    group = "lane-cg-commit"
    spec = lookup(68, 0)
    assert spec is not None
    join = {
        "group_id": group,
        "member_id": "",
        "member_epoch": 0,
        "rebalance_timeout_ms": 30000,
        "subscribed_topic_names": [TOPIC],
        "topic_partitions": [],
    }
    got = spec.decode_response(await wire.raw(68, 0, "setup", **join))
    assert got["error_code"] == 0, got
    member, epoch = got["member_id"], got["member_epoch"]
    for version in (9, 8):
        for offset, member_epoch in ((5, epoch), (6, epoch), (7, epoch + 3), (8, epoch)):
            body = {
                "group_id": group,
                "generation_id_or_member_epoch": member_epoch,
                "member_id": member,
                "topics": [
                    {
                        "name": TOPIC,
                        "partitions": [
                            {"partition_index": p, "committed_offset": offset} for p in (0, 1)
                        ],
                    }
                ],
            }
            answer = await wire.both(8, version, **body)
            codes = [p["error_code"] for p in answer["topics"][0]["partitions"]]
            if version < 9:  # a member of a consumer group commits from v9 on (KIP-848)
                assert codes == [35, 35], (version, answer)  # UNSUPPORTED_VERSION
            elif member_epoch == epoch:
                assert codes == [0, 0], (version, answer)
                stored = server.broker.coordinator.shard_for(group).offsets[group][TOPIC]
                assert stored[1].offset == offset
            else:
                assert codes[0] != 0 and codes[0] == codes[1], (version, answer)


@pytest.mark.asyncio
async def test_a_heartbeat_sent_again_gets_the_group_of_now(wire: Wire) -> None:
    """The lane reads a member's heartbeat body once and keeps its fields: the same bytes
    sent again after the member left are answered from the group as it is then."""
    member, generation = await _classic_member(wire, "lane-again-hb")
    ok = {"group_id": "lane-again-hb", "generation_id": generation, "member_id": member}
    for version in range(5):
        for _ in range(3):
            assert (await wire.both(12, version, **ok))["error_code"] == 0
    spec = lookup(13, 0)
    assert spec is not None
    left = await wire.raw(13, 0, "setup", group_id="lane-again-hb", member_id=member)
    assert spec.decode_response(left)["error_code"] == 0
    for version in range(5):
        assert (await wire.both(12, version, **ok))["error_code"] == 25  # UNKNOWN_MEMBER_ID


@pytest.mark.asyncio
async def test_a_steady_heartbeat_sent_again_after_leaving(server: KafkaServer, wire: Wire) -> None:
    """The same steady ConsumerGroupHeartbeat bytes once the member has left: the lane leaves
    it to the general path, which answers UNKNOWN_MEMBER_ID, on both."""
    group = "lane-cg-again"
    spec = lookup(68, 1)
    assert spec is not None
    join = {
        "group_id": group,
        "member_id": str(uuid.uuid4()),
        "member_epoch": 0,
        "rebalance_timeout_ms": 30000,
        "subscribed_topic_names": [TOPIC],
        "topic_partitions": [],
    }
    got = spec.decode_response(await wire.raw(68, 1, "setup", **join))
    member, epoch = got["member_id"], got["member_epoch"]
    topic_id = server.broker.topics.topics[TOPIC].topic_id
    owned = [{"topic_id": topic_id, "partitions": [0, 1, 2, 3]}]
    ack = {"group_id": group, "member_id": member, "member_epoch": epoch}
    got = spec.decode_response(await wire.raw(68, 1, "setup", **ack, topic_partitions=owned))
    steady = {"group_id": group, "member_id": member, "member_epoch": got["member_epoch"]}
    for _ in range(3):
        assert (await wire.both(68, 1, **steady))["error_code"] == 0
    leave = {**steady, "member_epoch": -1}
    assert spec.decode_response(await wire.raw(68, 1, "setup", **leave))["error_code"] == 0
    assert (await wire.both(68, 1, **steady))["error_code"] == 25  # UNKNOWN_MEMBER_ID


@pytest.mark.asyncio
async def test_the_lane_counts_every_answer_in_metrics(server: KafkaServer, wire: Wire) -> None:
    """/metrics counts the lane's answers exactly: each Heartbeat once, per version, its
    errors by name, its duration in the histogram."""
    member, generation = await _classic_member(wire, "lane-counted")
    ok = {"group_id": "lane-counted", "generation_id": generation, "member_id": member}
    stale = {**ok, "generation_id": generation + 1}
    spec = lookup(12, 1)
    assert spec is not None
    port = http_port(server)
    before = await scrape(port)
    for body, times in ((ok, 7), (stale, 3)):
        for _ in range(times):
            spec.decode_response(await wire.raw(12, 1, "lane", **body))
    after = await scrape(port)

    def moved(name: str, **labels: str) -> float:
        return value(after, name, **labels) - value(before, name, **labels)

    assert moved("kgroupd_requests_total", api="Heartbeat", version="1") == 10
    assert moved("kgroupd_request_errors_total", api="Heartbeat", error="ILLEGAL_GENERATION") == 3
    assert moved("kgroupd_request_duration_seconds_count", api="Heartbeat") == 10
    assert moved("kgroupd_request_duration_seconds_bucket", api="Heartbeat", le="+Inf") == 10
    assert moved("kgroupd_request_duration_seconds_sum", api="Heartbeat") > 0


@pytest.mark.asyncio
async def test_an_authenticated_sasl_session_takes_the_lane(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Over SASL the hot requests take the lane once the session is authenticated (answering
    as the general path does); a heartbeat before authentication, or after the session
    expired (``--connections-max-reauth-ms``), still closes the connection."""
    taken: list[int] = []
    entry = entry_for(12)
    assert entry is not None and entry.hot is not None
    hot = entry.hot

    def counted(*args: Any) -> Any:
        taken.append(1)
        return hot(*args)

    monkeypatch.setitem(HANDLERS, 12, dataclasses.replace(entry, hot=counted))
    users = tmp_path / "users.txt"
    users.write_text("alice:alice-secret\n")
    async with running_server(
        log_level="warning",
        initial_rebalance_delay_ms=0,
        create_topics=(TopicSpec(TOPIC, 4),),
        listeners="SASL_PLAINTEXT://127.0.0.1:0",
        sasl_users=str(users),
        connections_max_reauth_ms=1500,
    ) as srv:
        port = srv.bound[0][1]

        async def login() -> tuple[Wire, asyncio.StreamWriter]:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            wire = Wire(reader, writer)
            for key, version, fields in (
                (17, 1, {"mechanism": "PLAIN"}),
                (36, 2, {"auth_bytes": b"\0alice\0alice-secret"}),
            ):
                spec = lookup(key, version)
                assert spec is not None
                answer = spec.decode_response(await wire.raw(key, version, "setup", **fields))
                assert answer["error_code"] == 0, answer
            return wire, writer

        wire, writer = await login()
        member, generation = await _classic_member(wire, "lane-sasl")
        ok = {"group_id": "lane-sasl", "generation_id": generation, "member_id": member}
        for version in range(5):
            assert (await wire.both(12, version, **ok))["error_code"] == 0
        assert len(taken) >= 5  # the lane read them (the null client ids: the general path)
        await asyncio.sleep(1.6)  # the session ends: the next request closes the connection
        with pytest.raises((asyncio.IncompleteReadError, ConnectionError)):
            await wire.raw(12, 1, "lane", **ok)
        writer.close()
        # never authenticated: a heartbeat closes the connection, the lane never asked
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        before = len(taken)
        with pytest.raises((asyncio.IncompleteReadError, ConnectionError)):
            await Wire(reader, writer).raw(12, 1, "lane", **ok)
        assert len(taken) == before
        writer.close()
