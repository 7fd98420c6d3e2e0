"""The message registry: (api_key, version) -> request and response structs.

Exactly the versions the broker serves (``protocol.schemas.SERVED_MESSAGES``): aiokafka's
structs where aiokafka has them right, ours for the versions it lacks or gets wrong.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from io import BytesIO
from typing import Any

from aiokafka.protocol.api import RequestStruct, Response
from aiokafka.protocol.struct import Struct
from aiokafka.protocol.types import Array, Schema

from protocol.schemas import SERVED_MESSAGES

API_VERSIONS_KEY = 18


@dataclass(frozen=True, slots=True)
class MessageSpec:
    api_key: int
    version: int
    request: type[Struct]
    response: type[Struct]
    flexible: bool

    @property
    def response_header_v1(self) -> bool:
        # ApiVersions always answers with response header v0, so a client that does not
        # know our versions yet can still read the answer.
        return self.flexible and self.api_key != API_VERSIONS_KEY

    def decode_request(self, frame: bytes, offset: int) -> dict[str, Any]:
        buf = BytesIO(frame)
        buf.seek(offset)
        values = self.request.SCHEMA.decode(buf)
        if buf.tell() != len(frame):
            raise ValueError(f"{len(frame) - buf.tell()} unread bytes after the request body")
        return to_dict(self.request.SCHEMA, values)

    def encode_response(self, data: Mapping[str, Any]) -> bytes:
        schema = self.response.SCHEMA
        return schema.encode(to_values(schema, data))


def _collect() -> dict[tuple[int, int], MessageSpec]:
    found: dict[tuple[int, int], MessageSpec] = {}
    for (api_key, version), (req, resp) in SERVED_MESSAGES.items():
        flexible = bool(getattr(req, "FLEXIBLE_VERSION", False))
        found[(api_key, version)] = MessageSpec(api_key, version, req, resp, flexible)
    return found


MESSAGES: dict[tuple[int, int], MessageSpec] = _collect()


def lookup(api_key: int, version: int) -> MessageSpec | None:
    return MESSAGES.get((api_key, version))


# Response fields a handler may leave out; every other field must be given.
_DEFAULTS: dict[str, Any] = {"throttle_time_ms": 0, "tags": {}, "tagged_fields": {}}


def to_values(schema: Schema, data: Mapping[str, Any]) -> tuple[Any, ...]:
    """Turn a (possibly richer) dict into the positional values ``schema`` encodes.

    Handlers build one dict shape for every version; fields a version lacks are ignored.
    """
    out = []
    for name, field in zip(schema.names, schema.fields, strict=True):
        if name in data:
            value = data[name]
        elif name in _DEFAULTS:
            value = _DEFAULTS[name]
        else:
            raise KeyError(f"response field {name!r} missing")
        if isinstance(field, Schema):
            value = to_values(field, value)
        elif isinstance(field, Array) and isinstance(field.array_of, Schema) and value is not None:
            inner = field.array_of
            value = [to_values(inner, item) for item in value]
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


__all__ = ["MESSAGES", "MessageSpec", "RequestStruct", "Response", "lookup"]
