"""The "kgroupd" source over kgroupd's TLS and SASL listeners.

``cluster.py``'s own Metadata connection over SASL_SSL (each mechanism) and over SSL with a
client certificate (mutual TLS, the broker requiring one), with the failures a wrong
password or a missing certificate must give; then one real Spark micro-batch query over
SASL_SSL with SCRAM-SHA-512, committing its progress to a group."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from kgroupd.broker.net.server import KafkaServer
from kgroupd.broker.testing import ThreadedBroker, running_server
from kgroupd.pipeline.source import SourceOptions
from kgroupd.pipeline.source.cluster import AuthenticationError, describe_any
from kgroupd.pipeline.source.security import Security
from tests.pipeline.kafka_helpers import committed, create_topic, end_offsets, produce
from tests.pipeline.spark_helpers import data_batches, run_available_now
from tests.support.certs import Certs, make_certs
from tests.support.kafka_wire import WireClient
from tests.support.kafka_wire import create_topic as wire_create_topic

USER, PASSWORD = "alice", "alice-secret"
JAAS = (
    "org.apache.kafka.common.security.{kind}.{module} required "
    f'username="{USER}" password="{{password}}";'
)


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    return make_certs(tmp_path_factory.mktemp("certs"))


@pytest.fixture(scope="module")
def users_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("users") / "users.txt"
    path.write_text(f"{USER}:{PASSWORD}\n")
    return path


@pytest.fixture(scope="module")
def keystore(certs: Certs) -> Path:
    """Kafka's PEM keystore: the client's private key and certificate in one file."""
    path = certs.ca.parent / "client-keystore.pem"
    path.write_bytes(certs.client_key.read_bytes() + certs.client_cert.read_bytes())
    return path


def address(server: KafkaServer, name: str) -> str:
    port = next(p for listener, p, _ in server.bound if listener.name == name)
    return f"127.0.0.1:{port}"


def jaas(mechanism: str, password: str = PASSWORD) -> str:
    kind, module = (
        ("plain", "PlainLoginModule") if mechanism == "PLAIN" else ("scram", "ScramLoginModule")
    )
    return JAAS.format(kind=kind, module=module, password=password)


def security(bootstrap: str, **options: str) -> Security:
    """The Security SourceOptions.parse makes of ``options`` (checked as on the driver)."""
    return SourceOptions.parse(
        {"kafka.bootstrap.servers": bootstrap, "subscribe": "t"} | options
    ).security


async def make_topic(server: KafkaServer, topic: str) -> None:
    port = next(p for listener, p, _ in server.bound if listener.name == "PLAINTEXT")
    async with await WireClient.connect(port) as wire:
        await wire_create_topic(wire, topic, 2)


# --- cluster.py: Metadata v12 over TLS and SASL -----------------------------------------------


@pytest_asyncio.fixture
async def sasl_server(certs: Certs, users_file: Path) -> AsyncIterator[KafkaServer]:
    async with running_server(
        log_level="warning",
        listeners="SASL_SSL://127.0.0.1:0,PLAINTEXT://127.0.0.1:0",
        ssl_certfile=str(certs.server_cert),
        ssl_keyfile=str(certs.server_key),
        sasl_users=str(users_file),
    ) as server:
        await make_topic(server, "facts")
        yield server


@pytest_asyncio.fixture
async def mtls_server(certs: Certs) -> AsyncIterator[KafkaServer]:
    async with running_server(
        log_level="warning",
        listeners="SSL://127.0.0.1:0,PLAINTEXT://127.0.0.1:0",
        ssl_certfile=str(certs.server_cert),
        ssl_keyfile=str(certs.server_key),
        ssl_cafile=str(certs.ca),
        ssl_client_auth="required",
    ) as server:
        await make_topic(server, "facts")
        yield server


def assert_facts(server: KafkaServer, facts: Any) -> None:
    assert facts.cluster_id == server.broker.cluster_id
    assert list(facts.topic_ids) == ["facts"]
    assert uuid.UUID(facts.topic_ids["facts"]).int != 0


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-512", "SCRAM-SHA-256", "PLAIN"])
async def test_cluster_metadata_over_sasl_ssl(
    sasl_server: KafkaServer, certs: Certs, mechanism: str
) -> None:
    bootstrap = address(sasl_server, "SASL_SSL")
    settings = {
        "kafka.security.protocol": "SASL_SSL",
        "kafka.sasl.mechanism": mechanism,
        "kafka.ssl.truststore.location": str(certs.ca),
        "kafka.ssl.truststore.type": "PEM",
    }
    secure = security(bootstrap, **settings, **{"kafka.sasl.jaas.config": jaas(mechanism)})
    assert_facts(sasl_server, await describe_any(bootstrap, ["facts"], 5.0, secure))

    # a wrong password: the broker's refusal, without the password
    wrong = security(
        bootstrap, **settings, **{"kafka.sasl.jaas.config": jaas(mechanism, "nope-123")}
    )
    with pytest.raises(ConnectionError, match="authentication of user 'alice' failed") as info:
        await describe_any(bootstrap, ["facts"], 5.0, wrong)
    assert "nope-123" not in str(info.value) and PASSWORD not in str(info.value)
    # and without SASL the listener answers nothing but the SASL APIs: Metadata fails
    tls_only = Security(protocol="SSL", truststore=str(certs.ca))
    with pytest.raises(ConnectionError, match="no bootstrap server answered Metadata"):
        await describe_any(bootstrap, ["facts"], 5.0, tls_only)


async def test_cluster_metadata_over_mutual_tls(
    mtls_server: KafkaServer, certs: Certs, keystore: Path
) -> None:
    bootstrap = address(mtls_server, "SSL")
    settings = {
        "kafka.security.protocol": "SSL",
        "kafka.ssl.truststore.location": str(certs.ca),
        "kafka.ssl.truststore.type": "PEM",
    }
    with_cert = security(
        bootstrap,
        **settings,
        **{"kafka.ssl.keystore.location": str(keystore), "kafka.ssl.keystore.type": "PEM"},
    )
    assert_facts(mtls_server, await describe_any(bootstrap, ["facts"], 5.0, with_cert))
    # the broker requires a certificate: without one the handshake fails
    with pytest.raises(ConnectionError, match="no bootstrap server answered Metadata"):
        await describe_any(bootstrap, ["facts"], 5.0, security(bootstrap, **settings))


def test_authentication_error_is_a_connection_error() -> None:
    # describe_any tries the next bootstrap address on it, and reports it
    assert issubclass(AuthenticationError, ConnectionError)


# --- a Spark micro-batch query over SASL_SSL ----------------------------------------------------


@pytest.fixture(scope="module")
def secure_broker(certs: Certs, users_file: Path) -> Iterator[ThreadedBroker]:
    with ThreadedBroker(
        listeners="SASL_SSL://127.0.0.1:0,PLAINTEXT://127.0.0.1:0",
        ssl_certfile=str(certs.server_cert),
        ssl_keyfile=str(certs.server_key),
        sasl_users=str(users_file),
    ) as broker:
        yield broker


@pytest.mark.spark
def test_spark_reads_over_sasl_ssl_scram_sha_512(
    spark: Any, secure_broker: ThreadedBroker, certs: Certs, tmp_path: Path
) -> None:
    plain = secure_broker.bootstraps["PLAINTEXT"]
    topic, group = "secure-events", "secure-job"
    asyncio.run(create_topic(plain, topic, 3))
    placed = asyncio.run(
        produce(plain, topic, [(i % 3, None, f"s-{i}".encode(), []) for i in range(300)])
    )
    options = {
        "kafka.bootstrap.servers": secure_broker.bootstraps["SASL_SSL"],
        "kafka.security.protocol": "SASL_SSL",
        "kafka.sasl.mechanism": "SCRAM-SHA-512",
        "kafka.sasl.jaas.config": jaas("SCRAM-SHA-512"),
        "kafka.ssl.truststore.location": str(certs.ca),
        "kafka.ssl.truststore.type": "PEM",
        "subscribe": topic,
        "startingOffsets": "earliest",
        "maxOffsetsPerTrigger": "120",
        "group.id": group,
    }
    got, progress = run_available_now(spark, options, tmp_path / "ck")
    assert got == {(topic, p, o) for p, o in placed}
    assert [p["numInputRows"] for p in data_batches(progress)] == [120, 120, 60]
    # cluster.py's Metadata (over SASL_SSL too) gave the offsets their cluster id
    last_end = json.loads(data_batches(progress)[-1]["sources"][0]["endOffset"])
    port = int(plain.rpartition(":")[2])
    ends = asyncio.run(end_offsets(plain, topic, 3))
    assert ends == {0: 100, 1: 100, 2: 100}
    assert secure_broker.server is not None
    assert last_end["kgroupd:meta"]["cluster_id"] == secure_broker.server.broker.cluster_id
    assert asyncio.run(committed(port, group, topic, 3)) == ends
