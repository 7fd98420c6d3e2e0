"""The reader threads' descriptors (``kgroupd.broker.storage.partition_store.ReadFds``): one a read
on a
thread uses stays open until that thread is done with it, though its segment is dropped (a
deleted or cleaned segment) and the fetch waiting for it is cancelled meanwhile; then it is
closed, so its number is never reused under a read."""

from __future__ import annotations

import asyncio
import os
import threading
from pathlib import Path

import pytest

from kgroupd.broker.storage.partition_store import ReadFds
from kgroupd.broker.storage.segment import Segment


class HeldSegment(Segment):
    """A segment whose reads wait for ``gate`` on their thread, then read 10 bytes."""

    gate: threading.Event

    def read(self, fd: int, *args: object, **kw: object) -> tuple[list[memoryview], int, bool]:
        assert self.gate.wait(10)
        return [memoryview(os.pread(fd, 10, 0))], 10, True


def is_open(fd: int) -> bool:
    try:
        os.fstat(fd)
    except OSError:
        return False
    return True


async def until(condition: object, timeout: float = 5.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not condition():  # type: ignore[operator]
        assert asyncio.get_running_loop().time() < deadline, "timed out"
        await asyncio.sleep(0.001)


@pytest.mark.parametrize("cancelled", [False, True])
async def test_a_dropped_descriptor_closes_when_its_read_is_done(
    tmp_path: Path, cancelled: bool
) -> None:
    path = tmp_path / "00000000000000000000.log"
    path.write_bytes(b"0123456789" * 10)
    seg = HeldSegment(0, path)
    seg.gate = threading.Event()
    fds = ReadFds()
    reading = asyncio.ensure_future(fds.read(seg, 0, 10, True, None, 0, 100))
    await until(lambda: fds._pins)
    (fd,) = fds._pins
    fds.drop(seg)  # the segment is deleted while a thread reads it
    if cancelled:
        reading.cancel()
        await asyncio.sleep(0.01)
    assert is_open(fd)  # the thread still reads it
    seg.gate.set()
    if not cancelled:
        parts, size, ended = await reading
        assert (bytes(parts[0]), size, ended) == (b"0123456789", 10, True)
    await until(lambda: not is_open(fd))
    assert not fds._pins and not fds._doomed
    fds.close()


async def test_an_evicted_descriptor_of_a_read_waits_too(tmp_path: Path) -> None:
    segs = []
    for i in range(3):
        path = tmp_path / f"{i:020d}.log"
        path.write_bytes(b"abcdefghij" * 3)
        seg = HeldSegment(i, path)
        seg.gate = threading.Event()
        segs.append(seg)
    fds = ReadFds(limit=1)
    reading = asyncio.ensure_future(fds.read(segs[0], 0, 10, True, None, 0, 30))
    await until(lambda: fds._pins)
    (fd,) = fds._pins
    fds.get(segs[1])  # evicts segs[0]'s descriptor: not closed under its read
    fds.get(segs[2])
    assert is_open(fd)
    segs[0].gate.set()
    parts, _, _ = await reading
    assert bytes(parts[0]) == b"abcdefghij"
    await until(lambda: not is_open(fd))
    fds.close()
