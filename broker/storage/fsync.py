"""fsync off the event loop, with group commit.

Writes happen on the event loop (``os.write`` into the page cache, which a killed process
does not lose). Making them durable is this thread's job: under ``always`` a caller gets a
future that resolves once every file written so far is fsynced; whatever arrives while an
fsync runs is covered by the next one, so one fsync serves many requests. Under
``interval`` the thread fsyncs dirty files every interval; under ``never`` it does nothing.
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import structlog

from kgroupd.broker.storage.fileio import fsync_dir

log = structlog.get_logger("kgroupd.storage")

ALWAYS, INTERVAL, NEVER = "always", "interval", "never"
FSYNC_MODES = (ALWAYS, INTERVAL, NEVER)


class FsyncWorker:
    def __init__(self, loop: asyncio.AbstractEventLoop, mode: str, interval_ms: int) -> None:
        if mode not in FSYNC_MODES:
            raise ValueError(f"fsync mode must be one of {FSYNC_MODES}, not {mode!r}")
        self.loop = loop
        self.mode = mode
        self.interval_s = interval_ms / 1000.0
        self._cond = threading.Condition()
        # Held by the thread while it takes and fsyncs a batch of fds, and by ``close_fd``:
        # an fd is never closed (and its number reused, say by a socket) between the thread
        # taking it and fsyncing it.
        self._io_lock = threading.Lock()
        self._dirty: set[int] = set()
        self._retired: list[int] = []
        self._dirs: set[Path] = set()
        self._waiters: list[asyncio.Future[None]] = []
        self._stopping = False
        self.fsyncs = 0
        # told each round's seconds (the fsync histogram); called on the fsync thread
        self.timed: Callable[[float], None] | None = None
        self._thread = threading.Thread(target=self._run, name="kgroupd-fsync", daemon=True)
        self._thread.start()
        # File work that need not hold the event loop nor wait for an answer (retention's
        # checkpoints and segment deletions), one job at a time in order (``later``).
        self._later: ThreadPoolExecutor | None = None
        # Held around every write of a partition's log-start-offset file (the loop's and
        # ``later``'s): the one written last holds the latest start.
        self.start_lock = threading.Lock()

    def drained(self) -> asyncio.Future[None] | None:
        """A future for when every ``later`` job given so far is done (None: none ever)."""
        if self._later is None:
            return None
        return asyncio.wrap_future(self._later.submit(_nothing), loop=self.loop)

    def later(self, job: Callable[[], None]) -> None:
        """Run ``job`` on the file thread, after the jobs given before it; ``close`` waits for
        them all."""
        if self._later is None:
            self._later = ThreadPoolExecutor(1, thread_name_prefix="kgroupd-files")
        self._later.submit(job)

    def dirty(self, fd: int) -> None:
        """``fd`` was written to; under ``interval`` it is fsynced at the next tick."""
        if self.mode == NEVER:
            return
        with self._cond:
            self._dirty.add(fd)

    def dirty_dir(self, path: Path) -> None:
        """A name was created in directory ``path``; it is fsynced (unless ``never``) in the
        next round, before any waiter of that round is answered."""
        if self.mode == NEVER:
            return
        with self._cond:
            self._dirs.add(path)

    def retire(self, fd: int) -> None:
        """A file the loop is done writing (a rolled segment): the thread fsyncs it (unless
        ``never``) in its next round, before any waiter of that round is answered, then
        closes it."""
        if self.mode == NEVER:
            os.close(fd)
            return
        with self._cond:
            self._dirty.discard(fd)
            self._retired.append(fd)

    def close_fd(self, fd: int) -> None:
        """Close ``fd``, which ``dirty`` may have named: it is dropped from the next round
        first, and never closed while the thread is fsyncing a batch."""
        with self._io_lock:
            with self._cond:
                self._dirty.discard(fd)
            os.close(fd)

    def sync(self) -> asyncio.Future[None] | None:
        """Under ``always``: a future for when everything written so far is on disk."""
        if self.mode != ALWAYS:
            return None
        fut: asyncio.Future[None] = self.loop.create_future()
        with self._cond:
            self._waiters.append(fut)
            self._cond.notify()
        return fut

    def _run(self) -> None:
        while True:
            with self._cond:
                if self.mode == ALWAYS:
                    while not self._waiters and not self._stopping:
                        self._cond.wait()
                elif not self._stopping:
                    self._cond.wait(self.interval_s)
            with self._io_lock:
                with self._cond:
                    fds, self._dirty = self._dirty, set()
                    retired, self._retired = self._retired, []
                    dirs, self._dirs = self._dirs, set()
                    waiters, self._waiters = self._waiters, []
                    stopping = self._stopping
                started = time.perf_counter()
                error = self._sync_batch(fds, retired, dirs)
                timed = self.timed
                if timed is not None and (fds or retired or dirs):
                    timed(time.perf_counter() - started)
            if waiters:
                self.loop.call_soon_threadsafe(_resolve, waiters, error)
            if stopping:
                return

    def _sync_batch(self, fds: set[int], retired: list[int], dirs: set[Path]) -> OSError | None:
        error: OSError | None = None
        for fd in retired:
            try:
                os.fsync(fd)
            except OSError as exc:
                error = exc
                log.error("fsync_failed", error=str(exc))
            finally:
                os.close(fd)
        for fd in fds:
            try:
                os.fsync(fd)
            except OSError as exc:
                error = exc
                log.error("fsync_failed", error=str(exc))
        for path in dirs:
            try:
                fsync_dir(path)
            except FileNotFoundError:  # deleted since (a dropped topic): nothing to keep
                pass
            except OSError as exc:
                error = exc
                log.error("fsync_failed", error=str(exc), directory=str(path))
        if fds or retired or dirs:
            self.fsyncs += 1
        return error

    def close(self) -> None:
        """Finish the ``later`` jobs, fsync what is dirty and stop the thread."""
        if self._later is not None:
            self._later.shutdown(wait=True)
            self._later = None
        with self._cond:
            self._stopping = True
            self._cond.notify()
        self._thread.join()


def _nothing() -> None:
    pass


def _resolve(waiters: list[asyncio.Future[None]], error: OSError | None) -> None:
    for fut in waiters:
        if fut.done():
            continue
        if error is None:
            fut.set_result(None)
        else:
            fut.set_exception(error)
