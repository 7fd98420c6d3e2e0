"""The consumer embedded protocol: the bytes inside JoinGroup metadata and SyncGroup assignments.

``ConsumerProtocolSubscription`` v0-v3 and ``ConsumerProtocolAssignment``
v0-v3 as in Kafka's ``ConsumerProtocolSubscription.json`` /
``ConsumerProtocolAssignment.json`` (non-flexible: int16 version header, then
classic int16-length strings, int32-length bytes, int32-count arrays):

* Subscription: topics ``[]string``, user_data ``nullable bytes``; v1+ owned
  partitions ``[](topic string, partitions []int32)``; v2+ generation id
  ``int32`` (default -1); v3+ rack id ``nullable string``.
* Assignment: assigned partitions ``[](topic, []int32)``, user_data
  ``nullable bytes``; v1-v3 add nothing to the assignment itself.

Like the Java client, a decoder that meets a newer version than it knows
parses it with the newest format it knows (new versions only append fields),
and fields a lower version cannot carry are dropped on encode ("ignorable").

Also here: the user data of Kafka's eager ``StickyAssignor`` (v0: previous
assignment; v1: + generation), which the ``sticky`` protocol carries and the
Java client, aiokafka and kafka-python all speak, and the 4-byte failover
priority.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from dataclasses import dataclass

from kgroupd.assignors.spec import DEFAULT_GENERATION, TopicPartition, group_partitions

__all__ = [
    "ASSIGNMENT_MAX_VERSION",
    "INT32_MIN",
    "SUBSCRIPTION_MAX_VERSION",
    "Assignment",
    "CodecError",
    "StickyUserData",
    "Subscription",
    "decode_assignment",
    "decode_priority",
    "decode_sticky_user_data",
    "decode_subscription",
    "encode_assignment",
    "encode_priority",
    "encode_sticky_user_data",
    "encode_subscription",
    "peek_version",
]

SUBSCRIPTION_MAX_VERSION = 3
ASSIGNMENT_MAX_VERSION = 3
INT32_MIN = -(2**31)

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")


class CodecError(ValueError):
    """Malformed or truncated embedded-protocol bytes."""


TopicPartitions = tuple[tuple[str, tuple[int, ...]], ...]


def _normalise(parts: Iterable[tuple[str, Iterable[int]]]) -> TopicPartitions:
    return tuple((topic, tuple(ps)) for topic, ps in parts)


@dataclass(frozen=True, slots=True)
class Subscription:
    """A decoded ConsumerProtocolSubscription (all versions)."""

    topics: tuple[str, ...]
    user_data: bytes | None = None
    owned_partitions: TopicPartitions = ()
    generation_id: int = DEFAULT_GENERATION
    rack_id: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "topics", tuple(self.topics))
        object.__setattr__(self, "owned_partitions", _normalise(self.owned_partitions))

    def owned_topic_partitions(self) -> list[TopicPartition]:
        return [TopicPartition(t, p) for t, ps in self.owned_partitions for p in ps]


@dataclass(frozen=True, slots=True)
class Assignment:
    """A decoded ConsumerProtocolAssignment (all versions)."""

    assigned_partitions: TopicPartitions = ()
    user_data: bytes | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "assigned_partitions", _normalise(self.assigned_partitions))

    @classmethod
    def of(cls, partitions: Iterable[TopicPartition], user_data: bytes | None = None) -> Assignment:
        return cls(tuple(group_partitions(partitions).items()), user_data)

    def topic_partitions(self) -> list[TopicPartition]:
        return [TopicPartition(t, p) for t, ps in self.assigned_partitions for p in ps]


# --- primitive writers / readers -------------------------------------------------


def _w_string(out: list[bytes], value: str | None, nullable: bool = False) -> None:
    if value is None:
        if not nullable:
            raise CodecError("null in a non-nullable string")
        out.append(_I16.pack(-1))
        return
    raw = value.encode("utf-8")
    if len(raw) > 0x7FFF:
        raise CodecError("string longer than 32767 bytes")
    out.append(_I16.pack(len(raw)))
    out.append(raw)


def _w_bytes(out: list[bytes], value: bytes | None) -> None:
    if value is None:
        out.append(_I32.pack(-1))
    else:
        out.append(_I32.pack(len(value)))
        out.append(bytes(value))


def _w_topic_partitions(out: list[bytes], parts: TopicPartitions) -> None:
    out.append(_I32.pack(len(parts)))
    for topic, partitions in parts:
        _w_string(out, topic)
        out.append(_I32.pack(len(partitions)))
        if partitions:
            out.append(struct.pack(f">{len(partitions)}i", *partitions))


class _Reader:
    __slots__ = ("buf", "pos")

    def __init__(self, data: bytes | bytearray | memoryview) -> None:
        self.buf = bytes(data)
        self.pos = 0

    def _take(self, n: int) -> bytes:
        end = self.pos + n
        if n < 0 or end > len(self.buf):
            raise CodecError(f"truncated: need {n} bytes at offset {self.pos}")
        chunk = self.buf[self.pos : end]
        self.pos = end
        return chunk

    def i16(self) -> int:
        value: int = _I16.unpack(self._take(2))[0]
        return value

    def i32(self) -> int:
        value: int = _I32.unpack(self._take(4))[0]
        return value

    def i64(self) -> int:
        value: int = _I64.unpack(self._take(8))[0]
        return value

    def string(self) -> str:
        value = self.nullable_string()
        if value is None:
            raise CodecError("null in a non-nullable string")
        return value

    def nullable_string(self) -> str | None:
        n = self.i16()
        if n == -1:
            return None
        if n < 0:
            raise CodecError(f"bad string length {n}")
        try:
            return self._take(n).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise CodecError(str(exc)) from exc

    def nullable_bytes(self) -> bytes | None:
        n = self.i32()
        if n == -1:
            return None
        if n < 0:
            raise CodecError(f"bad bytes length {n}")
        return self._take(n)

    def count(self) -> int:
        n = self.i32()
        if n == -1:  # a null array; only produced by broken encoders, read as empty
            return 0
        if n < 0 or n > len(self.buf) - self.pos:  # every element is at least one byte
            raise CodecError(f"bad array length {n}")
        return n

    def int32_array(self) -> tuple[int, ...]:
        n = self.count()
        return struct.unpack(f">{n}i", self._take(4 * n)) if n else ()

    def topic_partitions(self) -> TopicPartitions:
        return tuple((self.string(), self.int32_array()) for _ in range(self.count()))

    def at_end(self) -> bool:
        return self.pos >= len(self.buf)


def peek_version(data: bytes) -> int:
    """The int16 version header of an embedded-protocol message."""
    return _Reader(data).i16()


# --- ConsumerProtocolSubscription ------------------------------------------------


def encode_subscription(sub: Subscription, version: int = SUBSCRIPTION_MAX_VERSION) -> bytes:
    if not 0 <= version <= SUBSCRIPTION_MAX_VERSION:
        raise CodecError(f"unsupported ConsumerProtocolSubscription version {version}")
    out: list[bytes] = [_I16.pack(version), _I32.pack(len(sub.topics))]
    for topic in sub.topics:
        _w_string(out, topic)
    _w_bytes(out, sub.user_data)
    if version >= 1:
        _w_topic_partitions(out, sub.owned_partitions)
    if version >= 2:
        out.append(_I32.pack(sub.generation_id))
    if version >= 3:
        _w_string(out, sub.rack_id, nullable=True)
    return b"".join(out)


def decode_subscription(data: bytes | bytearray | memoryview) -> Subscription:
    r = _Reader(data)
    version = r.i16()
    if version < 0:
        raise CodecError(f"negative ConsumerProtocolSubscription version {version}")
    version = min(version, SUBSCRIPTION_MAX_VERSION)
    topics = tuple(r.string() for _ in range(r.count()))
    user_data = r.nullable_bytes()
    owned: TopicPartitions = ()
    generation = DEFAULT_GENERATION
    rack: str | None = None
    if version >= 1:
        owned = r.topic_partitions()
    if version >= 2:
        generation = r.i32()
    if version >= 3:
        rack = r.nullable_string()
    return Subscription(topics, user_data, owned, generation, rack)


# --- ConsumerProtocolAssignment --------------------------------------------------


def encode_assignment(assignment: Assignment, version: int = ASSIGNMENT_MAX_VERSION) -> bytes:
    if not 0 <= version <= ASSIGNMENT_MAX_VERSION:
        raise CodecError(f"unsupported ConsumerProtocolAssignment version {version}")
    out: list[bytes] = [_I16.pack(version)]
    _w_topic_partitions(out, assignment.assigned_partitions)
    _w_bytes(out, assignment.user_data)
    return b"".join(out)


def decode_assignment(data: bytes | bytearray | memoryview) -> Assignment:
    r = _Reader(data)
    version = r.i16()
    if version < 0:
        raise CodecError(f"negative ConsumerProtocolAssignment version {version}")
    parts = r.topic_partitions()
    user_data = r.nullable_bytes()
    return Assignment(parts, user_data)


# --- StickyAssignor user data (Kafka STICKY_ASSIGNOR_USER_DATA_V0 / V1) ----------


@dataclass(frozen=True, slots=True)
class StickyUserData:
    partitions: tuple[TopicPartition, ...]
    generation: int | None  # None: a v0 payload (no generation field)


def encode_sticky_user_data(
    partitions: Iterable[TopicPartition], generation: int | None = DEFAULT_GENERATION
) -> bytes:
    """Kafka ``StickyAssignor.serializeTopicPartitionAssignment``: v1 when a generation is given."""
    out: list[bytes] = []
    _w_topic_partitions(out, tuple(group_partitions(partitions).items()))
    if generation is not None:
        out.append(_I32.pack(generation))
    return b"".join(out)


def decode_sticky_user_data(data: bytes) -> StickyUserData:
    r = _Reader(data)
    parts = r.topic_partitions()
    generation = None if r.at_end() else r.i32()
    return StickyUserData(tuple(TopicPartition(t, p) for t, ps in parts for p in ps), generation)


# --- failover priority ---------------------------------------------------------


def encode_priority(priority: int) -> bytes:
    """A failover member's priority: a 4-byte big-endian int32."""
    return _I32.pack(priority)


def decode_priority(user_data: bytes | None) -> int:
    """The failover priority in subscription user data; missing or short data is INT32_MIN.

    Only the first four bytes are read, so a future format may append fields.
    """
    if user_data is None or len(user_data) < 4:
        return INT32_MIN
    value: int = _I32.unpack_from(user_data)[0]
    return value
