"""The real broker as a subprocess, for tests that stop, kill and restart it.

    proc = BrokerProcess(data_dir, port=free_port())
    await proc.start()                 # until {"event": "listening"}
    ...                                # clients on proc.bootstrap
    await proc.kill()                  # SIGKILL (or proc.stop(): SIGTERM, exit 0)
    await proc.start()                 # same data dir, same port
    code, err = await proc.run_refused()   # a start-up that must fail: (exit code, stderr)

``python -m kgroupd.broker --port P --log-format json --data-dir D ...`` is started with stderr on a
pipe; a background task drains it for the whole life of the process (a full pipe would block
the broker) and keeps every JSON log line in ``events`` (and anything else, such as
``kgroupd: error: ...``, in ``other_lines``), across restarts. ``wait_for_event`` awaits a
log line by its event name and fields.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import socket
import sys
from collections.abc import AsyncIterator, Mapping
from typing import Any

from tests.support.groups import OFFSET_FETCH, RawConnection
from tests.support.kafka_wire import WireClient, fetch_request, iter_records

START_TIMEOUT_S = 20.0
OFFSET_OUT_OF_RANGE = 1


def free_port() -> int:
    """A loopback port nothing listens on now (the broker reuses it across restarts)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class BrokerExited(AssertionError):
    """The broker exited while the test waited for it to start or log something."""


class BrokerProcess:
    def __init__(
        self,
        data_dir: str | os.PathLike[str],
        port: int | None = None,
        args: tuple[str, ...] = (),
        env: Mapping[str, str] | None = None,
    ) -> None:
        self.data_dir = str(data_dir)
        self.port = port if port is not None else free_port()
        self.args = args
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("KGROUPD_")} | dict(
            env or {}
        )
        self.proc: asyncio.subprocess.Process | None = None
        self.events: list[dict[str, Any]] = []  # every JSON log line, every run
        self.other_lines: list[str] = []  # anything else on stderr
        self.starts = 0
        self._run_first_event = 0
        self._drain: asyncio.Task[None] | None = None
        self._changed = asyncio.Event()

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.returncode is None

    # --- start-up ---------------------------------------------------------------------------
    async def _spawn(self, extra: tuple[str, ...]) -> None:
        assert not self.running, "the broker is already running"
        await self._reap()
        self.starts += 1
        self.proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "kgroupd.broker",
            "--port",
            str(self.port),
            "--http-port",
            "0",
            "--log-format",
            "json",
            "--data-dir",
            self.data_dir,
            *self.args,
            *extra,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.PIPE,
            env=self.env,
        )
        self._run_first_event = len(self.events)
        self._drain = asyncio.create_task(self._drain_stderr(self.proc, self.starts))

    async def start(self, *extra: str) -> dict[str, Any]:
        """Start (``extra`` flags after the fixed ones) and await its ``listening`` line."""
        await self._spawn(extra)
        return await self.wait_for_event("listening", timeout=START_TIMEOUT_S)

    async def run_refused(self, *extra: str, timeout: float = START_TIMEOUT_S) -> tuple[int, str]:
        """Start a broker that must refuse to start: its exit code and non-JSON stderr."""
        await self._spawn(extra)
        assert self.proc is not None
        try:
            await self.wait_for_event("listening", timeout)
        except BrokerExited:
            pass  # as expected
        else:
            await self.kill()
            raise AssertionError(
                f"the broker started but was expected to refuse; it logged {self.run_events()}"
            )
        code = await asyncio.wait_for(self.proc.wait(), timeout)
        await self._reap()
        return code, "\n".join(self.other_lines)

    # --- what it logged ---------------------------------------------------------------------
    @property
    def run_start(self) -> int:
        """The index in ``events`` of the current (or last) run's first line."""
        return self._run_first_event

    def run_events(self) -> list[dict[str, Any]]:
        """The JSON log lines of the current (or last) run only."""
        return self.events[self._run_first_event :]

    def find(self, event: str, since: int = 0, **fields: Any) -> list[dict[str, Any]]:
        return [
            e
            for e in self.events[since:]
            if e.get("event") == event and all(e.get(k) == v for k, v in fields.items())
        ]

    async def wait_for_event(
        self, event: str, timeout: float = START_TIMEOUT_S, since: int | None = None, **fields: Any
    ) -> dict[str, Any]:
        """The first log line of this run (or from index ``since``) with ``event`` and
        ``fields``; fails if the broker exits first or ``timeout`` passes."""
        start = self._run_first_event if since is None else since
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            found = self.find(event, start, **fields)
            if found:
                return found[0]
            if self.proc is None or (
                self.proc.returncode is not None and self._drain is not None and self._drain.done()
            ):
                raise BrokerExited(
                    f"the broker exited (code {self.proc and self.proc.returncode}) before "
                    f"logging {event!r} {fields}; stderr: {self.other_lines} "
                    f"{self.run_events()[-5:]}"
                )
            remaining = deadline - loop.time()
            if remaining <= 0:
                raise AssertionError(f"timed out after {timeout} s waiting for {event!r} {fields}")
            self._changed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), remaining)

    async def _drain_stderr(self, proc: asyncio.subprocess.Process, run: int) -> None:
        assert proc.stderr is not None
        try:
            while True:
                line = await proc.stderr.readline()
                if not line:
                    break
                text = line.decode(errors="replace").rstrip("\n")
                try:
                    record = json.loads(text)
                except ValueError:
                    record = None
                if isinstance(record, dict):
                    record["_run"] = run
                    self.events.append(record)
                else:
                    self.other_lines.append(text)
                self._changed.set()
            await proc.wait()
        finally:
            self._changed.set()

    # --- stopping ---------------------------------------------------------------------------
    def problems(self) -> list[dict[str, Any]]:
        """Every log line at level error (or worse) of every run so far."""
        return [e for e in self.events if e.get("level") in ("error", "critical", "exception")]

    async def stop(self, timeout: float = 20.0) -> None:
        """SIGTERM; the broker must log ``stopped`` and exit 0, having logged no error in any
        run (a failed snapshot or fsync, a handler that raised, a record after close...)."""
        assert self.proc is not None and self.running, "the broker is not running"
        self.proc.send_signal(signal.SIGTERM)
        code = await asyncio.wait_for(self.proc.wait(), timeout)
        await self._reap()
        assert code == 0, f"exit code {code} after SIGTERM; stderr: {self.other_lines}"
        assert self.find("stopped", self._run_first_event), "no 'stopped' line after SIGTERM"
        assert not self.problems(), f"the broker logged errors: {self.problems()}"

    async def kill(self) -> None:
        """SIGKILL: no shutdown code runs at all."""
        assert self.proc is not None
        if self.proc.returncode is None:
            self.proc.send_signal(signal.SIGKILL)
        await asyncio.wait_for(self.proc.wait(), 20)
        await self._reap()

    async def _reap(self) -> None:
        if self._drain is not None:
            await asyncio.wait_for(self._drain, 20)
            self._drain = None

    async def close(self) -> None:
        """Teardown: kill whatever still runs."""
        if self.proc is not None and self.proc.returncode is None:
            await self.kill()
        await self._reap()


