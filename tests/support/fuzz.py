"""Fuzzing requests: hypothesis strategies for the request of every API/version kgroupd
serves (from the handler registry and the message definitions), frame mutations, and the
check that no answer carries UNKNOWN_SERVER_ERROR. Used by
``tests/integration/test_fuzz_requests.py`` and ``bench/fuzz.py``."""

from __future__ import annotations

import struct
import warnings
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


# Record batches a client could send: valid ones with bytes flipped, cut or appended, their
# length and CRC-32C made right again (so the CRC check cannot be what refuses them). A
# compressed batch is broken either as it is or inside its records (decompressed, broken,
# compressed again), so the record walk behind the codec is reached too.
RECORDS_TOPIC = "fuzz-records"
BATCH_MUTATIONS = st.tuples(
    st.sampled_from([0, 1, 2, 3, 4]),  # the batch's codec
    st.booleans(),  # a compressed batch: break its records (True) or its compressed bytes
    st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 255)), min_size=1, max_size=4),
    st.integers(0, 8),  # bytes cut from the end
    st.binary(max_size=4),  # bytes appended
)
BatchMutation = tuple[int, bool, list[tuple[int, int]], int, bytes]


def base_batch(codec: int) -> bytes:
    """A valid batch: keys, a null key and value, headers, values long enough for two-byte
    varints."""
    from tests.support.kafka_wire import build_batch

    return build_batch(
        [
            (b"key-0", b"v" * 100, [("h", b"1")]),
            (None, b"value-1", []),
            (b"key-2", None, [("a", b"x"), ("b", None)]),
            (b"k" * 70, b"w" * 300, []),
        ],
        compression=codec,
    )


def _flipped(data: bytes, flips: list[tuple[int, int]], cut: int, tail: bytes) -> bytes:
    out = bytearray(data)
    for at, value in flips:
        out[at % len(out)] = value
    if cut:
        del out[max(0, len(out) - cut) :]
    return bytes(out + tail)


def mutated_batch(how: BatchMutation) -> bytes:
    from crc32c import crc32c

    from kgroupd.broker.log import codecs
    from kgroupd.protocol.records import HEADER_SIZE

    codec, inner, flips, cut, tail = how
    batch = base_batch(codec)
    head = bytearray(batch[:HEADER_SIZE])
    body = batch[HEADER_SIZE:]
    if codec and inner:
        records = codecs.decompress(codec, body, 1 << 20)
        body = codecs.compress(codec, _flipped(records, flips, cut, tail))
    elif codec:
        body = _flipped(body, flips, cut, tail)
    else:  # the header's fields too
        whole = _flipped(batch, [(at % len(batch), v) for at, v in flips], cut, tail)
        head, body = bytearray(whole[:HEADER_SIZE].ljust(HEADER_SIZE, b"\0")), whole[HEADER_SIZE:]
    head[16] = 2  # magic 2 (another is refused before the records are looked at)
    out = head + body
    struct.pack_into(">i", out, 8, len(out) - 12)
    struct.pack_into(">I", out, 17, crc32c(memoryview(out)[21:]))
    return bytes(out)


def produce_frame(version: int, batch: bytes, topic: str = RECORDS_TOPIC) -> bytes:
    body = {
        "transactional_id": None,
        "acks": 1,
        "timeout_ms": 5000,
        "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": batch}]}],
    }
    return encode_request(0, version, 7, body)


def readable(records: bytes) -> int:
    """How many records a fetched record set holds, read by two clients' parsers (aiokafka's,
    kafka-python's) as a consumer reads them: any that cannot be read raises."""
    from aiokafka.record.memory_records import MemoryRecords as AioRecords

    with warnings.catch_warnings():
        # kafka-python 3.0 reads its message schemas with the deprecated read_text
        warnings.simplefilter("ignore", DeprecationWarning)
        from kafka.record import MemoryRecords as KafkaPythonRecords

    counts = []
    for parser in (AioRecords, KafkaPythonRecords):
        count = 0
        batches = parser(records)
        while batches.has_next():
            batch = batches.next_batch()
            if batch is None:
                break
            offsets = [record.offset for record in batch]
            assert offsets == list(range(batch.base_offset, batch.base_offset + len(offsets)))
            count += len(offsets)
        counts.append(count)
    assert counts[0] == counts[1], counts
    return counts[0]
