"""The Kafka listeners listen before the broker's modules are imported (issue 24): a client
that connects while the broker is still starting waits in the kernel's backlog and is answered
once the broker serves, where it would have been refused and backed off. Not timed: the broker
process is held just before it imports its server module, until the test lets it go."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import ssl
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.support.certs import make_certs
from tests.support.kafka_wire import WireClient

# Runs the broker as ``python -m kgroupd.broker`` does, held at the import of its server
# module (logged as "held") until a line comes on stdin.
_HELD = """
import json, runpy, sys
class Gate:
    def find_spec(self, name, path=None, target=None):
        if name == "kgroupd.broker.net.server":
            sys.meta_path.remove(self)
            print(json.dumps({"event": "held"}), file=sys.stderr, flush=True)
            sys.stdin.readline()
        return None
sys.meta_path.insert(0, Gate())
runpy.run_module("kgroupd.broker", run_name="__main__", alter_sys=True)
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def _next_event(stream: asyncio.StreamReader) -> dict[str, Any]:
    line = await asyncio.wait_for(stream.readline(), 30)
    assert line, "kgroupd exited early"
    return dict(json.loads(line))


async def _held(*flags: str) -> asyncio.subprocess.Process:
    """kgroupd started with ``flags``, held at the import of its server module."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("KGROUPD_")}
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        _HELD,
        "--no-http",
        "--log-format",
        "json",
        *flags,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
        env=env,
    )
    assert proc.stdin is not None and proc.stderr is not None
    assert (await _next_event(proc.stderr))["event"] == "held"
    return proc


async def _release(proc: asyncio.subprocess.Process) -> None:
    assert proc.stdin is not None
    proc.stdin.write(b"go\n")
    await proc.stdin.drain()


async def _stops_listening_on(proc: asyncio.subprocess.Process, port: int) -> None:
    """The "listening" line comes when the broker serves, with the port; then it stops."""
    assert proc.stderr is not None
    while (record := await _next_event(proc.stderr))["event"] != "listening":
        pass
    assert record["port"] == port
    proc.terminate()
    assert await asyncio.wait_for(proc.wait(), 30) == 0


@pytest.mark.parametrize("flags", [(), ("--max-connections", "5"), ("--data-dir", "DATA")])
async def test_a_client_that_connects_while_the_broker_starts_is_answered(
    flags: tuple[str, ...], tmp_path: Path
) -> None:
    port = free_port()
    args = [str(tmp_path / "data") if a == "DATA" else a for a in flags]
    proc = await _held("--port", str(port), *args)
    try:
        # the broker has not imported its server: the connection waits in the backlog
        async with await WireClient.connect(port) as client:
            corr = await client.send(18, 3, {})
            await _release(proc)
            versions = await client.receive(18, 3, corr)
            assert versions["error_code"] == 0
            assert versions["api_keys"]
        await _stops_listening_on(proc, port)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


async def test_a_tls_client_that_connects_early_completes_its_handshake(tmp_path: Path) -> None:
    certs = make_certs(tmp_path)
    port = free_port()
    proc = await _held(
        "--listeners",
        f"SSL://127.0.0.1:{port}",
        "--ssl-certfile",
        str(certs.server_cert),
        "--ssl-keyfile",
        str(certs.server_key),
    )
    try:
        raw = socket.create_connection(("127.0.0.1", port))  # accepted into the backlog
        context = ssl.create_default_context(cafile=str(certs.ca))
        connecting = asyncio.ensure_future(
            asyncio.open_connection(sock=raw, ssl=context, server_hostname="127.0.0.1")
        )
        await _release(proc)
        reader, writer = await asyncio.wait_for(connecting, 30)
        async with WireClient(reader, writer) as client:
            corr = await client.send(18, 3, {})
            assert (await client.receive(18, 3, corr))["error_code"] == 0
        await _stops_listening_on(proc, port)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


async def test_a_port_taken_fails_before_the_broker_is_imported() -> None:
    """Bound first, so a port taken is the same one line and exit code as ever, before the
    server module is imported (the gate is never reached)."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-c",
            _HELD,
            "--port",
            str(port),
            "--no-http",
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        _out, err = await asyncio.wait_for(proc.communicate(), 30)
    assert proc.returncode == 1
    lines = err.decode().strip().splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith("kgroupd: error: cannot listen on PLAINTEXT ")
    assert "held" not in lines[0]
