"""Cross-check every served (api_key, version) against an independent codec.

The classes under test are ``protocol.schemas.SERVED_MESSAGES``: aiokafka's
request/response structs, overridden/extended by ``EXTRA_MESSAGES``.  The
reference is kafka-python 3.x's JSON-driven codec (``kafka.protocol.{metadata,
consumer,producer,admin}``), which is generated from Apache Kafka's own
message definitions -- *not* ``kafka.protocol.old``, which shares aiokafka's
hand-written lineage and would check nothing.

For every (api, request|response, version) the test

1. builds a kafka-python message from Kafka's JSON schema with distinct,
   non-default values everywhere (non-empty arrays, negative numbers,
   multi-byte UTF-8 strings, binary bytes), once with every nullable field set
   and once with every nullable field null;
2. maps those values, by *position* on the wire, onto our struct's
   (differently named, aiokafka-style) schema;
3. checks ``our.encode() == kafka_python.encode()`` byte for byte, decodes our
   bytes with kafka-python and kafka-python's bytes with ours (consuming the
   whole buffer), and compares every field value.

A separate test pairs our field names with Kafka's field names position by
position, so two same-typed fields swapped by name (wire-invisible in step 3,
but a handler filling fields by keyword would send them swapped) also fail.

kafka-python's ``ApiMessage.encode``/``decode`` default to ``header=False``
(body only); we pass it explicitly and check header handling separately.
"""

from __future__ import annotations

import uuid
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from io import BytesIO
from typing import Any

import pytest
from aiokafka.protocol import types as aio_types
from aiokafka.protocol.api import RequestStruct, Response
from aiokafka.protocol.struct import Struct

from protocol.schemas import (
    AIOKAFKA_MESSAGES,
    ALL_SERVED,
    DEFINITIONS,
    EXTRA_MESSAGES,
    SERVED_MESSAGES,
)

with warnings.catch_warnings():
    # kafka-python 3.0.x loads its JSON with the deprecated
    # importlib.resources.read_text at class-creation (import) time, and the
    # project runs pytest with filterwarnings=error.
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka.protocol import admin as kp_admin
    from kafka.protocol import consumer as kp_consumer
    from kafka.protocol import metadata as kp_metadata
    from kafka.protocol import producer as kp_producer

INT32_MIN = -(2**31)

# api_key -> (kafka-python request class, kafka-python response class)
KP_CLASSES: dict[int, tuple[Any, Any]] = {
    0: (kp_producer.ProduceRequest, kp_producer.ProduceResponse),
    1: (kp_consumer.FetchRequest, kp_consumer.FetchResponse),
    2: (kp_consumer.ListOffsetsRequest, kp_consumer.ListOffsetsResponse),
    3: (kp_metadata.MetadataRequest, kp_metadata.MetadataResponse),
    8: (kp_consumer.OffsetCommitRequest, kp_consumer.OffsetCommitResponse),
    9: (kp_consumer.OffsetFetchRequest, kp_consumer.OffsetFetchResponse),
    10: (kp_metadata.FindCoordinatorRequest, kp_metadata.FindCoordinatorResponse),
    11: (kp_consumer.JoinGroupRequest, kp_consumer.JoinGroupResponse),
    12: (kp_consumer.HeartbeatRequest, kp_consumer.HeartbeatResponse),
    13: (kp_consumer.LeaveGroupRequest, kp_consumer.LeaveGroupResponse),
    14: (kp_consumer.SyncGroupRequest, kp_consumer.SyncGroupResponse),
    15: (kp_admin.DescribeGroupsRequest, kp_admin.DescribeGroupsResponse),
    16: (kp_admin.ListGroupsRequest, kp_admin.ListGroupsResponse),
    18: (kp_metadata.ApiVersionsRequest, kp_metadata.ApiVersionsResponse),
    19: (kp_admin.CreateTopicsRequest, kp_admin.CreateTopicsResponse),
    20: (kp_admin.DeleteTopicsRequest, kp_admin.DeleteTopicsResponse),
    22: (kp_producer.InitProducerIdRequest, kp_producer.InitProducerIdResponse),
    32: (kp_admin.DescribeConfigsRequest, kp_admin.DescribeConfigsResponse),
    37: (kp_admin.CreatePartitionsRequest, kp_admin.CreatePartitionsResponse),
    42: (kp_admin.DeleteGroupsRequest, kp_admin.DeleteGroupsResponse),
    47: (kp_consumer.OffsetDeleteRequest, kp_consumer.OffsetDeleteResponse),
}

