"""Shared pieces of the hand-written codecs: bounds-checked readers, the error-only body."""

from __future__ import annotations

import struct

from kgroupd.protocol.codec import read_uvarint

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_I16_I32 = struct.Struct(">ih")  # throttle_time_ms, error_code


def read_string(data: bytes, pos: int) -> tuple[str | None, int]:
    """A non-compact (int16-length) nullable string."""
    if pos + 2 > len(data):
        raise ValueError("string length runs past the end of the request")
    (n,) = _I16.unpack_from(data, pos)
    pos += 2
    if n < 0:
        return None, pos
    end = pos + n
    if end > len(data):
        raise ValueError("string runs past the end of the request")
    return data[pos:end].decode("utf-8"), end


def read_compact_string(data: bytes, pos: int) -> tuple[str | None, int]:
    """A compact (unsigned varint length + 1) nullable string."""
    if pos < len(data) and data[pos] < 0x80:  # a length below 127: one byte
        n = data[pos]
        pos += 1
    else:
        n, pos = read_uvarint(data, pos)
    if n == 0:
        return None, pos
    end = pos + n - 1
    if end > len(data):
        raise ValueError("string runs past the end of the request")
    return data[pos:end].decode("utf-8"), end


def skip_tagged_fields(data: bytes, pos: int) -> int:
    """Past a tagged-field buffer (a hot request's tags are all unknown to us)."""
    count, pos = read_uvarint(data, pos)
    prev = -1
    for _ in range(count):
        tag, pos = read_uvarint(data, pos)
        if tag <= prev:
            raise ValueError(f"tagged field {tag} out of order")
        prev = tag
        size, pos = read_uvarint(data, pos)
        pos += size
        if pos > len(data):
            raise ValueError(f"tagged field {tag} runs past the end of the request")
    return pos


def skip_tags(data: bytes, pos: int) -> int:
    """``skip_tagged_fields`` with the usual empty buffer read in one step."""
    if pos < len(data) and data[pos] == 0:
        return pos + 1
    return skip_tagged_fields(data, pos)


def read_int32(data: bytes, pos: int) -> tuple[int, int]:
    if pos + 4 > len(data):
        raise ValueError("int32 runs past the end of the request")
    return _I32.unpack_from(data, pos)[0], pos + 4


_ERROR_ONLY = [_I16.pack(code) for code in range(128)]


def encode_error_only(
    error_code: int, version: int, throttle_from: int = 1, flexible_from: int = 32767
) -> bytes:
    """A body of (throttle_time_ms from ``throttle_from``,) error_code (and empty tagged
    fields from ``flexible_from``): Heartbeat's shape."""
    if version >= flexible_from:
        return _I16_I32.pack(0, error_code) + b"\x00"
    if version >= throttle_from:
        return _I16_I32.pack(0, error_code)
    return _ERROR_ONLY[error_code] if 0 <= error_code < 128 else _I16.pack(error_code)


class Chunks(list[bytes | memoryview]):
    """A response body as buffers written one after the other (``transport.writelines``),
    so large record batches are never copied into one object."""
