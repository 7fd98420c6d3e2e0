"""Every served version of every API defined with ``kgroupd.protocol.codec``, against kafka-python
3;
for an API defined but not served yet (``DEFINITIONS`` without ``SERVED``), every version its
definition covers.

kafka-python 3's JSON-driven classes are generated from Apache Kafka's own message JSON, an
independent codec. For every (api, request|response, version) served:

1. kafka-python builds a message with distinct, non-default values everywhere (non-empty
   arrays, negative numbers, multi-byte UTF-8, tagged fields set), once with every nullable
   field set and once with every nullable field null, and encodes it;
2. we decode those bytes, and every field value must equal kafka-python's, by name (our
   names are Kafka's, snake_cased: ``GroupId`` is ``group_id``);
3. we encode what we decoded, and the bytes must be identical (encode what we parse);
4. kafka-python decodes our bytes to the same message (decode what we send);
5. in flexible versions, an unknown tagged field round-trips through us, and kafka-python
   still reads what we wrote with it.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from kgroupd.protocol.codec import UNKNOWN_TAGS, Message
from kgroupd.protocol.schemas import DEFINITIONS, SERVED

from .kp_extra import extra_kp_classes
from .kp_reference import INT32_MIN, KP_CLASSES, ValueGen, kp_encode

ALL_KP = {**KP_CLASSES, **extra_kp_classes()}


def _cases() -> Iterator[Any]:
    for api_key, (req, resp) in sorted(DEFINITIONS.items()):
        lo, hi = SERVED.get(api_key, (req.valid.lo, req.valid.hi))
        for version in range(lo, hi + 1):
            for kind, msg in (("request", req), ("response", resp)):
                yield pytest.param(api_key, version, kind, msg, id=f"{msg.name}-v{version}")


CASES = list(_cases())
FLEXIBLE_CASES = [c for c in CASES if c.values[1] in c.values[3].flexible]


def kp_class(api_key: int, kind: str) -> Any:
    if api_key not in ALL_KP:
        pytest.skip(f"kafka-python has no class for api key {api_key}")
    request, response = ALL_KP[api_key]
    return request if kind == "request" else response


def build(kp_cls: Any, version: int, nulls: bool, api_key: int, kind: str) -> Any:
    flexible = bool(kp_cls.flexible_version_q(version))
    values = ValueGen(nulls=nulls).fields(kp_cls.fields, version, flexible)
    if api_key == 18 and kind == "response":
        values["error_code"] = 0  # a non-zero error makes kafka-python re-read it as v0
    return kp_cls(version=version, **values)


def kp_value(f: Any, value: Any, version: int) -> Any:
    """kafka-python's value of field ``f`` as our codec represents it."""
    if f.type_str == "bitfield":  # kafka-python's set of operations; ours the int32
        return kp_scalar("bitfield", value)
    if value is None:
        return None
    if f.is_struct_array():
        return [kp_struct(f.fields, item, version) for item in value]
    if f.is_struct():
        return kp_struct(f.fields, value, version)
    if f.is_array():
        return [kp_scalar(f.array_of.type_str, x) for x in value]
    return kp_scalar(f.type_str, value)


def kp_scalar(type_str: str, value: Any) -> Any:
    if type_str == "bitfield":
        if value is None:
            return INT32_MIN
        raw = sum(1 << b for b in value)
        return raw - 2**32 if raw >= 2**31 else raw
    if type_str in ("bytes", "records") and value is not None:
        return bytes(value)
    if type_str == "uuid" and value is not None and not isinstance(value, uuid.UUID):
        return uuid.UUID(str(value))
    return value


def kp_struct(fields: dict[str, Any], obj: Any, version: int) -> dict[str, Any]:
    out = {}
    for f in fields.values():
        if f.for_version_q(version):
            value = getattr(obj, f.name)
            if f.tagged_field_q(version) and (value is None or value == f.default):
                continue  # a tagged field at its default is not on the wire
            out[f.name] = kp_value(f, value, version)
    return out


