"""Real clients over kgroupd's TLS and SASL listeners (issue 15).

One broker per test with four listeners: SASL_SSL, SSL (client certificates requested and
verified against the test CA), SASL_PLAINTEXT and PLAINTEXT. Certificates are made at test
time (``tests.support.certs``). aiokafka, confluent-kafka, kafka-python and the Java client
each produce, consume in a group and commit over SASL_SSL with SCRAM-SHA-512; PLAIN and
SCRAM-SHA-256 (aiokafka), mutual TLS (aiokafka, Java) are covered too; a wrong password, an
untrusted certificate and a plaintext client on the TLS port fail fast with the client's own
error.
"""

from __future__ import annotations

import asyncio
import json
import time
import warnings
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.errors import KafkaConnectionError
from aiokafka.helpers import create_ssl_context

from kgroupd.broker.net.server import KafkaServer

with warnings.catch_warnings():
    # kafka-python 3.0 loads its JSON with a deprecated importlib call at import time
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka import KafkaConsumer, KafkaProducer
    from kafka import TopicPartition as KpTP
from kgroupd.broker.testing import running_server
from tests.conftest import require
from tests.support.certs import Certs, make_certs
from tests.support.java import JavaClient, java_available, prepare_java_client
from tests.support.kafka_wire import WireClient
from tests.support.kafka_wire import create_topic as wire_create_topic

USER, PASSWORD = "alice", "alice-secret"
RECORDS = 200
FAIL_FAST_S = 10.0  # a refused client gives up well before this; a hang would not


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    return make_certs(tmp_path_factory.mktemp("certs"))


@pytest.fixture(scope="module")
def users_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("users") / "users.txt"
    path.write_text(f"# kgroupd test users\n{USER}:{PASSWORD}\nbob:bob-secret\n")
    return path


@pytest_asyncio.fixture
async def server(certs: Certs, users_file: Path) -> AsyncIterator[KafkaServer]:
    async with running_server(
        log_level="warning",
        listeners=(
            "SASL_SSL://127.0.0.1:0,SSL://127.0.0.1:0,"
            "SASL_PLAINTEXT://127.0.0.1:0,PLAINTEXT://127.0.0.1:0"
        ),
        ssl_certfile=str(certs.server_cert),
        ssl_keyfile=str(certs.server_key),
        ssl_cafile=str(certs.ca),
        ssl_client_auth="requested",
        sasl_users=str(users_file),
        initial_rebalance_delay_ms=0,
    ) as srv:
        yield srv


def address(server: KafkaServer, name: str) -> str:
    port = next(p for listener, p, _ in server.bound if listener.name == name)
    return f"127.0.0.1:{port}"


def principals(server: KafkaServer) -> set[str]:
    return {getattr(c, "principal", "?") for c in server.connections}


def aio_security(certs: Certs, protocol: str, mechanism: str | None = None) -> dict[str, Any]:
    settings: dict[str, Any] = {"security_protocol": protocol}
    if "SSL" in protocol:
        settings["ssl_context"] = create_ssl_context(cafile=str(certs.ca))
    if mechanism is not None:
        settings |= {
            "sasl_mechanism": mechanism,
            "sasl_plain_username": USER,
            "sasl_plain_password": PASSWORD,
        }
    return settings


