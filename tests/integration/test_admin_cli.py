"""``kgroupd groups ...`` and ``kgroupd topics ...`` against a real kgroupd, checked against
what real clients (aiokafka) consumed and committed.

Most calls run the tool in-process (``kgroupd.broker.cli.admin.amain`` on the test's loop, output
captured); exit codes and usage errors run ``python -m kgroupd.broker ...`` as a subprocess."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import sys
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
import pytest_asyncio
import structlog
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from kgroupd.broker.cli.admin import amain
from kgroupd.broker.net.server import KafkaServer
from kgroupd.broker.testing import running_server

TOPIC = "orders"
PARTITIONS = 3
PER_PARTITION = 10


@pytest.fixture(autouse=True)
def quiet_broker() -> Iterator[None]:
    """The in-process broker's info lines would land in the tool's captured stdout."""
    saved = structlog.get_config()
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    yield
    structlog.configure(**saved)


@pytest_asyncio.fixture
async def server() -> AsyncIterator[KafkaServer]:
    async with running_server(log_level="warning", initial_rebalance_delay_ms=0) as srv:
        yield srv


@pytest.fixture
def bootstrap(server: KafkaServer) -> str:
    return f"127.0.0.1:{server.port}"


async def cli(
    capsys: pytest.CaptureFixture[str], bootstrap: str, *argv: str
) -> tuple[int, str, str]:
    """The tool in-process: (exit code, stdout, stderr)."""
    capsys.readouterr()
    code = await amain([*argv, "--bootstrap-server", bootstrap])
    out, err = capsys.readouterr()
    return code, out, err


async def cli_json(capsys: pytest.CaptureFixture[str], bootstrap: str, *argv: str) -> Any:
    code, out, err = await cli(capsys, bootstrap, *argv, "--output", "json")
    assert code == 0, err
    return json.loads(out)


async def subprocess_cli(*argv: str) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "kgroupd.broker",
        *argv,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=os.environ.copy(),
    )
    out, err = await asyncio.wait_for(proc.communicate(), 30)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


async def fill(bootstrap: str, topic: str = TOPIC) -> None:
    """``PER_PARTITION`` records on each of the topic's partitions (value "p-i")."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap)
    await producer.start()
    try:
        for p in range(PARTITIONS):
            for i in range(PER_PARTITION):
                await producer.send(topic, f"{p}-{i}".encode(), partition=p)
        await producer.flush()
    finally:
        await producer.stop()


def consumer(bootstrap: str, group: str, client_id: str = "cli-test") -> AIOKafkaConsumer:
    return AIOKafkaConsumer(
        TOPIC,
        bootstrap_servers=bootstrap,
        group_id=group,
        client_id=client_id,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
    )


async def consume(c: AIOKafkaConsumer, count: int) -> list[tuple[int, int]]:
    """(partition, offset) of the next ``count`` records."""
    got: list[tuple[int, int]] = []
    while len(got) < count:
        batch = await asyncio.wait_for(c.getmany(timeout_ms=500), 20)
        for records in batch.values():
            got.extend((r.partition, r.offset) for r in records)
    return got


async def create_topic(capsys: pytest.CaptureFixture[str], bootstrap: str) -> None:
    code, _, err = await cli(
        capsys, bootstrap, "topics", "create", TOPIC, "--partitions", str(PARTITIONS)
    )
    assert code == 0, err


COMMITS = {0: 4, 1: 10, 2: 7}  # partition -> committed offset


async def active_group(
    capsys: pytest.CaptureFixture[str], bootstrap: str, group: str
) -> AIOKafkaConsumer:
    """A running consumer in ``group`` that consumed everything and committed COMMITS."""
    await create_topic(capsys, bootstrap)
    await fill(bootstrap)
    c = consumer(bootstrap, group)
    await c.start()
    await consume(c, PARTITIONS * PER_PARTITION)
    await c.commit({TopicPartition(TOPIC, p): o for p, o in COMMITS.items()})
    return c