# --- reading state back over raw connections ------------------------------------------------


async def fetch_committed(
    port: int, group: str, topic: str, partitions: list[int]
) -> dict[int, tuple[int, str]]:
    """OffsetFetch v5: ``{partition: (offset, metadata)}`` of the partitions with a commit."""
    async with await RawConnection.open(f"127.0.0.1:{port}", "durability-check") as conn:
        resp = await conn.call(OFFSET_FETCH, 5, group_id=group, topics=[(topic, partitions)])
    assert resp["error_code"] == 0, resp
    out = {}
    for t in resp["topics"]:
        assert t["name"] == topic
        for p in t["partitions"]:
            assert p["error_code"] == 0, p
            if p["committed_offset"] >= 0:
                out[p["partition_index"]] = (p["committed_offset"], p["metadata"])
    return out


async def read_partition(port: int, topic: str, partition: int) -> tuple[dict[int, bytes], int]:
    """Every record of one partition, from its log start, by Fetch v11:
    (``{offset: value}``, high watermark)."""
    records: dict[int, bytes] = {}
    offset = 0
    async with await WireClient.connect(port) as wire:
        while True:
            resp = await wire.request(1, 11, fetch_request(topic, partition, offset))
            ((part,),) = [t["partitions"] for t in resp["responses"]]
            if part["error_code"] == OFFSET_OUT_OF_RANGE and offset < part["log_start_offset"]:
                offset = part["log_start_offset"]
                continue
            assert part["error_code"] == 0, part
            high_watermark = part["high_watermark"]
            got = list(iter_records(part["records"] or b""))
            for rec in got:
                records[rec.offset] = rec.value
            if got:
                offset = got[-1].offset + 1
            if offset >= high_watermark:
                return records, high_watermark
            assert got, f"{topic}-{partition}: no records at {offset} below {high_watermark}"


@contextlib.asynccontextmanager
async def broker_process(
    data_dir: str | os.PathLike[str],
    port: int | None = None,
    args: tuple[str, ...] = (),
    env: Mapping[str, str] | None = None,
) -> AsyncIterator[BrokerProcess]:
    """A ``BrokerProcess`` (not started) that is killed at the end if still running."""
    proc = BrokerProcess(data_dir, port, args, env)
    try:
        yield proc
    finally:
        await proc.close()
