"""State-change records: what a shard emits and what ``replay`` applies.

Each record has a compaction ``key()`` (latest per key wins; tombstones delete) and a stable
JSON-able form (``record_to_dict`` / ``record_from_dict``; bytes as hex) with a format version,
so the durability work can persist them unchanged.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = [
    "RECORD_FORMAT_VERSION",
    "GroupMetadataRecord",
    "GroupTombstoneRecord",
    "MemberRecord",
    "OffsetCommitRecord",
    "OffsetTombstoneRecord",
    "Record",
    "RecordSink",
    "record_from_dict",
    "record_to_dict",
]

RECORD_FORMAT_VERSION = 1


@dataclass(frozen=True, slots=True)
class OffsetCommitRecord:
    group_id: str
    topic: str
    partition: int
    offset: int
    leader_epoch: int
    metadata: str
    commit_timestamp_ms: int
    expire_timestamp_ms: int | None = None

    def key(self) -> tuple[str, ...]:
        return ("offset", self.group_id, self.topic, str(self.partition))


@dataclass(frozen=True, slots=True)
class OffsetTombstoneRecord:
    group_id: str
    topic: str
    partition: int

    def key(self) -> tuple[str, ...]:
        return ("offset", self.group_id, self.topic, str(self.partition))


@dataclass(frozen=True, slots=True)
class MemberRecord:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    protocol_type: str
    protocols: tuple[tuple[str, bytes], ...]
    assignment: bytes


@dataclass(frozen=True, slots=True)
class GroupMetadataRecord:
    """A classic group as persisted: generation, protocol, leader and members (static ones
    with their cached assignment and protocols), like Kafka's GroupMetadataValue."""

    group_id: str
    protocol_type: str | None
    generation_id: int
    protocol_name: str | None
    leader_id: str | None
    current_state_timestamp_ms: int
    members: tuple[MemberRecord, ...]

    def key(self) -> tuple[str, ...]:
        return ("group", self.group_id)


@dataclass(frozen=True, slots=True)
class GroupTombstoneRecord:
    group_id: str

    def key(self) -> tuple[str, ...]:
        return ("group", self.group_id)


Record = OffsetCommitRecord | OffsetTombstoneRecord | GroupMetadataRecord | GroupTombstoneRecord
RecordSink = Callable[[Record], None]

_TYPES: dict[str, type] = {
    "offset_commit": OffsetCommitRecord,
    "offset_tombstone": OffsetTombstoneRecord,
    "group_metadata": GroupMetadataRecord,
    "group_tombstone": GroupTombstoneRecord,
}
_NAMES = {v: k for k, v in _TYPES.items()}


def _member_to_dict(m: MemberRecord) -> dict[str, Any]:
    return {
        "member_id": m.member_id,
        "group_instance_id": m.group_instance_id,
        "client_id": m.client_id,
        "client_host": m.client_host,
        "rebalance_timeout_ms": m.rebalance_timeout_ms,
        "session_timeout_ms": m.session_timeout_ms,
        "protocol_type": m.protocol_type,
        "protocols": [[name, meta.hex()] for name, meta in m.protocols],
        "assignment": m.assignment.hex(),
    }


def _member_from_dict(d: dict[str, Any]) -> MemberRecord:
    return MemberRecord(
        member_id=d["member_id"],
        group_instance_id=d["group_instance_id"],
        client_id=d["client_id"],
        client_host=d["client_host"],
        rebalance_timeout_ms=d["rebalance_timeout_ms"],
        session_timeout_ms=d["session_timeout_ms"],
        protocol_type=d["protocol_type"],
        protocols=tuple((name, bytes.fromhex(meta)) for name, meta in d["protocols"]),
        assignment=bytes.fromhex(d["assignment"]),
    )


def record_to_dict(record: Record) -> dict[str, Any]:
    """A JSON-able dict with ``v`` (format version) and ``type``."""
    out: dict[str, Any] = {"v": RECORD_FORMAT_VERSION, "type": _NAMES[type(record)]}
    if isinstance(record, GroupMetadataRecord):
        out.update(
            group_id=record.group_id,
            protocol_type=record.protocol_type,
            generation_id=record.generation_id,
            protocol_name=record.protocol_name,
            leader_id=record.leader_id,
            current_state_timestamp_ms=record.current_state_timestamp_ms,
            members=[_member_to_dict(m) for m in record.members],
        )
    else:
        out.update({f: getattr(record, f) for f in record.__dataclass_fields__})
    return out


def record_from_dict(d: dict[str, Any]) -> Record:
    if d.get("v") != RECORD_FORMAT_VERSION:
        raise ValueError(f"unsupported record format version {d.get('v')!r}")
    cls = _TYPES[d["type"]]
    fields = {k: v for k, v in d.items() if k not in ("v", "type")}
    if cls is GroupMetadataRecord:
        fields["members"] = tuple(_member_from_dict(m) for m in fields["members"])
    record: Record = cls(**fields)
    return record
