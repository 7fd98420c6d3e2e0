"""When a segment rolls by time, as Kafka's LogSegment decides it: the clock is the segment's
first batch's timestamp, also after a restart under --data-dir (read from the file, not
restarted with the process)."""

from __future__ import annotations

from pathlib import Path

from kgroupd.broker.log.partition import now_ms
from kgroupd.broker.testing import running_server
from kgroupd.protocol.records import build_batch
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
