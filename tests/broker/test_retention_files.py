"""Retention's file work on the storage's file thread (``PartitionStore.delete_below(later=
True)``): the start checkpoint, then the segments below it unlinked, in order, in the
partition's own directory only (not in a directory of the same name made since)."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

from kgroupd.broker.storage.fsync import FsyncWorker
from kgroupd.broker.storage.partition_store import _checkpoint_later


def _partition(home: Path) -> tuple[int, int]:
    home.mkdir()
    for name in ("00000000000000000000.log", "00000000000000000000.index", "log-start-offset"):
        (home / name).write_text("0")
    found = os.stat(home)
    return found.st_dev, found.st_ino


async def test_the_checkpoint_is_written_then_the_segments_go(tmp_path: Path) -> None:
    worker = FsyncWorker(asyncio.get_running_loop(), "always", 1000)
    try:
        home = tmp_path / "t-0"
        ident = _partition(home)
        names = ["00000000000000000000.log", "00000000000000000000.index"]
        worker.later(lambda: _checkpoint_later(home, ident, worker, 7, None, names))
        done = worker.drained()
        assert done is not None
        await done
        assert sorted(os.listdir(home)) == ["log-start-offset"]
        assert (home / "log-start-offset").read_text() == "7"
    finally:
        worker.close()


async def test_a_directory_made_again_under_the_same_name_is_left_alone(tmp_path: Path) -> None:
    """A topic deleted (its directory renamed away) and made again before the job ran: the
    new partition's files stay as they are."""
    worker = FsyncWorker(asyncio.get_running_loop(), "always", 1000)
    try:
        home = tmp_path / "t-0"
        ident = _partition(home)
        home.rename(tmp_path / "t-0.x-delete")
        _partition(home)
        names = ["00000000000000000000.log", "00000000000000000000.index"]
        _checkpoint_later(home, ident, worker, 7, None, names)
        assert len(os.listdir(home)) == 3
        assert (home / "log-start-offset").read_text() == "0"
        _checkpoint_later(tmp_path / "gone", ident, worker, 7, None, names)  # no error
    finally:
        worker.close()
