"""What a new user meets first, run as they run it (``python -m kgroupd.broker ...``,
``python -m kgroupd.pipeline.demo_producer`` in subprocesses): output piped to a reader that
went away, a state name in another case or misspelt, a port that is not Kafka's, no broker
at all, a data directory the broker's user cannot write."""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest_asyncio
from aiokafka import AIOKafkaConsumer

from kgroupd.broker.config.settings import TopicSpec
from kgroupd.broker.net.server import KafkaServer
from kgroupd.broker.testing import running_server
from tests.conftest import require

STATES = "PreparingRebalance, CompletingRebalance, Stable, Dead, Empty, Assigning, Reconciling"


@pytest_asyncio.fixture
async def server() -> AsyncIterator[KafkaServer]:
    async with running_server(
        log_level="warning",
        initial_rebalance_delay_ms=0,
        create_topics=(TopicSpec("orders", 2),),
    ) as srv:
        yield srv


async def run(*argv: str, stdout: int = asyncio.subprocess.PIPE) -> tuple[int, str, str]:
    """``python -m kgroupd.broker ARGV``: (exit code, stdout, stderr)."""
    return await run_module("kgroupd.broker", *argv, stdout=stdout)


async def run_module(
    module: str, *argv: str, stdout: int = asyncio.subprocess.PIPE
) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        module,
        *argv,
        stdout=stdout,
        stderr=asyncio.subprocess.PIPE,
        env=os.environ.copy(),
    )
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode is not None
    return proc.returncode, (out or b"").decode(), err.decode()


