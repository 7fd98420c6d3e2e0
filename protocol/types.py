"""The wire's primitive types as Kafka's message JSON names them (int8 ... uuid, string,
bytes, records, arrays of primitives), each able to read and write itself in the classic
and the compact (flexible-version) encodings, nullable or not; unsigned varints; version
ranges. ``kgroupd.protocol.codec`` builds message codecs from them."""

from __future__ import annotations

import struct
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

ZERO_UUID = uuid.UUID(int=0)


class DecodeError(ValueError):
    """The body cannot be read as this message at this version."""


# --- versions -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Versions:
    """An inclusive version range as Kafka writes it: ``"3+"``, ``"0-4"``, ``"none"``."""

    lo: int
    hi: int  # 32767 for "N+"

    @classmethod
    def parse(cls, spec: str | Versions | None) -> Versions:
        if isinstance(spec, Versions):
            return spec
        if spec is None or spec == "none":
            return cls(1, 0)
        if spec.endswith("+"):
            return cls(int(spec[:-1]), 32767)
        if "-" in spec:
            lo, hi = spec.split("-")
            return cls(int(lo), int(hi))
        return cls(int(spec), int(spec))

    def __contains__(self, version: object) -> bool:
        return isinstance(version, int) and self.lo <= version <= self.hi


# --- primitive readers and writers --------------------------------------------------------

# What a request is decoded from: a frame is bytes, or a bytearray when it was handed over
# whole (``framing.HAND_OVER``).
Frame = bytes | bytearray
Reader = Callable[[Frame, int], tuple[Any, int]]
Writer = Callable[[Any, bytearray], None]


def read_uvarint(data: Frame, pos: int) -> tuple[int, int]:
    value = 0
    shift = 0
    while True:
        if pos >= len(data):
            raise DecodeError("varint runs past the end of the body")
        b = data[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            return value, pos
        shift += 7
        if shift > 28:
            raise DecodeError("unsigned varint longer than 5 bytes")


def write_uvarint(value: int, out: bytearray) -> None:
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)


def _fixed(fmt: str) -> tuple[Reader, Writer, int]:
    st = struct.Struct(fmt)
    size = st.size
    unpack = st.unpack_from
    pack = st.pack

    def read(data: Frame, pos: int) -> tuple[Any, int]:
        end = pos + size
        if end > len(data):
            raise DecodeError(f"{fmt} runs past the end of the body")
        return unpack(data, pos)[0], end

    def write(value: Any, out: bytearray) -> None:
        out += pack(value)

    return read, write, size


class Type:
    """A wire type; ``reader``/``writer`` are built per (compact, nullable)."""

    name = "?"
    default: Any = None

    def reader(self, compact: bool, nullable: bool) -> Reader:
        raise NotImplementedError

    def writer(self, compact: bool, nullable: bool) -> Writer:
        raise NotImplementedError


class _Fixed(Type):
    def __init__(self, name: str, fmt: str, default: Any) -> None:
        self.name = name
        self.default = default
        self._read, self._write, _ = _fixed(fmt)

    def reader(self, compact: bool, nullable: bool) -> Reader:
        return self._read

    def writer(self, compact: bool, nullable: bool) -> Writer:
        return self._write


class _Bool(_Fixed):
    def reader(self, compact: bool, nullable: bool) -> Reader:
        inner = self._read

        def read(data: Frame, pos: int) -> tuple[Any, int]:
            value, pos = inner(data, pos)
            return value != 0, pos

        return read

    def writer(self, compact: bool, nullable: bool) -> Writer:
        def write(value: Any, out: bytearray) -> None:
            out.append(1 if value else 0)

        return write


class _Uuid(Type):
    name = "uuid"
    default = ZERO_UUID

    def reader(self, compact: bool, nullable: bool) -> Reader:
        def read(data: Frame, pos: int) -> tuple[Any, int]:
            end = pos + 16
            if end > len(data):
                raise DecodeError("uuid runs past the end of the body")
            return uuid.UUID(bytes=bytes(data[pos:end])), end

        return read

    def writer(self, compact: bool, nullable: bool) -> Writer:
        def write(value: Any, out: bytearray) -> None:
            out += value.bytes if value is not None else bytes(16)

        return write


_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")


def length_reader(
    compact: bool, nullable: bool, what: str
) -> Callable[[Frame, int], tuple[int, int]]:
    """Reads a length prefix; -1 means null (refused unless nullable)."""
    if compact:

        def read_compact(data: Frame, pos: int) -> tuple[int, int]:
            n, pos = read_uvarint(data, pos)
            n -= 1
            if n < 0 and not nullable:
                raise DecodeError(f"null {what} where the version allows none")
            return n, pos

        return read_compact
    st = _I32 if what in ("bytes", "array") else _I16

    def read_classic(data: Frame, pos: int) -> tuple[int, int]:
        end = pos + st.size
        if end > len(data):
            raise DecodeError(f"{what} length runs past the end of the body")
        (n,) = st.unpack_from(data, pos)
        if n < -1:
            raise DecodeError(f"negative {what} length {n}")
        if n == -1 and not nullable:
            raise DecodeError(f"null {what} where the version allows none")
        return n, end

    return read_classic


