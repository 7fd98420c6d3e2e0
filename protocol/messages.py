"""The message registry: (api_key, version) -> the codec of its request and its response.

Every served API is defined in ``protocol/schemas`` with our own field trees
(``protocol.codec``); ``protocol.schemas.SERVED`` is the one table of served version ranges.
An API not yet moved to our definitions is served through its aiokafka structs
(``protocol.schemas.legacy_served.AIOKAFKA_MESSAGES``), wrapped to the same interface.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from io import BytesIO
from typing import Any, Protocol

from aiokafka.protocol.struct import Struct
from aiokafka.protocol.types import Array, Schema

from protocol.codec import DecodeError
from protocol.schemas import DEFINITIONS, SERVED, SERVED_MESSAGES

API_VERSIONS_KEY = 18


class BodyCodec(Protocol):
    """Reads a body into a dict and writes a dict into a body, for one message version."""

    def decode(self, data: bytes, offset: int = 0) -> dict[str, Any]: ...

    def encode(self, value: Mapping[str, Any]) -> bytes: ...

    def encode_error(self, code: int) -> bytes: ...


@dataclass(frozen=True, slots=True)
class MessageSpec:
    api_key: int
    version: int
    request: BodyCodec
    response: BodyCodec
    flexible: bool

    @property
    def response_header_v1(self) -> bool:
        # ApiVersions always answers with response header v0, so a client that does not
        # know our versions yet can still read the answer.
        return self.flexible and self.api_key != API_VERSIONS_KEY

    def decode_request(self, frame: bytes, offset: int) -> dict[str, Any]:
        return self.request.decode(frame, offset)

    def encode_response(self, data: Mapping[str, Any]) -> bytes:
        return self.response.encode(data)

    def encode_error(self, code: int) -> bytes:
        return self.response.encode_error(code)

    # the client side, for tests and benchmarks
    def encode_request(self, data: Mapping[str, Any]) -> bytes:
        return self.request.encode(data)

    def decode_response(self, data: bytes, offset: int = 0) -> dict[str, Any]:
        return self.response.decode(data, offset)


class _StructCodec:
    """An aiokafka struct class behind the ``BodyCodec`` interface (legacy definitions)."""

    __slots__ = ("cls",)

    def __init__(self, cls: type[Struct]) -> None:
        self.cls = cls

    def decode(self, data: bytes, offset: int = 0) -> dict[str, Any]:
        buf = BytesIO(data)
        buf.seek(offset)
        try:
            values = self.cls.SCHEMA.decode(buf)
        except Exception as exc:
            raise DecodeError(str(exc)) from None
        if buf.tell() != len(data):
            raise DecodeError(f"{len(data) - buf.tell()} unread bytes after the body")
        return to_dict(self.cls.SCHEMA, values)

    def encode(self, value: Mapping[str, Any]) -> bytes:
        schema = self.cls.SCHEMA
        return schema.encode(to_values(schema, value))

    def encode_error(self, code: int) -> bytes:
        schema = self.cls.SCHEMA
        return schema.encode(error_values(schema, code))


def _collect() -> dict[tuple[int, int], MessageSpec]:
    found: dict[tuple[int, int], MessageSpec] = {}
    for api_key, (lo, hi) in SERVED.items():
        ours = DEFINITIONS.get(api_key)
        for version in range(lo, hi + 1):
            if ours is not None:
                req, resp = ours
                rc = req.codec(version)
                found[(api_key, version)] = MessageSpec(
                    api_key, version, rc, resp.codec(version), rc.flexible
                )
            elif (api_key, version) in SERVED_MESSAGES:
                req_cls, resp_cls = SERVED_MESSAGES[(api_key, version)]
                flexible = bool(getattr(req_cls, "FLEXIBLE_VERSION", False))
                found[(api_key, version)] = MessageSpec(
                    api_key, version, _StructCodec(req_cls), _StructCodec(resp_cls), flexible
                )
    return found


MESSAGES: dict[tuple[int, int], MessageSpec] = _collect()


def lookup(api_key: int, version: int) -> MessageSpec | None:
    return MESSAGES.get((api_key, version))


def served_range(api_key: int) -> tuple[int, int] | None:
    """The contiguous range of versions from ``SERVED`` that have a definition here."""
    want = SERVED.get(api_key)
    if want is None:
        return None
    lo, hi = want
    have = [v for v in range(lo, hi + 1) if (api_key, v) in MESSAGES]
    if not have:
        return None
    start = have[0]
    end = start
    while end + 1 in have:
        end += 1
    return start, end


# --- legacy aiokafka structs <-> dicts ------------------------------------------------------

# Response fields a handler may leave out; every other field must be given.
_DEFAULTS: dict[str, Any] = {"throttle_time_ms": 0, "tags": {}, "tagged_fields": {}}


def to_values(schema: Schema, data: Mapping[str, Any]) -> tuple[Any, ...]:
    """Turn a (possibly richer) dict into the positional values ``schema`` encodes."""
    out = []
    for name, field in zip(schema.names, schema.fields, strict=True):
        if name in data:
            value = data[name]
        elif name in _DEFAULTS:
            value = _DEFAULTS[name]
        else:
            raise KeyError(f"response field {name!r} missing")
        if isinstance(field, Schema) and isinstance(value, Mapping):
            value = to_values(field, value)
        elif isinstance(field, Array) and isinstance(field.array_of, Schema) and value is not None:
            inner = field.array_of
            value = [to_values(inner, i) if isinstance(i, Mapping) else i for i in value]
        out.append(value)
    return tuple(out)


def to_dict(schema: Schema, values: tuple[Any, ...]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, field, value in zip(schema.names, schema.fields, values, strict=True):
        if isinstance(field, Schema):
            value = to_dict(field, value)
        elif isinstance(field, Array) and isinstance(field.array_of, Schema) and value is not None:
            inner = field.array_of
            value = [to_dict(inner, item) for item in value]
        out[name] = value
    return out


def error_values(schema: Schema, code: int) -> tuple[Any, ...]:
    """A response of ``schema`` carrying ``code`` in every error field and nothing else."""
    out: list[Any] = []
    for name, field in zip(schema.names, schema.fields, strict=True):
        if isinstance(field, Schema):
            out.append(error_values(field, code))
        elif isinstance(field, Array):
            out.append([])
        elif name == "error_code":
            out.append(code)
        elif name in ("tags", "tagged_fields"):
            out.append({})
        else:
            out.append(_zero(name, field))
    return tuple(out)


def _zero(name: str, field: Any) -> Any:
    from aiokafka.protocol import types as t

    if isinstance(field, t.String):
        return None if name == "error_message" else ""
    if field in (t.Bytes, t.CompactBytes):
        return None
    if field is t.Boolean:
        return False
    return 0


__all__ = ["MESSAGES", "BodyCodec", "MessageSpec", "lookup", "served_range"]
