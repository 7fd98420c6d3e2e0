"""The Java client's classic consumer group (kafka-clients 4.3) against kgroupd (issue 3).

``tests/java/KgroupdGroupCheck.java`` runs the scenario in one JVM and prints one
``KGROUPD_GROUP_CHECK <json>`` summary line, asserted on here:

- two consumers (``group.protocol=classic``, ``subscribe``), one static (``group.instance.id``:
  JoinGroup v5, SyncGroup v3, Heartbeat v3, OffsetCommit v7), on their own threads, consume a
  4-partition topic and ``commitSync``; ``Admin.describeConsumerGroups`` /
  ``describeClassicGroups`` (Stable, both members, the instance id, the 4 partitions once each),
  ``listGroups`` / ``listConsumerGroups`` and ``listConsumerGroupOffsets`` (last consumed + 1
  per partition, the committer's metadata) agree with what the consumers saw;
- the dynamic consumer closes (LeaveGroup): the static one takes every partition and reads
  nothing again;
- the static consumer closes: as in Kafka, the Java client sends no LeaveGroup for it and the
  group keeps it (Stable, one member) until ``Admin.removeMembersFromConsumerGroup`` removes it
  by instance id (LeaveGroup v3): Empty, offsets kept; a second removal gets
  UNKNOWN_MEMBER_ID;
- a new static member resumes at the commits, closes, and is removed when its session times
  out (the broker's minimum session timeout is lowered so that takes 3 s, not 6 s).

The jars and compiled classes are cached in ``.cache/java`` (see ``tests.support.java``).
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import re
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import pytest
import pytest_asyncio

from kgroupd.broker.coordinator.state import GroupState
from kgroupd.broker.handlers import HANDLERS
from kgroupd.broker.net.server import KafkaServer
from kgroupd.broker.testing import running_server
from tests.conftest import require
from tests.support.java import JavaClient, java_available, prepare_java_client

pytestmark = pytest.mark.java

MAIN_CLASS = "KgroupdGroupCheck"
SUMMARY_PREFIX = "KGROUPD_GROUP_CHECK "
# Our SLF4J provider's line format: "HH:MM:SS.nnn LEVEL [thread] Logger: message".
CLIENT_COMPLAINT = re.compile(r"^\S+ (WARN|ERROR) ", re.MULTILINE)
JAVA_TIMEOUT_S = 90.0  # the program gives up on its own after 20 s per wait

TOPIC, GROUP = "java-group", "java-group-check"
PARTITIONS = 4
FIRST_BATCH = [40, 70, 110, 130]  # as KgroupdGroupCheck.FIRST_BATCH
SECOND_BATCH = 5
STATIC, EXPIRY = "kgroupd-static-1", "kgroupd-static-2"
CLIENT = {
    "dynamic": "kgroupd-group-dynamic",
    "static": "kgroupd-group-static",
    "expiry": "kgroupd-group-expiry",
}
HEARTBEAT_MS = 500  # as KgroupdGroupCheck.HEARTBEAT_INTERVAL_MS
EXPIRY_SESSION_MS = 3000
MIN_SESSION_MS = 1000
ADMIN_CLIENT = "kgroupd-group-admin"

# Group API keys, and the version kafka-clients 4.3 picks from the ranges kgroupd serves.
OFFSET_COMMIT, OFFSET_FETCH, FIND_COORDINATOR = 8, 9, 10
JOIN_GROUP, HEARTBEAT, LEAVE_GROUP, SYNC_GROUP = 11, 12, 13, 14
DESCRIBE_GROUPS, LIST_GROUPS = 15, 16
GROUP_APIS = (
    OFFSET_COMMIT,
    OFFSET_FETCH,
    FIND_COORDINATOR,
    JOIN_GROUP,
    HEARTBEAT,
    LEAVE_GROUP,
    SYNC_GROUP,
    DESCRIBE_GROUPS,
    LIST_GROUPS,
)


@pytest_asyncio.fixture
async def server() -> AsyncIterator[KafkaServer]:
    async with running_server(
        log_level="warning",
        initial_rebalance_delay_ms=200,
        group_min_session_timeout_ms=MIN_SESSION_MS,
    ) as srv:
        yield srv


@dataclass(frozen=True)
class Seen:
    """One group request the broker received."""

    client_id: str | None
    api_key: int
    version: int
    request: dict[str, Any]


@pytest.fixture
def group_requests(monkeypatch: pytest.MonkeyPatch) -> list[Seen]:
    """Every group request the broker receives, in order (the handlers are wrapped)."""
    seen: list[Seen] = []
    for key in GROUP_APIS:
        entry = HANDLERS[key]

        def tap(ctx: Any, req: dict[str, Any], _fn: Any = entry.fn) -> Any:
            seen.append(Seen(ctx.client_id, ctx.api_key, ctx.api_version, req))
            return _fn(ctx, req)

        # hot=None: the lane (broker/net/hot.py) answers Heartbeat/OffsetCommit without the
        # handler, so the tap would not see them; tests/integration/test_hot_lane.py checks
        # the lane answers byte for byte as this path does
        monkeypatch.setitem(HANDLERS, key, dataclasses.replace(entry, fn=tap, hot=None))
    return seen


@pytest.fixture(scope="module")
def java_client() -> JavaClient:
    require(java_available(), "java and javac (JDK 17) are not on PATH; the Java client needs them")
    return prepare_java_client()


@dataclass
class JavaRun:
    command: list[str]
    returncode: int | None
    stdout: str
    stderr: str
    seconds: float
    summary: dict[str, Any] | None

    def report(self, limit: int = 30_000) -> str:
        args = " ".join(self.command[self.command.index(MAIN_CLASS) :])
        return (
            f"\n$ java ... {args}\nexit {self.returncode} after {self.seconds:.1f} s"
            f"\n--- stdout ---\n{self.stdout[-limit:]}\n--- stderr ---\n{self.stderr[-limit:]}"
        )


async def run_group_check(client: JavaClient, bootstrap: str, log_level: str = "WARN") -> JavaRun:
    """Run KgroupdGroupCheck without blocking the event loop the in-process broker runs on."""
    command = client.command(
        MAIN_CLASS,
        bootstrap,
        TOPIC,
        GROUP,
        str(EXPIRY_SESSION_MS),
        properties={"kgroupd.log.level": log_level},
    )
    started = time.monotonic()
    proc = await asyncio.create_subprocess_exec(
        *command, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    try:
        out, err = await asyncio.wait_for(proc.communicate(), JAVA_TIMEOUT_S)
    except TimeoutError:
        proc.kill()
        out, err = await proc.communicate()
        err += f"\n[killed by the test after {JAVA_TIMEOUT_S} s]".encode()
    stdout, stderr = out.decode(errors="replace"), err.decode(errors="replace")
    summary = None
    for line in reversed(stdout.splitlines()):
        if line.startswith(SUMMARY_PREFIX):
            summary = json.loads(line[len(SUMMARY_PREFIX) :])
            break
    return JavaRun(command, proc.returncode, stdout, stderr, time.monotonic() - started, summary)


def member(description: dict[str, Any], client_id: str) -> dict[str, Any]:
    found = [m for m in description["members"] if m["client_id"] == client_id]
    assert len(found) == 1, f"{client_id} in {description['members']}"
    return found[0]


async def test_java_consumer_group_static_member_commits_describe_remove_expire(
    server: KafkaServer, java_client: JavaClient, group_requests: list[Seen]
) -> None:
    run = await run_group_check(java_client, f"127.0.0.1:{server.port}")
    assert run.summary is not None, f"no summary line from the Java group check{run.report()}"
    s = run.summary
    assert run.returncode == 0 and s["ok"], (
        f"Java group check failed at step {s.get('step')}: {s.get('exception')}"
        f" {s.get('errors')}{run.report()}"
    )
    complaints = CLIENT_COMPLAINT.findall(run.stderr)
    assert not complaints, f"the Java client logged warnings or errors{run.report()}"
    where = run.report()
    node = server.broker.node_id
    everything = list(range(PARTITIONS))

    # Both members consumed every record once and committed last consumed + 1 everywhere.
    assert s["produced"] == FIRST_BATCH, where
    assert s["last_consumed"] == [n - 1 for n in FIRST_BATCH], where
    assert s["offsets"] == [n + 1 for n in s["last_consumed"]], where
    assert s["offset_metadata"] == s["last_consumed_by"], where
    assert s["duplicates"] == 0 and s["thread_errors"] == [], where
    members = s["members"]
    assert (
        members["static"]["instance_id"] == STATIC and members["dynamic"]["instance_id"] is None
    ), where
    assert (
        sorted(members["static"]["partitions"] + members["dynamic"]["partitions"]) == everything
    ), where
    assert members["static"]["partitions"] and members["dynamic"]["partitions"], where
    assert members["static"]["generation"] == members["dynamic"]["generation"] == s["generation"], (
        where
    )
    assert all(m["commit_failures"] == 0 for m in members.values()), where

    # describeConsumerGroups while both members are in the group.
    stable = s["stable"]
    assert stable["group_id"] == GROUP, where
    assert (stable["state"], stable["type"], stable["assignor"]) == (
        "Stable",
        "Classic",
        "range",
    ), where
    assert stable["simple"] is False and stable["coordinator"] == node, where
    assert [m["client_id"] for m in stable["members"]] == sorted(CLIENT[n] for n in members), where
    for name, mine in members.items():
        described = member(stable, CLIENT[name])
        assert described["instance_id"] == mine["instance_id"], where
        assert described["member_id"] == mine["member_id"], where
        assert described["partitions"] == mine["partitions"], where
        assert described["host"].lstrip("/") == "127.0.0.1", where
    assigned = [p for m in stable["members"] for p in m["partitions"]]
    assert sorted(assigned) == everything, f"each partition assigned exactly once{where}"
    # describeClassicGroups (DescribeGroups itself) agrees: protocol is the protocol type.
    classic = s["stable_classic"]
    assert (classic["state"], classic["protocol"], classic["protocol_data"]) == (
        "Stable",
        "consumer",
        "range",
    ), where
    assert classic["members"] == stable["members"], where
    # listGroups and the deprecated listConsumerGroups list the group, with its state (ListGroups
    # v4+) and type (v5): the client negotiates ListGroups v5.
    listed = {"type": "Classic", "protocol": "consumer", "state": "Stable", "simple": False}
    assert s["list_groups"] == listed, where
    assert s["list_groups_after_remove"] == {**listed, "state": "Empty"}, where
    assert s["list_consumer_groups"] == {"state": "Stable", "type": "Classic", "simple": False}, (
        where
    )

    # The dynamic member left (LeaveGroup): the static one owns everything, rereads nothing.
    assert s["takeover_generation"] > s["generation"], where
    assert s["takeover_reread"] == 0, where
    takeover = s["takeover"]
    assert takeover["state"] == "Stable", where
    assert [(m["client_id"], m["instance_id"], m["partitions"]) for m in takeover["members"]] == [
        (CLIENT["static"], STATIC, everything)
    ], where

    # The static member closed without LeaveGroup: still a member until removed.
    closed = s["static_closed"]
    assert closed["state"] == "Stable", where
    assert [(m["instance_id"], m["member_id"]) for m in closed["members"]] == [
        (STATIC, members["static"]["member_id"])
    ], where
    removed = s["removed"]
    assert (removed["state"], removed["members"], removed["assignor"]) == ("Empty", [], ""), where
    assert s["remove_again"] == "UnknownMemberIdException", where
    assert s["offsets_after_remove"] == s["offsets"], where

    # A new static member resumes at the commits; after closing it stays until its session
    # times out.
    total = [n + SECOND_BATCH for n in FIRST_BATCH]
    assert s["produced_total"] == total, where
    assert s["expiry_first_offsets"] == FIRST_BATCH == s["expiry_resume_expected"], where
    assert s["expiry_records"] == SECOND_BATCH * PARTITIONS, where
    assert s["expiry_member"]["partitions"] == everything, where
    expiry_closed = s["expiry_closed"]
    assert expiry_closed["state"] == "Stable", where
    assert [m["instance_id"] for m in expiry_closed["members"]] == [EXPIRY], where
    expired = s["expired"]
    assert (expired["state"], expired["members"]) == ("Empty", []), where
    # Measured from the start of close(); the last heartbeat was at most an interval before.
    low, high = EXPIRY_SESSION_MS - HEARTBEAT_MS - 500, EXPIRY_SESSION_MS + 3000
    assert low <= s["expired_after_ms"] <= high, where
    assert s["offsets_final"] == total, where

    # The versions the Java client used: the newest kgroupd serves (static membership needs
    # at least JoinGroup v5, SyncGroup v3, Heartbeat v3, OffsetCommit v7), and every such
    # request carries the instance id.
    def latest(api: int) -> int:
        return HANDLERS[api].max_version

    def versions(client: str, api: int) -> set[int]:
        return {r.version for r in group_requests if r.client_id == client and r.api_key == api}

    for name, instance in (("static", STATIC), ("expiry", EXPIRY), ("dynamic", None)):
        client = CLIENT[name]
        for api, version in (
            (JOIN_GROUP, latest(JOIN_GROUP)),
            (SYNC_GROUP, latest(SYNC_GROUP)),
            (HEARTBEAT, latest(HEARTBEAT)),
            # The classic consumer never names topics by id, so it stops at v9 (v10 is the
            # KIP-848 consumer's, with topic ids).
            (OFFSET_COMMIT, latest(OFFSET_COMMIT) - 1),
        ):
            assert versions(client, api) == {version}, f"{client} api {api}{where}"
        instances = {
            r.request.get("group_instance_id")
            for r in group_requests
            if r.client_id == client and r.api_key in (JOIN_GROUP, SYNC_GROUP, HEARTBEAT)
        }
        assert instances == {instance}, f"{client}: {instances}{where}"
    leaves = [
        (
            r.client_id,
            r.version,
            [(m["member_id"], m["group_instance_id"]) for m in r.request["members"]],
        )
        for r in group_requests
        if r.api_key == LEAVE_GROUP
    ]
    # Only the dynamic member leaves on close; the Admin client removes the static one by
    # instance id (twice: the second gets UNKNOWN_MEMBER_ID).
    leave = latest(LEAVE_GROUP)
    assert leaves == [
        (CLIENT["dynamic"], leave, [(members["dynamic"]["member_id"], None)]),
        (ADMIN_CLIENT, leave, [("", STATIC)]),
        (ADMIN_CLIENT, leave, [("", STATIC)]),
    ], where
    # The Admin client negotiates the newest versions kgroupd serves.
    assert versions(ADMIN_CLIENT, DESCRIBE_GROUPS) == {latest(DESCRIBE_GROUPS)}, where
    assert versions(ADMIN_CLIENT, LIST_GROUPS) == {latest(LIST_GROUPS)}, where
    # (OffsetFetch v10 names topics by id, which the Admin client does not: it stops at v9.)
    assert versions(ADMIN_CLIENT, OFFSET_FETCH) == {latest(OFFSET_FETCH) - 1}, where

    # The broker's own view.
    shard = server.broker.coordinator.shard_for(GROUP)
    group = shard.groups[GROUP]
    assert group.state is GroupState.EMPTY and not group.members and not group.static_members, where
    committed = shard.committed(GROUP)
    assert {p: committed[(TOPIC, p)].offset for p in everything} == dict(enumerate(total)), where
