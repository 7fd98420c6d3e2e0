"""Which paths a ``.dockerignore`` keeps out of the build context, by Docker's rules (moby's
patternmatcher): patterns in order, the last one matching a path or one of its parent
directories decides, ``!`` lets a path back in; ``*`` and ``?`` stay within one path
component, ``**`` crosses any number; a leading or trailing ``/`` means nothing."""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path


def _regex(pattern: str) -> re.Pattern[str]:
    out, i = "", 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out, i = out + "(?:.*/)?", i + 3
        elif pattern.startswith("**", i):
            out, i = out + ".*", i + 2
        elif pattern[i] == "*":
            out, i = out + "[^/]*", i + 1
        elif pattern[i] == "?":
            out, i = out + "[^/]", i + 1
        else:
            out, i = out + re.escape(pattern[i]), i + 1
    return re.compile(out)


class DockerIgnore:
    def __init__(self, path: Path) -> None:
        self.rules: list[tuple[bool, re.Pattern[str]]] = []
        for line in path.read_text().splitlines():
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            negate = line.startswith("!")
            pattern = line.lstrip("!").strip().strip("/")
            self.rules.append((negate, _regex(pattern)))

    def ignored(self, path: str) -> bool:
        """Whether ``path`` (relative to the context, ``/``-separated) is left out."""
        parts = path.strip("/").split("/")
        prefixes = ["/".join(parts[:n]) for n in range(1, len(parts) + 1)]
        out = False
        for negate, rx in self.rules:
            if any(rx.fullmatch(p) for p in prefixes):
                out = not negate
        return out

    def kept_out(self, root: Path, sources: Iterable[str]) -> list[str]:
        """The files under ``sources`` (COPY's, relative to ``root``) this file leaves out,
        bytecode aside."""
        out = []
        for source in sources:
            top = root / source
            files = [top] if top.is_file() else [p for p in top.rglob("*") if p.is_file()]
            assert files, f"{source}: nothing there"
            for f in files:
                rel = f.relative_to(root).as_posix()
                if "__pycache__" not in rel and self.ignored(rel):
                    out.append(rel)
        return out
