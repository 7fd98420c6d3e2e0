"""A Java consumer (kafka-clients 4.3, classic and ``group.protocol=consumer``) whose group
coordinator node goes down and comes back (``--nodes 3`` and the test controls, issue 28).

``tests/java/KgroupdNodesCheck.java`` reads and commits a round of records, takes its
coordinator's node down over HTTP, reads and commits a second round (through the coordinator
FindCoordinator names now), brings the node back, reads and commits a third, closes; a new
consumer of the group then resumes at the commits and reads nothing again. It prints one
``KGROUPD_NODES_CHECK <json>`` line, asserted on here.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator

import pytest

from kgroupd.broker.testing import ThreadedBroker
from tests.conftest import require
from tests.support.java import JavaClient, java_available, prepare_java_client

pytestmark = pytest.mark.java

MAIN_CLASS = "KgroupdNodesCheck"
PREFIX = "KGROUPD_NODES_CHECK "
TOPIC, PER_ROUND = "java-nodes", 30
JAVA_TIMEOUT_S = 150.0


@pytest.fixture(scope="module")
def java_client() -> JavaClient:
    require(java_available(), "java and javac (JDK 17) are not on PATH; the Java client needs them")
    return prepare_java_client()


@pytest.fixture
def broker() -> Iterator[ThreadedBroker]:
    with ThreadedBroker(
        nodes=3, create_topics=[f"{TOPIC}:3"], initial_rebalance_delay_ms=0
    ) as running:
        yield running


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
async def test_java_consumer_keeps_its_commits_across_its_coordinator_going_down(
    broker: ThreadedBroker, java_client: JavaClient, protocol: str
) -> None:
    group = f"java-nodes-{protocol}"
    command = java_client.command(
        MAIN_CLASS, broker.bootstrap_all, broker.http, TOPIC, group, protocol, str(PER_ROUND)
    )
    proc = await asyncio.create_subprocess_exec(
        *command, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    try:
        out, err = await asyncio.wait_for(proc.communicate(), JAVA_TIMEOUT_S)
    except TimeoutError:
        proc.kill()
        out, err = await proc.communicate()
    stdout, stderr = out.decode(errors="replace"), err.decode(errors="replace")
    report = f"\n--- stdout ---\n{stdout[-20000:]}\n--- stderr ---\n{stderr[-20000:]}"
    lines = [line for line in stdout.splitlines() if line.startswith(PREFIX)]
    assert lines, report
    summary = json.loads(lines[-1][len(PREFIX) :])
    assert summary["error"] is None, report
    assert summary["consumed"] == 3 * PER_ROUND and summary["duplicates"] == 0, report
    first, during, after = summary["coordinators"]
    assert during != first and after == first, report  # moved, and back
    expected = {f"{TOPIC}-{p}": PER_ROUND for p in range(3)}  # 3 rounds of 10 per partition
    assert summary["committed"] == expected, report
    assert summary["resumed"] == expected and summary["second_read"] == 0, report
    assert broker.controls.nodes()[first]["up"]  # node ids 0..2: index = id
