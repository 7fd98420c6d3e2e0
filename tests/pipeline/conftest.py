"""Fixtures for the Spark tests: one local[2] SparkSession per test module, and a real
broker running in this process on a thread of its own (Spark's calls block, so the broker
cannot share the test's event loop).

Java missing: the tests skip, except under CI=true, where it fails (``tests.conftest.require``).
"""

from __future__ import annotations

import asyncio
import os
import shutil
import sys
import threading
from collections.abc import Coroutine, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

from kgroupd.broker.log.partition import now_ms
from kgroupd.broker.net.server import KafkaServer
from kgroupd.broker.testing import running_server
from tests.conftest import require

T = TypeVar("T")

# Spark starts faster with the C1 compiler only and the serial collector.
JAVA_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
SPARK_ENV = {"PYSPARK_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1"}
START_TIMEOUT_S = 20.0
CALL_TIMEOUT_S = 120.0


class BrokerThread:
    """kgroupd on a free loopback port, served by an event loop on a daemon thread.

    ``run(coro)`` runs a coroutine on the broker's loop and returns its result, so the tests
    can use async clients (and the broker's own objects) from synchronous code.
    """

    def __init__(self) -> None:
        self.server: KafkaServer | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._main, name="kgroupd-broker", daemon=True)

    def _main(self) -> None:
        async def serve() -> None:
            async with running_server(log_level="warning") as server:
                self.server = server
                self._loop = asyncio.get_running_loop()
                self._stop = asyncio.Event()
                self._ready.set()
                await self._stop.wait()

        try:
            asyncio.run(serve())
        except BaseException as exc:  # reported by start() or stop()
            self._error = exc
        finally:
            self._ready.set()

    def start(self) -> None:
        self._thread.start()
        if not self._ready.wait(START_TIMEOUT_S) or self.server is None:
            raise RuntimeError(f"the broker did not start: {self._error!r}")

    def stop(self) -> None:
        if self._loop is not None and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(START_TIMEOUT_S)
        assert not self._thread.is_alive(), "the broker thread did not stop"
        if self._error is not None:
            raise self._error

    @property
    def port(self) -> int:
        assert self.server is not None
        return self.server.port

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def run(self, coro: Coroutine[Any, Any, T], timeout: float = CALL_TIMEOUT_S) -> T:
        assert self._loop is not None
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout)

    def apply_retention(self) -> int:
        """Run the broker's retention pass now (it runs every 5 minutes on its own): the
        batches the topics' retention.ms/retention.bytes configs let go are dropped and log
        start offsets move. Returns how many batches were dropped."""

        async def apply() -> int:
            assert self.server is not None
            return self.server.broker.topics.apply_retention(now_ms())

        return self.run(apply())


@pytest.fixture(scope="module")
def broker() -> Iterator[BrokerThread]:
    thread = BrokerThread()
    thread.start()
    try:
        yield thread
    finally:
        thread.stop()


@pytest.fixture(scope="module")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A local[2] SparkSession with the "kgroupd" source registered, for one test module."""
    require(shutil.which("java") is not None, "java (a JRE, 17+) is not on PATH; PySpark needs it")
    from pyspark.sql import SparkSession

    from kgroupd.pipeline.source import KgroupdDataSource

    saved = {name: os.environ.get(name) for name in SPARK_ENV}
    os.environ.update(SPARK_ENV)
    warehouse: Path = tmp_path_factory.mktemp("spark-warehouse")
    session = (
        SparkSession.builder.master("local[2]")
        .appName("kgroupd-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.warehouse.dir", str(warehouse))
        .config("spark.driver.extraJavaOptions", JAVA_OPTIONS)
        .config("spark.executor.extraJavaOptions", JAVA_OPTIONS)
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    session.dataSource.register(KgroupdDataSource)
    try:
        yield session
    finally:
        session.stop()
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
