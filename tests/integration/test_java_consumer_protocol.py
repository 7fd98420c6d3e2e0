"""kafka-clients 4.3 with ``group.protocol=consumer`` (KIP-848) against kgroupd.

``tests/java/KgroupdConsumerProtocolCheck.java`` runs every scenario in one JVM (heartbeat
interval 500 ms) and prints one summary line asserted here: three members share six
partitions and consume every record once; a fourth joins and only the partitions that move
are revoked, none ever owned twice; ``Admin.describeConsumerGroups`` shows a CONSUMER group
with its epoch and assignments; a static member restarts and keeps its partitions while the
others are not disturbed; a broker-side regex subscription (``SubscriptionPattern``, RE2)
picks up a new matching topic and not another; a member killed without leaving (SIGKILL of
a second JVM) loses its partitions after the session timeout; a new set of members resumes at
the commits. The broker records the versions the client negotiates.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio

from kgroupd.broker.handlers import HANDLERS
from kgroupd.broker.net.server import KafkaServer
from kgroupd.broker.testing import running_server
from tests.conftest import require
from tests.support.java import JavaClient, java_available, prepare_java_client

pytestmark = pytest.mark.java

MAIN_CLASS = "KgroupdConsumerProtocolCheck"
PREFIX = "KGROUPD_CONSUMER_PROTOCOL "
RECORDS = 30_000
SESSION_MS = 3000


@pytest_asyncio.fixture
async def server() -> AsyncIterator[KafkaServer]:
    async with running_server(
        log_level="warning",
        group_consumer_min_heartbeat_interval_ms=100,
        group_consumer_heartbeat_interval_ms=500,
        group_consumer_min_session_timeout_ms=1000,
        group_consumer_session_timeout_ms=SESSION_MS,
    ) as srv:
        yield srv


@pytest.fixture(scope="module")
def java_client() -> JavaClient:
    require(java_available(), "java and javac (JDK 17) are not on PATH; the Java client needs them")
    return prepare_java_client()


async def test_java_consumer_protocol_group(
    server: KafkaServer, java_client: JavaClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    versions: dict[int, set[int]] = {}
    for key in (68, 8, 9):
        entry = HANDLERS[key]

        def tap(ctx: Any, req: dict[str, Any], _fn: Any = entry.fn) -> Any:
            versions.setdefault(ctx.api_key, set()).add(ctx.api_version)
            return _fn(ctx, req)

        # hot=None: the lane (broker/net/hot.py) answers Heartbeat/OffsetCommit without the
        # handler, so the tap would not see them; tests/integration/test_hot_lane.py checks
        # the lane answers byte for byte as this path does
        monkeypatch.setitem(HANDLERS, key, dataclasses.replace(entry, fn=tap, hot=None))
    command = java_client.command(
        MAIN_CLASS, f"127.0.0.1:{server.port}", "jcp", "jcp-group", str(RECORDS)
    )
    proc = await asyncio.create_subprocess_exec(
        *command, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    out, err = await asyncio.wait_for(proc.communicate(), 120)
    stdout = out.decode(errors="replace")
    lines = [ln for ln in stdout.splitlines() if ln.startswith(PREFIX)]
    where = f"\n--- stdout ---\n{stdout[-5000:]}\n--- stderr ---\n{err.decode()[-10000:]}"
    assert lines, f"no summary line{where}"
    s = json.loads(lines[-1][len(PREFIX) :])
    assert s["ok"], f"failed at {s.get('step')}: {s.get('exception')}{where}"
    assert (s["consumed"], s["duplicates"], s["double_owned"]) == (RECORDS, 0, 0), where
    assert s["only_moved_revoked"] and s["fourth"] >= 1, where
    assert (s["type"], s["members"], s["described_partitions"]) == ("Consumer", 4, 6), where
    assert s["state"] in ("Stable", "Reconciling") and s["group_epoch"] >= 4, where
    assert s["static_kept"] and s["others_undisturbed"], where
    assert s["regex_topics"] == "jcp-rx-a,jcp-rx-b", where  # not other-jcp
    # a member killed without leaving (SIGKILL of a second JVM) loses its partitions after the
    # session timeout, not before; a new set of members resumes at the commits
    assert SESSION_MS - 1000 <= s["killed_reassigned_ms"] <= SESSION_MS + 10_000, where
    assert (s["resumed"], s["old_reread_after_resume"]) == (300, 0), where
    assert s["errors"] == "", where
    # the newest versions: ConsumerGroupHeartbeat v1, and the KIP-848 consumer's commits by id
    assert versions[68] == {HANDLERS[68].max_version}, versions
    assert max(versions[8]) == HANDLERS[8].max_version, versions
