"""The kgroupd process as users run it: flags, environment, start-up, graceful stop."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys

from aiokafka import AIOKafkaProducer


async def start(*args: str, env: dict[str, str] | None = None) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "kgroupd.broker",
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        # a free HTTP port (the default 8080 may be taken), unless the test says otherwise
        env={**os.environ, "KGROUPD_HTTP_PORT": "0", **(env or {})},
    )


async def wait_for_event(proc: asyncio.subprocess.Process, event: str) -> dict[str, object]:
    assert proc.stderr is not None
    while True:
        line = await asyncio.wait_for(proc.stderr.readline(), 20)
        assert line, f"kgroupd exited before logging {event!r}"
        record = json.loads(line)
        if record.get("event") == event:
            return record


async def test_port_zero_logs_the_port_and_sigterm_stops_cleanly() -> None:
    proc = await start("--port", "0", "--log-format", "json", "--create-topic", "ready:2")
    try:
        listening = await wait_for_event(proc, "listening")
        port = listening["port"]
        assert isinstance(port, int) and port > 0
        producer = AIOKafkaProducer(bootstrap_servers=f"127.0.0.1:{port}")
        await producer.start()
        try:
            meta = await producer.send_and_wait("ready", b"x", partition=1)
            assert (meta.partition, meta.offset) == (1, 0)
        finally:
            await producer.stop()
        proc.send_signal(signal.SIGTERM)
        await wait_for_event(proc, "stopped")
        assert await asyncio.wait_for(proc.wait(), 20) == 0
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


async def test_environment_configures_the_broker() -> None:
    env = {"KGROUPD_PORT": "0", "KGROUPD_LOG_FORMAT": "json", "KGROUPD_NODE_ID": "7"}
    proc = await start(env=env)
    try:
        listening = await wait_for_event(proc, "listening")
        assert listening["node_id"] == 7
        proc.send_signal(signal.SIGINT)
        assert await asyncio.wait_for(proc.wait(), 20) == 0
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


async def run_to_end(*args: str, env: dict[str, str] | None = None) -> tuple[int, str, str]:
    proc = await start(*args, env=env)
    out, err = await asyncio.wait_for(proc.communicate(), 30)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


async def test_help_documents_every_flag() -> None:
    code, out, _ = await run_to_end("--help")
    assert code == 0
    for flag in (
        "--host",
        "--port",
        "--advertised-host",
        "--advertised-port",
        "--node-id",
        "--cluster-id",
        "--data-dir",
        "--log-format",
        "--log-level",
        "--auto-create-topics",
        "--default-partitions",
        "--create-topic",
        "--max-request-bytes",
        "--message-max-bytes",
        "--offsets-partitions",
        "--initial-rebalance-delay-ms",
        "--group-min-session-timeout-ms",
        "--group-max-session-timeout-ms",
        "--group-max-size",
        "--offsets-retention-minutes",
        "--offset-metadata-max-bytes",
        "--fsync",
        "--fsync-interval-ms",
        "--recover",
        "--max-partitions",
        "--max-connections-per-ip",
        "--connections-max-idle-ms",
        "--incomplete-request-timeout-ms",
        "--http-host",
        "--http-port",
        "--no-http",
        "--no-metrics",
        "--metrics-max-groups",
        "--version",
    ):
        assert flag in out


async def test_help_mentions_the_admin_tools() -> None:
    code, out, _ = await run_to_end("--help")
    assert code == 0
    assert "kgroupd groups list|describe|delete|delete-offsets|reset-offsets" in out
    assert "kgroupd topics list|describe|create|delete" in out
    code, out, _ = await run_to_end("groups", "--help")
    assert code == 0 and "reset-offsets" in out and "copy-offsets" in out


async def test_bad_config_exits_2_with_a_clear_message() -> None:
    code, _, err = await run_to_end(env={"KGROUPD_PORT": "lots"})
    assert code == 2
    assert "KGROUPD_PORT" in err
    code, _, err = await run_to_end("--fsync", "never")
    assert code == 2
    assert "--fsync needs --data-dir" in err
    # a bad flag value, by flag or by variable, is one line (no forty-line usage first)
    for args, env in (
        (("--create-topic", "bad!name:3"), None),
        ((), {"KGROUPD_CREATE_TOPIC": "bad!name:3"}),
        (("--create-topic", "nocount"), None),
        (("--no-such-flag",), None),
    ):
        code, _, err = await run_to_end(*args, env=env)
        assert code == 2, (args, env, err)
        lines = err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("kgroupd: error: "), err
        assert "usage:" not in err
    code, _, err = await run_to_end("--create-topic", "bad!name:3")
    assert "Topic name 'bad!name' is illegal" in err


async def test_port_in_use_exits_1() -> None:
    blocker = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
    port = blocker.sockets[0].getsockname()[1]
    try:
        code, _, err = await run_to_end("--port", str(port))
        assert code == 1
        assert "error" in err
    finally:
        blocker.close()
        await blocker.wait_closed()