# The only served flexible version (request header v2, compact body + tags).
FLEXIBLE: set[tuple[int, int]] = set()


@dataclass(frozen=True)
class Case:
    api_key: int
    version: int
    kind: str  # "request" | "response"

    @property
    def ours(self) -> type[RequestStruct] | type[Response]:
        request_cls, response_cls = SERVED_MESSAGES[(self.api_key, self.version)]
        return request_cls if self.kind == "request" else response_cls

    @property
    def kp_cls(self) -> Any:
        request_cls, response_cls = KP_CLASSES[self.api_key]
        return request_cls if self.kind == "request" else response_cls

    @property
    def flexible(self) -> bool:
        return bool(self.kp_cls.flexible_version_q(self.version))

    @property
    def id(self) -> str:
        return f"{self.kp_cls.name}-{self.kind}-v{self.version}"


def _served() -> Iterator[tuple[int, int]]:
    """The versions still served through aiokafka-style structs (ours are checked by
    test_definitions.py)."""
    for api_key, (lo, hi) in sorted(ALL_SERVED.items()):
        if api_key in DEFINITIONS:
            continue
        for version in range(lo, hi + 1):
            if (api_key, version) in SERVED_MESSAGES:
                yield api_key, version


CASES = [Case(k, v, kind) for k, v in _served() for kind in ("request", "response")]
CASE_PARAMS = [pytest.param(c, id=c.id) for c in CASES]


# --------------------------------------------------------------------------- kafka-python side


def _split_fields(fields: dict[str, Any], version: int, flexible: bool) -> tuple[list, list]:
    """(untagged fields in wire order, tagged fields) of a kafka-python struct."""
    present = [f for f in fields.values() if f.for_version_q(version)]
    tagged = [f for f in present if flexible and f.tagged_field_q(version)]
    return [f for f in present if f not in tagged], tagged


class ValueGen:
    """Distinct, non-default values for every field, driven by Kafka's JSON schema.

    Every scalar gets a fresh value (alternating sign), so two same-typed
    fields in the wrong order can never compare equal by accident.
    """

    def __init__(self, *, nulls: bool) -> None:
        self.nulls = nulls
        self.n = 0

    def scalar(self, type_str: str) -> Any:
        self.n += 1
        n = self.n
        sign = -1 if n % 2 else 1
        if type_str == "int8":
            return sign * (n % 100 + 1)
        if type_str == "int16":
            return sign * (300 + n)
        if type_str == "uint16":
            return 40000 + n
        if type_str == "int32":
            return sign * (70_000 + n)
        if type_str == "int64":
            return sign * (2**40 + n)
        if type_str == "bool":
            return n % 2 == 0
        if type_str == "string":
            return f"s{n}-ñ€😀"  # 1-, 2-, 3- and 4-byte UTF-8 sequences
        if type_str in ("bytes", "records"):
            return bytes([n % 256, 0, 255]) + "ü".encode()
        if type_str == "uuid":
            return uuid.UUID(int=(n * 0x9E3779B97F4A7C15) % 2**128 or 1)
        if type_str == "bitfield":  # kafka-python's view of int32 authorized-operations
            return {n % 30, 31}  # bit 31 set -> negative int32 on the wire
        raise AssertionError(f"no generator for JSON type {type_str!r}")

    def fields(self, fields: dict[str, Any], version: int, flexible: bool) -> dict[str, Any]:
        untagged, tagged = _split_fields(fields, version, flexible)
        values = {f.name: self.value(f, version, flexible) for f in untagged}
        if not self.nulls:  # tagged fields: only in the "values" variant
            values.update({f.name: self.value(f, version, flexible) for f in tagged})
        return values

    def value(self, f: Any, version: int, flexible: bool) -> Any:
        if self.nulls and f.nullable_for_version_q(version):
            return None
        if f.is_struct_array():
            return [self.struct(f, version, flexible) for _ in range(2)]
        if f.is_struct():
            return self.struct(f, version, flexible)
        if f.is_array():
            return [self.scalar(f.array_of.type_str) for _ in range(3)]
        if self.nulls and f.type_str == "bitfield":
            return None  # kafka-python's "not requested" == INT32_MIN on the wire
        return self.scalar(f.type_str)

    def struct(self, f: Any, version: int, flexible: bool) -> Any:
        return f.data_class(version=version, **self.fields(f.fields, version, flexible))