async def test_describe_agrees_with_the_consumer(
    capsys: pytest.CaptureFixture[str], bootstrap: str
) -> None:
    c = await active_group(capsys, bootstrap, "g-describe")
    try:
        member_id = c._coordinator.member_id
        rows = await cli_json(capsys, bootstrap, "groups", "describe", "g-describe")
        assert rows == [
            {
                "group": "g-describe",
                "topic": TOPIC,
                "partition": p,
                "current_offset": COMMITS[p],
                "log_end_offset": PER_PARTITION,
                "lag": PER_PARTITION - COMMITS[p],
                "consumer_id": member_id,
                "host": "127.0.0.1",  # as the broker names the client (Kafka: /127.0.0.1)
                "client_id": "cli-test",
            }
            for p in range(PARTITIONS)
        ]
        code, out, _ = await cli(capsys, bootstrap, "groups", "describe", "g-describe")
        assert code == 0
        header, *lines = out.splitlines()
        assert header.split() == [
            "GROUP",
            "TOPIC",
            "PARTITION",
            "CURRENT-OFFSET",
            "LOG-END-OFFSET",
            "LAG",
            "CONSUMER-ID",
            "HOST",
            "CLIENT-ID",
        ]
        assert [line.split()[2:6] for line in lines] == [
            [str(p), str(COMMITS[p]), str(PER_PARTITION), str(PER_PARTITION - COMMITS[p])]
            for p in range(PARTITIONS)
        ]
        members = await cli_json(capsys, bootstrap, "groups", "describe", "g-describe", "--members")
        assert [(m["consumer_id"], m["partitions"], m["client_id"]) for m in members] == [
            (member_id, PARTITIONS, "cli-test")
        ]
        listed = await cli_json(capsys, bootstrap, "groups", "list", "--state", "Stable")
        assert {"group": "g-describe", "state": "Stable", "type": "classic"} in listed
        assert await cli_json(capsys, bootstrap, "groups", "list", "--state", "Empty") == []
    finally:
        await c.stop()
    # no members: offsets stay, consumer columns are "-"
    code, out, err = await cli(capsys, bootstrap, "groups", "describe", "g-describe")
    assert code == 0 and "has no active members" in err
    assert [line.split()[6:] for line in out.splitlines()[1:]] == [["-", "-", "-"]] * PARTITIONS


async def committed(bootstrap: str, group: str) -> dict[int, int | None]:
    c = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=group)
    await c.start()
    try:
        return {p: await c.committed(TopicPartition(TOPIC, p)) for p in range(PARTITIONS)}
    finally:
        await c.stop()


async def test_reset_offsets_dry_run_then_execute_then_a_consumer_follows(
    capsys: pytest.CaptureFixture[str], bootstrap: str
) -> None:
    group = "g-reset"
    c = await active_group(capsys, bootstrap, group)
    try:
        # refused while the group has a member, in a subprocess: exit 1 and Kafka's message
        code, _, err = await subprocess_cli(
            "groups",
            "reset-offsets",
            group,
            "--all-topics",
            "--to-earliest",
            "--execute",
            "--bootstrap-server",
            bootstrap,
        )
        assert code == 1
        assert (
            f"Assignments can only be reset if the group '{group}' is inactive, "
            "but the current state is Stable." in err
        )
        assert "NON_EMPTY_GROUP" in err
    finally:
        await c.stop()
    assert await committed(bootstrap, group) == COMMITS

    rows = await cli_json(
        capsys, bootstrap, "groups", "reset-offsets", group, "--topic", TOPIC, "--to-earliest"
    )
    assert [(r["partition"], r["new_offset"]) for r in rows] == [(p, 0) for p in range(3)]
    assert await committed(bootstrap, group) == COMMITS  # a dry run changes nothing

    # a shift is clamped to the log: 10+3 -> 10, 4+3 -> 7, 7+3 -> 10
    rows = await cli_json(
        capsys, bootstrap, "groups", "reset-offsets", group, "--all-topics", "--shift-by", "3"
    )
    assert {r["partition"]: r["new_offset"] for r in rows} == {0: 7, 1: 10, 2: 10}
    # some partitions only, executed
    rows = await cli_json(
        capsys,
        bootstrap,
        "groups",
        "reset-offsets",
        group,
        "--topic",
        f"{TOPIC}:0,2",
        "--to-offset",
        "2",
        "--execute",
    )
    assert {r["partition"]: r["new_offset"] for r in rows} == {0: 2, 2: 2}
    assert await committed(bootstrap, group) == {0: 2, 1: 10, 2: 2}

    # a consumer in the group re-consumes from there
    c = consumer(bootstrap, group)
    await c.start()
    try:
        got = await consume(c, 2 * (PER_PARTITION - 2))
        assert sorted(got) == [(p, o) for p in (0, 2) for o in range(2, PER_PARTITION)]
    finally:
        await c.stop()

    code, _, _ = await cli(
        capsys,
        bootstrap,
        "groups",
        "reset-offsets",
        group,
        "--all-topics",
        "--to-datetime",
        "2000-01-01T00:00:00.000",
        "--execute",
    )
    assert code == 0
    assert await committed(bootstrap, group) == {0: 0, 1: 0, 2: 0}  # every record is newer
    code, _, _ = await cli(
        capsys,
        bootstrap,
        "groups",
        "reset-offsets",
        group,
        "--all-topics",
        "--to-latest",
        "--execute",
    )
    assert await committed(bootstrap, group) == dict.fromkeys(range(PARTITIONS), PER_PARTITION)


