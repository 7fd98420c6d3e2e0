"""The periodic retention pass under --data-dir (its files deleted on the storage's file
thread): the old segments of every partition go, the log start moves to the active segment,
and a kill -9 once the files are gone brings the log back from there."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from tests.support.broker_process import broker_process
from tests.support.kafka_wire import (
    WireClient,
    build_batch,
    create_topic,
    list_offsets_request,
    only_partition,
    produce_request,
)

PARTITIONS = 3


async def earliest(wire: WireClient, partition: int) -> int:
    resp = await wire.request(2, 5, list_offsets_request("aged", [partition], -2))
    return int(only_partition(resp)["offset"])


async def test_the_periodic_pass_deletes_old_segments_and_the_start_survives_a_kill(
    tmp_path: Path,
) -> None:
    data = tmp_path / "data"
    dirs = [data / "topics" / f"aged-{p}" for p in range(PARTITIONS)]
    async with broker_process(data, args=("--log-retention-check-interval-ms", "50")) as broker:
        await broker.start()
        async with await WireClient.connect(broker.port) as wire:
            configs = {"segment.bytes": "1024", "retention.ms": "60000"}
            await create_topic(wire, "aged", PARTITIONS, configs)
            old = int(time.time() * 1000) - 3_600_000
            for i in range(12):  # ~100-byte batches an hour old: several 1 KiB segments
                for p in range(PARTITIONS):
                    batch = build_batch([(None, b"%04d" % i + b"x" * 60, [])], timestamp_ms=old)
                    resp = await wire.request(0, 8, produce_request("aged", p, batch))
                    assert only_partition(resp)["error_code"] == 0
            deadline = time.monotonic() + 30
            while any(len(list(d.glob("*.log"))) > 1 for d in dirs):
                assert time.monotonic() < deadline, "retention never deleted the old segments"
                await asyncio.sleep(0.02)
            actives = [int(next(iter(d.glob("*.log"))).stem) for d in dirs]
            assert all(a > 0 for a in actives)
            assert [await earliest(wire, p) for p in range(PARTITIONS)] == actives
            for d, active in zip(dirs, actives, strict=True):
                while (d / "log-start-offset").read_text() != str(active):
                    assert time.monotonic() < deadline, "the start was never checkpointed"
                    await asyncio.sleep(0.02)
            assert all(len(list(d.glob("*.index"))) <= 1 for d in dirs)  # old ones went too
        await broker.kill()
        await broker.start()
        async with await WireClient.connect(broker.port) as wire:
            assert [await earliest(wire, p) for p in range(PARTITIONS)] == actives
        await broker.stop()
