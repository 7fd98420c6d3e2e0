"""Segments roll by time (issue 29, ``segment.ms``): a topic's segment rolls at the first
append more than ``segment.ms`` after its first batch, so time-based retention and the
cleaner reach data that never fills ``segment.bytes``, with and without --data-dir. In memory
there are no files: the batches appended more than ``segment.ms`` before the newest are closed.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from kgroupd.broker.config.settings import load_config
from kgroupd.broker.log.partition import now_ms
from kgroupd.broker.testing import running_server
from kgroupd.protocol.records import build_batch
from tests.integration.test_compaction import wait_for
from tests.integration.test_index_interval import DEFAULT_CONFIG, STATIC_BROKER_CONFIG, describe
from tests.support.kafka_wire import (
    WireClient,
    create_topic,
    fetch_request,
    iter_records,
    list_offsets_request,
    only_partition,
    produce_request,
)

TOPIC = "rolled"
SEGMENT_MS = 200
MODES = pytest.mark.parametrize("on_disk", [True, False], ids=["data-dir", "in-memory"])


def settings(tmp_path: Path, on_disk: bool) -> dict[str, Any]:
    out: dict[str, Any] = {
        "log_cleaner_backoff_ms": 50,
        "log_retention_check_interval_ms": 50,
        "log_level": "warning",
    }
    if on_disk:
        out["data_dir"] = tmp_path
    return out


async def produce(
    wire: WireClient, records: list[tuple[bytes, bytes]], now: int | None = None
) -> int:
    now = now_ms() if now is None else now
    batch = build_batch([(i, k, v, now) for i, (k, v) in enumerate(records)])
    part = only_partition(await wire.request(0, 8, produce_request(TOPIC, 0, batch)))
    assert part["error_code"] == 0, part
    return int(part["base_offset"])


async def after_segment_ms() -> None:
    """Past segment.ms since the last append (the next append rolls)."""
    await asyncio.sleep(SEGMENT_MS * 1.5 / 1000)


async def earliest(wire: WireClient) -> int:
    part = only_partition(await wire.request(2, 7, list_offsets_request(TOPIC, [0], -2)))
    assert part["error_code"] == 0, part
    return int(part["offset"])


async def test_a_segment_file_rolls_at_the_first_append_after_segment_ms(tmp_path: Path) -> None:
    async with (
        running_server(**settings(tmp_path, True)) as server,
        await WireClient.connect(server.port) as wire,
    ):
        await create_topic(wire, TOPIC, 1, {"segment.ms": str(SEGMENT_MS)})
        directory = tmp_path / "topics" / f"{TOPIC}-0"
        first = now_ms()
        await produce(wire, [(b"a", b"1")], first)
        # Kafka's rule compares the batches' timestamps: the same segment
        await produce(wire, [(b"b", b"2")], first)
        assert [p.name for p in sorted(directory.glob("*.log"))] == [f"{0:020d}.log"]
        await after_segment_ms()
        assert len(list(directory.glob("*.log"))) == 1  # time alone does not roll
        assert await produce(wire, [(b"c", b"3")]) == 2
        names = [p.name for p in sorted(directory.glob("*.log"))]
        assert names == [f"{0:020d}.log", f"{2:020d}.log"]


@MODES
async def test_retention_ms_deletes_what_segment_ms_closed(tmp_path: Path, on_disk: bool) -> None:
    configs = {"segment.ms": str(SEGMENT_MS), "retention.ms": str(SEGMENT_MS)}
    async with (
        running_server(**settings(tmp_path, on_disk)) as server,
        await WireClient.connect(server.port) as wire,
    ):
        await create_topic(wire, TOPIC, 1, configs)
        for i in range(3):
            await produce(wire, [(b"k", b"%d" % i)])
        await after_segment_ms()
        assert await produce(wire, [(b"k", b"new")]) == 3

        async def deleted() -> bool:
            return await earliest(wire) == 3

        await wait_for(deleted)


@MODES
async def test_a_compacted_topic_with_segment_ms_is_cleaned(tmp_path: Path, on_disk: bool) -> None:
    configs = {
        "cleanup.policy": "compact",
        "segment.ms": str(SEGMENT_MS),
        "min.cleanable.dirty.ratio": "0.01",
    }
    keys = [b"k%d" % i for i in range(10)]
    async with (
        running_server(**settings(tmp_path, on_disk)) as server,
        await WireClient.connect(server.port) as wire,
    ):
        await create_topic(wire, TOPIC, 1, configs)
        for rnd in range(3):
            await produce(wire, [(k, k + b"=%d" % rnd) for k in keys])
        await after_segment_ms()
        assert await produce(wire, [(b"~roll", b"x")]) == 30
        plog = server.broker.topics.partition(TOPIC, 0)
        assert plog is not None

        async def cleaned() -> bool:
            return plog.cleaned_to == 30

        await wait_for(cleaned)
        got: list[tuple[int, bytes, bytes]] = []
        offset = 0
        while offset < 31:  # a fetch answers from one segment file
            body = fetch_request(TOPIC, 0, offset, max_bytes=1 << 20, partition_max_bytes=1 << 20)
            part = only_partition(await wire.request(1, 11, body))
            assert part["error_code"] == 0 and part["records"], part
            got += [(r.offset, r.key, r.value) for r in iter_records(part["records"])]
            offset = got[-1][0] + 1
        want = [(20 + i, k, k + b"=2") for i, k in enumerate(keys)]
        assert got == [*want, (30, b"~roll", b"x")]


def test_the_broker_default_is_log_roll_ms_or_log_roll_hours() -> None:
    assert load_config([]).log_roll_ms is None
    assert load_config([]).log_roll_hours == 168
    assert load_config(["--log-roll-ms", "200"]).log_roll_ms == 200
    assert load_config(["--log-roll-hours", "1"]).log_roll_hours == 1


async def test_log_roll_ms_is_the_default_segment_ms(tmp_path: Path) -> None:
    async with (
        running_server(**settings(tmp_path, True), log_roll_ms=SEGMENT_MS) as server,
        await WireClient.connect(server.port) as wire,
    ):
        await create_topic(wire, TOPIC, 1, {})
        await produce(wire, [(b"a", b"1")])
        await after_segment_ms()
        assert await produce(wire, [(b"b", b"2")]) == 1
        assert len(list((tmp_path / "topics" / f"{TOPIC}-0").glob("*.log"))) == 2
        topic = (await describe(wire, 2, TOPIC))["segment.ms"]
        assert (topic["value"], topic["config_source"]) == (str(SEGMENT_MS), STATIC_BROKER_CONFIG)
        broker = await describe(wire, 4, "0")
        ms = broker["log.roll.ms"]
        assert (ms["value"], ms["config_source"]) == (str(SEGMENT_MS), STATIC_BROKER_CONFIG)


async def test_describe_configs_shows_kafkas_roll_defaults(tmp_path: Path) -> None:
    async with (
        running_server(**settings(tmp_path, False)) as server,
        await WireClient.connect(server.port) as wire,
    ):
        await create_topic(wire, TOPIC, 1, {})
        topic = (await describe(wire, 2, TOPIC))["segment.ms"]
        assert (topic["value"], topic["config_source"]) == ("604800000", DEFAULT_CONFIG)
        hours = (await describe(wire, 4, "0"))["log.roll.hours"]
        assert (hours["value"], hours["config_source"]) == ("168", DEFAULT_CONFIG)
