"""Our own message definitions: a field tree per API, compiled into a codec per version.

A message is written once, as Kafka's message JSON describes it: fields with the versions
they exist in, the versions they may be null in, and (for flexible versions) tagged fields.
``Message.codec(version)`` compiles that tree for one version into a ``VersionCodec`` that
reads a body into a dict and writes a dict into a body. Field names are Kafka's, in
snake_case (``GroupId`` is ``group_id``), the names kafka-python 3 uses too.

Decoding fills every field the version lacks with its default, so handlers read one dict
shape for every version. Encoding ignores fields the version lacks and takes the default
for fields the dict leaves out. Unknown tagged fields are kept under ``UNKNOWN_TAGS`` and
written back, so a struct round-trips whatever tags a newer peer sends.

Any malformed body (truncated, a null where the version allows none, a negative length,
out-of-order tags, invalid UTF-8) raises ``DecodeError``.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kgroupd.protocol.types import (
    BOOL,
    BYTES,
    FLOAT64,
    INT8,
    INT16,
    INT32,
    INT64,
    RECORDS,
    RECORDS_VIEW,
    STRING,
    UINT16,
    UUID,
    ZERO_UUID,
    ArrayOf,
    DecodeError,
    Frame,
    Reader,
    Type,
    Versions,
    Writer,
    length_reader,
    length_writer,
    read_uvarint,
    write_uvarint,
)

__all__ = [
    "BOOL",
    "BYTES",
    "FLOAT64",
    "INT8",
    "INT16",
    "INT32",
    "INT64",
    "NULL",
    "RECORDS",
    "RECORDS_VIEW",
    "STRING",
    "UINT16",
    "UNKNOWN_TAGS",
    "UUID",
    "ZERO_UUID",
    "ArrayOf",
    "DecodeError",
    "F",
    "Frame",
    "Message",
    "VersionCodec",
    "Versions",
    "read_uvarint",
    "write_uvarint",
]

UNKNOWN_TAGS = "_unknown_tags"


# --- the field tree -----------------------------------------------------------------------

FieldType = Type | ArrayOf | list["F"]


class _Null:
    def __repr__(self) -> str:
        return "NULL"


NULL: Any = _Null()  # ``default=NULL``: the field's default is null
_UNSET: Any = object()


@dataclass(slots=True)
class F:
    """One field: ``F("group_id", STRING)``; ``F("topics", [F(...), ...])`` is an array of
    structs, ``F("snapshot_id", [..], struct=True)`` a single struct. ``versions`` and
    ``nullable`` take Kafka's range syntax; ``tag`` with ``tagged`` makes a tagged field.
    ``default`` is Kafka's default (``NULL`` for null); unset, it is zero or empty."""

    name: str
    type: FieldType
    versions: str = "0+"
    nullable: str | None = None
    default: Any = _UNSET
    tag: int | None = None
    tagged: str | None = None
    struct: bool = False
    vr: Versions = field(default=Versions(0, 32767), init=False)
    nr: Versions = field(default=Versions(1, 0), init=False)
    tr: Versions = field(default=Versions(1, 0), init=False)

    def __post_init__(self) -> None:
        self.vr = Versions.parse(self.versions)
        self.nr = Versions.parse(self.nullable)
        self.tr = Versions.parse(self.tagged if self.tag is not None else None)

    def default_for(self, version: int) -> Any:
        if self.default is NULL:
            return None
        if self.default is not _UNSET:
            return self.default
        t = self.type
        if isinstance(t, list):
            if self.struct:
                return None if version in self.nr else _struct_default(t, version)
            return []
        if isinstance(t, ArrayOf):
            return []
        return t.default


def _struct_default(fields: Sequence[F], version: int) -> dict[str, Any]:
    return {f.name: f.default_for(version) for f in fields if version in f.vr}


# --- compiling one version ----------------------------------------------------------------


