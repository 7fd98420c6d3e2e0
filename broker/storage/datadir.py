"""The data directory itself: its lock and ``meta.json`` (what it was created with)."""

from __future__ import annotations

import fcntl
import json
import os
import stat
from pathlib import Path
from typing import IO, Any

from kgroupd.broker.storage.fileio import fsync_dir

META_VERSION = 1


class DataDirError(Exception):
    """The data directory cannot be used with this configuration; the message says why."""


class DataDir:
    def __init__(self, path: str) -> None:
        self.path = Path(path)
        self._lock: IO[bytes] | None = None

    def open(self, cluster_id: str | None, offsets_partitions: int, node_id: int) -> str:
        """Lock the directory, check or write ``meta.json``; returns the cluster id."""
        try:
            if not self.path.exists():
                self.path.mkdir(parents=True)
                fsync_dir(self.path.parent)
            lock = open(self.path / ".lock", "wb")  # noqa: SIM115 - held while running
        except PermissionError as exc:
            raise not_writable(self.path, exc) from None
        except OSError as exc:
            raise DataDirError(f"cannot use data dir {self.path}: {exc}") from None
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            lock.close()
            raise DataDirError(f"data dir {self.path} is in use by another kgroupd") from None
        self._lock = lock
        meta_path = self.path / "meta.json"
        if meta_path.exists():
            try:
                meta: dict[str, Any] = json.loads(meta_path.read_text())
            except ValueError as exc:
                raise DataDirError(f"{meta_path}: not valid JSON ({exc})") from None
            if meta.get("version", 0) > META_VERSION:
                raise DataDirError(
                    f"{meta_path}: format version {meta['version']} is newer than this "
                    f"kgroupd reads ({META_VERSION})"
                )
            if meta["offsets_partitions"] != offsets_partitions:
                raise DataDirError(
                    f"data dir {self.path} was created with --offsets-partitions "
                    f"{meta['offsets_partitions']}, not {offsets_partitions}: groups would "
                    "move to other shards; start with the same value"
                )
            if cluster_id is not None and cluster_id != meta["cluster_id"]:
                raise DataDirError(
                    f"data dir {self.path} belongs to cluster {meta['cluster_id']}, "
                    f"not {cluster_id}"
                )
            return str(meta["cluster_id"])
        from kgroupd.broker.config.settings import new_cluster_id

        chosen = cluster_id or new_cluster_id()
        tmp = meta_path.with_suffix(".tmp")
        tmp.write_text(
            json.dumps(
                {
                    "version": META_VERSION,
                    "cluster_id": chosen,
                    "offsets_partitions": offsets_partitions,
                    "node_id": node_id,
                },
                indent=2,
            )
        )
        with open(tmp, "rb") as f:
            os.fsync(f.fileno())
        os.replace(tmp, meta_path)
        fsync_dir(self.path)
        return chosen

    def close(self) -> None:
        if self._lock is not None:
            self._lock.close()
            self._lock = None


def not_writable(path: Path, exc: OSError) -> DataDirError:
    """One line naming the directory, who kgroupd runs as, who owns it, and the fix (a
    bind-mounted host directory owned by root is the usual case in a container)."""
    uid, gid = os.geteuid(), os.getegid()
    where = path  # or the nearest directory above it that exists
    while not where.exists() and where != where.parent:
        where = where.parent
    try:
        st = where.stat()
    except OSError:
        owner, fix = f"{where} cannot be read", f"make {where} readable and writable by it"
    else:
        owner = f"{where} belongs to uid {st.st_uid}, mode {stat.S_IMODE(st.st_mode):o}"
        if where != path:
            fix = f"create it for uid {uid} (mkdir -p {path} && chown {uid}:{gid} {path})"
        elif st.st_uid == uid:
            fix = f"make it writable (chmod u+rwx {path})"
        else:
            fix = f"give it to uid {uid} (chown -R {uid}:{gid} {path}, on the host for a "
            fix += "bind mount)"
            if st.st_uid != 0:  # running as root to write root's directory is no advice
                fix += f" or run kgroupd as its owner (docker run --user {st.st_uid}:{st.st_gid})"
    return DataDirError(
        f"data dir {path} is not writable by uid {uid}, which kgroupd runs as "
        f"({exc.strerror}: {exc.filename}; {owner}): {fix}"
    )
