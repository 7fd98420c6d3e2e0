"""The installed kgroupd's version, read without ``importlib.metadata``: importing that
(email, zipfile, pathlib, csv) takes longer than the rest of ``kgroupd --version``."""

from __future__ import annotations

import os
import sys

_NAME = "kgroupd"
_FILES = {".dist-info": "METADATA", ".egg-info": "PKG-INFO"}


def version() -> str:
    """pyproject.toml's version as installed: the ``Version:`` of the first kgroupd
    distribution on ``sys.path``, found as ``importlib.metadata.version`` finds it."""
    for entry in sys.path:
        folder = entry or "."
        try:
            names = os.listdir(folder)
        except OSError:
            continue
        for name in names:
            found = _read(folder, name)
            if found is not None:
                return found
    return _slow()


def _read(folder: str, name: str) -> str | None:
    stem, dot, suffix = name.rpartition(".")
    metadata = _FILES.get(dot + suffix)
    if metadata is None or stem.partition("-")[0].lower().replace("_", "-") != _NAME:
        return None
    try:
        with open(os.path.join(folder, name, metadata), encoding="utf-8") as f:
            for line in f:
                if line.startswith("Version:"):
                    return line.partition(":")[2].strip()
                if not line.strip():  # the end of the headers
                    break
    except OSError:
        pass
    return None


def _slow() -> str:
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as installed

    try:
        return installed(_NAME)
    except PackageNotFoundError:  # pragma: no cover (run from a source tree)
        return "unknown"