async def test_delete_offsets_and_delete_are_refused_while_members_are_active(
    capsys: pytest.CaptureFixture[str], bootstrap: str
) -> None:
    group = "g-delete"
    c = await active_group(capsys, bootstrap, group)
    try:
        code, out, _ = await cli(
            capsys, bootstrap, "groups", "delete-offsets", group, "--topic", TOPIC
        )
        assert code == 1 and "GROUP_SUBSCRIBED_TO_TOPIC" in out
        code, _, err = await cli(capsys, bootstrap, "groups", "delete", group)
        assert code == 1
        code, out, _ = await cli(capsys, bootstrap, "groups", "delete", group)
        assert "could not be deleted due to: NON_EMPTY_GROUP" in out
    finally:
        await c.stop()
    code, out, _ = await cli(
        capsys, bootstrap, "groups", "delete-offsets", group, "--topic", f"{TOPIC}:1"
    )
    assert code == 0 and "Successful" in out
    assert await committed(bootstrap, group) == {0: 4, 1: None, 2: 7}
    code, out, _ = await cli(capsys, bootstrap, "groups", "delete", group)
    assert code == 0 and f"('{group}') was successful" in out
    assert group not in await cli_json(capsys, bootstrap, "groups", "list")
    code, _, err = await cli(capsys, bootstrap, "groups", "describe", group)
    assert code == 1 and "GROUP_ID_NOT_FOUND" in err


async def test_copy_offsets_to_another_kgroupd(
    capsys: pytest.CaptureFixture[str], bootstrap: str
) -> None:
    group = "g-copy"
    c = await active_group(capsys, bootstrap, group)
    async with running_server(log_level="warning", initial_rebalance_delay_ms=0) as other:
        target = f"127.0.0.1:{other.port}"
        await create_topic(capsys, target)
        await fill(target)
        # an active source group is not copied
        code, _, err = await cli(capsys, bootstrap, "groups", "copy-offsets", "--to", target, group)
        assert code == 1 and "NON_EMPTY_GROUP" in err
        await c.stop()
        rows = await cli_json(capsys, bootstrap, "groups", "copy-offsets", "--to", target)
        assert [(r["group"], r["partition"], r["offset"], r["error"]) for r in rows] == [
            (group, p, COMMITS[p], None) for p in range(PARTITIONS)
        ]
        assert await committed(target, group) == COMMITS
        # a consumer on the other cluster resumes where the first one stopped
        resumed = consumer(target, group)
        await resumed.start()
        try:
            got = await consume(resumed, sum(PER_PARTITION - o for o in COMMITS.values()))
            assert min(o for p, o in got if p == 0) == COMMITS[0]
            assert sorted(got) == [
                (p, o) for p in range(PARTITIONS) for o in range(COMMITS[p], PER_PARTITION)
            ]
        finally:
            await resumed.stop()