async def aio_roundtrip(
    bootstrap: str, topic: str, group: str, settings: dict[str, Any], server: KafkaServer
) -> tuple[int, int, set[str]]:
    """Produce RECORDS, consume them in a group and commit; (consumed, committed, the
    principals the broker saw while the clients were connected)."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, **settings)
    await producer.start()
    try:
        for i in range(RECORDS):
            await producer.send(topic, f"v{i}".encode(), partition=i % 2)
        await producer.flush()
        seen = principals(server)
    finally:
        await producer.stop()
    consumer = AIOKafkaConsumer(
        topic,
        bootstrap_servers=bootstrap,
        group_id=group,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        **settings,
    )
    await consumer.start()
    consumed = 0
    try:
        deadline = time.monotonic() + 20
        while consumed < RECORDS and time.monotonic() < deadline:
            batches = await consumer.getmany(timeout_ms=200)
            consumed += sum(len(b) for b in batches.values())
        await consumer.commit()
        committed = 0
        for p in range(2):
            committed += await consumer.committed(TopicPartition(topic, p)) or 0
    finally:
        await consumer.stop()
    return consumed, committed, seen


async def create_topic(server: KafkaServer, topic: str) -> None:
    """Two partitions, created on the PLAINTEXT listener."""
    port = next(p for listener, p, _ in server.bound if listener.name == "PLAINTEXT")
    async with await WireClient.connect(port) as wire:
        await wire_create_topic(wire, topic, 2)


async def test_aiokafka_sasl_ssl_scram_sha_512(server: KafkaServer, certs: Certs) -> None:
    await create_topic(server, "aio-secure")
    settings = aio_security(certs, "SASL_SSL", "SCRAM-SHA-512")
    consumed, committed, seen = await aio_roundtrip(
        address(server, "SASL_SSL"), "aio-secure", "aio-group", settings, server
    )
    assert (consumed, committed) == (RECORDS, RECORDS)
    assert f"User:{USER}" in seen


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256"])
async def test_aiokafka_each_mechanism(server: KafkaServer, certs: Certs, mechanism: str) -> None:
    await create_topic(server, "aio-mech")
    settings = aio_security(certs, "SASL_PLAINTEXT", mechanism)
    consumed, committed, seen = await aio_roundtrip(
        address(server, "SASL_PLAINTEXT"), "aio-mech", f"g-{mechanism}", settings, server
    )
    assert (consumed, committed) == (RECORDS, RECORDS)
    assert f"User:{USER}" in seen


async def test_aiokafka_mutual_tls_principal_is_the_certificate_subject(
    server: KafkaServer, certs: Certs
) -> None:
    await create_topic(server, "aio-mtls")
    context = create_ssl_context(
        cafile=str(certs.ca), certfile=str(certs.client_cert), keyfile=str(certs.client_key)
    )
    settings = {"security_protocol": "SSL", "ssl_context": context}
    consumed, committed, seen = await aio_roundtrip(
        address(server, "SSL"), "aio-mtls", "mtls-group", settings, server
    )
    assert (consumed, committed) == (RECORDS, RECORDS)
    assert "User:CN=client,O=example" in seen  # RFC 2253, most specific first, as Kafka


async def test_without_a_certificate_the_tls_principal_is_anonymous(
    server: KafkaServer, certs: Certs
) -> None:
    producer = AIOKafkaProducer(
        bootstrap_servers=address(server, "SSL"), **aio_security(certs, "SSL")
    )
    await producer.start()
    try:
        assert "User:ANONYMOUS" in principals(server)
    finally:
        await producer.stop()


async def _fails_fast(producer: AIOKafkaProducer) -> Exception:
    started = time.monotonic()
    try:
        with pytest.raises(Exception) as info:
            await asyncio.wait_for(producer.start(), FAIL_FAST_S * 2)
    finally:
        await producer.stop()
    assert not isinstance(info.value, asyncio.TimeoutError), "the client hung"
    assert time.monotonic() - started < FAIL_FAST_S
    return info.value


async def test_a_wrong_password_fails_fast_with_sasl_authentication_failed(
    server: KafkaServer, certs: Certs, caplog: pytest.LogCaptureFixture
) -> None:
    settings = aio_security(certs, "SASL_SSL", "SCRAM-SHA-512")
    settings["sasl_plain_password"] = "not-" + PASSWORD
    producer = AIOKafkaProducer(bootstrap_servers=address(server, "SASL_SSL"), **settings)
    error = await _fails_fast(producer)
    assert isinstance(error, KafkaConnectionError)
    # aiokafka logs the broker's answer and gives up bootstrapping
    assert any("SaslAuthenticationFailed" in r.getMessage() for r in caplog.records)


async def test_an_untrusted_certificate_fails_fast(server: KafkaServer, certs: Certs) -> None:
    context = create_ssl_context(
        cafile=str(certs.ca), certfile=str(certs.rogue_cert), keyfile=str(certs.rogue_key)
    )
    producer = AIOKafkaProducer(
        bootstrap_servers=address(server, "SSL"), security_protocol="SSL", ssl_context=context
    )
    await _fails_fast(producer)
    assert "User:CN=rogue,O=example" not in principals(server)


async def test_a_client_that_does_not_trust_the_broker_fails_fast(
    server: KafkaServer, tmp_path: Path
) -> None:
    other = make_certs(tmp_path / "other")
    producer = AIOKafkaProducer(
        bootstrap_servers=address(server, "SSL"),
        security_protocol="SSL",
        ssl_context=create_ssl_context(cafile=str(other.ca)),
    )
    await _fails_fast(producer)


async def test_a_plaintext_client_on_the_tls_port_fails_fast(server: KafkaServer) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=address(server, "SSL"))
    error = await _fails_fast(producer)
    assert isinstance(error, KafkaConnectionError)
    assert not server.connections  # the TLS handshake failed: no connection was made


async def test_client_auth_required_refuses_a_client_without_a_certificate(
    certs: Certs, users_file: Path
) -> None:
    async with running_server(
        log_level="warning",
        listeners="SSL://127.0.0.1:0",
        ssl_certfile=str(certs.server_cert),
        ssl_keyfile=str(certs.server_key),
        ssl_cafile=str(certs.ca),
        ssl_client_auth="required",
    ) as srv:
        bare = AIOKafkaProducer(
            bootstrap_servers=address(srv, "SSL"),
            security_protocol="SSL",
            ssl_context=create_ssl_context(cafile=str(certs.ca)),
        )
        await _fails_fast(bare)
        context = create_ssl_context(
            cafile=str(certs.ca), certfile=str(certs.client_cert), keyfile=str(certs.client_key)
        )
        ok = AIOKafkaProducer(
            bootstrap_servers=address(srv, "SSL"), security_protocol="SSL", ssl_context=context
        )
        await ok.start()
        try:
            await ok.send_and_wait("required-ok", b"x")
        finally:
            await ok.stop()


# --- blocking clients, each on a thread while the broker runs on the test's loop ----------


def _confluent_roundtrip(bootstrap: str, certs: Certs, topic: str) -> tuple[int, int]:
    from confluent_kafka import Consumer, Producer
    from confluent_kafka import TopicPartition as CTopicPartition

    security = {
        "bootstrap.servers": bootstrap,
        "security.protocol": "SASL_SSL",
        "ssl.ca.location": str(certs.ca),
        "sasl.mechanisms": "SCRAM-SHA-512",
        "sasl.username": USER,
        "sasl.password": PASSWORD,
    }
    producer = Producer(security)
    for i in range(RECORDS):
        producer.produce(topic, f"v{i}".encode(), partition=i % 2)
    assert producer.flush(20) == 0
    consumer = Consumer(
        {
            **security,
            "group.id": "confluent-group",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    consumer.subscribe([topic])
    consumed = 0
    deadline = time.monotonic() + 30
    try:
        while consumed < RECORDS and time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is not None and msg.error() is None:
                consumed += 1
        consumer.commit(asynchronous=False)
        offsets = consumer.committed([CTopicPartition(topic, p) for p in range(2)], timeout=10)
    finally:
        consumer.close()
    return consumed, sum(tp.offset for tp in offsets)


def _confluent_wrong_password(bootstrap: str, certs: Certs) -> tuple[list[Any], float]:
    """librdkafka reports the broker's refusal through error_cb as _AUTHENTICATION."""
    from confluent_kafka import Producer

    errors: list[Any] = []
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "security.protocol": "SASL_SSL",
            "ssl.ca.location": str(certs.ca),
            "sasl.mechanisms": "SCRAM-SHA-512",
            "sasl.username": USER,
            "sasl.password": "wrong",
            "error_cb": errors.append,
        }
    )
    started = time.monotonic()
    while not errors and time.monotonic() - started < FAIL_FAST_S:
        producer.poll(0.1)
    return errors, time.monotonic() - started


