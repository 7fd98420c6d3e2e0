"""Records of a KIP-848 consumer group (Kafka's ConsumerGroup* record types), their keys and
their binary and JSON forms.

Every state change of a consumer group is one of these, applied by ``replay`` live and at
load alike (Kafka replays consumer-group records live too). The key (latest per key wins,
a ``ConsumerTombstoneRecord`` with the same key deletes) is ``(kind, group_id, sub_key)``.

Binary form (record format version 2, beside types 1-4 of ``kgroupd.broker.coordinator.records``):
``uint8 version | uint8 type | fields in declaration order``, where strings are
``uint32 length | UTF-8``, nullable strings ``int32 length (-1: None) | UTF-8``, ints
``int32``, string lists ``uint32 n | strings``, topic partitions ``uint32 n | (16-byte topic
id | uint32 m | int32 partition * m) * n``, topic metadata ``uint32 n | (name | 16-byte id |
int32 partitions) * n``. Types: 5 group epoch, 6 subscription metadata, 7 member
subscription, 8 target assignment member, 9 target assignment epoch, 10 current member
assignment, 11 resolved regular expression, 12 tombstone (``uint8 kind`` then group and
sub key).
"""

from __future__ import annotations

import base64
import struct
import uuid
from dataclasses import dataclass, fields
from typing import Any

from .commands import TopicPartitions

__all__ = [
    "CONSUMER_RECORD_TYPES",
    "ClassicMeta",
    "ConsumerGroupCurrentMemberRecord",
    "ConsumerGroupEpochRecord",
    "ConsumerGroupMemberRecord",
    "ConsumerGroupPartitionMetadataRecord",
    "ConsumerGroupRegexRecord",
    "ConsumerGroupTargetEpochRecord",
    "ConsumerGroupTargetMemberRecord",
    "ConsumerRecord",
    "ConsumerTombstoneRecord",
    "TopicMetadata",
    "consumer_record_from_dict",
    "consumer_record_to_dict",
    "decode_consumer_record",
    "encode_consumer_record",
]

# ((name, topic id, partition count), ...) sorted by name
TopicMetadata = tuple[tuple[str, uuid.UUID, int], ...]

K_EPOCH = "cg-epoch"
K_METADATA = "cg-metadata"
K_MEMBER = "cg-member"
K_TARGET = "cg-target"
K_TARGET_EPOCH = "cg-target-epoch"
K_CURRENT = "cg-current"
K_REGEX = "cg-regex"
KINDS = (K_EPOCH, K_METADATA, K_MEMBER, K_TARGET, K_TARGET_EPOCH, K_CURRENT, K_REGEX)


@dataclass(frozen=True, slots=True)
class ConsumerGroupEpochRecord:
    """The group epoch (Kafka's ConsumerGroupMetadata)."""

    group_id: str
    epoch: int

    def key(self) -> tuple[str, ...]:
        return (K_EPOCH, self.group_id, "")


@dataclass(frozen=True, slots=True)
class ConsumerGroupPartitionMetadataRecord:
    """The metadata of the topics the group subscribes to, as last resolved."""

    group_id: str
    topics: TopicMetadata

    def key(self) -> tuple[str, ...]:
        return (K_METADATA, self.group_id, "")


@dataclass(frozen=True, slots=True)
class ClassicMeta:
    """What a member using the classic protocol in a consumer group sent in its JoinGroup
    (Kafka's ConsumerGroupMemberMetadataValue.ClassicMemberMetadata)."""

    session_timeout_ms: int
    protocols: tuple[tuple[str, bytes], ...]  # (name, subscription metadata), preferred first

    @property
    def protocol_name(self) -> str:
        return self.protocols[0][0]

    def metadata(self, name: str) -> bytes:
        for n, meta in self.protocols:
            if n == name:
                return meta
        return self.protocols[0][1]


@dataclass(frozen=True, slots=True)
class ConsumerGroupMemberRecord:
    """A member's subscription and metadata (Kafka's ConsumerGroupMemberMetadata)."""

    group_id: str
    member_id: str
    instance_id: str | None
    rack_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    subscribed_topic_names: tuple[str, ...]
    subscribed_topic_regex: str | None
    server_assignor: str | None
    classic: ClassicMeta | None = None  # a member using the classic protocol

    def key(self) -> tuple[str, ...]:
        return (K_MEMBER, self.group_id, self.member_id)


@dataclass(frozen=True, slots=True)
class ConsumerGroupTargetMemberRecord:
    """One member's target assignment."""

    group_id: str
    member_id: str
    partitions: TopicPartitions

    def key(self) -> tuple[str, ...]:
        return (K_TARGET, self.group_id, self.member_id)


