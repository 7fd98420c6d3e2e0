"""kafkajs (npm) consumer groups against kgroupd (issue 3), when node is present.

``tests/js/group_consume.js`` runs kafkajs consumers of one group and reports joins, records
and commits as JSON lines (see its header). Two of them share a 4-partition topic, consume
what is produced, commit and leave; then a new member of the group resumes from the commits.

kafkajs is installed from ``tests/js/package-lock.json`` with ``npm ci`` into the git-ignored
``.cache/js/<hash of package.json and package-lock.json>/``, once (under a lock, published by
renaming a finished directory into place, so an interrupted install never looks complete).
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from aiokafka import AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient

from kgroupd.broker.config.settings import TopicSpec
from kgroupd.broker.coordinator import DescribeGroups
from kgroupd.broker.net.server import KafkaServer
from kgroupd.broker.testing import running_server
from tests.conftest import require

REPO = Path(__file__).resolve().parents[2]
JS_DIR = REPO / "tests" / "js"
SCRIPT = JS_DIR / "group_consume.js"
CACHE = REPO / ".cache" / "js"
TOPIC, PARTITIONS = "js", 4
WAIT_S = 30.0


def install_kafkajs() -> Path:
    """``npm ci`` of tests/js into .cache/js/<hash>/ unless already there; its node_modules."""
    npm = shutil.which("npm")
    assert npm is not None
    manifest = [JS_DIR / "package.json", JS_DIR / "package-lock.json"]
    digest = hashlib.sha256(b"".join(p.read_bytes() for p in manifest)).hexdigest()[:16]
    target = CACHE / digest
    done = target / "node_modules" / "kafkajs" / "package.json"
    if done.exists():
        return target / "node_modules"
    CACHE.mkdir(parents=True, exist_ok=True)
    with open(CACHE / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if done.exists():  # another process installed it while we waited
            return target / "node_modules"
        work = CACHE / f".{digest}.{os.getpid()}.tmp"
        shutil.rmtree(work, ignore_errors=True)
        work.mkdir()
        for p in manifest:
            shutil.copy(p, work / p.name)
        proc = subprocess.run(
            [npm, "ci", "--no-audit", "--no-fund", "--ignore-scripts"],
            cwd=work,
            capture_output=True,
            text=True,
            timeout=300,
        )
        if proc.returncode != 0 or not (work / "node_modules" / "kafkajs").is_dir():
            shutil.rmtree(work, ignore_errors=True)
            raise AssertionError(f"npm ci failed ({proc.returncode}):\n{proc.stdout}{proc.stderr}")
        shutil.rmtree(target, ignore_errors=True)
        work.rename(target)
    return target / "node_modules"


@pytest.fixture
def node_modules() -> Path:
    require(
        shutil.which("node") is not None and shutil.which("npm") is not None,
        "node and npm are needed for the kafkajs tests",
    )
    return install_kafkajs()


@pytest_asyncio.fixture
async def server() -> AsyncIterator[KafkaServer]:
    async with running_server(
        log_level="warning",
        initial_rebalance_delay_ms=200,
        create_topics=(TopicSpec(TOPIC, PARTITIONS),),
    ) as srv:
        yield srv


class KafkajsGroup:
    """One run of group_consume.js: its JSON-line events, collected as they arrive."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc
        self.events: list[dict[str, Any]] = []
        self.stderr = b""
        self._readers = [
            asyncio.create_task(self._read_stdout()),
            asyncio.create_task(self._read_stderr()),
        ]

    @classmethod
    async def start(
        cls, node_modules: Path, bootstrap: str, group: str, members: int
    ) -> KafkajsGroup:
        node = shutil.which("node")
        assert node is not None
        opts = {"brokers": [bootstrap], "topic": TOPIC, "group": group, "members": members}
        proc = await asyncio.create_subprocess_exec(
            node,
            str(SCRIPT),
            json.dumps(opts),
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env={**os.environ, "NODE_PATH": str(node_modules)},
        )
        return cls(proc)

    async def _read_stdout(self) -> None:
        assert self.proc.stdout is not None
        async for line in self.proc.stdout:
            self.events.append(json.loads(line))

    async def _read_stderr(self) -> None:
        assert self.proc.stderr is not None
        self.stderr = await self.proc.stderr.read()

    def of(self, kind: str) -> list[dict[str, Any]]:
        return [e for e in self.events if e["event"] == kind]

    def failed(self) -> str | None:
        if self.of("error") or self.proc.returncode not in (None, 0):
            return f"kafkajs failed: {self.of('error')}\n{self.stderr.decode(errors='replace')}"
        return None

    async def wait_until(self, check: Callable[[], Any], what: str) -> Any:
        deadline = time.monotonic() + WAIT_S
        while True:
            result = check()
            if result is not None and result is not False:
                return result
            assert self.failed() is None, self.failed()
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"timed out after {WAIT_S} s waiting for {what}: {self.events}"
                )
            await asyncio.sleep(0.05)

    def assignment(self, members: int) -> dict[int, frozenset[int]] | None:
        """Each member's partitions from its latest join, once they split the topic."""
        latest: dict[int, frozenset[int]] = {}
        for e in self.of("join"):
            latest[e["member"]] = frozenset(e["partitions"])
        if len(latest) != members or any(not ps for ps in latest.values()):
            return None
        if sorted(p for ps in latest.values() for p in ps) != list(range(PARTITIONS)):
            return None
        return latest

    async def stop(self) -> None:
        """ "stop": every member commits and leaves; the script exits 0."""
        assert self.proc.stdin is not None
        self.proc.stdin.write(b"stop\n")
        await self.proc.stdin.drain()
        await asyncio.wait_for(self.proc.wait(), WAIT_S)
        await asyncio.wait_for(asyncio.gather(*self._readers), WAIT_S)
        assert self.proc.returncode == 0, self.failed()
        assert self.of("done"), self.events

    async def kill(self) -> None:
        if self.proc.returncode is None:
            self.proc.kill()
            await self.proc.wait()
        for t in self._readers:
            t.cancel()
        for t in self._readers:
            with contextlib.suppress(asyncio.CancelledError):
                await t
        if self.proc.stdin is not None:
            self.proc.stdin.close()


