"""Low-level file writes: whole writes (a short ``os.write`` is continued, never ignored) and
directory fsyncs (a new file's directory entry is durable only once its directory is)."""

from __future__ import annotations

import errno
import os
from pathlib import Path


def write_all(fd: int, data: bytes | bytearray) -> None:
    """Write every byte of ``data`` to ``fd``, continuing after short writes; raises
    ``OSError`` if the file takes nothing (``os.write`` returned 0)."""
    n = os.write(fd, data)
    total = len(data)
    if n == total:
        return
    view = memoryview(data)
    try:
        while n < total:
            if n <= 0:
                raise OSError(errno.EIO, f"write took 0 of {total} bytes")
            view = view[n:]
            total -= n
            n = os.write(fd, view)
    finally:
        view.release()


def fsync_dir(path: Path) -> None:
    """fsync a directory, so the names created, renamed or deleted in it are on disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
