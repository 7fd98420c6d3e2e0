"""``kgroupd share-groups ...`` (kafka-share-groups) against a real kgroupd: list, describe
(start offsets and lag, members, state), reset-offsets (dry run, then --execute; refused while
the group has members), delete-offsets and delete. The tool runs in-process
(``kgroupd.broker.cli.admin.amain``), output captured."""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import AsyncIterator, Iterator

import pytest
import pytest_asyncio
import structlog

from kgroupd.broker.cli.admin import amain
from kgroupd.broker.net.server import KafkaServer
from kgroupd.broker.testing import running_server
from tests.support.kafka_wire import WireClient, build_batch, create_topic, produce_request
from tests.support.share_wire import ACCEPT, ack, acquired, heartbeat, set_group_config, share_fetch

TOPIC, GROUP = "cli-sq", "cli-g"


@pytest.fixture(autouse=True)
def quiet_broker() -> Iterator[None]:
    saved = structlog.get_config()
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    yield
    structlog.configure(**saved)


@pytest_asyncio.fixture
async def server() -> AsyncIterator[KafkaServer]:
    async with running_server(log_level="warning") as srv:
        yield srv


async def cli(capsys: pytest.CaptureFixture[str], port: int, *argv: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = await amain(["share-groups", *argv, "--bootstrap-server", f"127.0.0.1:{port}"])
    out, err = capsys.readouterr()
    return code, out, err


async def test_share_groups_tool(server: KafkaServer, capsys: pytest.CaptureFixture[str]) -> None:
    member = uuid.uuid4().hex[:22]
    port = server.port
    async with await WireClient.connect(port) as wire:
        await create_topic(wire, TOPIC, 2, {})
        for i in range(8):
            await wire.request(
                0, 8, produce_request(TOPIC, 0, build_batch([(None, b"%d" % i, [])]))
            )
        await set_group_config(wire, GROUP, "share.auto.offset.reset", "earliest")
        hb = await heartbeat(wire, GROUP, member, 0, TOPIC)
        topic_id = hb["assignment"]["topic_partitions"][0]["topic_id"]
        assert acquired(await share_fetch(wire, GROUP, member, 0, topic_id, [])) == [(0, 7, 1)]
        await share_fetch(wire, GROUP, member, 1, topic_id, [ack(0, 4, ACCEPT)])

        assert await cli(capsys, port, "list") == (0, f"{GROUP}\n", "")
        code, out, _ = await cli(capsys, port, "list", "--state")
        assert (code, out.split()) == (0, ["GROUP", "STATE", GROUP, "Stable"])
        code, out, _ = await cli(capsys, port, "describe", GROUP, "--output", "json")
        assert code == 0
        assert json.loads(out) == [
            {"group": GROUP, "topic": TOPIC, "partition": 0, "start_offset": 5, "lag": 3}
        ]
        code, out, _ = await cli(capsys, port, "describe", GROUP, "--members", "--output", "json")
        (m,) = json.loads(out)
        assert (m["consumer_id"], m["partitions"], m["assignment"]) == (
            member,
            2,
            f"{TOPIC}:0,{TOPIC}:1",
        )
        code, out, _ = await cli(capsys, port, "describe", GROUP, "--state", "--output", "json")
        (st,) = json.loads(out)
        assert (st["state"], st["members"]) == ("Stable", 1)

        # while a member is in the group: refused
        code, _, err = await cli(
            capsys,
            port,
            "reset-offsets",
            GROUP,
            "--topic",
            f"{TOPIC}:0",
            "--to-earliest",
            "--execute",
        )
        assert (code, err.strip()) == (
            1,
            f"Error: NON_EMPTY_GROUP: Share group '{GROUP}' is not empty.",
        )
        assert (await heartbeat(wire, GROUP, member, -1))["error_code"] == 0

        code, out, err = await cli(
            capsys, port, "reset-offsets", GROUP, "--topic", f"{TOPIC}:0", "--to-offset", "2"
        )
        assert code == 0 and "--execute option is missing" in err
        assert out.split()[-4:] == [GROUP, TOPIC, "0", "2"]
        code, out, _ = await cli(capsys, port, "describe", GROUP, "--output", "json")
        assert json.loads(out)[0]["start_offset"] == 5  # a dry run changed nothing
        code, out, _ = await cli(
            capsys, port, "reset-offsets", GROUP, "--all-topics", "--to-earliest", "--execute"
        )
        assert code == 0 and out.split()[-4:] == [GROUP, TOPIC, "0", "0"]
        code, out, _ = await cli(capsys, port, "describe", GROUP, "--output", "json")
        assert json.loads(out) == [
            {"group": GROUP, "topic": TOPIC, "partition": 0, "start_offset": 0, "lag": 8}
        ]

        code, out, _ = await cli(capsys, port, "delete-offsets", GROUP, "--topic", TOPIC)
        assert (code, out.split()) == (0, ["TOPIC", "STATUS", TOPIC, "Successful"])
        code, out, _ = await cli(capsys, port, "describe", GROUP, "--output", "json")
        assert json.loads(out) == []
        code, out, _ = await cli(capsys, port, "delete", GROUP)
        assert (code, out.strip()) == (
            0,
            f"Deletion of requested share groups ('{GROUP}') was successful.",
        )
        code, _, err = await cli(capsys, port, "describe", GROUP)
        assert (code, err.strip()) == (
            1,
            f"Error: GROUP_ID_NOT_FOUND: Share group '{GROUP}' does not exist.",
        )