@pytest_asyncio.fixture
async def runs() -> AsyncIterator[list[KafkajsGroup]]:
    """Script runs started by a test; whatever is still running is killed at teardown."""
    started: list[KafkajsGroup] = []
    yield started
    for r in started:
        await r.kill()


async def produce(bootstrap: str, values: dict[int, list[bytes]]) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap)
    await producer.start()
    try:
        for partition, vals in values.items():
            for v in vals:
                await producer.send_and_wait(TOPIC, v, partition=partition)
    finally:
        await producer.stop()


async def committed(bootstrap: str, group: str) -> dict[int, int]:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        offsets = await admin.list_consumer_group_offsets(group)
    finally:
        await admin.close()
    return {tp.partition: om.offset for tp, om in offsets.items() if tp.topic == TOPIC}


def group_view(server: KafkaServer, group: str) -> tuple[str, set[str]]:
    """(state, member ids) as the broker's DescribeGroups answers them."""
    (described,) = server.broker.coordinator.describe_groups(DescribeGroups((group,))).groups
    return described.state, {m.member_id for m in described.members}


async def test_kafkajs_group_consumes_commits_and_resumes(
    server: KafkaServer, bootstrap: str, node_modules: Path, runs: list[KafkajsGroup]
) -> None:
    group = "kafkajs"
    first = await KafkajsGroup.start(node_modules, bootstrap, group, members=2)
    runs.append(first)
    owners = await first.wait_until(
        lambda: first.assignment(2), "two kafkajs members to split the 4 partitions"
    )
    member_ids = {e["member"]: e["memberId"] for e in first.of("join")}
    state, ids = group_view(server, group)
    assert (state, ids) == ("Stable", set(member_ids.values()))

    values = {p: [b"first-%d-%d" % (p, i) for i in range(10)] for p in range(PARTITIONS)}
    await produce(bootstrap, values)
    await first.wait_until(
        lambda: len(first.of("record")) >= 10 * PARTITIONS, "kafkajs to consume 40 records"
    )
    got = sorted((e["partition"], e["offset"], e["value"]) for e in first.of("record"))
    assert got == sorted(
        (p, i, v.decode()) for p, vs in values.items() for i, v in enumerate(vs)
    )  # each record once
    for e in first.of("record"):  # each by the member that owns its partition
        assert e["partition"] in owners[e["member"]], e
    await first.stop()
    commits = {int(p): o for e in first.of("committed") for p, o in e["offsets"].items()}
    assert commits == dict.fromkeys(range(PARTITIONS), 10)
    assert await committed(bootstrap, group) == dict.fromkeys(range(PARTITIONS), 10)
    assert group_view(server, group) == ("Empty", set())  # both left (LeaveGroup)

    more = {p: [b"second-%d-%d" % (p, i) for i in range(3)] for p in range(PARTITIONS)}
    await produce(bootstrap, more)
    second = await KafkajsGroup.start(node_modules, bootstrap, group, members=1)
    runs.append(second)
    await second.wait_until(
        lambda: len(second.of("record")) >= 3 * PARTITIONS, "the new member to consume 12 records"
    )
    got = sorted((e["partition"], e["offset"], e["value"]) for e in second.of("record"))
    assert got == sorted(
        (p, 10 + i, v.decode()) for p, vs in more.items() for i, v in enumerate(vs)
    )  # resumed at the committed offsets: nothing before them re-read
    await second.stop()
    assert await committed(bootstrap, group) == dict.fromkeys(range(PARTITIONS), 13)


def test_install_is_idempotent(node_modules: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Once installed, the install finds the published directory and runs no npm at all."""

    def no_npm(*args: Any, **kwargs: Any) -> None:
        raise AssertionError(f"npm ran again: {args}")

    monkeypatch.setattr(subprocess, "run", no_npm)
    assert install_kafkajs() == node_modules
    assert (node_modules / "kafkajs" / "package.json").is_file()
    assert not list(CACHE.glob(".*.tmp"))