@dataclass(frozen=True, slots=True)
class ConsumerGroupTargetEpochRecord:
    """The epoch of the target assignment (written after its member records)."""

    group_id: str
    assignment_epoch: int

    def key(self) -> tuple[str, ...]:
        return (K_TARGET_EPOCH, self.group_id, "")


@dataclass(frozen=True, slots=True)
class ConsumerGroupCurrentMemberRecord:
    """A member's current assignment, epochs and reconciliation state."""

    group_id: str
    member_id: str
    member_epoch: int
    previous_member_epoch: int
    state: int  # MemberState value
    assigned: TopicPartitions
    pending_revocation: TopicPartitions

    def key(self) -> tuple[str, ...]:
        return (K_CURRENT, self.group_id, self.member_id)


@dataclass(frozen=True, slots=True)
class ConsumerGroupRegexRecord:
    """The topics a subscribed regular expression resolved to."""

    group_id: str
    regex: str
    topics: tuple[str, ...]

    def key(self) -> tuple[str, ...]:
        return (K_REGEX, self.group_id, self.regex)


@dataclass(frozen=True, slots=True)
class ConsumerTombstoneRecord:
    """Deletes the record of key ``(kind, group_id, sub_key)``."""

    kind: str
    group_id: str
    sub_key: str = ""

    def key(self) -> tuple[str, ...]:
        return (self.kind, self.group_id, self.sub_key)


ConsumerRecord = (
    ConsumerGroupEpochRecord
    | ConsumerGroupPartitionMetadataRecord
    | ConsumerGroupMemberRecord
    | ConsumerGroupTargetMemberRecord
    | ConsumerGroupTargetEpochRecord
    | ConsumerGroupCurrentMemberRecord
    | ConsumerGroupRegexRecord
    | ConsumerTombstoneRecord
)

# type number -> (class, field codecs in declaration order)
# s: str, n: nullable str, i: int32, S: tuple[str], P: TopicPartitions, M: TopicMetadata,
# k: tombstone kind (uint8), C: optional trailing ClassicMeta (absent: None; else int32
# session timeout, uint32 n, (name, uint32 length, metadata bytes) * n)
_LAYOUT: dict[int, tuple[type, str]] = {
    5: (ConsumerGroupEpochRecord, "si"),
    6: (ConsumerGroupPartitionMetadataRecord, "sM"),
    7: (ConsumerGroupMemberRecord, "ssnnssiSnnC"),
    8: (ConsumerGroupTargetMemberRecord, "ssP"),
    9: (ConsumerGroupTargetEpochRecord, "si"),
    10: (ConsumerGroupCurrentMemberRecord, "ssiiiPP"),
    11: (ConsumerGroupRegexRecord, "ssS"),
    12: (ConsumerTombstoneRecord, "kss"),
}
CONSUMER_RECORD_TYPES: dict[type, int] = {cls: t for t, (cls, _) in _LAYOUT.items()}

_U32 = struct.Struct(">I")
_I32 = struct.Struct(">i")
_U8 = struct.Struct(">B")


def _put_str(out: bytearray, s: str) -> None:
    b = s.encode()
    out += _U32.pack(len(b))
    out += b


def _put(out: bytearray, code: str, value: Any) -> None:
    if code == "s":
        _put_str(out, value)
    elif code == "n":
        if value is None:
            out += _I32.pack(-1)
        else:
            b = value.encode()
            out += _I32.pack(len(b))
            out += b
    elif code == "i":
        out += _I32.pack(value)
    elif code == "k":
        out += _U8.pack(KINDS.index(value))
    elif code == "S":
        out += _U32.pack(len(value))
        for s in value:
            _put_str(out, s)
    elif code == "P":
        out += _U32.pack(len(value))
        for tid, parts in value:
            out += tid.bytes
            out += _U32.pack(len(parts))
            out += struct.pack(f">{len(parts)}i", *parts)
    elif code == "M":
        out += _U32.pack(len(value))
        for name, tid, n in value:
            _put_str(out, name)
            out += tid.bytes
            out += _I32.pack(n)
    elif code == "C":
        if value is not None:
            out += _I32.pack(value.session_timeout_ms)
            out += _U32.pack(len(value.protocols))
            for name, meta in value.protocols:
                _put_str(out, name)
                out += _U32.pack(len(meta))
                out += meta
    else:  # pragma: no cover
        raise ValueError(code)


def encode_consumer_record(record: ConsumerRecord, version: int) -> bytes:
    kind = CONSUMER_RECORD_TYPES[type(record)]
    codes = _LAYOUT[kind][1]
    out = bytearray((version, kind))
    for code, f in zip(codes, fields(record), strict=True):
        _put(out, code, getattr(record, f.name))
    return bytes(out)


