"""Text tables as Kafka's tools print them, or JSON (the same column names in snake_case)."""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from typing import Any, TextIO


def key(column: str) -> str:
    """``LOG-END-OFFSET`` -> ``log_end_offset``; ``#PARTITIONS`` -> ``partitions``."""
    return column.lstrip("#").lower().replace("-", "_")


def table(columns: Sequence[str], rows: Sequence[Sequence[Any]], out: TextIO | None = None) -> None:
    """Left-aligned columns, ``-`` where a value is empty (None)."""
    out = out or sys.stdout
    cells = [[("-" if v is None or v == "" else str(v)) for v in row] for row in rows]
    widths = [max([len(c), *(len(r[i]) for r in cells)]) for i, c in enumerate(columns)]
    for line in [list(columns), *cells]:
        out.write(" ".join(v.ljust(w) for v, w in zip(line, widths, strict=True)).rstrip())
        out.write("\n")


def records(columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> list[dict[str, Any]]:
    return [
        {key(c): (None if v == "" else v) for c, v in zip(columns, row, strict=True)}
        for row in rows
    ]


def emit_json(value: Any, out: TextIO | None = None) -> None:
    (out or sys.stdout).write(json.dumps(value, indent=2, sort_keys=False) + "\n")


def emit(fmt: str, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    if fmt == "json":
        emit_json(records(columns, rows))
    else:
        table(columns, rows)


def note(message: str) -> None:
    """Kafka's tools' remarks (no active members, dry run...): on stderr, so stdout is data."""
    print(message, file=sys.stderr)
