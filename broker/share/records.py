"""The share-group state that survives a restart, as records (plain JSON-able dicts), and
their replay.

What Kafka keeps in ``__share_group_state`` (each share partition's start offset and state
batches: ShareSnapshot and ShareUpdate records) and in ``__consumer_offsets`` for share groups
(the group's epochs and members, and the group configs), kgroupd writes to its share store
(``kgroupd.broker.storage.share_store``) as:

- ``{"t": "group", ...}``: a share group whole (epochs, members with their subscriptions and
  assignments); ``{"t": "group-", "g": id}``: it was deleted;
- ``{"t": "sp", "g", "tid", "p", "so", "b", "full"}``: a share partition's start offset and
  state batches ``[first, last, state, delivery count]``; ``full`` replaces the state, else
  the batches update it (Kafka's snapshot and update); ``{"t": "sp-", ...}``: deleted;
- ``{"t": "cfg", "g", "p"}``: a group's config overrides (empty: none).

``ShareState`` replays them in order (live records and, at start-up, the whole log alike) and
gives back the compacted records of what is left.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from kgroupd.broker.coordinator.share.coordinator import ShareGroup, ShareMember
from kgroupd.broker.share.partition import SharePartition, StateBatch

Record = dict[str, Any]
PartitionKey = tuple[str, uuid.UUID, int]


def group_record(group: ShareGroup) -> Record:
    return {
        "t": "group",
        "g": group.group_id,
        "ge": group.group_epoch,
        "ae": group.assignment_epoch,
        "m": [
            {
                "id": m.member_id,
                "e": m.member_epoch,
                "s": list(m.subscribed_topic_names),
                "r": m.rack_id,
                "c": m.client_id,
                "h": m.client_host,
                "a": [[tid.hex, list(ps)] for tid, ps in m.assignment],
            }
            for m in group.members.values()
        ],
    }


def members_of(record: Record) -> list[ShareMember]:
    return [
        ShareMember(
            m["id"],
            m["e"],
            tuple(m["s"]),
            m["r"],
            m["c"],
            m["h"],
            tuple((uuid.UUID(hex=tid), tuple(ps)) for tid, ps in m["a"]),
        )
        for m in record["m"]
    ]


def partition_record(
    key: PartitionKey, start: int, batches: list[StateBatch], full: bool
) -> Record:
    group_id, topic_id, index = key
    return {
        "t": "sp",
        "g": group_id,
        "tid": topic_id.hex,
        "p": index,
        "so": start,
        "b": [list(b) for b in batches],
        "full": full,
    }


def partition_deleted(key: PartitionKey) -> Record:
    return {"t": "sp-", "g": key[0], "tid": key[1].hex, "p": key[2]}


def configs_record(group_id: str, props: dict[str, str]) -> Record:
    return {"t": "cfg", "g": group_id, "p": dict(props)}


@dataclass
class PartitionState:
    start: int
    offsets: dict[int, tuple[int, int]] = field(default_factory=dict)  # offset -> (state, count)

    def batches(self) -> list[StateBatch]:
        out: list[StateBatch] = []
        for offset in sorted(self.offsets):
            state, count = self.offsets[offset]
            if out and out[-1][1] == offset - 1 and out[-1][2:] == (state, count):
                out[-1] = (out[-1][0], offset, state, count)
            else:
                out.append((offset, offset, state, count))
        return out


@dataclass
class ShareState:
    """The replayed records: what a start-up restores, and what compaction writes."""

    groups: dict[str, Record] = field(default_factory=dict)
    partitions: dict[PartitionKey, PartitionState] = field(default_factory=dict)
    configs: dict[str, dict[str, str]] = field(default_factory=dict)

    def replay(self, record: Record) -> None:
        kind = record["t"]
        if kind == "group":
            self.groups[record["g"]] = record
        elif kind == "group-":
            self.groups.pop(record["g"], None)
        elif kind == "cfg":
            if record["p"]:
                self.configs[record["g"]] = dict(record["p"])
            else:
                self.configs.pop(record["g"], None)
        elif kind in ("sp", "sp-"):
            key = (record["g"], uuid.UUID(hex=record["tid"]), record["p"])
            if kind == "sp-":
                self.partitions.pop(key, None)
                return
            state = self.partitions.get(key)
            start = record["so"]
            if state is None or record["full"]:
                state = self.partitions[key] = PartitionState(start)
            if start > state.start:
                state.offsets = {o: v for o, v in state.offsets.items() if o >= start}
            state.start = start
            for first, last, st, count in record["b"]:
                for offset in range(max(first, start), last + 1):
                    state.offsets[offset] = (st, count)
        # an unknown kind is from a newer kgroupd: ignored, as it cannot be applied

    def records(self) -> Iterator[Record]:
        """The compacted records: one per group, config set and share partition."""
        for props in sorted(self.configs.items()):
            yield configs_record(*props)
        yield from self.groups.values()
        for key, state in self.partitions.items():
            yield partition_record(key, state.start, state.batches(), True)


def live_records(
    groups: Iterable[ShareGroup],
    partitions: Iterable[tuple[PartitionKey, SharePartition]],
    configs: dict[str, dict[str, str]],
) -> Iterator[Record]:
    """The compacted records of the live state (a snapshot while running)."""
    for props in sorted(configs.items()):
        yield configs_record(*props)
    for group in groups:
        yield group_record(group)
    for key, sp in partitions:
        start, batches = sp.snapshot()
        yield partition_record(key, start, batches, True)