def build_kp(case: Case, *, nulls: bool) -> Any:
    gen = ValueGen(nulls=nulls)
    values = gen.fields(case.kp_cls.fields, case.version, case.flexible)
    if case.api_key == 18 and case.kind == "response":
        # kafka-python (like the Java client) re-reads an ApiVersions response
        # with a non-zero error_code as v0 (KIP-511 fallback); keep it 0.
        values["error_code"] = 0
    return case.kp_cls(version=case.version, **values)


def _kp_scalar(type_str: str, value: Any) -> Any:
    if type_str == "bitfield":
        if value is None:
            return INT32_MIN
        raw = sum(1 << b for b in value)
        return raw - 2**32 if raw >= 2**31 else raw
    if type_str in ("bytes", "records") and value is not None:
        return bytes(value)
    return value


def _item(tokens: list[Any]) -> Any:
    # An array element with a single wire field is that field (e.g. Kafka's
    # []MetadataRequestTopic{Name} vs aiokafka's Array(String)).
    return tokens[0] if len(tokens) == 1 else tuple(tokens)


def kp_canon(obj: Any, fields: dict[str, Any], version: int, flexible: bool) -> list[Any]:
    """Wire-order token list of a kafka-python message (names dropped)."""
    untagged, tagged = _split_fields(fields, version, flexible)
    out: list[Any] = []
    for f in untagged:
        value = getattr(obj, f.name)
        if f.is_struct_array():
            out.append(
                None
                if value is None
                else [_item(kp_canon(x, f.fields, version, flexible)) for x in value]
            )
        elif f.is_struct():  # inline struct: its fields are spliced into the parent
            out.extend([None] if value is None else kp_canon(value, f.fields, version, flexible))
        elif f.is_array():
            out.append(
                None if value is None else [_kp_scalar(f.array_of.type_str, x) for x in value]
            )
        else:
            out.append(_kp_scalar(f.type_str, value))
    if flexible:
        tags = {}
        for f in tagged:
            value = getattr(obj, f.name)
            if value != f.default:  # kafka-python (like Java) omits default-valued tags
                tags[f.tag] = bytes(f.encode(value, version=version, compact=True, tagged=None))
        out.append(tags)
    return out


# ------------------------------------------------------------------------------ our side


def _is_bytes_type(t: Any) -> bool:
    return isinstance(t, type) and issubclass(t, aio_types.Bytes | aio_types.CompactBytes)


def aio_canon(schema: aio_types.Schema, value: Any) -> list[Any]:
    """Wire-order token list of an aiokafka Struct / nested tuple (names dropped)."""
    out: list[Any] = []
    for i, (name, t) in enumerate(zip(schema.names, schema.fields, strict=True)):
        v = value.get_item(name) if isinstance(value, Struct) else value[i]
        if isinstance(t, aio_types.Schema):
            out.extend(aio_canon(t, v))
        elif isinstance(t, aio_types.Array):
            if v is None:
                out.append(None)
            elif isinstance(t.array_of, aio_types.Schema):
                out.append([_item(aio_canon(t.array_of, x)) for x in v])
            else:
                out.append(list(v))
        elif _is_bytes_type(t) and v is not None:
            out.append(bytes(v))
        else:
            out.append(v)
    return out


def _aio_build(schema: aio_types.Schema, tokens: list[Any], pos: int) -> tuple[tuple, int]:
    values = []
    for t in schema.fields:
        if isinstance(t, aio_types.Schema):
            value, pos = _aio_build(t, tokens, pos)
        else:
            assert pos < len(tokens), "our schema has more wire fields than Kafka's"
            value = tokens[pos]
            pos += 1
            if isinstance(t, aio_types.Array) and value is not None:
                if not isinstance(value, list):
                    raise AssertionError(f"array in our schema where Kafka has {value!r}")
                if isinstance(t.array_of, aio_types.Schema):
                    value = [_aio_item(t.array_of, x) for x in value]
        values.append(value)
    return tuple(values), pos


