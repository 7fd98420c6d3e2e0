"""OffsetCommit: the hand-written request decoder and response encoder, v0-v10.

v1 adds the generation and member id, v2-v4 a retention time, v1 alone a commit timestamp,
v6 the leader epoch, v7 the group instance id, v8 is flexible (compact strings and arrays,
tagged fields), v10 names topics by id.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Iterable, Sequence
from itertools import chain, repeat
from typing import Any

from kgroupd.protocol.fast.common import (
    _I16,
    _I32,
    _I64,
    read_compact_string,
    read_int32,
    read_string,
    read_uvarint,
    skip_tagged_fields,
)

FLEXIBLE_FROM = 8
TOPIC_IDS_FROM = 10

_COMMIT_PART = {  # per partition, up to the metadata string's length (non-flexible)
    0: struct.Struct(">iqh"),  # partition, offset, metadata length
    1: struct.Struct(">iqqh"),  # partition, offset, commit timestamp (ignored), ...
    6: struct.Struct(">iqih"),  # partition, offset, committed leader epoch, ...
}
_FLEX_PART = struct.Struct(">iqi")  # partition, offset, committed leader epoch

# (partition, offset, leader epoch, metadata)
CommitPartition = tuple[int, int, int, str | None]

_I32_I16 = struct.Struct(">ih")  # generation, member id length
_FLEX_USUAL = struct.Struct(">iqiBB")  # ..., metadata "" or null, no tagged fields
_MANY_CACHED = 256  # partition counts whose struct for a whole topic is kept
_many_structs: dict[tuple[str, int], struct.Struct] = {}
_MIXED = object()


def _many(one: struct.Struct, count: int) -> struct.Struct:
    """A struct reading ``count`` partitions of the layout ``one`` at once."""
    key = (one.format, count)
    many = _many_structs.get(key)
    if many is None:
        many = _many_structs[key] = struct.Struct(">" + one.format[1:] * count)
    return many


def _same_metadata(lengths: tuple[int, ...], count: int, empty: int, null: int) -> Any:
    """ "" if every metadata length is ``empty``'s, None if every one is ``null``'s, else
    ``_MIXED`` (read partition by partition)."""
    if lengths.count(empty) == count:
        return ""
    if lengths.count(null) == count:
        return None
    return _MIXED


def _commit_part_struct(version: int) -> struct.Struct:
    if version >= 6:
        return _COMMIT_PART[6]
    return _COMMIT_PART[1] if version == 1 else _COMMIT_PART[0]


def decode_offset_commit(frame: bytes, pos: int, version: int) -> dict[str, object]:
    """OffsetCommit v0-v10, straight into the handler's shape.

    Keys as the general codec names them (``group_id``, ``generation_id_or_member_epoch``,
    ``member_id``, ``retention_time_ms``, ``group_instance_id``); ``topics`` is a list of
    ``(name, [(partition, offset, leader_epoch, metadata), ...])`` with leader epoch -1 before
    v6, and from v10 the topic id's 16 bytes instead of the name (no UUID object: the
    broker looks ids up by their bytes). Nulls where Kafka allows none
    raise ``ValueError``.
    """
    try:
        if version >= FLEXIBLE_FROM:
            return _decode_flexible(frame, pos, version)
        return _decode(frame, pos, version)
    except struct.error as exc:  # an int read past the end
        raise ValueError(f"the request ends early: {exc}") from None


def _decode(frame: bytes, pos: int, version: int) -> dict[str, object]:
    # strings read inline: a Python call costs more than the rest of a field's reading
    n = len(frame)
    (size,) = _I16.unpack_from(frame, pos)
    end = pos + 2 + size
    if size < 0 or end > n:
        raise ValueError("null group id" if size < 0 else "group id runs past the end")
    fields: dict[str, object] = {
        "group_id": frame[pos + 2 : end].decode("utf-8"),
        "generation_id_or_member_epoch": -1,
        "member_id": "",
        "retention_time_ms": -1,
        "group_instance_id": None,
    }
    pos = end
    if version >= 1:
        generation, size = _I32_I16.unpack_from(frame, pos)
        end = pos + 6 + size
        if size < 0 or end > n:
            raise ValueError("null member id" if size < 0 else "member id runs past the end")
        fields["generation_id_or_member_epoch"] = generation
        fields["member_id"] = frame[pos + 6 : end].decode("utf-8")
        pos = end
    if 2 <= version <= 4:
        fields["retention_time_ms"] = _I64.unpack_from(frame, pos)[0]
        pos += 8
    if version >= 7:
        fields["group_instance_id"], pos = read_string(frame, pos)
    part = _commit_part_struct(version)
    unpack = part.unpack_from
    head = part.size
    v6 = version >= 6
    (ntopics,) = _I32.unpack_from(frame, pos)
    pos += 4
    if ntopics < 0:
        raise ValueError("null topics array")
    topics: list[tuple[str | bytes, list[CommitPartition]]] = []
    for _ in range(ntopics):
        (size,) = _I16.unpack_from(frame, pos)
        end = pos + 2 + size
        if size < 0 or end > n:
            raise ValueError("null topic name" if size < 0 else "topic name runs past the end")
        name = frame[pos + 2 : end].decode("utf-8")
        (nparts,) = _I32.unpack_from(frame, end)
        pos = end + 4
        if nparts < 0:
            raise ValueError("null partitions array")
        end = pos + nparts * head
        if 0 < nparts <= _MANY_CACHED and end <= n:  # the usual commit: no metadata
            values = _many(part, nparts).unpack_from(frame, pos)
            k = len(values) // nparts
            lengths = values[k - 1 :: k]  # _same_metadata inlined (the commit path is hot)
            if lengths.count(0) == nparts:
                meta: Any = ""
            elif lengths.count(-1) == nparts:
                meta = None
            else:
                meta = _MIXED
            if meta is not _MIXED:
                epochs = values[2::k] if v6 else repeat(-1, nparts)
                topics.append((name, list(zip(values[::k], values[1::k], epochs, repeat(meta)))))
                pos = end
                continue
        parts: list[CommitPartition] = []
        for _ in range(nparts):
            if pos + head > n:
                raise ValueError("partition runs past the end of the request")
            values = unpack(frame, pos)
            pos += head
            mlen = values[-1]
            if mlen == 0:
                metadata: str | None = ""
            elif mlen < 0:
                metadata = None
            else:
                end = pos + mlen
                if end > n:
                    raise ValueError("string runs past the end of the request")
                metadata = frame[pos:end].decode("utf-8")
                pos = end
            parts.append((values[0], values[1], values[2] if v6 else -1, metadata))
        topics.append((name, parts))
    if pos > n:  # bytes after the body are ignored, as Kafka ignores them
        raise ValueError("the request body runs past the end of the frame")
    fields["topics"] = topics
    return fields


def _decode_flexible(frame: bytes, pos: int, version: int) -> dict[str, object]:
    n = len(frame)
    group, pos = read_compact_string(frame, pos)
    generation, pos = read_int32(frame, pos)
    member, pos = read_compact_string(frame, pos)
    instance, pos = read_compact_string(frame, pos)
    if group is None or member is None:
        raise ValueError("null group id or member id")
    by_id = version >= TOPIC_IDS_FROM
    if pos < n and frame[pos] < 0x80:
        ntopics = frame[pos]
        pos += 1
    else:
        ntopics, pos = read_uvarint(frame, pos)
    if ntopics == 0:
        raise ValueError("null topics array")
    topics: list[tuple[str | bytes, list[CommitPartition]]] = []
    unpack = _FLEX_PART.unpack_from
    for _ in range(ntopics - 1):
        key: str | bytes | None
        if by_id:
            if pos + 16 > n:
                raise ValueError("topic id runs past the end of the request")
            key = frame[pos : pos + 16]  # the id's 16 bytes: no UUID object on the hot path
            pos += 16
        else:
            key, pos = read_compact_string(frame, pos)
            if key is None:
                raise ValueError("null topic name")
        if pos < n and frame[pos] < 0x80:
            nparts = frame[pos]
            pos += 1
        else:
            nparts, pos = read_uvarint(frame, pos)
        if nparts == 0:
            raise ValueError("null partitions array")
        count = nparts - 1
        end = pos + count * 18
        if 0 < count <= _MANY_CACHED and end <= n:  # the usual commit: no metadata, no tags
            values = _many(_FLEX_USUAL, count).unpack_from(frame, pos)
            meta = _same_metadata(values[3::5], count, 1, 0)
            if meta is not _MIXED and not any(values[4::5]):
                parts = list(zip(values[::5], values[1::5], values[2::5], repeat(meta)))
                pos = skip_tagged_fields(frame, end)
                topics.append((key, parts))
                continue
        parts = []
        append = parts.append
        for _ in range(nparts - 1):
            if pos + 18 > n:
                raise ValueError("partition runs past the end of the request")
            partition, offset, epoch = unpack(frame, pos)
            pos += 16
            mlen = frame[pos]
            if mlen == 1:  # the usual empty metadata, then (usually) no tagged fields
                metadata: str | None = ""
                pos += 1
            elif mlen == 0:
                metadata = None
                pos += 1
            else:
                metadata, pos = read_compact_string(frame, pos)
            if pos < n and frame[pos] == 0:
                pos += 1
            else:
                pos = skip_tagged_fields(frame, pos)
            append((partition, offset, epoch, metadata))
        pos = skip_tagged_fields(frame, pos)
        topics.append((key, parts))
    pos = skip_tagged_fields(frame, pos)
    if pos > n:  # bytes after the body are ignored, as Kafka ignores them
        raise ValueError("the request body runs past the end of the frame")
    return {
        "group_id": group,
        "generation_id_or_member_epoch": generation,
        "member_id": member,
        "retention_time_ms": -1,
        "group_instance_id": instance,
        "topics": topics,
    }


_PART_ERROR = struct.Struct(">ih")
_FLEX_PART_ERROR = struct.Struct(">ihB")  # partition, error, empty tagged fields
_SMALL = [bytes((i,)) for i in range(0x80)]
_pair_structs: dict[int, struct.Struct] = {}  # count -> count, (partition, error) * count
_PAIRS_CACHED = 256  # counts whose struct is kept
_names: dict[str, bytes] = {}  # topic name -> its int16-length string (the answer's head)
_NAMES_CACHED = 4096


def _uvarint(value: int) -> bytes:
    if value < 0x80:
        return _SMALL[value]
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def encode_offset_commit_response(
    version: int,
    topics: Iterable[tuple[str | uuid.UUID | bytes, Iterable[tuple[int, int]]]],
    ids: Sequence[uuid.UUID | bytes] | None = None,
    extra: Iterable[tuple[uuid.UUID | bytes, Iterable[tuple[int, int]]]] = (),
) -> bytes:
    """OffsetCommit response v0-v10: (throttle_time_ms from v3,) [topic [partition, error]];
    flexible from v8, topics by id from v10 (a UUID, or its 16 bytes, as the key). ``ids``,
    if given, names the topics in place of their keys (the i-th topic by ``ids[i]``);
    ``extra`` topics follow."""
    flexible = version >= FLEXIBLE_FROM
    out = [_I32.pack(0)] if version >= 3 else []
    count = 0
    count_at = len(out)
    out.append(b"")
    flex_pack = _FLEX_PART_ERROR.pack
    for key, parts in chain(topics, extra):
        if ids is not None and count < len(ids):
            key = ids[count]
        count += 1
        if flexible:
            packed = [flex_pack(p, code, 0) for p, code in parts]
            if isinstance(key, bytes):
                head = key
            elif isinstance(key, uuid.UUID):
                head = key.bytes
            else:
                raw = key.encode()
                head = _uvarint(len(raw) + 1) + raw
            out.append(head + _uvarint(len(packed) + 1))
            out.extend(packed)
            out.append(b"\x00")
        else:
            assert isinstance(key, str)
            named = _names.get(key)
            if named is None:
                raw = key.encode()
                named = _I16.pack(len(raw)) + raw
                if len(_names) < _NAMES_CACHED:
                    _names[key] = named
            out.append(named)
            flat = list(chain.from_iterable(parts))  # partition, error, partition, ...
            count_parts = len(flat) // 2
            pairs = _pair_structs.get(count_parts)  # one struct packs the count and them all
            if pairs is None:
                pairs = struct.Struct(">i" + "ih" * count_parts)
                if count_parts <= _PAIRS_CACHED:
                    _pair_structs[count_parts] = pairs
            out.append(pairs.pack(count_parts, *flat))
    out[count_at] = _uvarint(count + 1) if flexible else _I32.pack(count)
    if flexible:
        out.append(b"\x00")
    return b"".join(out)


# --- shapes: a consumer's commits again, read without decoding -----------------------------
# A consumer commits the same partitions of the same group over and over: the request's bytes
# are the same each time but for the offsets (and leader epochs). A shape is such a request's
# bytes apart from those, learned from one decoded commit (one topic, every metadata "" or
# every one null, v0-v9: topics by name); a later request of the same shape is read with one
# struct call (its offsets and epochs), its other fields are the shape's.
_SHAPES_CACHED = 1024
_LAYOUTS = {  # per partition, as read in one go; the metadata's length (and tags) last
    0: struct.Struct(">iqh"),
    1: struct.Struct(">iqqh"),  # ..., commit timestamp (ignored), ...
    6: struct.Struct(">iqih"),  # ..., committed leader epoch, ...
    8: struct.Struct(">iqiH"),  # ..., metadata length + 1 (a byte) and no tags (a zero byte)
}
# what the last field reads for metadata "" and for null metadata (by layout)
_EMPTY_META = {0: 0, 1: 0, 6: 0, 8: 0x0100}
_NULL_META = {0: -1, 1: -1, 6: -1, 8: 0}


class CommitShape:
    """A single-topic OffsetCommit's bytes apart from its offsets and leader epochs.

    ``fields``: the decoded request's fields but ``topics``; ``name``: the topic's name;
    ``indexes``: its partitions; ``metadata``: "" or None (every partition's); ``state``:
    the caller's (the broker keeps what it checked of the topic there)."""

    __slots__ = (
        "epochs",
        "fields",
        "indexes",
        "k",
        "lengths",
        "many",
        "metadata",
        "name",
        "prefix",
        "start",
        "state",
        "suffix",
        "version",
    )

    def __init__(
        self,
        version: int,
        prefix: bytes,
        suffix: bytes,
        fields: dict[str, Any],
        name: str,
        indexes: tuple[int, ...],
        metadata: str | None,
    ) -> None:
        layout = _layout(version)
        head = _LAYOUTS[layout]
        count = len(indexes)
        self.version = version
        self.prefix = prefix
        self.start = len(prefix)
        self.suffix = suffix
        self.fields = fields
        self.name = name
        self.indexes = indexes
        self.metadata = metadata
        self.many = _many(head, count)
        self.k = len(head.format) - 1
        mark = _EMPTY_META[layout] if metadata is not None else _NULL_META[layout]
        self.lengths = (mark,) * count
        # leader epochs are read from v6 on (index 2 of a partition), else -1
        self.epochs: tuple[int, ...] | None = None if version >= 6 else (-1,) * count
        self.state: Any = None


_shapes: dict[tuple[int, int, bytes], CommitShape] = {}


def _layout(version: int) -> int:
    if version >= FLEXIBLE_FROM:
        return 8
    return 6 if version >= 6 else 1 if version == 1 else 0


def _shape_key(frame: bytes, pos: int, version: int) -> tuple[int, int, bytes] | None:
    """(version, the body's length, the group id's bytes with their length)."""
    n = len(frame)
    if pos + 2 > n:
        return None
    if version >= FLEXIBLE_FROM:
        if frame[pos] >= 0x80:
            return None
        end = pos + frame[pos]
    else:
        end = pos + 2 + (frame[pos] << 8 | frame[pos + 1])
    return (version, n - pos, frame[pos:end])


def match_offset_commit(
    frame: bytes, pos: int, version: int
) -> tuple[CommitShape, tuple[int, ...], tuple[int, ...]] | None:
    """(the shape, the offsets, the leader epochs) of a request of a known shape, else None
    (decode it, and ``learn_offset_commit``): the same fields as ``decode_offset_commit``
    would read (``shape.fields``, one topic ``shape.name``: ``shape.indexes`` with these
    offsets and epochs, every metadata ``shape.metadata``)."""
    # _shape_key inlined: a group id's length of several bytes (flexible) or a body cut short
    # reads a key no shape has
    n = len(frame)
    try:
        if version >= FLEXIBLE_FROM:
            end = pos + frame[pos]
        else:
            end = pos + 2 + (frame[pos] << 8 | frame[pos + 1])
    except IndexError:
        return None
    shape = _shapes.get((version, n - pos, frame[pos:end]))
    if shape is None or not frame.startswith(shape.prefix, pos):
        return None
    values = shape.many.unpack_from(frame, pos + shape.start)
    k = shape.k
    if values[::k] != shape.indexes or values[k - 1 :: k] != shape.lengths:
        return None
    if shape.suffix and not frame.endswith(shape.suffix):
        return None
    epochs = shape.epochs
    return shape, values[1::k], values[2::k] if epochs is None else epochs


def learn_offset_commit(
    frame: bytes, pos: int, version: int, fields: dict[str, Any]
) -> CommitShape | None:
    """The shape of a request ``decode_offset_commit`` read as ``fields`` (kept: the next
    request of this shape matches), or None: not a shape (several topics, metadata, v10)."""
    topics = fields["topics"]
    if version >= TOPIC_IDS_FROM or len(topics) != 1:
        return None
    name, parts = topics[0]
    if not parts or len(parts) > _MANY_CACHED:
        return None
    metadata = parts[0][3]
    if metadata not in ("", None) or any(p[3] != metadata for p in parts):
        return None
    key = _shape_key(frame, pos, version)
    if key is None:
        return None
    count = len(parts)
    suffix = b"\x00\x00" if version >= FLEXIBLE_FROM else b""  # the topic's and body's tags
    start = _prefix_size(version, fields, name, count)
    # exactly the prefix, the partitions and the tags: no trailing bytes, no longer varints
    if len(frame) - pos != start + count * _LAYOUTS[_layout(version)].size + len(suffix):
        return None
    constant = {k: v for k, v in fields.items() if k != "topics"}
    indexes = tuple(p[0] for p in parts)
    shape = CommitShape(
        version, frame[pos : pos + start], suffix, constant, name, indexes, metadata
    )
    # it must read this very request as the decoder did (else: trailing bytes, tags, ...)
    matched = _match_one(shape, frame, pos)
    if matched is None or list(zip(indexes, *matched, repeat(metadata))) != parts:
        return None
    if len(_shapes) >= _SHAPES_CACHED:
        _shapes.clear()
    _shapes[key] = shape
    return shape


def _match_one(
    shape: CommitShape, frame: bytes, pos: int
) -> tuple[tuple[int, ...], tuple[int, ...]] | None:
    if not frame.startswith(shape.prefix, pos) or not frame.endswith(shape.suffix):
        return None
    if len(frame) - pos != shape.start + shape.many.size + len(shape.suffix):
        return None
    values = shape.many.unpack_from(frame, pos + shape.start)
    k = shape.k
    if values[::k] != shape.indexes or values[k - 1 :: k] != shape.lengths:
        return None
    return values[1::k], values[2::k] if shape.epochs is None else shape.epochs


def _prefix_size(version: int, fields: dict[str, Any], name: str, count: int) -> int:
    """The bytes before the first partition, every length written in the fewest bytes."""
    group = len(fields["group_id"].encode())
    member = len(fields["member_id"].encode())
    instance = fields["group_instance_id"]
    raw = len(name.encode())
    if version >= FLEXIBLE_FROM:
        size = len(_uvarint(group + 1)) + group + 4 + len(_uvarint(member + 1)) + member
        size += 1 if instance is None else len(_uvarint(len(instance.encode()) + 1))
        size += 0 if instance is None else len(instance.encode())
        return size + 1 + len(_uvarint(raw + 1)) + raw + len(_uvarint(count + 1))
    size = 2 + group
    if version >= 1:
        size += 4 + 2 + member
    if 2 <= version <= 4:
        size += 8
    if version >= 7:
        size += 2 + (0 if instance is None else len(instance.encode()))
    return size + 4 + 2 + raw + 4