class _Reader:
    __slots__ = ("buf", "pos")

    def __init__(self, buf: bytes, pos: int) -> None:
        self.buf = buf
        self.pos = pos

    def take(self, n: int) -> bytes:
        end = self.pos + n
        if n < 0 or end > len(self.buf):
            raise ValueError("record cut short")
        out = self.buf[self.pos : end]
        self.pos = end
        return out

    def u32(self) -> int:
        v: int = _U32.unpack(self.take(4))[0]
        return v

    def i32(self) -> int:
        v: int = _I32.unpack(self.take(4))[0]
        return v

    def string(self) -> str:
        return self.take(self.u32()).decode()

    def get(self, code: str) -> Any:
        if code == "s":
            return self.string()
        if code == "n":
            n = self.i32()
            return None if n == -1 else self.take(n).decode()
        if code == "i":
            return self.i32()
        if code == "k":
            return KINDS[self.take(1)[0]]
        if code == "S":
            return tuple(self.string() for _ in range(self.u32()))
        if code == "P":
            out = []
            for _ in range(self.u32()):
                tid = uuid.UUID(bytes=self.take(16))
                m = self.u32()
                out.append((tid, struct.unpack(f">{m}i", self.take(4 * m))))
            return tuple(out)
        if code == "M":
            return tuple(
                (self.string(), uuid.UUID(bytes=self.take(16)), self.i32())
                for _ in range(self.u32())
            )
        if code == "C":
            if self.pos == len(self.buf):
                return None
            session = self.i32()
            protocols = tuple((self.string(), self.take(self.u32())) for _ in range(self.u32()))
            return ClassicMeta(session, protocols)
        raise ValueError(code)  # pragma: no cover


def decode_consumer_record(payload: bytes) -> ConsumerRecord | None:
    """The consumer-group record in ``payload`` (version already checked), None if its type
    is not one of them; raises ``ValueError``/``IndexError`` if it is malformed."""
    layout = _LAYOUT.get(payload[1])
    if layout is None:
        return None
    cls, codes = layout
    r = _Reader(payload, 2)
    values = [r.get(code) for code in codes]
    if r.pos != len(payload):
        raise ValueError(f"{len(payload) - r.pos} bytes after the record")
    record: ConsumerRecord = cls(*values)
    return record


# --- JSON-able form (tools) -------------------------------------------------------------------
_NAMES = {
    ConsumerGroupEpochRecord: "consumer_group_epoch",
    ConsumerGroupPartitionMetadataRecord: "consumer_group_partition_metadata",
    ConsumerGroupMemberRecord: "consumer_group_member",
    ConsumerGroupTargetMemberRecord: "consumer_group_target_member",
    ConsumerGroupTargetEpochRecord: "consumer_group_target_epoch",
    ConsumerGroupCurrentMemberRecord: "consumer_group_current_member",
    ConsumerGroupRegexRecord: "consumer_group_regex",
    ConsumerTombstoneRecord: "consumer_group_tombstone",
}
_BY_NAME = {v: k for k, v in _NAMES.items()}


def _to_json(code: str, value: Any) -> Any:
    if code == "C":
        if value is None:
            return None
        return {
            "session_timeout_ms": value.session_timeout_ms,
            "protocols": [[n, base64.b64encode(m).decode()] for n, m in value.protocols],
        }
    if code == "S":
        return list(value)
    if code == "P":
        return [[str(t), list(ps)] for t, ps in value]
    if code == "M":
        return [[name, str(t), n] for name, t, n in value]
    return value


def _from_json(code: str, value: Any) -> Any:
    if code == "C":
        if value is None:
            return None
        return ClassicMeta(
            value["session_timeout_ms"],
            tuple((n, base64.b64decode(m)) for n, m in value["protocols"]),
        )
    if code == "S":
        return tuple(value)
    if code == "P":
        return tuple((uuid.UUID(t), tuple(ps)) for t, ps in value)
    if code == "M":
        return tuple((name, uuid.UUID(t), n) for name, t, n in value)
    return value


def consumer_record_to_dict(record: ConsumerRecord) -> tuple[str, dict[str, Any]]:
    codes = _LAYOUT[CONSUMER_RECORD_TYPES[type(record)]][1]
    return _NAMES[type(record)], {
        f.name: _to_json(c, getattr(record, f.name))
        for c, f in zip(codes, fields(record), strict=True)
    }


def consumer_record_from_dict(name: str, d: dict[str, Any]) -> ConsumerRecord | None:
    cls = _BY_NAME.get(name)
    if cls is None:
        return None
    codes = _LAYOUT[CONSUMER_RECORD_TYPES[cls]][1]
    record: ConsumerRecord = cls(
        *(_from_json(c, d.get(f.name)) for c, f in zip(codes, fields(cls), strict=True))
    )
    return record
