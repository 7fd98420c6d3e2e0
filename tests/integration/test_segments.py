"""Topic data beyond memory (issue "Bounded under abuse"): under --data-dir the log is served
from its segment files, memory holds sparse indexes and a bounded cache of the newest batches,
and a restart reads only what recovery needs; in memory, --max-memory-bytes deletes the oldest.

The data is produced as pre-encoded raw Produce frames (acks=1, pipelined), one ~1 KiB batch
each, whose value starts with its own offset so every fetched batch is checked where it is.
"""

from __future__ import annotations

from pathlib import Path

from structlog.testing import capture_logs

from kgroupd.broker.testing import running_server
from tests.support.broker_process import BrokerProcess, broker_process
from tests.support.kafka_wire import WireClient, create_topic
from tests.support.segment_data import BATCH, MiB, produce_raw, read_all, template
from tests.support.segment_data import rss as vm_rss

TOPIC = "big"


def rss(broker: BrokerProcess) -> int:
    assert broker.proc is not None
    return vm_rss(broker.proc.pid)


def loaded(broker: BrokerProcess) -> dict[str, int]:
    (event,) = broker.find("topic_data_loaded", since=broker.run_start)
    return event


async def test_a_log_many_times_the_cache_is_served_from_its_segments(tmp_path: Path) -> None:
    total = 64 * MiB // BATCH  # 64 MiB of ~1 KiB batches
    segment_bytes = 16 * MiB
    _, value_at = template()
    async with broker_process(tmp_path / "data", args=("--log-cache-bytes", str(4 * MiB))) as b:
        await b.start()
        async with await WireClient.connect(b.port) as wire:
            await create_topic(wire, TOPIC, 1, {"segment.bytes": str(segment_bytes)})
            await create_topic(wire, "warm", 1, {})
        # warm up: what any broker allocates on its first requests is not the topic data
        await produce_raw(b.port, "warm", 2000)
        before = rss(b)
        assert await produce_raw(b.port, TOPIC, total) == total - 1
        grown = rss(b) - before
        # 64 MiB went to the files; memory holds the 4 MiB cache and the indexes
        assert grown < 24 * MiB, f"RSS grew {grown / MiB:.1f} MiB for 64 MiB of data"
        # consumers from the start (the files) and from the tail (the cache) get everything
        assert await read_all(b.port, TOPIC, 0, total, value_at) == total
        assert await read_all(b.port, TOPIC, total - 50, total, value_at) == 50
        segments = sorted((tmp_path / "data" / "topics" / f"{TOPIC}-0").glob("*.log"))
        assert len(segments) >= 4

        # kill -9: start-up reads the index files and the tail after the last one only
        await b.kill()
        await b.start()
        first = loaded(b)
        per_segment = segment_bytes // BATCH + 1
        assert 0 < first["batches_read"] <= per_segment, first
        assert first["batches_read"] < total // 3
        assert await read_all(b.port, TOPIC, 0, total, value_at) == total

        # a clean stop writes the active segment's index file: nothing is read back
        await b.stop()
        await b.start()
        assert loaded(b)["batches_read"] == 0
        assert await read_all(b.port, TOPIC, total - 3000, total, value_at) == 3000

        # deleted index files are rebuilt from their segments, once
        await b.stop()
        indexes = sorted(segments[0].parent.glob("*.idx"))
        assert [p.stem for p in indexes] == [p.stem for p in segments]
        for p in indexes:
            p.unlink()
        await b.start()
        assert loaded(b)["batches_read"] == total
        assert sorted(p.stem for p in segments[0].parent.glob("*.idx")) == [
            p.stem for p in segments
        ]
        assert await read_all(b.port, TOPIC, 0, total, value_at) == total
        await b.stop()
        await b.start()
        assert loaded(b)["batches_read"] == 0
        # appends go on after all this, and are read back from the cache and the files
        assert await produce_raw(b.port, TOPIC, 10, first=total) == total + 9
        assert await read_all(b.port, TOPIC, 0, total + 10, value_at) == total + 10
        await b.stop()


async def test_in_memory_the_bound_deletes_the_oldest_batches_first() -> None:
    bound = 2 * MiB
    _, value_at = template()
    with capture_logs() as logs:
        async with running_server(max_memory_bytes=bound, log_level="warning") as server:
            async with await WireClient.connect(server.port) as wire:
                await create_topic(wire, "old", 1, {})
                await create_topic(wire, "new", 1, {})
            n = bound // BATCH
            await produce_raw(server.port, "old", n)  # fits
            assert not [e for e in logs if e["event"] == "memory_bound_deleted"]
            await produce_raw(server.port, "new", n // 2)  # over: the oldest ("old") go first
            topics = server.broker.topics
            old, new = topics.partition("old", 0), topics.partition("new", 0)
            assert old is not None and new is not None
            assert topics.budget is not None and topics.budget.total <= bound
            assert old.log_start_offset > 0 and new.log_start_offset == 0
            deleted = [e for e in logs if e["event"] == "memory_bound_deleted"]
            assert deleted and {e["topic"] for e in deleted} == {"old"}
            assert deleted[-1]["log_start_offset"] == old.log_start_offset
            # what is left is served from its new start
            start = old.log_start_offset
            assert await read_all(server.port, "old", start, n, value_at) == n - start
            assert await read_all(server.port, "new", 0, n // 2, value_at) == n // 2
