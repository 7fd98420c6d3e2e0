"""State-change records: what a shard emits and what ``replay`` applies.

Each record has a compaction ``key()`` (latest per key wins; tombstones delete) and two stable
serialized forms, each with a format version:

- binary (``encode_record`` / ``decode_record``, record format version 2): what the record
  logs and snapshots under ``--data-dir`` hold. ``struct``-packed, big-endian, strings as
  UTF-8 with a length prefix; an offset commit costs ~1 µs to encode.
- JSON-able dicts (``record_to_dict`` / ``record_from_dict``, version 1; bytes as hex): the
  format of data directories written before version 2 (still read) and of tools.

Binary layout: ``uint8 version | uint8 type | body``. Strings are ``uint32 length | UTF-8``;
nullable strings ``int32 length (-1: None) | UTF-8``; bytes ``uint32 length | bytes``.

- type 1, offset commit: ``uint8 flags (1: expire timestamp set) | int32 partition |
  int64 offset | int32 leader epoch | int64 commit ms | int64 expire ms (0 if unset) |
  uint32 len(group) | uint32 len(topic) | uint32 len(metadata)``, then the three strings.
- type 2, offset tombstone: ``int32 partition | uint32 len(group) | uint32 len(topic)``, then
  both strings.
- type 3, group metadata: group, nullable protocol type, int32 generation, nullable
  protocol name, nullable leader, int64 state timestamp, uint32 member count, then per
  member: member id, nullable instance id, client id, client host, int32 rebalance timeout,
  int32 session timeout, protocol type, uint32 protocol count, (name, bytes metadata) per
  protocol, bytes assignment.
- type 4, group tombstone: group.
- types 5-12: KIP-848 consumer-group records, laid out in ``consumer.records``.
- type 15, transactional offset commit: group, int64 producer id, int16 producer epoch,
  int32 partition, int64 offset, int32 leader epoch, int64 commit ms, topic, metadata.
- type 16, transactional offset marker: group, int64 producer id, uint8 commit.

A payload whose version is above ``RECORD_FORMAT_VERSION`` raises ``NewerRecordFormat``.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from .consumer.records import (
    CONSUMER_RECORD_TYPES,
    ConsumerRecord,
    consumer_record_from_dict,
    consumer_record_to_dict,
    decode_consumer_record,
    encode_consumer_record,
)

__all__ = [
    "JSON_RECORD_FORMAT_VERSION",
    "RECORD_FORMAT_VERSION",
    "BatchRecordSink",
    "CommitEntries",
    "GroupMetadataRecord",
    "GroupTombstoneRecord",
    "MemberRecord",
    "NewerRecordFormat",
    "OffsetCommitRecord",
    "OffsetTombstoneRecord",
    "Record",
    "RecordFormatError",
    "RecordSink",
    "TxnOffsetCommitRecord",
    "TxnOffsetMarkerRecord",
    "decode_record",
    "encode_offset_commit",
    "encode_record",
    "record_from_dict",
    "record_to_dict",
]

RECORD_FORMAT_VERSION = 2  # binary records (encode_record)
JSON_RECORD_FORMAT_VERSION = 1  # JSON-able dicts (record_to_dict), data dirs before version 2


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


@dataclass(frozen=True, slots=True)
class TxnOffsetCommitRecord:
    """An offset committed inside a transaction (TxnOffsetCommit): pending, invisible to
    OffsetFetch, until its producer's transaction ends (Kafka writes it to
    __consumer_offsets with the producer id and resolves it at the marker)."""

    group_id: str
    producer_id: int
    producer_epoch: int
    topic: str
    partition: int
    offset: int
    leader_epoch: int
    metadata: str
    commit_timestamp_ms: int

    def key(self) -> tuple[str, ...]:
        return ("txn-offset", self.group_id, str(self.producer_id), self.topic, str(self.partition))


@dataclass(frozen=True, slots=True)
class TxnOffsetMarkerRecord:
    """The end of a producer's transaction for a group's pending offsets: they were made
    committed offsets (by offset commit records written just before) or dropped (abort)."""

    group_id: str
    producer_id: int
    commit: bool

    def key(self) -> tuple[str, ...]:
        return ("txn-offset", self.group_id, str(self.producer_id))


Record = (
    OffsetCommitRecord
    | OffsetTombstoneRecord
    | GroupMetadataRecord
    | GroupTombstoneRecord
    | TxnOffsetCommitRecord
    | TxnOffsetMarkerRecord
    | ConsumerRecord  # KIP-848 consumer groups (kgroupd.broker.coordinator.consumer.records)
)
RecordSink = Callable[[Record], None]

# One topic's partitions of an OffsetCommit: (partition, offset, leader epoch, metadata).
CommitEntries = Sequence[tuple[int, int, int, str]]


@runtime_checkable
class BatchRecordSink(Protocol):
    """A sink that also takes one topic's offset commits at once, without a record object per
    partition (the commit hot path). ``offset_commits(g, t, entries, now, expire)`` must
    persist exactly what ``OffsetCommitRecord(g, t, p, o, e, m, now, expire)`` per entry
    would."""

    def __call__(self, record: Record, /) -> None: ...

    def offset_commits(
        self,
        group_id: str,
        topic: str,
        entries: CommitEntries,
        commit_timestamp_ms: int,
        expire_timestamp_ms: int | None,
    ) -> None: ...


_TYPES: dict[str, type] = {
    "offset_commit": OffsetCommitRecord,
    "offset_tombstone": OffsetTombstoneRecord,
    "group_metadata": GroupMetadataRecord,
    "group_tombstone": GroupTombstoneRecord,
    "txn_offset_commit": TxnOffsetCommitRecord,
    "txn_offset_marker": TxnOffsetMarkerRecord,
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
    if type(record) in CONSUMER_RECORD_TYPES:
        name, body = consumer_record_to_dict(record)  # type: ignore[arg-type]
        return {"v": JSON_RECORD_FORMAT_VERSION, "type": name, **body}
    out: dict[str, Any] = {"v": JSON_RECORD_FORMAT_VERSION, "type": _NAMES[type(record)]}
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
    if d.get("v") != JSON_RECORD_FORMAT_VERSION:
        raise ValueError(f"unsupported JSON record format version {d.get('v')!r}")
    consumer = consumer_record_from_dict(d["type"], d)
    if consumer is not None:
        return consumer
    cls = _TYPES[d["type"]]
    fields = {k: v for k, v in d.items() if k not in ("v", "type")}
    if cls is GroupMetadataRecord:
        fields["members"] = tuple(_member_from_dict(m) for m in fields["members"])
    record: Record = cls(**fields)
    return record


# --- binary form ------------------------------------------------------------------------------


class RecordFormatError(ValueError):
    """A payload that is not a well-formed binary record."""


class NewerRecordFormat(RecordFormatError):
    """A record written by a newer kgroupd (its version is above ``RECORD_FORMAT_VERSION``)."""

    def __init__(self, version: int) -> None:
        super().__init__(
            f"record format version {version} is newer than this kgroupd reads "
            f"({RECORD_FORMAT_VERSION}); upgrade kgroupd"
        )
        self.version = version


TYPE_OFFSET_COMMIT = 1
TYPE_OFFSET_TOMBSTONE = 2
TYPE_GROUP_METADATA = 3
TYPE_GROUP_TOMBSTONE = 4
TYPE_TXN_OFFSET_COMMIT = 15
TYPE_TXN_OFFSET_MARKER = 16

_PREFIX = struct.Struct(">BB")
_OFFSET_COMMIT = struct.Struct(">BBBiqiqqIII")
_OFFSET_TOMBSTONE = struct.Struct(">BBiII")
_U32 = struct.Struct(">I")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_MEMBER_TIMEOUTS = struct.Struct(">ii")
# producer id, producer epoch, partition, offset, leader epoch, commit ms
_TXN_OFFSET = struct.Struct(">qhiqiq")
_TXN_MARKER = struct.Struct(">qB")  # producer id, commit


def encode_offset_commit(
    group: bytes,
    topic: bytes,
    partition: int,
    offset: int,
    leader_epoch: int,
    metadata: str,
    commit_timestamp_ms: int,
    expire_timestamp_ms: int | None,
) -> bytes:
    """An offset commit record's binary form, from the UTF-8 group and topic (encoded once
    for all the partitions of a commit)."""
    m = metadata.encode() if metadata else b""
    return (
        _OFFSET_COMMIT.pack(
            RECORD_FORMAT_VERSION,
            TYPE_OFFSET_COMMIT,
            0 if expire_timestamp_ms is None else 1,
            partition,
            offset,
            leader_epoch,
            commit_timestamp_ms,
            0 if expire_timestamp_ms is None else expire_timestamp_ms,
            len(group),
            len(topic),
            len(m),
        )
        + group
        + topic
        + m
    )


def encode_record(record: Record) -> bytes:
    """The binary form of ``record`` (record format version ``RECORD_FORMAT_VERSION``)."""
    if type(record) is OffsetCommitRecord:
        return encode_offset_commit(
            record.group_id.encode(),
            record.topic.encode(),
            record.partition,
            record.offset,
            record.leader_epoch,
            record.metadata,
            record.commit_timestamp_ms,
            record.expire_timestamp_ms,
        )
    if type(record) is OffsetTombstoneRecord:
        g = record.group_id.encode()
        t = record.topic.encode()
        head = _OFFSET_TOMBSTONE.pack(
            RECORD_FORMAT_VERSION, TYPE_OFFSET_TOMBSTONE, record.partition, len(g), len(t)
        )
        return head + g + t
    if type(record) is GroupTombstoneRecord:
        out = bytearray(_PREFIX.pack(RECORD_FORMAT_VERSION, TYPE_GROUP_TOMBSTONE))
        _put_str(out, record.group_id)
        return bytes(out)
    if type(record) is GroupMetadataRecord:
        return _encode_group(record)
    if type(record) is TxnOffsetCommitRecord:
        out = bytearray(_PREFIX.pack(RECORD_FORMAT_VERSION, TYPE_TXN_OFFSET_COMMIT))
        _put_str(out, record.group_id)
        out += _TXN_OFFSET.pack(
            record.producer_id,
            record.producer_epoch,
            record.partition,
            record.offset,
            record.leader_epoch,
            record.commit_timestamp_ms,
        )
        _put_str(out, record.topic)
        _put_str(out, record.metadata)
        return bytes(out)
    if type(record) is TxnOffsetMarkerRecord:
        out = bytearray(_PREFIX.pack(RECORD_FORMAT_VERSION, TYPE_TXN_OFFSET_MARKER))
        _put_str(out, record.group_id)
        out += _TXN_MARKER.pack(record.producer_id, int(record.commit))
        return bytes(out)
    if type(record) in CONSUMER_RECORD_TYPES:
        return encode_consumer_record(record, RECORD_FORMAT_VERSION)  # type: ignore[arg-type]
    raise TypeError(f"not a record: {record!r}")


def _put_str(out: bytearray, s: str) -> None:
    b = s.encode()
    out += _U32.pack(len(b))
    out += b


def _put_nullable(out: bytearray, s: str | None) -> None:
    if s is None:
        out += _I32.pack(-1)
    else:
        b = s.encode()
        out += _I32.pack(len(b))
        out += b


def _put_bytes(out: bytearray, b: bytes) -> None:
    out += _U32.pack(len(b))
    out += b


def _encode_group(r: GroupMetadataRecord) -> bytes:
    out = bytearray(_PREFIX.pack(RECORD_FORMAT_VERSION, TYPE_GROUP_METADATA))
    _put_str(out, r.group_id)
    _put_nullable(out, r.protocol_type)
    out += _I32.pack(r.generation_id)
    _put_nullable(out, r.protocol_name)
    _put_nullable(out, r.leader_id)
    out += _I64.pack(r.current_state_timestamp_ms)
    out += _U32.pack(len(r.members))
    for m in r.members:
        _put_str(out, m.member_id)
        _put_nullable(out, m.group_instance_id)
        _put_str(out, m.client_id)
        _put_str(out, m.client_host)
        out += _MEMBER_TIMEOUTS.pack(m.rebalance_timeout_ms, m.session_timeout_ms)
        _put_str(out, m.protocol_type)
        out += _U32.pack(len(m.protocols))
        for name, metadata in m.protocols:
            _put_str(out, name)
            _put_bytes(out, metadata)
        _put_bytes(out, m.assignment)
    return bytes(out)


class _Reader:
    __slots__ = ("buf", "pos")

    def __init__(self, buf: bytes, pos: int) -> None:
        self.buf = buf
        self.pos = pos

    def take(self, n: int) -> bytes:
        end = self.pos + n
        if n < 0 or end > len(self.buf):
            raise RecordFormatError("record cut short")
        out = self.buf[self.pos : end]
        self.pos = end
        return out

    def unpack(self, s: struct.Struct) -> tuple[Any, ...]:
        if self.pos + s.size > len(self.buf):
            raise RecordFormatError("record cut short")
        out = s.unpack_from(self.buf, self.pos)
        self.pos += s.size
        return out

    def u32(self) -> int:
        value: int = self.unpack(_U32)[0]
        return value

    def i32(self) -> int:
        value: int = self.unpack(_I32)[0]
        return value

    def string(self) -> str:
        return self.take(self.u32()).decode()

    def nullable(self) -> str | None:
        n = self.i32()
        return None if n == -1 else self.take(n).decode()

    def bytes_(self) -> bytes:
        return self.take(self.u32())


def record_version(payload: bytes) -> int:
    """The format version of a binary record (its first byte); raises ``RecordFormatError``
    for an empty payload."""
    if not payload:
        raise RecordFormatError("empty record")
    return payload[0]


def decode_record(payload: bytes) -> Record:
    """The record ``encode_record`` made. Raises ``NewerRecordFormat`` for a newer version,
    ``RecordFormatError`` for anything else that is not a well-formed record."""
    try:
        return _decode(payload)
    except RecordFormatError:
        raise
    except (struct.error, UnicodeDecodeError, IndexError, ValueError) as exc:
        raise RecordFormatError(f"malformed record: {exc}") from None


def _decode(payload: bytes) -> Record:
    version = record_version(payload)
    if version > RECORD_FORMAT_VERSION:
        raise NewerRecordFormat(version)
    if version != RECORD_FORMAT_VERSION or len(payload) < 2:
        raise RecordFormatError(f"not a binary record (version byte {version})")
    kind = payload[1]
    record: Record
    if kind == TYPE_OFFSET_COMMIT:
        _v, _t, flags, partition, offset, epoch, commit_ms, expire_ms, lg, lt, lm = (
            _OFFSET_COMMIT.unpack_from(payload, 0)
        )
        pos = _OFFSET_COMMIT.size
        end = pos + lg + lt + lm
        if end != len(payload):
            raise RecordFormatError("offset commit record of the wrong length")
        record = OffsetCommitRecord(
            payload[pos : pos + lg].decode(),
            payload[pos + lg : pos + lg + lt].decode(),
            partition,
            offset,
            epoch,
            payload[pos + lg + lt : end].decode(),
            commit_ms,
            expire_ms if flags & 1 else None,
        )
        return record
    if kind == TYPE_OFFSET_TOMBSTONE:
        _v, _t, partition, lg, lt = _OFFSET_TOMBSTONE.unpack_from(payload, 0)
        pos = _OFFSET_TOMBSTONE.size
        if pos + lg + lt != len(payload):
            raise RecordFormatError("offset tombstone record of the wrong length")
        return OffsetTombstoneRecord(
            payload[pos : pos + lg].decode(), payload[pos + lg : pos + lg + lt].decode(), partition
        )
    r = _Reader(payload, _PREFIX.size)
    if kind == TYPE_GROUP_TOMBSTONE:
        record = GroupTombstoneRecord(r.string())
    elif kind == TYPE_TXN_OFFSET_COMMIT:
        group_id = r.string()
        pid, pepoch, partition, offset, epoch, commit_ms = r.unpack(_TXN_OFFSET)
        record = TxnOffsetCommitRecord(
            group_id, pid, pepoch, r.string(), partition, offset, epoch, r.string(), commit_ms
        )
    elif kind == TYPE_TXN_OFFSET_MARKER:
        group_id = r.string()
        pid, commit = r.unpack(_TXN_MARKER)
        record = TxnOffsetMarkerRecord(group_id, pid, bool(commit))
    elif kind == TYPE_GROUP_METADATA:
        group_id = r.string()
        protocol_type = r.nullable()
        generation = r.i32()
        protocol_name = r.nullable()
        leader = r.nullable()
        (timestamp,) = r.unpack(_I64)
        members = []
        for _ in range(r.u32()):
            member_id = r.string()
            instance = r.nullable()
            client_id = r.string()
            client_host = r.string()
            rebalance_timeout, session_timeout = r.unpack(_MEMBER_TIMEOUTS)
            member_protocol_type = r.string()
            protocols = tuple((r.string(), r.bytes_()) for _ in range(r.u32()))
            members.append(
                MemberRecord(
                    member_id,
                    instance,
                    client_id,
                    client_host,
                    rebalance_timeout,
                    session_timeout,
                    member_protocol_type,
                    protocols,
                    r.bytes_(),
                )
            )
        record = GroupMetadataRecord(
            group_id, protocol_type, generation, protocol_name, leader, timestamp, tuple(members)
        )
    else:
        consumer = decode_consumer_record(payload)
        if consumer is None:
            raise RecordFormatError(f"unknown record type {kind}")
        return consumer
    if r.pos != len(payload):
        raise RecordFormatError(f"{len(payload) - r.pos} bytes after the record")
    return record