async def test_topics_create_describe_list_delete(
    capsys: pytest.CaptureFixture[str], bootstrap: str
) -> None:
    code, out, _ = await cli(
        capsys,
        bootstrap,
        "topics",
        "create",
        "events",
        "--partitions",
        "4",
        "--config",
        "retention.ms=60000",
    )
    assert (code, out) == (0, "Created topic events.\n")
    described = await cli_json(capsys, bootstrap, "topics", "describe", "events")
    assert described["partition_count"] == 4
    assert described["configs"] == {"retention.ms": "60000"}
    assert [p["partition"] for p in described["partitions"]] == [0, 1, 2, 3]
    code, out, _ = await cli(capsys, bootstrap, "topics", "describe", "events")
    assert out.startswith("Topic: events\tTopicId: ") and "PartitionCount: 4" in out
    assert "events" in await cli_json(capsys, bootstrap, "topics", "list")
    code, _, err = await cli(capsys, bootstrap, "topics", "create", "events")
    assert code == 1 and "TOPIC_ALREADY_EXISTS" in err
    code, _, err = await cli(
        capsys, bootstrap, "topics", "create", "bad", "--config", "retention.ms=-5"
    )
    assert code == 1 and "INVALID_CONFIG" in err
    code, out, _ = await cli(capsys, bootstrap, "topics", "delete", "events")
    assert code == 0
    assert "events" not in await cli_json(capsys, bootstrap, "topics", "list")
    code, _, err = await cli(capsys, bootstrap, "topics", "describe", "events")
    assert code == 1 and "UNKNOWN_TOPIC_OR_PARTITION" in err


async def test_exit_codes_and_usage_in_a_subprocess(bootstrap: str, tmp_path: Any) -> None:
    code, _, err = await subprocess_cli("groups", "frobnicate")
    assert code == 2 and "invalid choice" in err
    code, _, err = await subprocess_cli("groups", "reset-offsets", "g", "--all-topics")
    assert code == 2 and "--to-earliest" in err
    bad = tmp_path / "client.properties"
    bad.write_text("security.protocol=PLAINTEXT\nsasl.kerberos.service.name=kafka\n")
    code, _, err = await subprocess_cli(
        "groups", "list", "--bootstrap-server", bootstrap, "--command-config", str(bad)
    )
    assert code == 2 and "sasl.kerberos.service.name" in err
    code, _, err = await subprocess_cli("topics", "list", "--bootstrap-server", "nohostport")
    assert code == 2 and "HOST:PORT" in err
    code, out, err = await subprocess_cli(
        "groups", "describe", "nobody", "--bootstrap-server", bootstrap
    )
    assert code == 1 and "GROUP_ID_NOT_FOUND" in err
    code, out, err = await subprocess_cli(
        "topics",
        "create",
        "sub",
        "--partitions",
        "2",
        "--bootstrap-server",
        bootstrap,
        "--output",
        "json",
    )
    assert code == 0 and json.loads(out) == {"topic": "sub", "created": True}
    code, out, _ = await subprocess_cli("groups", "list", "--bootstrap-server", bootstrap)
    assert code == 0 and out == ""


async def test_the_serving_path_does_not_import_the_tools() -> None:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        "import sys, kgroupd.broker.net.server, kgroupd.broker.cli.main; "
        "sys.exit(any(m.startswith('kgroupd.broker.cli.tools') for m in sys.modules))",
    )
    assert await asyncio.wait_for(proc.wait(), 30) == 0


def _consume_with_the_consumer_protocol(bootstrap: str, group: str) -> tuple[Any, str]:
    """A KIP-848 member (librdkafka, group.protocol=consumer) that consumed everything and
    committed; still in the group (the caller closes it)."""
    from confluent_kafka import Consumer

    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "group.protocol": "consumer",
            "client.id": "cfk-848",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    c.subscribe([TOPIC])
    seen = 0
    for _ in range(200):
        m = c.poll(0.1)
        if m is not None and not m.error():
            seen += 1
        if seen == PARTITIONS * PER_PARTITION:
            break
    c.commit(asynchronous=False)
    return c, c.memberid()


async def test_describe_a_consumer_protocol_group(
    capsys: pytest.CaptureFixture[str], bootstrap: str
) -> None:
    await create_topic(capsys, bootstrap)
    await fill(bootstrap)
    c, member_id = await asyncio.to_thread(_consume_with_the_consumer_protocol, bootstrap, "g-848")
    try:
        rows = await cli_json(capsys, bootstrap, "groups", "describe", "g-848")
        assert [
            (r["partition"], r["current_offset"], r["lag"], r["consumer_id"]) for r in rows
        ] == [(p, PER_PARTITION, 0, member_id) for p in range(PARTITIONS)]
        listed = await cli_json(capsys, bootstrap, "groups", "list", "--type", "consumer")
        assert [r["group"] for r in listed] == ["g-848"]
    finally:
        await asyncio.to_thread(c.close)
