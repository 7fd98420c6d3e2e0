"""A rolling upgrade from the classic protocol to the consumer protocol (KIP-848 online
migration) with kafka-clients 4.3 against kgroupd.

``tests/java/KgroupdRollingUpgrade.java`` starts three ``group.protocol=classic`` members
sharing six partitions while a producer writes, then replaces them one at a time with
``group.protocol=consumer`` members. Every rebalance callback updates one ownership map: no
partition may ever be owned by two members. The group is classic before, a consumer group
with classic and consumer members in the middle, and a consumer group of consumer members at
the end; every record is consumed.
"""

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

PREFIX = "KGROUPD_ROLLING_UPGRADE "
RECORDS = 3000


@pytest_asyncio.fixture
async def server() -> AsyncIterator[KafkaServer]:
    async with running_server(
        log_level="warning",
        initial_rebalance_delay_ms=0,
        group_consumer_min_heartbeat_interval_ms=100,
        group_consumer_heartbeat_interval_ms=500,
        group_consumer_min_session_timeout_ms=1000,
        group_consumer_session_timeout_ms=6000,
    ) as srv:
        yield srv


@pytest.fixture(scope="module")
def java_client() -> JavaClient:
    require(java_available(), "java and javac (JDK 17) are not on PATH; the Java client needs them")
    return prepare_java_client()


async def test_rolling_upgrade_of_a_classic_group(
    server: KafkaServer, java_client: JavaClient
) -> None:
    command = java_client.command(
        "KgroupdRollingUpgrade", f"127.0.0.1:{server.port}", "jru", "jru-group", str(RECORDS)
    )
    proc = await asyncio.create_subprocess_exec(
        *command, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    out, err = await asyncio.wait_for(proc.communicate(), 180)
    stdout = out.decode(errors="replace")
    lines = [ln for ln in stdout.splitlines() if ln.startswith(PREFIX)]
    where = f"\n--- stdout ---\n{stdout[-5000:]}\n--- stderr ---\n{err.decode()[-10000:]}"
    assert lines, f"no summary line{where}"
    s = json.loads(lines[-1][len(PREFIX) :])
    assert s["ok"], f"failed at {s.get('step')}: {s.get('exception')}{where}"
    assert s["double_owned"] == 0, s["double"]
    assert (s["type_before"], s["type_mixed"], s["type_after"]) == (
        "Classic",
        "Consumer",
        "Consumer",
    ), where
    assert (s["members_mixed"], s["members_after"]) == (3, 3), where
    assert s["consumed"] == RECORDS, where
    assert s["errors"] == "", where
    group = server.broker.coordinator.shard_for("jru-group").consumer_groups["jru-group"]
    assert all(not m.uses_classic for m in group.members.values())
