"""kafka-clients 4.3 against kgroupd (``tests/java/KgroupdShareRenewCheck.java``): an
explicit-mode KafkaShareConsumer's RENEW acknowledgements (KIP-1222) succeed where the group
allows them (the renewed records come back from the next poll, not redelivered) and fail with
InvalidRecordStateException where share.renew.acknowledge.enable is false; a KafkaConsumer
given a share group's id is refused: InconsistentGroupProtocolException (the classic
protocol's JoinGroup), GroupIdNotFoundException (the consumer protocol's heartbeat)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

import pytest
import pytest_asyncio

from kgroupd.broker.net.server import KafkaServer
from kgroupd.broker.testing import running_server
from tests.conftest import require
from tests.support.java import JavaClient, java_available, prepare_java_client

pytestmark = pytest.mark.java

PREFIX = "KGROUPD_RENEW "


@pytest_asyncio.fixture
async def server() -> AsyncIterator[KafkaServer]:
    async with running_server(log_level="warning") as srv:
        yield srv


@pytest.fixture(scope="module")
def java_client() -> JavaClient:
    require(java_available(), "java and javac (JDK 17) are not on PATH; the Java client needs them")
    return prepare_java_client()


async def test_java_renew_and_group_types(server: KafkaServer, java_client: JavaClient) -> None:
    command = java_client.command("KgroupdShareRenewCheck", f"127.0.0.1:{server.port}", "jrenew")
    proc = await asyncio.create_subprocess_exec(
        *command, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    out, err = await asyncio.wait_for(proc.communicate(), 240)
    stdout = out.decode(errors="replace")
    lines = [ln for ln in stdout.splitlines() if ln.startswith(PREFIX)]
    where = f"\n--- stdout ---\n{stdout[-5000:]}\n--- stderr ---\n{err.decode()[-10000:]}"
    assert lines, f"no summary line{where}"
    s = json.loads(lines[-1][len(PREFIX) :])
    assert s["renew-on_held"] > 0 and s["renew-off_held"] > 0, where
    assert (s["renew-on_renew"], s["renew-on_accept"]) == ("ok", "ok"), where
    # renewed records come back from the next poll, not redelivered (delivery count 1)
    held = s["renew-on_held"]
    assert s["renew-on_back"] == ",".join(f"{o}/1" for o in range(held)), where
    assert s["renew-off_renew"] == "InvalidRecordStateException", where
    assert s["join_classic"] == "InconsistentGroupProtocolException", where
    assert s["join_consumer"] == "GroupIdNotFoundException", where
