"""The HTTP listener's port as users meet it: the default 8080 taken falls back to a free port
(one warning line naming both and the flag); a port given (flag or variable) that cannot be
bound stops start-up, as before.

Real processes (``python -m kgroupd.broker``), with 8080 really taken: held by the test while
it runs when it is free, else it is taken by someone else on this machine, which is the case
under test all the same.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import json
import os
import signal
import socket
import sys
from collections.abc import Iterator
from typing import Any

import aiohttp
import pytest

DEFAULT = 8080


@pytest.fixture
def taken_8080() -> Iterator[None]:
    """127.0.0.1:8080 listened on, by this test (when free) or by someone else."""
    sock = socket.socket()
    try:
        sock.bind(("127.0.0.1", DEFAULT))
        sock.listen()
    except OSError as exc:
        sock.close()
        if exc.errno != errno.EADDRINUSE:
            raise
        with socket.socket() as probe:  # taken: but is anything listening on it?
            probe.settimeout(2)
            if probe.connect_ex(("127.0.0.1", DEFAULT)) != 0:
                pytest.skip("127.0.0.1:8080 can be neither bound nor reached")
        yield
        return
    with sock:
        yield


def _env(**extra: str) -> dict[str, str]:
    """This environment without any KGROUPD_* variable (no KGROUPD_HTTP_PORT: the default)."""
    return {k: v for k, v in os.environ.items() if not k.startswith("KGROUPD_")} | extra


async def _spawn(*args: str, env: dict[str, str]) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "kgroupd.broker",
        "--host",
        "127.0.0.1",
        "--port",
        "0",
        "--log-format",
        "json",
        *args,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
        env=env,
    )


async def _until(
    proc: asyncio.subprocess.Process, event: str, seen: list[dict[str, Any]]
) -> dict[str, Any]:
    assert proc.stderr is not None
    while True:
        line = await asyncio.wait_for(proc.stderr.readline(), 20)
        assert line, f"kgroupd exited before logging {event!r}: {seen}"
        record = json.loads(line)
        seen.append(record)
        if record.get("event") == event:
            return record


async def test_a_taken_default_port_falls_back_to_a_free_one_with_one_warning(
    taken_8080: None,
) -> None:
    proc = await _spawn(env=_env())
    seen: list[dict[str, Any]] = []
    try:
        http = await _until(proc, "http_listening", seen)
        port = http["port"]
        assert isinstance(port, int) and port not in (0, DEFAULT)
        taken = [r for r in seen if r["event"] == "http_port_taken"]
        assert taken == [
            {
                "requested": DEFAULT,
                "port": port,
                "flag": "--http-port",
                "event": "http_port_taken",
                "level": "warning",
                "timestamp": taken[0]["timestamp"],
            }
        ]
        assert [r["event"] for r in seen if r["level"] != "info"] == ["http_port_taken"]
        # the Kafka listener was up first, and the fallback port serves the whole listener
        assert any(r["event"] == "listening" for r in seen)
        async with aiohttp.ClientSession() as session:
            for path, text in (("/healthz", "ok\n"), ("/readyz", "ready\n")):
                async with session.get(f"http://127.0.0.1:{port}{path}") as resp:
                    assert (resp.status, await resp.text()) == (200, text)
        proc.send_signal(signal.SIGTERM)
        await _until(proc, "stopped", seen)
        assert await asyncio.wait_for(proc.wait(), 20) == 0
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


async def _refused(*args: str, env: dict[str, str]) -> tuple[int, list[str]]:
    proc = await _spawn(*args, env=env)
    try:
        _out, err = await asyncio.wait_for(proc.communicate(), 30)
    finally:
        if proc.returncode is None:  # it started after all
            proc.kill()
            await proc.wait()
    assert proc.returncode is not None
    return proc.returncode, err.decode().strip().splitlines()


@pytest.mark.parametrize("how", ["flag", "variable"])
async def test_a_taken_port_that_was_asked_for_still_stops_start_up(
    taken_8080: None, how: str
) -> None:
    if how == "flag":
        code, lines = await _refused("--http-port", str(DEFAULT), env=_env())
    else:
        code, lines = await _refused(env=_env(KGROUPD_HTTP_PORT=str(DEFAULT)))
    assert code == 1
    where = f"kgroupd: error: cannot listen for HTTP on 127.0.0.1:{DEFAULT} (--http-port, "
    assert lines[-1].startswith(where + "--http-host): ")
    assert "address already in use" in lines[-1].lower()
    events = [json.loads(line)["event"] for line in lines[:-1]]
    assert "http_port_taken" not in events and "http_listening" not in events


async def test_a_free_default_port_is_used_as_it_is() -> None:
    """No fallback when nothing holds 8080 (skipped when something does)."""
    with socket.socket() as probe:
        try:
            probe.bind(("127.0.0.1", DEFAULT))
        except OSError:
            pytest.skip("127.0.0.1:8080 is taken on this machine")
    proc = await _spawn(env=_env())
    seen: list[dict[str, Any]] = []
    try:
        http = await _until(proc, "http_listening", seen)
        if http["port"] != DEFAULT:  # taken between the probe and the broker's bind
            assert [r["event"] for r in seen].count("http_port_taken") == 1
            pytest.skip("127.0.0.1:8080 was taken by someone else meanwhile")
        assert "http_port_taken" not in [r["event"] for r in seen]
    finally:
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        await proc.wait()
