"""Fuzzing requests: hypothesis strategies for the request of every API/version kgroupd
serves (from the handler registry and the message definitions), frame mutations, and the
check that no answer carries UNKNOWN_SERVER_ERROR. Used by
``tests/integration/test_fuzz_requests.py`` and ``bench/fuzz.py``."""

from __future__ import annotations

import struct
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kgroupd.broker.handlers import HANDLERS
from kgroupd.protocol.codec import ArrayOf, F
from kgroupd.protocol.errors import ErrorCode
from kgroupd.protocol.messages import lookup
from tests.support.kafka_wire import decode_response, encode_request

UNKNOWN_SERVER_ERROR = int(ErrorCode.UNKNOWN_SERVER_ERROR)
_SIZE = struct.Struct(">i")

# Values that make a request wait (legitimately) are kept small, so examples stay quick.
SHORT = st.integers(-1, 20)
BOUNDED_FIELDS = {
    "max_wait_ms": SHORT,
    "timeout_ms": SHORT,
    "rebalance_timeout_ms": SHORT,
    "session_timeout_ms": st.integers(-1, 10_000),
    "transaction_timeout_ms": st.integers(-1, 100_000),
}
NAMES = st.sampled_from(["", "t", "fuzz", "__consumer_offsets", "a" * 250, "bad name!", "é"])
PRIMITIVES: dict[str, st.SearchStrategy[Any]] = {
    "int8": st.integers(-(2**7), 2**7 - 1),
    "int16": st.integers(-(2**15), 2**15 - 1),
    "uint16": st.integers(0, 2**16 - 1),
    "int32": st.one_of(st.integers(-3, 3), st.sampled_from([-(2**31), 2**31 - 1, 10_001])),
    "int64": st.one_of(st.integers(-3, 3), st.sampled_from([-(2**63), 2**63 - 1])),
    "float64": st.floats(allow_nan=False, allow_infinity=False),
    "bool": st.booleans(),
    "uuid": st.uuids(),
    "string": st.one_of(NAMES, st.text(max_size=12)),
    "bytes": st.binary(max_size=40),
    "records": st.one_of(st.just(b""), st.binary(max_size=80)),
}


def field_strategy(f: F, version: int) -> st.SearchStrategy[Any]:
    t = f.type
    if f.name in BOUNDED_FIELDS:
        inner = BOUNDED_FIELDS[f.name]
    elif isinstance(t, list):
        struct_ = struct_strategy(t, version)
        inner = struct_ if f.struct else st.lists(struct_, max_size=3)
    elif isinstance(t, ArrayOf):
        inner = st.lists(PRIMITIVES[t.item.name], max_size=3)
    else:
        inner = PRIMITIVES[t.name]
    return st.one_of(st.none(), inner) if version in f.nr else inner


def struct_strategy(fields: list[F], version: int) -> st.SearchStrategy[dict[str, Any]]:
    return st.fixed_dictionaries(
        {f.name: field_strategy(f, version) for f in fields if version in f.vr}
    )


def cases() -> list[tuple[int, int]]:
    return [
        (e.api_key, v)
        for e in sorted(HANDLERS.values(), key=lambda e: e.api_key)
        for v in range(e.min_version, e.max_version + 1)
        if lookup(e.api_key, v) is not None
    ]


def internal_errors(value: Any, path: str = "") -> list[str]:
    """Every place in a decoded answer that carries UNKNOWN_SERVER_ERROR."""
    found = []
    if isinstance(value, dict):
        for k, v in value.items():
            if k.endswith("error_code") and v == UNKNOWN_SERVER_ERROR:
                found.append(f"{path}.{k}")
            found += internal_errors(v, f"{path}.{k}")
    elif isinstance(value, list):
        for i, v in enumerate(value):
            found += internal_errors(v, f"{path}[{i}]")
    return found


def check_answers(api_key: int, version: int, out: bytes, what: object) -> None:
    pos = 0
    while pos + 4 <= len(out):
        (size,) = _SIZE.unpack_from(out, pos)
        payload = out[pos + 4 : pos + 4 + size]
        pos += 4 + size
        if api_key == 18 and payload[4:6] == b"\x00\x23":  # ApiVersions' v0 fallback
            continue
        _corr, answer = decode_response(api_key, version, payload)
        bad = internal_errors(answer)
        assert not bad, f"api {api_key} v{version}: {bad} for {what!r}: {answer!r}"


def mutate(base: bytes, header: int, flips: list[tuple[int, int]], cut: int, tail: bytes) -> bytes:
    """``base`` (a whole frame whose request header takes ``header`` bytes with its size
    prefix) with body bytes flipped, its end cut and ``tail`` appended, framed again."""
    body = bytearray(base[header:])
    for at, value in flips:
        if body:
            body[at % len(body)] = value
    if cut and body:
        del body[len(body) - min(cut, len(body)) :]
    body += tail
    frame = base[4:header] + bytes(body)
    return _SIZE.pack(len(frame)) + frame


MUTATIONS = st.tuples(
    st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 255)), max_size=4),
    st.integers(0, 64),
    st.binary(max_size=8),
)


def default_frame(api_key: int, version: int) -> tuple[bytes, int]:
    """A valid frame with every field at its default, and its header's length."""
    spec = lookup(api_key, version)
    assert spec is not None
    base = encode_request(api_key, version, 7, {})
    return base, len(base) - len(spec.encode_request({}))


def generated_frames(api_key: int, version: int, examples: int) -> list[tuple[bytes, Any]]:
    """Up to ``examples`` hypothesis-generated requests of the API/version, framed, each
    with the body it encodes (bodies that cannot be encoded, e.g. a string too long for
    its length prefix, are left out)."""
    spec = lookup(api_key, version)
    assert spec is not None
    bodies: list[dict[str, Any]] = []

    @settings(
        max_examples=examples,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(struct_strategy(spec.request.message.fields, version))
    def collect(body: dict[str, Any]) -> None:
        bodies.append(body)

    collect()
    frames = []
    for body in bodies:
        try:
            frames.append((encode_request(api_key, version, 7, body), body))
        except (ValueError, OverflowError, struct.error, UnicodeEncodeError):
            continue
    return frames