async def test_confluent_kafka_sasl_ssl_scram_sha_512(server: KafkaServer, certs: Certs) -> None:
    await create_topic(server, "confluent-secure")
    bootstrap = address(server, "SASL_SSL")
    consumed, committed = await asyncio.to_thread(
        _confluent_roundtrip, bootstrap, certs, "confluent-secure"
    )
    assert (consumed, committed) == (RECORDS, RECORDS)
    from confluent_kafka import KafkaError

    errors, seconds = await asyncio.to_thread(_confluent_wrong_password, bootstrap, certs)
    assert errors and errors[0].code() == KafkaError._AUTHENTICATION, errors
    assert "Authentication failed" in errors[0].str() and seconds < FAIL_FAST_S


def _kafka_python_roundtrip(bootstrap: str, certs: Certs, topic: str) -> tuple[int, int]:
    security: dict[str, Any] = {
        "bootstrap_servers": bootstrap,
        "security_protocol": "SASL_SSL",
        "ssl_cafile": str(certs.ca),
        "sasl_mechanism": "SCRAM-SHA-512",
        "sasl_plain_username": USER,
        "sasl_plain_password": PASSWORD,
    }
    producer = KafkaProducer(**security)
    for i in range(RECORDS):
        producer.send(topic, f"v{i}".encode(), partition=i % 2)
    producer.flush(20)
    producer.close()
    consumer = KafkaConsumer(
        topic,
        group_id="kafka-python-group",
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        **security,
    )
    consumed = 0
    deadline = time.monotonic() + 30
    try:
        while consumed < RECORDS and time.monotonic() < deadline:
            batches = consumer.poll(timeout_ms=200)
            consumed += sum(len(b) for b in batches.values())
        consumer.commit()
        committed = sum(consumer.committed(KpTP(topic, p)) or 0 for p in range(2))
    finally:
        consumer.close()
    return consumed, committed