def _aio_item(schema: aio_types.Schema, item: Any) -> tuple:
    tokens = list(item) if isinstance(item, tuple) else [item]
    value, pos = _aio_build(schema, tokens, 0)
    assert pos == len(tokens), "our array element has fewer wire fields than Kafka's"
    return value


def build_ours(cls: type[Struct], tokens: list[Any]) -> Struct:
    values, pos = _aio_build(cls.SCHEMA, tokens, 0)
    assert pos == len(tokens), "our schema has fewer wire fields than Kafka's"
    return cls(*values)


def decode_ours(cls: type[Struct], data: bytes) -> Struct:
    buf = BytesIO(data)
    obj = cls.decode(buf)
    assert buf.tell() == len(data), f"{cls.__name__} left {len(data) - buf.tell()} bytes unread"
    return obj


def kp_encode(obj: Any, version: int) -> bytes:
    # Objects from kafka-python's (compiled) decode carry their version but an
    # unset _header slot, which encode(version=...) (or DeleteTopicsRequest's
    # encode override) reads: fill it, and rely on .version.
    assert obj.version == version
    if not hasattr(obj, "_header"):
        obj._header = None
    return bytes(obj.encode(header=False, framed=False))


def kp_decode(case: Case, data: bytes) -> Any:
    return case.kp_cls.decode(data, version=case.version, header=False, framed=False)


# ------------------------------------------------------------------------------------ checks


def crosscheck(case: Case, ours: type[Struct], *, nulls: bool) -> None:
    version, flexible = case.version, case.flexible
    reference = build_kp(case, nulls=nulls)
    expected = kp_canon(reference, case.kp_cls.fields, version, flexible)
    kp_bytes = kp_encode(reference, version)

    # ours -> kafka-python
    our_obj = build_ours(ours, expected)
    our_bytes = our_obj.encode()
    decoded_by_kp = kp_decode(case, our_bytes)
    assert kp_canon(decoded_by_kp, case.kp_cls.fields, version, flexible) == expected
    assert kp_encode(decoded_by_kp, version) == our_bytes, "kafka-python did not consume it all"

    # kafka-python -> ours
    decoded_by_us = decode_ours(ours, kp_bytes)
    assert aio_canon(ours.SCHEMA, decoded_by_us) == expected

    # and the strongest statement: identical bytes
    assert our_bytes == kp_bytes


@pytest.mark.parametrize("case", CASE_PARAMS)
@pytest.mark.parametrize("nulls", [False, True], ids=["values", "nulls"])
def test_wire_crosscheck(case: Case, nulls: bool) -> None:
    crosscheck(case, case.ours, nulls=nulls)


# ------------------------------------------------------------------------------ field names

