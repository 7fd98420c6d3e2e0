"""The fsync thread never fsyncs an fd number that was closed and reused (say by a socket)."""

from __future__ import annotations

import asyncio
import os
import socket
from pathlib import Path

from kgroupd.broker.storage.fsync import FsyncWorker


async def test_a_closed_dirty_fd_reused_by_a_socket_does_not_fail_the_next_fsync(
    tmp_path: Path,
) -> None:
    worker = FsyncWorker(asyncio.get_running_loop(), "always", 1000)
    try:
        fd = os.open(tmp_path / "log", os.O_WRONLY | os.O_CREAT, 0o644)
        os.write(fd, b"x")
        worker.dirty(fd)
        worker.close_fd(fd)
        a, b = socket.socketpair()  # takes the lowest free numbers: the closed fd's
        try:
            assert fd in (a.fileno(), b.fileno())
            sync = worker.sync()
            assert sync is not None
            await asyncio.wait_for(sync, 5)  # EINVAL from fsync(socket) would fail it
        finally:
            a.close()
            b.close()
    finally:
        worker.close()