async def test_kafka_python_sasl_ssl_scram_sha_512(server: KafkaServer, certs: Certs) -> None:
    await create_topic(server, "kp-secure")
    consumed, committed = await asyncio.to_thread(
        _kafka_python_roundtrip, address(server, "SASL_SSL"), certs, "kp-secure"
    )
    assert (consumed, committed) == (RECORDS, RECORDS)


# --- the Java client: every case in one JVM ------------------------------------------------


@pytest.fixture(scope="module")
def java_client() -> JavaClient:
    require(java_available(), "java and javac (JDK 17) are not on PATH; the Java client needs them")
    return prepare_java_client()


@pytest.mark.java
async def test_java_client_over_sasl_ssl_and_mutual_tls(
    server: KafkaServer, certs: Certs, java_client: JavaClient, tmp_path: Path
) -> None:
    # Kafka's PEM keystore: the private key and its certificate in one file (KIP-651)
    client_pem = tmp_path / "client-keystore.pem"
    client_pem.write_bytes(certs.client_key.read_bytes() + certs.client_cert.read_bytes())
    rogue_pem = tmp_path / "rogue-keystore.pem"
    rogue_pem.write_bytes(certs.rogue_key.read_bytes() + certs.rogue_cert.read_bytes())
    command = java_client.command(
        "KgroupdSecurityCheck",
        address(server, "SASL_SSL"),
        address(server, "SSL"),
        str(certs.ca),
        USER,
        PASSWORD,
        str(client_pem),
        str(rogue_pem),
        properties={"kgroupd.log.level": "ERROR"},
    )
    proc = await asyncio.create_subprocess_exec(
        *command, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    out, err = await asyncio.wait_for(proc.communicate(), 120)
    where = f"\n--- stdout ---\n{out.decode()[-4000:]}\n--- stderr ---\n{err.decode()[-8000:]}"
    lines = [ln for ln in out.decode().splitlines() if ln.startswith("KGROUPD_SECURITY ")]
    assert lines, f"no summary line{where}"
    s = json.loads(lines[-1].split(" ", 1)[1])
    assert s["ok"], f"{s.get('exception')}{where}"
    assert (s["consumed"], s["committed"]) == (300, 300), where
    assert s["users"] == ["alice", "bob", "carol"] and s["carol_iterations"] == 8192, where
    assert s["carol_produced"] and s["mtls_produced"], where
    assert s["wrong_password"] == "SaslAuthenticationException", where
    assert s["untrusted_certificate"] == "SslAuthenticationException", where
