"""A decoder of ``__consumer_offsets`` records written from Kafka's own message definitions
(vendored under tests/data/kafka_coordinator_messages, see its README), independent of the
broker's encoder: the key is ``int16 type | key fields``, the value ``int16 version | value
fields`` at that version (null: a tombstone)."""

from __future__ import annotations

import json
import struct
import uuid
from pathlib import Path
from typing import Any

MESSAGES = Path(__file__).resolve().parent.parent / "data" / "kafka_coordinator_messages"


def _load(name: str) -> dict[str, Any]:
    text = (MESSAGES / f"{name}.json").read_text()
    text = "\n".join(line for line in text.splitlines() if not line.strip().startswith("//"))
    spec: dict[str, Any] = json.loads(text)
    return spec


def _in(versions: str | None, v: int) -> bool:
    if versions is None or versions == "none":
        return False
    if versions.endswith("+"):
        return v >= int(versions[:-1])
    lo, _, hi = versions.partition("-")
    return int(lo) <= v <= int(hi or lo)


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def take(self, n: int) -> bytes:
        out = self.data[self.pos : self.pos + n]
        if len(out) != n:
            raise ValueError("truncated")
        self.pos += n
        return out

    def unpack(self, fmt: str) -> Any:
        return struct.unpack(fmt, self.take(struct.calcsize(fmt)))[0]

    def uvarint(self) -> int:
        shift = result = 0
        while True:
            b = self.take(1)[0]
            result |= (b & 0x7F) << shift
            if not b & 0x80:
                return result
            shift += 7


_INTS = {"int8": ">b", "int16": ">h", "int32": ">i", "int64": ">q", "bool": ">?"}


class Schema:
    def __init__(self, spec: dict[str, Any]) -> None:
        self.spec = spec
        self.structs = {s["name"]: s for s in spec.get("commonStructs", [])}

    def decode(self, data: bytes, version: int) -> dict[str, Any]:
        r = _Reader(data)
        flexible = _in(self.spec.get("flexibleVersions"), version)
        out = self._struct(r, self.spec["fields"], version, flexible)
        if r.pos != len(data):
            raise ValueError(f"{len(data) - r.pos} bytes left over")
        return out

    def _struct(
        self, r: _Reader, fields: list[dict[str, Any]], v: int, flexible: bool
    ) -> dict[str, Any]:
        out: dict[str, Any] = {}
        tagged = {}
        for f in fields:
            if not _in(f["versions"], v):
                continue
            if flexible and _in(f.get("taggedVersions"), v):
                tagged[f["tag"]] = f
                out[f["name"]] = f.get("default")
                continue
            out[f["name"]] = self._value(r, f, f["type"], v, flexible)
        if flexible:
            for _ in range(r.uvarint()):
                tag, size = r.uvarint(), r.uvarint()
                body = r.take(size)
                if tag in tagged:
                    f = tagged[tag]
                    out[f["name"]] = self._value(_Reader(body), f, f["type"], v, flexible)
        return out

    def _value(self, r: _Reader, f: dict[str, Any], t: str, v: int, flexible: bool) -> Any:
        nullable = _in(f.get("nullableVersions"), v)
        if t in _INTS:
            return r.unpack(_INTS[t])
        if t == "uuid":
            return uuid.UUID(bytes=r.take(16))
        if t in ("string", "bytes"):
            n = r.uvarint() - 1 if flexible else r.unpack(">h" if t == "string" else ">i")
            if n < 0:
                assert nullable, f["name"]
                return None
            raw = r.take(n)
            return raw.decode() if t == "string" else raw
        if t.startswith("[]"):
            n = r.uvarint() - 1 if flexible else r.unpack(">i")
            if n < 0:
                assert nullable, f["name"]
                return None
            inner = t[2:]
            return [self._value(r, f, inner, v, flexible) for _ in range(n)]
        # a struct: inline fields, or a common struct
        fields = f.get("fields") or self.structs[t]["fields"]
        if nullable and flexible and r.unpack(">b") < 0:
            return None
        return self._struct(r, fields, v, flexible)


def _key_type(spec: dict[str, Any]) -> list[int]:
    if "apiKey" in spec:
        return [int(spec["apiKey"])]
    lo, _, hi = spec["validVersions"].partition("-")
    return list(range(int(lo), int(hi or lo) + 1))


NAMES = [
    "OffsetCommit",
    "GroupMetadata",
    "ConsumerGroupMetadata",
    "ConsumerGroupMemberMetadata",
    "ConsumerGroupTargetAssignmentMetadata",
    "ConsumerGroupTargetAssignmentMember",
    "ConsumerGroupCurrentMemberAssignment",
    "ConsumerGroupRegularExpression",
]
# key type -> (record name, key schema, value schema)
TYPES: dict[int, tuple[str, Schema, Schema]] = {}
for _name in NAMES:
    _key = _load(_name + "Key")
    for _t in _key_type(_key):
        TYPES[_t] = (_name, Schema(_key), Schema(_load(_name + "Value")))


def decode(key: bytes, value: bytes | None) -> tuple[str, dict[str, Any], dict[str, Any] | None]:
    """(record name, key fields, value fields or None for a tombstone); raises on bytes
    that do not follow Kafka's definitions exactly."""
    key_type = struct.unpack(">h", key[:2])[0]
    name, key_schema, value_schema = TYPES[key_type]
    fields = key_schema.decode(key[2:], key_type)
    if value is None:
        return name, fields, None
    version = struct.unpack(">h", value[:2])[0]
    if not _in(value_schema.spec["validVersions"], version):
        raise ValueError(f"{name} value version {version}")
    return name, fields, {"_version": version, **value_schema.decode(value[2:], version)}
