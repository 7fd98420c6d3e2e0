"""Every API at every version kgroupd serves (taken from the handler registry, so new versions
are fuzzed as they arrive) gets hypothesis-generated requests that its schema allows: nulls
where a version allows them, empty and odd strings, extreme integers, random bytes for record
batches. No answer may carry UNKNOWN_SERVER_ERROR (an internal error is a bug: Kafka answers
these with INVALID_REQUEST, INVALID_GROUP_ID, ... or by closing the connection), and afterwards
a bystander producer and consumer group still work. Valid frames with bytes of their body
flipped, cut or appended are answered the same way, or their connection closed.

Driven in process: one ``KafkaConnection`` per example fed the frame directly (no sockets), so
thousands of requests take seconds. Requests a broker legitimately holds (a JoinGroup waiting
for its group, a long-polling Fetch) are not waited for. A longer run:
``KGROUPD_FUZZ_EXAMPLES=500 pytest tests/integration/test_fuzz_requests.py``.
"""

from __future__ import annotations

import asyncio
import os
import struct
from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from broker.config import TopicSpec
from broker.connection import KafkaConnection
from broker.handlers import HANDLERS
from broker.server import KafkaServer
from broker.testing import running_server
from protocol.codec import ArrayOf, F
from protocol.errors import ErrorCode
from protocol.messages import lookup
from tests.support.kafka_wire import decode_response, encode_request

EXAMPLES = int(os.environ.get("KGROUPD_FUZZ_EXAMPLES", "12"))
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


class Transport:
    def __init__(self, protocol: Any) -> None:
        self.protocol = protocol
        self.out = bytearray()
        self.closed = False

    def write(self, data: bytes) -> None:
        self.out += data

    def writelines(self, parts: Any) -> None:
        for p in parts:
            self.out += p

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return ("127.0.0.1", 1) if name == "peername" else default

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.protocol.connection_lost(None)

    abort = close

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        pass

    def get_write_buffer_size(self) -> int:
        return 0


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


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def server() -> AsyncIterator[KafkaServer]:
    topics = (TopicSpec("t", 2), TopicSpec("fuzz", 1), TopicSpec("bystander", 1))
    async with running_server(
        log_level="critical", create_topics=topics, initial_rebalance_delay_ms=0
    ) as srv:
        yield srv


async def ask(server: KafkaServer, frame: bytes) -> tuple[bytes, bool]:
    """Feed one frame to a fresh connection; what it wrote within a short while, and whether
    it closed the connection."""
    conn = KafkaConnection(server)
    transport = Transport(conn)
    conn.connection_made(transport)  # type: ignore[arg-type]
    conn.data_received(frame)
    for _ in range(20):  # held answers (a long poll, a join) come within their short waits
        if transport.out or transport.closed:
            break
        await asyncio.sleep(0.005)
    closed = transport.closed
    transport.close()
    return bytes(transport.out), closed


@pytest.mark.parametrize(("api_key", "version"), cases())
@pytest.mark.asyncio(loop_scope="module")
async def test_generated_requests_get_no_internal_error(
    server: KafkaServer, api_key: int, version: int
) -> None:
    spec = lookup(api_key, version)
    assert spec is not None
    bodies: list[dict[str, Any]] = []

    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(struct_strategy(spec.request.message.fields, version))
    def collect(body: dict[str, Any]) -> None:
        bodies.append(body)

    collect()
    for body in bodies:
        try:
            frame = encode_request(api_key, version, 7, body)
        except (ValueError, OverflowError, struct.error, UnicodeEncodeError):
            continue  # not encodable (e.g. a string too long for its length prefix)
        out, _closed = await ask(server, frame)
        check_answers(api_key, version, out, body)


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


@pytest.mark.parametrize(("api_key", "version"), cases())
@pytest.mark.asyncio(loop_scope="module")
async def test_mutated_frames_are_answered_or_closed(
    server: KafkaServer, api_key: int, version: int
) -> None:
    """A valid frame (every field at its default) with bytes of its body flipped, cut or
    appended: answered without an internal error, or the connection closed."""
    spec = lookup(api_key, version)
    assert spec is not None
    base = encode_request(api_key, version, 7, {})
    header = len(encode_request(api_key, version, 7, {})) - len(spec.encode_request({}))
    mutations: list[bytes] = []

    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(
        st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 255)), max_size=4),
        st.integers(0, 64),
        st.binary(max_size=8),
    )
    def collect(flips: list[tuple[int, int]], cut: int, tail: bytes) -> None:
        body = bytearray(base[header:])
        for at, value in flips:
            if body:
                body[at % len(body)] = value
        if cut and body:
            del body[len(body) - min(cut, len(body)) :]
        body += tail
        frame = base[4:header] + bytes(body)
        mutations.append(_SIZE.pack(len(frame)) + frame)

    collect()
    for frame in mutations:
        out, _closed = await ask(server, frame)
        check_answers(api_key, version, out, frame.hex())


@pytest.mark.asyncio(loop_scope="module")
async def test_a_bystander_still_works_after_the_fuzzing(server: KafkaServer) -> None:
    bootstrap = f"127.0.0.1:{server.port}"
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap)
    await producer.start()
    try:
        await producer.send_and_wait("bystander", b"still here", partition=0)
    finally:
        await producer.stop()
    consumer = AIOKafkaConsumer(
        "bystander", bootstrap_servers=bootstrap, group_id="bystander", auto_offset_reset="earliest"
    )
    await consumer.start()
    try:
        record = await asyncio.wait_for(consumer.getone(), 20)
        assert record.value == b"still here"
        await consumer.commit()
    finally:
        await consumer.stop()