def length_writer(compact: bool, what: str) -> Callable[[int, bytearray], None]:
    if compact:

        def write_compact(n: int, out: bytearray) -> None:
            write_uvarint(n + 1, out)

        return write_compact
    pack = (_I32 if what in ("bytes", "array") else _I16).pack

    def write_classic(n: int, out: bytearray) -> None:
        out += pack(n)

    return write_classic


class _String(Type):
    name = "string"
    default = ""

    def reader(self, compact: bool, nullable: bool) -> Reader:
        length = length_reader(compact, nullable, "string")

        def read(data: Frame, pos: int) -> tuple[Any, int]:
            n, pos = length(data, pos)
            if n < 0:
                return None, pos
            end = pos + n
            if end > len(data):
                raise DecodeError("string runs past the end of the body")
            try:
                return data[pos:end].decode("utf-8"), end
            except UnicodeDecodeError as exc:
                raise DecodeError(f"string is not UTF-8: {exc}") from None

        return read

    def writer(self, compact: bool, nullable: bool) -> Writer:
        length = length_writer(compact, "string")

        def write(value: Any, out: bytearray) -> None:
            if value is None:
                if not nullable:
                    raise ValueError("null string in a non-nullable field")
                length(-1, out)
                return
            raw = value.encode("utf-8")
            length(len(raw), out)
            out += raw

        return write


class _Bytes(Type):
    default = b""

    def __init__(self, name: str) -> None:
        self.name = name

    def reader(self, compact: bool, nullable: bool) -> Reader:
        length = length_reader(compact, nullable, "bytes")

        def read(data: Frame, pos: int) -> tuple[Any, int]:
            n, pos = length(data, pos)
            if n < 0:
                return None, pos
            end = pos + n
            if end > len(data):
                raise DecodeError("bytes run past the end of the body")
            return bytes(data[pos:end]), end

        return read

    def writer(self, compact: bool, nullable: bool) -> Writer:
        length = length_writer(compact, "bytes")

        def write(value: Any, out: bytearray) -> None:
            if value is None:
                if not nullable:
                    raise ValueError("null bytes in a non-nullable field")
                length(-1, out)
                return
            if isinstance(value, list | tuple):  # record batches kept as stored
                total = 0
                for chunk in value:
                    total += len(chunk)
                length(total, out)
                for chunk in value:
                    out += chunk
                return
            length(len(value), out)
            out += value

        return write


class _RecordsView(_Bytes):
    """A request's records (Produce's): from ``VIEW_FROM`` bytes on, a read-only view of the
    frame instead of a copy, so a 100 MB batch costs no pass over it to decode (the view keeps
    the frame alive while it is used; whoever keeps the records copies them). Smaller ones
    are copied as ``bytes``: the record walk indexes bytes about 10% faster than a view."""

    def reader(self, compact: bool, nullable: bool) -> Reader:
        length = length_reader(compact, nullable, "bytes")

        def read(data: Frame, pos: int) -> tuple[Any, int]:
            n, pos = length(data, pos)
            if n < 0:
                return None, pos
            end = pos + n
            if end > len(data):
                raise DecodeError("records run past the end of the body")
            if n >= VIEW_FROM:
                return memoryview(data).toreadonly()[pos:end], end
            if type(data) is bytes:
                return data[pos:end], end
            return memoryview(data)[pos:end].tobytes(), end  # one copy, not two

        return read


# Above what max.message.bytes lets through by default (1 MiB): a batch the log may take is
# copied, and walked as bytes; a larger one is refused on its size unless a topic allows it.
VIEW_FROM = 8 * 1024 * 1024

INT8 = _Fixed("int8", ">b", 0)
INT16 = _Fixed("int16", ">h", 0)
UINT16 = _Fixed("uint16", ">H", 0)
INT32 = _Fixed("int32", ">i", 0)
INT64 = _Fixed("int64", ">q", 0)
FLOAT64 = _Fixed("float64", ">d", 0.0)
BOOL = _Bool("bool", ">B", False)
UUID = _Uuid()
STRING = _String()
BYTES = _Bytes("bytes")
RECORDS = _Bytes("records")
RECORDS_VIEW = _RecordsView("records")  # a request's: see _RecordsView


@dataclass(frozen=True, slots=True)
class ArrayOf:
    """An array of a primitive type (arrays of structs are written as a list of ``F``)."""

    item: Type