class _StructCodec:
    """Reader and writer of one struct (the message body or a nested struct) at one version."""

    __slots__ = ("decode", "encode", "names")

    def __init__(self, fields: Sequence[F], version: int, flexible: bool) -> None:
        plain: list[tuple[str, Reader, Writer, Any, bool]] = []
        tagged: dict[int, tuple[str, Reader, Writer, Any, bool]] = {}
        absent: list[tuple[str, Any]] = []
        for f in fields:
            if version not in f.vr:
                absent.append((f.name, f.default_for(version)))
                continue
            nullable = version in f.nr
            if f.tag is not None and flexible and version in f.tr:
                r, w = _field_codec(f, version, True, nullable)
                tagged[f.tag] = (f.name, r, w, f.default_for(version), nullable)
            elif f.tag is not None and f.tr.lo <= version:
                # tagged in flexible versions only; before them it is absent from the wire
                absent.append((f.name, f.default_for(version)))
            else:
                r, w = _field_codec(f, version, flexible, nullable)
                plain.append((f.name, r, w, f.default_for(version), nullable))
        self.names = [p[0] for p in plain]
        self.decode = _make_decoder(plain, tagged, absent, flexible)
        self.encode = _make_encoder(plain, tagged, flexible)


def _field_codec(f: F, version: int, compact: bool, nullable: bool) -> tuple[Reader, Writer]:
    t = f.type
    if isinstance(t, list):
        inner = _StructCodec(t, version, compact)
        if f.struct:
            return _nullable_struct(inner, nullable)
        return _array(inner.decode, inner.encode, compact, nullable)
    if isinstance(t, ArrayOf):
        return _array(
            t.item.reader(compact, False), t.item.writer(compact, False), compact, nullable
        )
    return t.reader(compact, nullable), t.writer(compact, nullable)


def _nullable_struct(inner: _StructCodec, nullable: bool) -> tuple[Reader, Writer]:
    if not nullable:
        return inner.decode, inner.encode

    def read(data: Frame, pos: int) -> tuple[Any, int]:
        if pos >= len(data):
            raise DecodeError("struct marker runs past the end of the body")
        marker = data[pos]
        if marker == 0xFF:
            return None, pos + 1
        return inner.decode(data, pos + 1)

    def write(value: Any, out: bytearray) -> None:
        if value is None:
            out.append(0xFF)
        else:
            out.append(1)
            inner.encode(value, out)

    return read, write


def _array(
    item_read: Reader, item_write: Writer, compact: bool, nullable: bool
) -> tuple[Reader, Writer]:
    length = length_reader(compact, nullable, "array")
    write_length = length_writer(compact, "array")

    def read(data: Frame, pos: int) -> tuple[Any, int]:
        n, pos = length(data, pos)
        if n < 0:
            return None, pos
        if n > len(data) - pos:  # every element takes at least one byte
            raise DecodeError(f"array of {n} elements runs past the end of the body")
        items: list[Any] = []
        append = items.append
        for _ in range(n):
            value, pos = item_read(data, pos)
            append(value)
        return items, pos

    def write(value: Any, out: bytearray) -> None:
        if value is None:
            if not nullable:
                raise ValueError("null array in a non-nullable field")
            write_length(-1, out)
            return
        write_length(len(value), out)
        for item in value:
            item_write(item, out)

    return read, write


def _make_decoder(
    plain: list[tuple[str, Reader, Writer, Any, bool]],
    tagged: dict[int, tuple[str, Reader, Writer, Any, bool]],
    absent: list[tuple[str, Any]],
    flexible: bool,
) -> Reader:
    readers = [(p[0], p[1]) for p in plain]
    absent_items = list(absent)
    tag_defaults = [(t[0], t[3]) for t in tagged.values()]

    def decode(data: Frame, pos: int) -> tuple[Any, int]:
        out: dict[str, Any] = {}
        for name, r in readers:
            out[name], pos = r(data, pos)
        for name, d in absent_items:
            out[name] = _copy_default(d)
        if flexible:
            for name, d in tag_defaults:
                out[name] = _copy_default(d)
            count, pos = read_uvarint(data, pos)
            prev = -1
            unknown: dict[int, bytes] | None = None
            for _ in range(count):
                tag, pos = read_uvarint(data, pos)
                if tag <= prev:
                    raise DecodeError(f"tagged field {tag} out of order")
                prev = tag
                size, pos = read_uvarint(data, pos)
                end = pos + size
                if end > len(data):
                    raise DecodeError(f"tagged field {tag} runs past the end of the body")
                spec = tagged.get(tag)
                if spec is None:
                    if unknown is None:
                        unknown = {}
                    unknown[tag] = bytes(data[pos:end])
                else:
                    value, stop = spec[1](data[:end], pos)
                    if stop != end:
                        raise DecodeError(f"tagged field {tag} has {end - stop} extra bytes")
                    out[spec[0]] = value
                pos = end
            if unknown:
                out[UNKNOWN_TAGS] = unknown
        return out, pos

    return decode