def free_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def test_output_to_a_reader_that_went_away_stops_quietly(server: KafkaServer) -> None:
    """``kgroupd topics list | head -1`` once head has exited: no traceback, exit 141 (what a
    shell reports for a Unix tool stopped by SIGPIPE). The pipe's reading end is closed
    before the tool starts, so its first write meets a broken pipe every time."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        code, _, err = await run(
            "topics", "list", "--bootstrap-server", f"127.0.0.1:{server.port}", stdout=write_end
        )
    finally:
        os.close(write_end)
    assert err == ""
    assert code == 141
    # the same command with a reader prints the topic: the pipe was what stopped it
    code, out, err = await run("topics", "list", "--bootstrap-server", f"127.0.0.1:{server.port}")
    assert (code, out) == (0, "orders\n"), err


async def test_group_states_in_any_case_and_an_unknown_one_refused(server: KafkaServer) -> None:
    """``groups list --state`` takes Kafka's state names in any case (kafka-consumer-groups.sh
    does) and refuses one Kafka does not know: a usage error listing the valid ones, exit 2,
    instead of an empty table and exit 0."""
    boot = f"127.0.0.1:{server.port}"
    consumer = AIOKafkaConsumer("orders", bootstrap_servers=boot, group_id="billing")
    await consumer.start()
    try:
        await asyncio.wait_for(consumer.getmany(timeout_ms=100), 20)
        while not consumer.assignment():
            await asyncio.wait_for(consumer.getmany(timeout_ms=100), 20)
        for given in ("stable", "STABLE", "Stable", "empty,stable"):
            code, out, err = await run(
                "groups", "list", "--state", given, "--bootstrap-server", boot
            )
            assert code == 0, err
            assert out.splitlines()[1].split() == ["billing", "Classic", "Stable"], (given, out)
        for given, unknown in (("Bogus", "'Bogus'"), ("stable,runing", "'runing'")):
            code, out, err = await run(
                "groups", "list", "--state", given, "--bootstrap-server", boot
            )
            assert code == 2 and out == "", (code, out)
            assert err == (
                f"kgroupd groups list: error: --state {given}: unknown {unknown}; "
                f"valid: {STATES} (any case)\n"
            )
        code, out, err = await run(
            "groups", "list", "--type", "CONSUMER", "--bootstrap-server", boot
        )
        assert code == 0 and out.splitlines() == ["GROUP TYPE STATE"], (out, err)
        code, out, err = await run("groups", "list", "--type", "share", "--bootstrap-server", boot)
        assert code == 2 and "--type share: unknown 'share'; valid: classic, consumer" in err
    finally:
        await consumer.stop()


async def test_a_port_that_is_not_kafka_is_named_for_what_it_is(server: KafkaServer) -> None:
    """The broker's own HTTP port (the live page, /metrics) given as --bootstrap-server: one
    line saying it answered something that is not the Kafka protocol, an HTTP server,
    rather than "connection lost (293 bytes read on a total of 1213486160 expected bytes)"."""
    assert server.http is not None
    address = f"127.0.0.1:{server.http.port}"
    code, out, err = await run("groups", "list", "--bootstrap-server", address)
    assert code == 1 and out == ""
    assert err.count("\n") == 1, err
    assert err.startswith(
        f"Error: {address} answered something that is not the Kafka protocol "
        "(an HTTP server? it said 'HTTP/1."
    ), err
    assert "expected bytes" not in err


async def test_a_port_that_closes_without_answering_is_named_so() -> None:
    """A listener that accepts and hangs up (as a TLS-only port may): it closed the
    connection without answering, with the TLS hint."""

    async def hang_up(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read(4)
        writer.close()

    listener = await asyncio.start_server(hang_up, "127.0.0.1", 0)
    port = listener.sockets[0].getsockname()[1]
    try:
        code, _, err = await run("topics", "list", "--bootstrap-server", f"127.0.0.1:{port}")
    finally:
        listener.close()
        await listener.wait_closed()
    assert code == 1
    assert err == (
        f"Error: 127.0.0.1:{port} closed the connection without answering ApiVersions: is it "
        "a Kafka listener's address, or one that wants TLS (security.protocol=SSL or SASL_SSL "
        "in --command-config)?\n"
    )


async def test_the_demo_producer_without_a_broker_says_so_in_one_line() -> None:
    """``./scripts/demo-producer`` (``python -m kgroupd.pipeline.demo_producer``) with nothing
    listening: one line naming the address and the reason, exit 1, no traceback."""
    address = f"127.0.0.1:{free_port()}"
    code, out, err = await run_module(
        "kgroupd.pipeline.demo_producer", "--bootstrap-server", address, "--count", "1"
    )
    assert code == 1 and out == ""
    assert err.count("\n") == 1, err
    assert err.startswith(
        f"python -m kgroupd.pipeline.demo_producer: error: cannot reach a Kafka broker at "
        f"{address} ("
    ), err
    assert "Connect call failed" in err and "./scripts/broker" in err
    assert "Traceback" not in err


async def test_a_data_dir_the_broker_cannot_write_is_one_line_saying_what_to_do(
    tmp_path: Path,
) -> None:
    """A data directory owned by another user (a bind mount owned by root, the image's user
    10001): exit 2 with one line naming the directory, the uid kgroupd runs as and the fix.
    As root the broker runs without CAP_DAC_OVERRIDE (``setpriv``), so permissions apply."""
    data = tmp_path / "data"
    data.mkdir()
    prefix: list[str] = []
    if os.geteuid() == 0:
        setpriv = shutil.which("setpriv")
        require(setpriv is not None, "setpriv (util-linux) to drop root's override of modes")
        assert setpriv is not None
        caps = "-dac_override,-dac_read_search"
        prefix = [setpriv, f"--bounding-set={caps}", f"--inh-caps={caps}"]
        os.chown(data, 65534, 65534)  # nobody's; mode 755: root may read, not write
        data.chmod(0o755)
        owner, mode, fix = 65534, "755", "docker run --user 65534:65534"
    else:
        data.chmod(0o555)
        owner, mode, fix = os.geteuid(), "555", f"chmod u+rwx {data}"
    proc = await asyncio.create_subprocess_exec(
        *prefix,
        sys.executable,
        "-m",
        "kgroupd.broker",
        "--data-dir",
        str(data),
        "--port",
        "0",
        "--no-http",
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )
    _, err_bytes = await asyncio.wait_for(proc.communicate(), 60)
    data.chmod(0o755)
    err = [line for line in err_bytes.decode().splitlines() if not line.startswith("{")]
    assert proc.returncode == 2, err
    (line,) = [x for x in err if x.startswith("kgroupd: error:")]
    uid = os.geteuid()
    assert line.startswith(
        f"kgroupd: error: data dir {data} is not writable by uid {uid}, which kgroupd runs as "
        f"(Permission denied: {data}/.lock; {data} belongs to uid {owner}, mode {mode})"
    ), line
    assert fix in line
    if owner != uid:
        assert f"chown -R {uid}:{os.getegid()} {data}, on the host for a bind mount" in line
