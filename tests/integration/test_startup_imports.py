"""What start-up imports: a run imports what it needs when it needs it (issue 24). Not timed:
these check which modules are loaded, so a module-level import that brings back a slow
start fails here (bench/bench_startup.py has the figures).

- reading the flags (``kgroupd --version``, ``--help``) imports no asyncio, no HTTP, no
  security and no broker (``--help`` at the cached help's width not even argparse);
- a broker in memory with default flags, once started, has not imported SASL (scramp), RE2,
  aiokafka, the compression codecs, nor the schema and handler of an API no client called;
  the HTTP listener's modules (aiohttp, prometheus-client) only with HTTP on.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from typing import Any

from kgroupd.broker.handlers.registry import HOMES
from tests.support.kafka_wire import WireClient

# never at start-up
SASL_RE2_CODECS = ("scramp", "re2", "aiokafka", "cramjam", "importlib.metadata")
HTTP = ("aiohttp", "prometheus_client")


def _loaded(code: str) -> set[str]:
    """The modules loaded once ``code`` has run in a fresh interpreter."""
    probe = f"{code}\nimport sys, json\nprint(json.dumps(sorted(sys.modules)))"
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60
    ).stdout
    return set(json.loads(out.strip().splitlines()[-1]))


def _heavy(loaded: set[str], roots: tuple[str, ...]) -> list[str]:
    return sorted(m for m in loaded if m.split(".")[0] in roots or m in roots)


def test_reading_the_flags_imports_no_asyncio_http_security_or_broker() -> None:
    banned = ("asyncio", "uvloop", "ssl", "structlog", *HTTP, *SASL_RE2_CODECS)
    loaded = _loaded("import kgroupd.broker.cli.main")
    assert _heavy(loaded, banned) == []
    # --version: not even argparse (nor typing)
    version = _loaded(
        "import contextlib, io\nfrom kgroupd.broker.cli.main import main\n"
        "with contextlib.redirect_stdout(io.StringIO()): main(['--version'])"
    )
    assert _heavy(version, (*banned, "argparse", "typing", "kgroupd.broker.config.settings")) == []
    # --help at the cached width (kgroupd.broker.cli.help_text): not even argparse; at another
    # width argparse and every flag, still nothing of the serving path
    for columns, parser in (("80", False), ("100", True)):
        help_ = _loaded(
            f"import contextlib, io, os\nos.environ['COLUMNS'] = '{columns}'\n"
            "from kgroupd.broker.cli.main import main\n"
            "with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):\n"
            "    main(['--help'])"
        )
        assert ("argparse" in help_) is parser
        assert ("kgroupd.broker.config.settings" in help_) is parser
        assert _heavy(help_, banned) == []
        serving = ("kgroupd.broker.net", "kgroupd.broker.coord")
        assert not [m for m in help_ if m.startswith(serving)]


# Runs the broker as ``python -m kgroupd.broker`` does, and at exit logs the modules loaded.
_RUN = """
import atexit, json, runpy, sys
atexit.register(lambda: print(json.dumps({"event": "modules", "loaded": sorted(sys.modules)}),
                              file=sys.stderr, flush=True))
runpy.run_module("kgroupd.broker", run_name="__main__", alter_sys=True)
"""


async def _modules_after(*args: str, requests: bool) -> set[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("KGROUPD_")}
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        _RUN,
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
    try:
        assert proc.stderr is not None
        events: dict[str, dict[str, Any]] = {}
        wanted = {"listening"} | ({"http_listening"} if "--no-http" not in args else set())
        while not wanted <= set(events):
            line = await asyncio.wait_for(proc.stderr.readline(), 20)
            assert line, f"kgroupd exited early: {events}"
            record = json.loads(line)
            events[record["event"]] = record
        if requests:  # what every client does first
            async with await WireClient.connect(int(events["listening"]["port"])) as client:
                versions = await client.request(18, 3, {})
                assert versions["error_code"] == 0
                await client.request(3, 12, {"topics": None})
        proc.send_signal(signal.SIGTERM)
        while True:
            line = await asyncio.wait_for(proc.stderr.readline(), 20)
            assert line, "kgroupd exited without listing its modules"
            record = json.loads(line)
            if record["event"] == "modules":
                assert await asyncio.wait_for(proc.wait(), 20) == 0
                return set(record["loaded"])
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


async def test_a_broker_in_memory_imports_no_sasl_re2_codecs_or_unused_apis() -> None:
    loaded = await _modules_after("--http-port", "0", requests=True)
    # (prometheus-client imports python-snappy, hence cramjam, where it is installed: the
    # test without HTTP checks the codecs)
    assert _heavy(loaded, tuple(m for m in SASL_RE2_CODECS if m != "cramjam")) == []
    assert set(HTTP) <= loaded  # HTTP is on by default
    # the schemas and handlers of ApiVersions and Metadata, nothing else
    schemas = sorted(m for m in loaded if m.startswith("kgroupd.protocol.schemas."))
    assert schemas == ["kgroupd.protocol.schemas.api_versions", "kgroupd.protocol.schemas.metadata"]
    homes = {f"kgroupd.broker.handlers.{home}" for home in HOMES.values()}
    assert sorted(homes & loaded) == [
        "kgroupd.broker.handlers.api_versions",
        "kgroupd.broker.handlers.metadata",
    ]
    assert "kgroupd.broker.security.sasl" not in loaded
    assert "kgroupd.broker.security.tls" not in loaded


async def test_no_http_imports_no_http_library() -> None:
    loaded = await _modules_after("--no-http", requests=False)
    assert _heavy(loaded, (*HTTP, *SASL_RE2_CODECS)) == []
    assert "kgroupd.broker.http.listener" not in loaded