def _copy_default(d: Any) -> Any:
    if isinstance(d, list):
        return list(d)
    if isinstance(d, dict):
        return {k: _copy_default(v) for k, v in d.items()}
    return d


def _make_encoder(
    plain: list[tuple[str, Reader, Writer, Any, bool]],
    tagged: dict[int, tuple[str, Reader, Writer, Any, bool]],
    flexible: bool,
) -> Writer:
    # A field missing from the dict takes its default; None in a field the version does not
    # let be null takes its default too (handlers fill one dict shape for every version).
    writers = [(name, w, d, nullable or d is None) for name, _r, w, d, nullable in plain]
    tags = sorted(tagged.items())
    missing = _UNSET

    names = [p[0] for p in plain]

    def encode(value: Any, out: bytearray) -> None:
        if isinstance(value, tuple):  # positional, in this version's wire order
            value = dict(zip(names, value, strict=True))
        get = value.get
        for name, w, d, may_be_null in writers:
            v = get(name, missing)
            if v is missing or (v is None and not may_be_null):
                v = d
            w(v, out)
        if flexible:
            extra: list[tuple[int, bytes]] = []
            for tag, (name, _r, w, d, _n) in tags:
                v = get(name, d)
                if v == d:
                    continue
                buf = bytearray()
                w(v, buf)
                extra.append((tag, bytes(buf)))
            unknown = get(UNKNOWN_TAGS)
            if unknown:
                extra.extend((t, raw) for t, raw in unknown.items() if t not in tagged)
                extra.sort()
            write_uvarint(len(extra), out)
            for tag, raw in extra:
                write_uvarint(tag, out)
                write_uvarint(len(raw), out)
                out += raw

    return encode


# --- messages -----------------------------------------------------------------------------


class VersionCodec:
    """One message at one version: ``decode(frame, offset) -> dict``, ``encode(dict) -> bytes``."""

    __slots__ = ("_decode", "_encode", "flexible", "message", "version")

    def __init__(self, message: Message, version: int) -> None:
        self.message = message
        self.version = version
        self.flexible = version in message.flexible
        inner = _StructCodec(message.fields, version, self.flexible)
        self._decode = inner.decode
        self._encode = inner.encode

    def decode(self, data: Frame, offset: int = 0, exact: bool = True) -> dict[str, Any]:
        """The message at ``data[offset:]``; ``exact``: bytes left after it are an error
        (requests pass False: Kafka ignores what follows a request's body, and librdkafka's
        Metadata v13 carries three such bytes)."""
        try:
            value, pos = self._decode(data, offset)
        except DecodeError:
            raise
        except (IndexError, ValueError, struct.error) as exc:
            raise DecodeError(str(exc)) from None
        if exact and pos != len(data):
            raise DecodeError(f"{len(data) - pos} unread bytes after the {self.message.name} body")
        assert isinstance(value, dict)
        return value

    def encode(self, value: Mapping[str, Any]) -> bytes:
        out = bytearray()
        self._encode(value, out)
        return bytes(out)

    def encode_error(self, code: int) -> bytes:
        """A response carrying ``code`` in its top-level error field, empty everywhere else."""
        return self.encode({"error_code": code})


class Message:
    """A request or response: its fields for every version it has."""

    def __init__(
        self,
        name: str,
        api_key: int,
        valid: str,
        flexible: str,
        fields: Sequence[F],
    ) -> None:
        self.name = name
        self.api_key = api_key
        self.valid = Versions.parse(valid)
        self.flexible = Versions.parse(flexible)
        self.fields = list(fields)
        self._codecs: dict[int, VersionCodec] = {}

    def codec(self, version: int) -> VersionCodec:
        c = self._codecs.get(version)
        if c is None:
            if version not in self.valid:
                raise KeyError(f"{self.name} has no version {version}")
            c = self._codecs[version] = VersionCodec(self, version)
        return c

    def __repr__(self) -> str:
        return f"Message({self.name}, {self.valid.lo}-{self.valid.hi})"
