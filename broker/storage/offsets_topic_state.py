"""``consumer-offsets.json`` under ``--data-dir``: where each ``__consumer_offsets``
partition's offsets go on from after a restart (``kgroupd.broker.log.consumer_offsets``).

``{"version": 1, "next_offsets": [...], "clean": bool}``: while running, the offsets
reserved ahead (``clean`` false: every offset handed out is below them); written exactly at
a clean shutdown (``clean`` true). Written atomically (temp file, fsync, rename).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from kgroupd.broker.storage.fileio import fsync_dir

FILE = "consumer-offsets.json"


class OffsetsTopicState:
    def __init__(self, data_dir: str | Path, partitions: int) -> None:
        self.path = Path(data_dir) / FILE
        self.partitions = partitions

    def load(self) -> list[int] | None:
        """The offsets to start from; None if the topic never existed here."""
        if not self.path.exists():
            return None
        data = json.loads(self.path.read_text())
        offsets = [int(o) for o in data["next_offsets"]]
        if len(offsets) != self.partitions:  # guarded by meta.json; never shrink anyway
            offsets = (offsets + [0] * self.partitions)[: self.partitions]
        return offsets

    def save(self, next_offsets: list[int], clean: bool = False) -> None:
        tmp = self.path.with_suffix(".tmp")
        body = {"version": 1, "next_offsets": next_offsets, "clean": clean}
        with open(tmp, "w") as f:
            f.write(json.dumps(body))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)
        fsync_dir(self.path.parent)
