"""CreateTopics of an internal topic's name never makes a second topic of that name:
TOPIC_ALREADY_EXISTS once the broker has it (as Kafka answers), INVALID_REQUEST before
(``Creation of internal topic ... is prohibited.``, Kafka's answer for its metadata log; kgroupd
makes ``__consumer_offsets`` and ``__transaction_state`` only itself). Metadata and the HTTP
API keep listing each once."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
import pytest_asyncio
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import TopicAlreadyExistsError

from kgroupd.broker.net.server import KafkaServer
from kgroupd.protocol.errors import ErrorCode
from tests.support.kafka_wire import WireClient, create_topics_request

CREATE_TOPICS, METADATA, FIND_COORDINATOR, INIT_PID = 19, 3, 10, 22
OFFSETS, TXN_STATE = "__consumer_offsets", "__transaction_state"


@pytest_asyncio.fixture
async def wire(server: KafkaServer) -> AsyncIterator[WireClient]:
    async with await WireClient.connect(server.port) as client:
        yield client


async def create(wire: WireClient, name: str, validate_only: bool = False) -> dict[str, Any]:
    body = create_topics_request(name, 2) | {"validate_only": validate_only}
    (result,) = (await wire.request(CREATE_TOPICS, 5, body))["topics"]
    return dict(result)


async def listed(wire: WireClient) -> list[tuple[str, bool, int]]:
    """Every topic Metadata lists: (name, is_internal, partitions)."""
    resp = await wire.request(METADATA, 9, {"topics": None, "allow_auto_topic_creation": False})
    return sorted((t["name"], t["is_internal"], len(t["partitions"])) for t in resp["topics"])


async def http_topics(server: KafkaServer) -> list[str]:
    assert server.http is not None
    async with (
        aiohttp.ClientSession() as http,
        http.get(f"http://127.0.0.1:{server.http.port}/api/topics") as resp,
    ):
        assert resp.status == 200, await resp.text()
        return [t["topic"] for t in (await resp.json())["topics"]]


@pytest.mark.parametrize("name", [OFFSETS, TXN_STATE, "__share_group_state", "__cluster_metadata"])
async def test_internal_names_are_refused_before_the_broker_has_them(
    server: KafkaServer, wire: WireClient, name: str
) -> None:
    for validate_only in (True, False):
        got = await create(wire, name, validate_only)
        assert got["error_code"] == ErrorCode.INVALID_REQUEST, got
        assert got["error_message"] == f"Creation of internal topic {name} is prohibited."
    assert await listed(wire) == []
    assert await http_topics(server) == []


async def test_existing_internal_topics_already_exist(
    server: KafkaServer, wire: WireClient
) -> None:
    find = await wire.request(FIND_COORDINATOR, 3, {"key": "g", "key_type": 0})
    assert find["error_code"] == 0  # __consumer_offsets is made for it
    init = {"transactional_id": "t", "transaction_timeout_ms": 60_000}
    assert (await wire.request(INIT_PID, 1, init))["error_code"] == 0  # __transaction_state
    before = await listed(wire)
    assert [name for name, _, _ in before] == [OFFSETS, TXN_STATE]
    for name in (OFFSETS, TXN_STATE):
        for validate_only in (True, False):
            got = await create(wire, name, validate_only)
            assert got["error_code"] == ErrorCode.TOPIC_ALREADY_EXISTS, got
            assert got["error_message"] == f"Topic '{name}' already exists."
    assert await listed(wire) == before
    assert all(internal for _, internal, _ in before)
    assert await http_topics(server) == [OFFSETS]  # the transaction log is not served

    # a real admin client gets its TopicAlreadyExistsError
    admin = AIOKafkaAdminClient(bootstrap_servers=f"127.0.0.1:{server.port}")
    await admin.start()
    try:
        resp = await admin.create_topics([NewTopic(OFFSETS, 2, 1)])
        (code,) = [t[1] for t in resp.topic_errors]  # type: ignore[attr-defined]
        assert code == TopicAlreadyExistsError.errno
    finally:
        await admin.close()
    assert await listed(wire) == before