# (aiokafka-style name, Kafka JSON snake_case name) pairs accepted as "the same
# field".  Anything else paired by wire position is reported: it means a field
# is misnamed, or two same-typed fields are swapped.
NAME_ALIASES: set[tuple[str, str]] = {
    ("api_versions", "api_keys"),
    ("assignment", "assignments"),
    ("cluster_authorized_operations", "authorized_operations"),
    ("config_documentation", "documentation"),
    ("config_entries", "configs"),
    ("config_key", "name"),
    ("config_name", "name"),
    ("config_names", "configuration_keys"),
    ("config_names", "name"),  # sic: aiokafka's DescribeConfigsResponse entry name
    ("config_source", "source"),
    ("config_synonyms", "synonyms"),
    ("config_value", "value"),
    ("consumer_group", "group_id"),
    ("consumer_group", "key"),
    ("consumer_group_generation_id", "generation_id_or_member_epoch"),
    ("consumer_id", "member_id"),
    ("coordinator_id", "node_id"),
    ("coordinator_key", "key"),
    ("coordinator_type", "key_type"),
    ("create_topic_requests", "topics"),
    ("group", "group_id"),
    ("group_assignment", "assignments"),
    ("group_protocol", "protocol_name"),
    ("group_protocols", "protocols"),
    ("highwater_offset", "high_watermark"),
    ("isr", "isr_nodes"),
    ("leader", "leader_id"),
    ("leader_epoch", "committed_leader_epoch"),
    ("leader_id", "leader"),
    ("max_bytes", "partition_max_bytes"),
    ("max_offsets", "max_num_offsets"),
    ("max_wait_time", "max_wait_ms"),
    ("member_assignment", "assignment"),
    ("member_metadata", "assignment"),  # aiokafka's SyncGroupRequest assignment bytes
    ("member_metadata", "metadata"),
    ("message_set", "records"),
    ("messages", "records"),
    ("metadata", "committed_metadata"),
    ("offset", "base_offset"),
    ("offset", "committed_offset"),
    ("offset", "fetch_offset"),
    ("offsets", "old_style_offsets"),
    ("partition", "index"),
    ("partition", "partition_index"),
    ("partition_id", "partition_index"),
    ("partitions", "partition_data"),
    ("partitions", "partition_indexes"),
    ("partitions", "partition_responses"),
    ("protocol", "protocol_data"),
    ("protocol_metadata", "metadata"),
    ("protocol_name", "name"),
    ("replica_assignment", "assignments"),
    ("replicas", "broker_ids"),
    ("replicas", "replica_nodes"),
    ("required_acks", "acks"),
    ("resources", "results"),
    ("state", "group_state"),
    ("timestamp", "commit_timestamp"),
    ("timestamp", "log_append_time_ms"),
    ("topic", "name"),
    ("topic_authorized_operations", "authorized_operations"),
    ("topic_error_codes", "responses"),
    ("topic_errors", "results"),
    ("topic_errors", "topics"),
    ("topic_partitions", "topics"),
    ("topics", "responses"),
    ("topics", "topic"),  # aiokafka's FetchResponse topic-name field
    ("topics", "topic_data"),
    ("topics", "topic_names"),
}


def _kp_leaves(fields: dict[str, Any], version: int, flexible: bool) -> list[tuple[str, Any]]:
    untagged, _ = _split_fields(fields, version, flexible)
    out: list[tuple[str, Any]] = []
    for f in untagged:
        if f.is_struct() and not f.is_struct_array():
            out.extend(_kp_leaves(f.fields, version, flexible))
        else:
            out.append((f.name, f))
    if flexible:
        out.append(("tags", None))
    return out


def _aio_leaves(schema: aio_types.Schema) -> list[tuple[str, Any]]:
    out: list[tuple[str, Any]] = []
    for name, t in zip(schema.names, schema.fields, strict=True):
        if isinstance(t, aio_types.Schema):
            out.extend(_aio_leaves(t))
        else:
            out.append((name, t))
    return out


def name_pairs(
    schema: aio_types.Schema, fields: dict[str, Any], version: int, flexible: bool, path: str
) -> Iterator[tuple[str, str, str]]:
    ours, theirs = _aio_leaves(schema), _kp_leaves(fields, version, flexible)
    assert len(ours) == len(theirs), f"{path}: {len(ours)} wire fields vs Kafka's {len(theirs)}"
    for (our_name, t), (kp_name, f) in zip(ours, theirs, strict=True):
        yield f"{path}.{our_name}", our_name, kp_name
        if (
            f is not None
            and f.is_struct_array()
            and isinstance(t, aio_types.Array)
            and isinstance(t.array_of, aio_types.Schema)
        ):
            yield from name_pairs(t.array_of, f.fields, version, flexible, f"{path}.{our_name}")


def _names_match(ours: str, theirs: str) -> bool:
    if ours == theirs or (ours, theirs) in NAME_ALIASES:
        return True
    return theirs == f"{ours}_ms" or ours == f"{theirs}_ms"  # session_timeout(_ms), ...


@pytest.mark.parametrize("case", CASE_PARAMS)
def test_field_names_match_kafka(case: Case) -> None:
    bad = [
        (path, ours, theirs)
        for path, ours, theirs in name_pairs(
            case.ours.SCHEMA, case.kp_cls.fields, case.version, case.flexible, case.id
        )
        if not _names_match(ours, theirs)
    ]
    assert not bad, f"fields paired by wire position have unrelated names: {bad}"


