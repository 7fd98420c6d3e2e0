"""kafka-clients 4.3's KafkaShareConsumer and share-group Admin APIs against kgroupd (KIP-932).

``tests/java/KgroupdShareCheck.java`` runs in one JVM and prints one summary line asserted
here: two implicit-mode consumers of one group share one partition and take each of its
records exactly once; an explicit-mode consumer releases a record (delivered again with
delivery count 2), rejects one (never delivered again) and accepts the rest;
``Admin.describeShareGroups`` shows the group Stable with both members on the partition,
``listGroups(forShareGroups())`` lists the groups; ``listShareGroupOffsets`` shows the start
offset and lag, ``alterShareGroupOffsets`` moves the start back (its records come again),
``deleteShareGroupOffsets`` removes it and ``deleteShareGroups`` the group. The broker records
the versions the client negotiates.
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

MAIN_CLASS = "KgroupdShareCheck"
PREFIX = "KGROUPD_SHARE "
SHARE_APIS = (76, 77, 78, 79, 90, 91, 92)


@pytest_asyncio.fixture
async def server() -> AsyncIterator[KafkaServer]:
    async with running_server(log_level="warning") as srv:
        yield srv


@pytest.fixture(scope="module")
def java_client() -> JavaClient:
    require(java_available(), "java and javac (JDK 17) are not on PATH; the Java client needs them")
    return prepare_java_client()


async def test_java_share_consumer_and_admin(
    server: KafkaServer, java_client: JavaClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    versions: dict[int, set[int]] = {}
    for key in SHARE_APIS:
        entry = HANDLERS[key]

        def tap(ctx: Any, req: dict[str, Any], _fn: Any = entry.fn) -> Any:
            versions.setdefault(ctx.api_key, set()).add(ctx.api_version)
            return _fn(ctx, req)

        monkeypatch.setitem(HANDLERS, key, dataclasses.replace(entry, fn=tap))
    command = java_client.command(MAIN_CLASS, f"127.0.0.1:{server.port}", "jshare", "jshare-g")
    proc = await asyncio.create_subprocess_exec(
        *command, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    out, err = await asyncio.wait_for(proc.communicate(), 240)
    stdout = out.decode(errors="replace")
    lines = [ln for ln in stdout.splitlines() if ln.startswith(PREFIX)]
    where = f"\n--- stdout ---\n{stdout[-5000:]}\n--- stderr ---\n{err.decode()[-10000:]}"
    assert lines, f"no summary line{where}"
    s = json.loads(lines[-1][len(PREFIX) :])
    # implicit mode: 100 records, each delivered once across the two consumers
    assert (s["implicit_offsets"], s["implicit_duplicates"], s["implicit_deliveries"]) == (
        100,
        0,
        100,
    ), where
    assert (s["describe_state"], s["describe_members"]) == ("Stable", 2), where
    assert s["describe_assigned"] == "jshare-0", where
    # explicit mode: 100 released and delivered again (count 2), 101 rejected: never again
    assert s["explicit_deliveries"] == "100:1,101:1,102:1,103:1,104:1,100:2", where
    assert s["listed"] == "jshare-g-explicit:Share:Empty,jshare-g-implicit:Share:Empty", where
    assert s["offsets_after"] == "105/lag=0", where
    assert s["offsets_altered"].startswith("102/"), where
    assert s["after_alter"] == "[102, 103, 104]", where
    assert s["offsets_deleted"] == "none", where
    assert s["describe_deleted"] == "GroupIdNotFoundException", where
    # Kafka 4.3's versions, each the newest served
    for key in SHARE_APIS:
        assert versions.get(key) == {HANDLERS[key].max_version}, (key, versions)
