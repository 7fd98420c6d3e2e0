"""The group coordinator's records in Kafka's own ``__consumer_offsets`` key/value formats.

Kafka 4.3 writes each coordinator record as a key ``int16 type | fields`` (the type is the
key message's apiKey: 1 OffsetCommitKey, 2 GroupMetadataKey, 3 ConsumerGroupMetadataKey,
5 ConsumerGroupMemberMetadataKey, 6 ConsumerGroupTargetAssignmentMetadataKey,
7 ConsumerGroupTargetAssignmentMemberKey, 8 ConsumerGroupCurrentMemberAssignmentKey,
16 ConsumerGroupRegularExpressionKey) and a value ``int16 version | fields``, or a null value
(a tombstone). The value versions are the ones Kafka 4.3 writes (``GroupCoordinatorRecord
Helpers``): OffsetCommitValue 3 (1 when an expire timestamp is set), GroupMetadataValue 3
(the newest non-flexible), every ConsumerGroup* value 0 (flexible: compact strings and
arrays, tagged fields). Tagged fields are written empty (Kafka 4.3 adds MetadataHash and
CreationTimeMs to ConsumerGroupMetadataValue and AssignmentEpochs to the assignment topics
there; a reader takes their defaults). The layouts are read from Kafka's message
definitions (group-coordinator/src/main/resources/common/message/*.json).

Not written: the transactional offset commits (Kafka writes them in a transactional batch
and resolves them with a marker; here the offsets a committed transaction makes durable
appear as the OffsetCommit records the coordinator writes at the marker) and the
subscription metadata record (ConsumerGroupPartitionMetadata, which Kafka 4.1+ no longer
writes: the group's metadata hash replaced it).
"""

from __future__ import annotations

import struct
import uuid

from kgroupd.broker.coordinator.consumer.records import (
    K_CURRENT,
    K_EPOCH,
    K_MEMBER,
    K_REGEX,
    K_TARGET,
    K_TARGET_EPOCH,
    ConsumerGroupCurrentMemberRecord,
    ConsumerGroupEpochRecord,
    ConsumerGroupMemberRecord,
    ConsumerGroupRegexRecord,
    ConsumerGroupTargetEpochRecord,
    ConsumerGroupTargetMemberRecord,
    ConsumerTombstoneRecord,
)
from kgroupd.broker.coordinator.records import (
    GroupMetadataRecord,
    GroupTombstoneRecord,
    OffsetCommitRecord,
    OffsetTombstoneRecord,
    Record,
)

__all__ = ["KafkaRecord", "kafka_record", "offset_commit_key", "offset_commit_value"]

# (key bytes, value bytes or None for a tombstone)
KafkaRecord = tuple[bytes, bytes | None]

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_COMMIT_V3 = struct.Struct(">hqi")  # version, offset, leader epoch

_KEY_TYPES = {K_EPOCH: 3, K_MEMBER: 5, K_TARGET_EPOCH: 6, K_TARGET: 7, K_CURRENT: 8, K_REGEX: 16}


def _string(s: str) -> bytes:
    raw = s.encode()
    return _I16.pack(len(raw)) + raw


def _nullable(s: str | None) -> bytes:
    return _I16.pack(-1) if s is None else _string(s)


def _bytes(b: bytes) -> bytes:
    return _I32.pack(len(b)) + b


def _uvarint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _cstring(s: str) -> bytes:
    raw = s.encode()
    return _uvarint(len(raw) + 1) + raw


def _cnullable(s: str | None) -> bytes:
    return b"\x00" if s is None else _cstring(s)


def _cbytes(b: bytes) -> bytes:
    return _uvarint(len(b) + 1) + b


def _carray(items: list[bytes]) -> bytes:
    return _uvarint(len(items) + 1) + b"".join(items)


NO_TAGS = b"\x00"


def offset_commit_key(group_id: str, topic: str, partition: int) -> bytes:
    return _I16.pack(1) + _string(group_id) + _string(topic) + _I32.pack(partition)


def offset_commit_value(
    offset: int, leader_epoch: int, metadata: str, commit_ms: int, expire_ms: int | None
) -> bytes:
    if expire_ms is not None:  # version 1: no leader epoch, an expire timestamp
        return (
            _I16.pack(1)
            + _I64.pack(offset)
            + _string(metadata)
            + _I64.pack(commit_ms)
            + _I64.pack(expire_ms)
        )
    return _COMMIT_V3.pack(3, offset, leader_epoch) + _string(metadata) + _I64.pack(commit_ms)


def _group_key(group_id: str) -> bytes:
    return _I16.pack(2) + _string(group_id)


def _group_value(r: GroupMetadataRecord) -> bytes:
    out = bytearray(_I16.pack(3))
    out += _string(r.protocol_type or "")
    out += _I32.pack(r.generation_id)
    out += _nullable(r.protocol_name)
    out += _nullable(r.leader_id)
    out += _I64.pack(r.current_state_timestamp_ms)
    out += _I32.pack(len(r.members))
    for m in r.members:
        subscription = b""
        for name, meta in m.protocols:
            if name == r.protocol_name:
                subscription = meta
        out += _string(m.member_id)
        out += _nullable(m.group_instance_id)
        out += _string(m.client_id)
        out += _string(m.client_host)
        out += _I32.pack(m.rebalance_timeout_ms)
        out += _I32.pack(m.session_timeout_ms)
        out += _bytes(subscription)
        out += _bytes(m.assignment)
    return bytes(out)


