"""When a segment rolls by time, as Kafka's LogSegment decides it: the clock is the segment's
first batch's timestamp, also after a restart under --data-dir (read from the file, not
restarted with the process), less a random jitter below segment.jitter.ms, whose broker
default is --log-roll-jitter-ms, else --log-roll-jitter-hours (Kafka's log.roll.jitter.*)."""

from __future__ import annotations

from pathlib import Path

from kgroupd.broker.config.settings import load_config
from kgroupd.broker.log.partition import now_ms
from kgroupd.broker.testing import running_server
from kgroupd.protocol.records import build_batch
from tests.integration.test_index_interval import DEFAULT_CONFIG, STATIC_BROKER_CONFIG, describe
from tests.support.kafka_wire import WireClient, create_topic, only_partition, produce_request

TOPIC = "clocked"
SEGMENT_MS = 1_000_000  # long: the tests name the batches' timestamps and never wait


async def produce(wire: WireClient, timestamp: int) -> int:
    batch = build_batch([(0, b"k", b"v", timestamp)])
    part = only_partition(await wire.request(0, 8, produce_request(TOPIC, 0, batch)))
    assert part["error_code"] == 0, part
    return int(part["base_offset"])


def segments(data_dir: Path) -> list[str]:
    return sorted(p.name for p in (data_dir / "topics" / f"{TOPIC}-0").glob("*.log"))


async def test_a_restart_keeps_the_active_segments_clock(tmp_path: Path) -> None:
    first = now_ms() - 2 * SEGMENT_MS
    async with (
        running_server(data_dir=tmp_path, log_level="warning") as server,
        await WireClient.connect(server.port) as wire,
    ):
        await create_topic(wire, TOPIC, 1, {"segment.ms": str(SEGMENT_MS)})
        assert await produce(wire, first) == 0
    for restart in range(2):
        async with (
            running_server(data_dir=tmp_path, log_level="warning") as server,
            await WireClient.connect(server.port) as wire,
        ):
            if restart == 0:
                # within segment.ms of the first batch (written before the restart): kept
                assert await produce(wire, first + SEGMENT_MS // 2) == 1
                assert segments(tmp_path) == [f"{0:020d}.log"]
            else:
                # more than segment.ms past the first batch, though the broker just started
                assert await produce(wire, first + SEGMENT_MS + 1) == 2
                assert segments(tmp_path) == [f"{0:020d}.log", f"{2:020d}.log"]


def test_the_jitter_flags_are_kafkas() -> None:
    assert load_config([]).log_roll_jitter_ms is None
    assert load_config([]).log_roll_jitter_hours == 0
    assert load_config(["--log-roll-jitter-ms", "5"]).log_roll_jitter_ms == 5
    assert load_config(["--log-roll-jitter-hours", "2"]).log_roll_jitter_hours == 2


async def test_log_roll_jitter_hours_is_the_default_segment_jitter(tmp_path: Path) -> None:
    async with (
        running_server(data_dir=tmp_path, log_level="warning", log_roll_jitter_hours=1) as server,
        await WireClient.connect(server.port) as wire,
    ):
        await create_topic(wire, TOPIC, 1, {"segment.ms": str(SEGMENT_MS)})
        jitter = (await describe(wire, 2, TOPIC))["segment.jitter.ms"]
        assert (jitter["value"], jitter["config_source"]) == ("3600000", STATIC_BROKER_CONFIG)
        hours = (await describe(wire, 4, "0"))["log.roll.jitter.hours"]
        assert (hours["value"], hours["config_source"]) == ("1", STATIC_BROKER_CONFIG)
        first = now_ms() - 2 * SEGMENT_MS
        assert await produce(wire, first) == 0
        # one millisecond short of segment.ms: only a jitter (drawn below segment.ms, here
        # over 1 ms but for a chance of 2 in a million) rolls it
        assert await produce(wire, first + SEGMENT_MS - 1) == 1
        assert segments(tmp_path) == [f"{0:020d}.log", f"{1:020d}.log"]


async def test_log_roll_jitter_ms_beats_the_hours(tmp_path: Path) -> None:
    async with (
        running_server(log_level="warning", log_roll_jitter_ms=7, log_roll_jitter_hours=1) as srv,
        await WireClient.connect(srv.port) as wire,
    ):
        await create_topic(wire, TOPIC, 1, {})
        jitter = (await describe(wire, 2, TOPIC))["segment.jitter.ms"]
        assert (jitter["value"], jitter["config_source"]) == ("7", STATIC_BROKER_CONFIG)
        ms = (await describe(wire, 4, "0"))["log.roll.jitter.ms"]
        assert (ms["value"], ms["config_source"]) == ("7", STATIC_BROKER_CONFIG)


async def test_no_jitter_by_default(tmp_path: Path) -> None:
    async with (
        running_server(log_level="warning") as server,
        await WireClient.connect(server.port) as wire,
    ):
        await create_topic(wire, TOPIC, 1, {})
        jitter = (await describe(wire, 2, TOPIC))["segment.jitter.ms"]
        assert (jitter["value"], jitter["config_source"]) == ("0", DEFAULT_CONFIG)
        hours = (await describe(wire, 4, "0"))["log.roll.jitter.hours"]
        assert (hours["value"], hours["config_source"]) == ("0", DEFAULT_CONFIG)


async def test_a_segment_found_at_start_up_gets_a_jitter(tmp_path: Path) -> None:
    first = now_ms() - 2 * SEGMENT_MS
    async with (
        running_server(data_dir=tmp_path, log_level="warning") as server,
        await WireClient.connect(server.port) as wire,
    ):
        await create_topic(wire, TOPIC, 1, {"segment.ms": str(SEGMENT_MS)})
        assert await produce(wire, first) == 0
    async with (
        running_server(data_dir=tmp_path, log_level="warning", log_roll_jitter_hours=1) as server,
        await WireClient.connect(server.port) as wire,
    ):
        # one millisecond short of segment.ms past the first batch written before the
        # restart: only the jitter drawn for the loaded segment rolls it
        assert await produce(wire, first + SEGMENT_MS - 1) == 1
        assert segments(tmp_path) == [f"{0:020d}.log", f"{1:020d}.log"]
