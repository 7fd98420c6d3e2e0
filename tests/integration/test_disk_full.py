"""A full disk under ``--data-dir``, on a small tmpfs (root mounts one; elsewhere the test
skips, saying why).

What kgroupd does: a produce whose batch cannot be written gets KAFKA_STORAGE_ERROR for that
partition (nothing of it is kept, the offsets do not move, the partition stays served: the
next produce tries again); an offset commit that cannot be written is not acknowledged (the
client's request gets no answer until the write succeeds, or the connection closes) and is
logged as one structured line; once space returns, both work again, and nothing that was
acknowledged is lost across a restart. SIGTERM while the disk is full exits with one line
naming the problem."""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.broker_process import BrokerProcess, fetch_committed, read_partition
from tests.support.groups import OFFSET_COMMIT, RawConnection, decode_response
from tests.support.kafka_wire import WireClient, build_batch, create_topic, produce_request

KAFKA_STORAGE_ERROR = 56
TOPIC = "full"
SIZE = "8m"
METADATA = "m" * 3000


@pytest.fixture
def tmpfs(tmp_path: Path) -> Iterator[Path]:
    mount = tmp_path / "tmpfs"
    mount.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={SIZE}", "tmpfs", str(mount)],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def fill(mount: Path) -> Path:
    """Take every free byte of the tmpfs with one file; deleting it gives the space back."""
    filler = mount / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        for size in (1 << 20, 4096, 1):
            with contextlib.suppress(OSError):
                while os.write(fd, b"\0" * size):
                    pass
    finally:
        os.close(fd)
    return filler


async def produce(wire: WireClient, value: bytes) -> tuple[int, int]:
    """(error code, base offset) of one batch of ten records to partition 0."""
    batch = build_batch([(None, value, []) for _ in range(10)])
    resp = await wire.request(0, 9, produce_request(TOPIC, 0, batch))
    part = resp["responses"][0]["partition_responses"][0]
    return part["error_code"], part["base_offset"]


def commit_frame(conn: RawConnection, offset: int) -> tuple[int, bytes]:
    """An OffsetCommit of ``offset`` with 3,000 bytes of metadata (under Kafka's 4096 limit)."""
    return conn.frame(
        OFFSET_COMMIT,
        7,
        group_id="g",
        generation_id_or_member_epoch=-1,
        member_id="",
        group_instance_id=None,
        topics=[(TOPIC, [(0, offset, -1, METADATA)])],
    )


async def commit(proc: BrokerProcess, offset: int) -> bool:
    """Whether a commit of ``offset`` (on a connection of its own) was acknowledged."""
    async with await RawConnection.open(proc.bootstrap, "committer") as conn:
        corr, frame = commit_frame(conn, offset)
        conn.writer.write(frame)
        await conn.writer.drain()
        try:
            got, body = await conn.read_frame(5.0)
        except (TimeoutError, asyncio.IncompleteReadError, ConnectionResetError):
            return False
    assert got == corr
    resp = decode_response(OFFSET_COMMIT, 7, body)
    assert resp["topics"][0]["partitions"][0]["error_code"] == 0, resp
    return True


async def commit_until_refused(proc: BrokerProcess, first: int) -> None:
    """Commit ``first``, ``first + 1``... until one is refused (a small entry may still fit in
    the slack of the log file's last page), failing if ten all are acknowledged."""
    for offset in range(first, first + 10):
        if not await commit(proc, offset):
            return
    raise AssertionError("every commit was acknowledged on a full disk")


async def test_a_full_disk_refuses_writes_and_recovers(tmpfs: Path) -> None:
    data_dir = tmpfs / "data"
    proc = BrokerProcess(data_dir, args=("--fsync", "always"))
    try:
        await proc.start()
        async with await WireClient.connect(proc.port) as wire:
            await create_topic(wire, TOPIC, 1)
            value = uuid.uuid4().hex.encode() * 100
            assert (await produce(wire, value))[0] == 0
            async with await RawConnection.open(proc.bootstrap, "committer") as conn:
                resp = await conn.call(
                    OFFSET_COMMIT,
                    7,
                    group_id="g",
                    generation_id_or_member_epoch=-1,
                    member_id="",
                    group_instance_id=None,
                    topics=[(TOPIC, [(0, 5, -1, "")])],
                )
                assert resp["topics"][0]["partitions"][0]["error_code"] == 0

                filler = fill(tmpfs)
                # The produce is refused per partition; the high watermark does not move.
                for _ in range(3):
                    code, _ = await produce(wire, value)
                    assert code == KAFKA_STORAGE_ERROR
                # A commit is not acknowledged while it cannot be written: its connection
                # is closed unanswered.
                await commit_until_refused(proc, 6)
                assert proc.running
                failed = [
                    e for e in proc.problems() if e["event"] == "coordinator_log_write_failed"
                ]
                assert failed and "No space left" in failed[0]["error"], proc.problems()
                assert not proc.other_lines, proc.other_lines  # no plain-text traceback

                filler.unlink()  # space is back
                assert await commit(proc, 20)
                code, base = await produce(wire, value)
                assert (code, base) == (0, 10)
        proc.events.clear()  # the errors above were expected; the restart must log none
        await proc.stop()
        await proc.start()
        records, high_watermark = await read_partition(proc.port, TOPIC, 0)
        assert high_watermark == 20 and sorted(records) == list(range(20))
        assert await fetch_committed(proc.port, "g", TOPIC, [0]) == {0: (20, METADATA)}

        # SIGTERM on a full disk with a commit not yet written: one line naming the problem,
        # a non-zero exit (the commit was never acknowledged).
        fill(tmpfs)
        async with await WireClient.connect(proc.port) as wire:
            assert (await produce(wire, value))[0] == KAFKA_STORAGE_ERROR
        await commit_until_refused(proc, 21)
        assert proc.proc is not None
        proc.proc.terminate()
        code = await asyncio.wait_for(proc.proc.wait(), 20)
        await proc.close()
        assert code != 0
        assert proc.other_lines[-1] == (
            f"kgroupd: error: stopping: cannot write to the data dir {data_dir}: No space left "
            "on device; everything acknowledged was on disk already, anything not "
            "acknowledged may be lost"
        ), proc.other_lines
    finally:
        await proc.close()
