"""Logs that answer questions: the one-line start-up summary of what was recovered, a
--create-topic that disagrees with the existing topic, and the line a rebalance ends with."""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

from tests.integration.test_cli import start, wait_for_event


async def test_startup_summary_topic_mismatch_and_rebalance_lines(tmp_path: Path) -> None:
    common = ("--port", "0", "--log-format", "json", "--data-dir", str(tmp_path))
    proc = await start(*common, "--create-topic", "logs:2", "--initial-rebalance-delay-ms", "0")
    try:
        loaded = await wait_for_event(proc, "loaded")
        assert (loaded["topics"], loaded["partitions"], loaded["groups"]) == (1, 2, 0)
        boot = f"127.0.0.1:{(await wait_for_event(proc, 'listening'))['port']}"
        producer = AIOKafkaProducer(bootstrap_servers=boot)
        await producer.start()
        for p in (0, 1):
            await producer.send_and_wait("logs", b"x", partition=p)
        await producer.stop()
        consumer = AIOKafkaConsumer(
            "logs",
            bootstrap_servers=boot,
            group_id="lg",
            client_id="logger",
            group_instance_id="static-1",
            auto_offset_reset="earliest",
            enable_auto_commit=False,
        )
        await consumer.start()
        try:
            seen = 0
            while seen < 2:
                got = await consumer.getmany(timeout_ms=2000)
                seen += sum(len(v) for v in got.values())
            await consumer.commit()
        finally:
            await consumer.stop()  # a static member leaves no LeaveGroup: it stays
        done = await wait_for_event(proc, "rebalance_completed")
        assert done["group_id"] == "lg" and done["generation"] == 1
        assert done["members"] == 1 and done["partitions_moved"] == 2
        assert done["state"] == "Stable"
        assert "static-1" in str(done["reason"]) or "member" in str(done["reason"])
        assert isinstance(done["duration_ms"], float) and done["duration_ms"] >= 0
    finally:
        proc.send_signal(signal.SIGTERM)
        await asyncio.wait_for(proc.wait(), 20)
    assert proc.returncode == 0

    proc = await start(*common, "--create-topic", "logs:3")
    try:
        mismatch = await wait_for_event(proc, "create_topic_mismatch")
        assert mismatch["level"] == "warning"
        assert mismatch["topic"] == "logs"
        assert (mismatch["requested_partitions"], mismatch["existing_partitions"]) == (3, 2)
        loaded = await wait_for_event(proc, "loaded")
        assert loaded["data_dir"] == str(tmp_path)
        assert (loaded["topics"], loaded["partitions"]) == (1, 2)
        assert (loaded["groups"], loaded["committed_offsets"], loaded["static_members"]) == (
            1,
            2,
            1,
        )
        assert isinstance(loaded["load_ms"], float)
    finally:
        proc.send_signal(signal.SIGTERM)
        await asyncio.wait_for(proc.wait(), 20)