# ---------------------------------------------------------------------------------- registry


def test_all_served_table() -> None:
    assert set(_served()) <= set(SERVED_MESSAGES)
    assert set(EXTRA_MESSAGES) <= set(SERVED_MESSAGES)
    assert set(AIOKAFKA_MESSAGES) | set(EXTRA_MESSAGES) == set(SERVED_MESSAGES)
    for api_key, version in _served():
        assert 0 <= version <= KP_CLASSES[api_key][0].max_version


@pytest.mark.parametrize(("api_key", "version"), list(_served()))
def test_registry_entry_consistent(api_key: int, version: int) -> None:
    request_cls, response_cls = SERVED_MESSAGES[(api_key, version)]
    assert issubclass(request_cls, RequestStruct)
    assert issubclass(response_cls, Response)
    assert request_cls.API_KEY == response_cls.API_KEY == api_key
    assert request_cls.API_VERSION == response_cls.API_VERSION == version
    assert request_cls.RESPONSE_TYPE is response_cls
    expect_flexible = (api_key, version) in FLEXIBLE
    assert request_cls.FLEXIBLE_VERSION is expect_flexible
    kp_request, _ = KP_CLASSES[api_key]
    assert api_key == kp_request.API_KEY
    assert bool(kp_request.flexible_version_q(version)) == request_cls.FLEXIBLE_VERSION


# ------------------------------------------------------------------ the checker itself bites


def _mutant(base: type[Struct], schema: aio_types.Schema) -> type[Struct]:
    return type(f"Mutant{base.__name__}", (base,), {"SCHEMA": schema})


def _swap_first_same_typed(schema: aio_types.Schema) -> aio_types.Schema:
    fields = list(zip(schema.names, schema.fields, strict=True))
    for i in range(len(fields)):
        for j in range(i + 1, len(fields)):
            if fields[i][1] is fields[j][1] or repr(fields[i][1]) == repr(fields[j][1]):
                fields[i], fields[j] = fields[j], fields[i]
                return aio_types.Schema(*fields)
    raise AssertionError("no same-typed pair")


def test_checker_rejects_aiokafka_listoffsets_v4() -> None:
    """aiokafka's OffsetRequest_v4 declares current_leader_epoch as Int64."""
    from aiokafka.protocol.offset import OffsetRequest_v4

    case = Case(2, 4, "request")
    with pytest.raises((AssertionError, ValueError)):
        crosscheck(case, OffsetRequest_v4, nulls=False)


@pytest.mark.parametrize(
    ("api_key", "version", "kind"),
    [(3, 8, "response"), (11, 4, "request"), (8, 7, "request")],
)
def test_checker_rejects_mutants(api_key: int, version: int, kind: str) -> None:
    case = Case(api_key, version, kind)
    ours = case.ours
    names, fields = list(ours.SCHEMA.names), list(ours.SCHEMA.fields)
    # 1. a field dropped
    dropped = _mutant(ours, aio_types.Schema(*zip(names[:-1], fields[:-1], strict=True)))
    with pytest.raises((AssertionError, ValueError, IndexError, TypeError)):
        crosscheck(case, dropped, nulls=False)
    # 2. an int field widened / narrowed
    widths = {aio_types.Int16: aio_types.Int32, aio_types.Int32: aio_types.Int64}
    i = next(i for i, t in enumerate(fields) if t in widths)
    retyped = _mutant(
        ours,
        aio_types.Schema(
            *zip(names, [widths[t] if k == i else t for k, t in enumerate(fields)], strict=True)
        ),
    )
    with pytest.raises((AssertionError, ValueError)):
        crosscheck(case, retyped, nulls=False)


def test_names_check_rejects_swapped_same_typed_fields() -> None:
    case = Case(11, 4, "response")  # ..., leader_id, member_id, ... both strings
    swapped = _swap_first_same_typed(case.ours.SCHEMA)
    pairs = name_pairs(swapped, case.kp_cls.fields, case.version, case.flexible, case.id)
    assert not all(_names_match(ours, theirs) for _, ours, theirs in pairs)
