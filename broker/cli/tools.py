"""kgroupd's admin tools: ``kgroupd groups ...``, ``kgroupd share-groups ...`` and
``kgroupd topics ...``.

They speak the Kafka protocol (``kgroupd.broker.cli.client``), so they work against any broker,
kgroupd or Apache Kafka. The broker's serving path never imports this package.
"""

from __future__ import annotations

from collections.abc import Sequence

TOOLS = ("groups", "share-groups", "topics")

TOOLS_HELP = """\
kgroupd groups ... and kgroupd topics ... are admin tools (Kafka protocol, any broker):
  kgroupd groups list|describe|delete|delete-offsets|reset-offsets|copy-offsets ...
  kgroupd share-groups list|describe|reset-offsets|delete-offsets|delete ...
  kgroupd topics list|describe|create|delete ...
  (kgroupd groups --help, kgroupd groups describe --help, ...)
"""


def main(argv: Sequence[str]) -> int:
    from .admin import main as run

    return run(argv)