# kafka-python renames a few fields of Kafka's JSON: (its name, Kafka's names), in every
# message but those listed after.
KP_RENAMES = {
    "authorized_operations": ("cluster_authorized_operations", "topic_authorized_operations")
}
KP_KEEPS_NAMES = {"DescribeTopicPartitionsResponse"}


def ours_present(msg: Message, value: dict[str, Any], version: int) -> dict[str, Any]:
    """Our decoded dict restricted to the fields that exist at ``version``, named as
    kafka-python names them; tagged fields at their default left out."""
    return _present(msg.fields, value, version, msg.name not in KP_KEEPS_NAMES)


def _present(
    fields: list[Any], value: dict[str, Any], version: int, rename: bool = True
) -> dict[str, Any]:
    out = {}
    for f in fields:
        if version not in f.vr:
            continue
        v = value[f.name]
        if f.tag is not None and v == f.default_for(version):
            continue  # a tagged field at its default is not on the wire
        if isinstance(f.type, list) and v is not None:
            v = (
                _present(f.type, v, version, rename)
                if f.struct
                else [_present(f.type, i, version, rename) for i in v]
            )
        name = f.name
        for kp_name, ours in KP_RENAMES.items():
            if rename and name in ours:
                name = kp_name
        out[name] = v
    return out


@pytest.mark.parametrize(("api_key", "version", "kind", "msg"), CASES)
@pytest.mark.parametrize("nulls", [False, True], ids=["values", "nulls"])
def test_round_trip_against_kafka_python(
    api_key: int, version: int, kind: str, msg: Message, nulls: bool
) -> None:
    kp_cls = kp_class(api_key, kind)
    reference = build(kp_cls, version, nulls, api_key, kind)
    kp_bytes = kp_encode(reference, version)
    codec = msg.codec(version)
    assert codec.flexible == bool(kp_cls.flexible_version_q(version))

    ours = codec.decode(kp_bytes)
    assert ours_present(msg, ours, version) == kp_struct(kp_cls.fields, reference, version)
    our_bytes = codec.encode(ours)
    assert our_bytes == kp_bytes

    back = kp_cls.decode(our_bytes, version=version, header=False, framed=False)
    assert kp_struct(kp_cls.fields, back, version) == kp_struct(kp_cls.fields, reference, version)


@pytest.mark.parametrize(("api_key", "version", "kind", "msg"), FLEXIBLE_CASES)
def test_unknown_tagged_fields_round_trip(
    api_key: int, version: int, kind: str, msg: Message
) -> None:
    codec = msg.codec(version)
    kp_cls = kp_class(api_key, kind)
    reference = build(kp_cls, version, False, api_key, kind)
    ours = codec.decode(kp_encode(reference, version))
    ours[UNKNOWN_TAGS] = {77: b"\x01\x02", 12345: b""}
    raw = codec.encode(ours)
    again = codec.decode(raw)
    assert again[UNKNOWN_TAGS] == {77: b"\x01\x02", 12345: b""}
    assert codec.encode(again) == raw
    back = kp_cls.decode(raw, version=version, header=False, framed=False)
    assert kp_struct(kp_cls.fields, back, version) == kp_struct(kp_cls.fields, reference, version)


@pytest.mark.parametrize(("api_key", "version", "kind", "msg"), CASES)
def test_truncated_bodies_are_refused(api_key: int, version: int, kind: str, msg: Message) -> None:
    """Every strict prefix of a valid body fails to decode with a clear error."""
    from kgroupd.protocol.codec import DecodeError

    kp_cls = kp_class(api_key, kind)
    raw = kp_encode(build(kp_cls, version, False, api_key, kind), version)
    codec = msg.codec(version)
    for cut in range(0, len(raw), max(1, len(raw) // 16)):
        with pytest.raises(DecodeError):
            codec.decode(raw[:cut])