def _topic_partitions(parts: tuple[tuple[uuid.UUID, tuple[int, ...]], ...]) -> bytes:
    return _carray(
        [
            topic_id.bytes
            + _carray([_I32.pack(p) for p in partitions])
            + NO_TAGS  # AssignmentEpochs (tag 0) left out: null
            for topic_id, partitions in parts
        ]
    )


def _member_value(r: ConsumerGroupMemberRecord) -> bytes:
    out = bytearray(_I16.pack(0))
    out += _cnullable(r.instance_id)
    out += _cnullable(r.rack_id)
    out += _cstring(r.client_id)
    out += _cstring(r.client_host)
    out += _carray([_cstring(t) for t in r.subscribed_topic_names])
    out += _cnullable(r.subscribed_topic_regex)
    out += _I32.pack(r.rebalance_timeout_ms)
    out += _cnullable(r.server_assignor)
    if r.classic is None:
        out += NO_TAGS
    else:  # tag 0: ClassicMemberMetadata, a nullable struct (a presence byte first)
        body = b"\x01" + (
            _I32.pack(r.classic.session_timeout_ms)
            + _carray([_cstring(n) + _cbytes(meta) + NO_TAGS for n, meta in r.classic.protocols])
            + NO_TAGS
        )
        out += _uvarint(1) + _uvarint(0) + _uvarint(len(body)) + body
    return bytes(out)


def _consumer_key(kind: str, group_id: str, sub_key: str) -> bytes:
    key = _I16.pack(_KEY_TYPES[kind]) + _string(group_id)
    if kind in (K_MEMBER, K_TARGET, K_CURRENT, K_REGEX):
        key += _string(sub_key)
    return key


def kafka_record(record: Record) -> KafkaRecord | None:
    """The key and value Kafka writes for ``record``; None for records Kafka does not
    write (see the module docstring)."""
    if isinstance(record, OffsetCommitRecord):
        key = offset_commit_key(record.group_id, record.topic, record.partition)
        value = offset_commit_value(
            record.offset,
            record.leader_epoch,
            record.metadata,
            record.commit_timestamp_ms,
            record.expire_timestamp_ms,
        )
        return key, value
    if isinstance(record, OffsetTombstoneRecord):
        return offset_commit_key(record.group_id, record.topic, record.partition), None
    if isinstance(record, GroupMetadataRecord):
        return _group_key(record.group_id), _group_value(record)
    if isinstance(record, GroupTombstoneRecord):
        return _group_key(record.group_id), None
    if isinstance(record, ConsumerGroupEpochRecord):
        key = _consumer_key(K_EPOCH, record.group_id, "")
        return key, _I16.pack(0) + _I32.pack(record.epoch) + NO_TAGS
    if isinstance(record, ConsumerGroupMemberRecord):
        key = _consumer_key(K_MEMBER, record.group_id, record.member_id)
        return key, _member_value(record)
    if isinstance(record, ConsumerGroupTargetEpochRecord):
        key = _consumer_key(K_TARGET_EPOCH, record.group_id, "")
        value = _I16.pack(0) + _I32.pack(record.assignment_epoch) + NO_TAGS
        return key, value
    if isinstance(record, ConsumerGroupTargetMemberRecord):
        key = _consumer_key(K_TARGET, record.group_id, record.member_id)
        value = _I16.pack(0) + _topic_partitions(record.partitions) + NO_TAGS
        return key, value
    if isinstance(record, ConsumerGroupCurrentMemberRecord):
        key = _consumer_key(K_CURRENT, record.group_id, record.member_id)
        value = (
            _I16.pack(0)
            + _I32.pack(record.member_epoch)
            + _I32.pack(record.previous_member_epoch)
            + struct.pack(">b", record.state)
            + _topic_partitions(record.assigned)
            + _topic_partitions(record.pending_revocation)
            + NO_TAGS
        )
        return key, value
    if isinstance(record, ConsumerGroupRegexRecord):
        return _regex_record(record)
    if isinstance(record, ConsumerTombstoneRecord):
        if record.kind not in _KEY_TYPES:
            return None
        return _consumer_key(record.kind, record.group_id, record.sub_key), None
    return None  # transactional offsets, subscription metadata


def _regex_record(record: ConsumerGroupRegexRecord) -> KafkaRecord:
    key = _consumer_key(K_REGEX, record.group_id, record.regex)
    # ConsumerGroupRegularExpressionValue v0: topics, version (of the metadata image
    # resolved against: none here), timestamp
    value = _I16.pack(0) + _carray([_cstring(t) for t in record.topics])
    value += _I64.pack(-1) + _I64.pack(-1) + NO_TAGS
    return key, value
