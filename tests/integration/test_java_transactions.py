"""kafka-clients 4.3 transactions against kgroupd, with transaction version 2 (KIP-890: the
broker's default; partitions added by Produce and TxnOffsetCommit, EndTxn v5 bumping the
epoch) and with ``--transaction-version 1`` (AddPartitionsToTxn and AddOffsetsToTxn).

``tests/java/KgroupdTransactionsCheck.java`` runs in one JVM and prints one summary line:
commit, abort and commit across three partitions of two topics, read back with read_committed
(exactly the committed records) and read_uncommitted (all of them); zombie fencing (a second
producer with the transactional id fences the first: its next send fails with
INVALID_PRODUCER_EPOCH, its next commit with PRODUCER_FENCED, as Kafka answers); and
consume-transform-produce of 3,000 records by a processor in child JVMs, SIGKILLed after a
third and restarted: every output once under read_committed, the group's offsets at the
input's end. The consume-transform-produce group uses ``group.protocol=consumer`` (KIP-848)
with version 2 and a classic static member with version 1. The broker records the versions
the client sends.
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

MAIN_CLASS = "KgroupdTransactionsCheck"
PREFIX = "KGROUPD_TRANSACTIONS "
RECORDS = 3000
PRODUCE, INIT_PRODUCER_ID, ADD_PARTITIONS, ADD_OFFSETS, END_TXN, TXN_OFFSET_COMMIT = (
    0,
    22,
    24,
    25,
    26,
    28,
)
TAPPED = (PRODUCE, INIT_PRODUCER_ID, ADD_PARTITIONS, ADD_OFFSETS, END_TXN, TXN_OFFSET_COMMIT)


@pytest.fixture(scope="module")
def java_client() -> JavaClient:
    require(java_available(), "java and javac (JDK 17) are not on PATH; the Java client needs them")
    return prepare_java_client()


@pytest_asyncio.fixture(params=[2, 1], ids=["transaction-version-2", "transaction-version-1"])
async def server(request: pytest.FixtureRequest) -> AsyncIterator[KafkaServer]:
    async with running_server(
        log_level="warning",
        transaction_version=request.param,
        group_consumer_min_heartbeat_interval_ms=100,
        group_consumer_heartbeat_interval_ms=500,
        group_consumer_min_session_timeout_ms=1000,
        group_consumer_session_timeout_ms=3000,
    ) as srv:
        yield srv


async def test_java_transactions(
    server: KafkaServer, java_client: JavaClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    tv = server.config.transaction_version
    versions: dict[int, set[int]] = {key: set() for key in TAPPED}
    for key in TAPPED:
        entry = HANDLERS[key]

        def tap(ctx: Any, req: dict[str, Any], _fn: Any = entry.fn) -> Any:
            versions[ctx.api_key].add(ctx.api_version)
            return _fn(ctx, req)

        monkeypatch.setitem(HANDLERS, key, dataclasses.replace(entry, fn=tap))
    protocol = "consumer" if tv == 2 else "classic"
    command = java_client.command(
        MAIN_CLASS, f"127.0.0.1:{server.port}", f"jtx{tv}", str(RECORDS), protocol
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
    assert (s["read_committed_exact"], s["committed"]) == (True, 12), where
    assert (s["read_uncommitted_all"], s["uncommitted"]) == (True, 18), where
    # as Kafka answers: Produce with an old epoch INVALID_PRODUCER_EPOCH, EndTxn PRODUCER_FENCED
    assert s["zombie_send_error"] == "InvalidProducerEpochException", where
    assert s["zombie_commit_error"] == "ProducerFencedException", where
    assert (s["zombie_visible"], s["successors_visible"]) == (False, 2), where
    assert RECORDS // 3 <= s["killed_after"] < RECORDS, where
    assert s["restart_exit"] == 0, where
    assert (s["outputs"], s["duplicates"], s["missing"]) == (RECORDS, 0, 0), where
    assert s["offsets_match"], where
    if tv == 2:  # KIP-890 part 2: no AddPartitionsToTxn/AddOffsetsToTxn from the client
        assert versions[END_TXN] == {HANDLERS[END_TXN].max_version}, versions
        assert versions[ADD_PARTITIONS] == versions[ADD_OFFSETS] == set(), versions
        assert max(versions[PRODUCE]) == HANDLERS[PRODUCE].max_version, versions
        assert versions[TXN_OFFSET_COMMIT] == {HANDLERS[TXN_OFFSET_COMMIT].max_version}, versions
    else:
        assert max(versions[END_TXN]) <= 4, versions
        assert versions[ADD_PARTITIONS] == {3} and versions[ADD_OFFSETS], versions  # v3: clients
        assert max(versions[TXN_OFFSET_COMMIT]) <= 4, versions
