"""The admin tools' --command-config against secured kgroupd listeners: SASL_SSL with
SCRAM-SHA-512 (and PLAIN), mutual TLS with a PEM keystore, a wrong password (exit 1,
SASL_AUTHENTICATION_FAILED), and the properties format itself."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio

from kgroupd.broker.cli.properties import UsageError, parse_properties, settings_from
from kgroupd.broker.net.server import KafkaServer
from kgroupd.broker.testing import running_server
from tests.support.certs import Certs, make_certs

USER, PASSWORD = "alice", "alice-secret"
SCRAM = "org.apache.kafka.common.security.scram.ScramLoginModule"


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    return make_certs(tmp_path_factory.mktemp("certs"))


@pytest_asyncio.fixture
async def server(certs: Certs, tmp_path: Path) -> AsyncIterator[KafkaServer]:
    users = tmp_path / "users.txt"
    users.write_text(f"{USER}:{PASSWORD}\n")
    async with running_server(
        log_level="warning",
        listeners="SASL_SSL://127.0.0.1:0,SSL://127.0.0.1:0",
        ssl_certfile=str(certs.server_cert),
        ssl_keyfile=str(certs.server_key),
        ssl_cafile=str(certs.ca),
        ssl_client_auth="required",
        sasl_users=str(users),
    ) as srv:
        yield srv


def address(server: KafkaServer, name: str) -> str:
    port = next(p for listener, p, _ in server.bound if listener.name == name)
    return f"127.0.0.1:{port}"


async def run_cli(*argv: str) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "kgroupd.broker",
        *argv,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=os.environ.copy(),
    )
    out, err = await asyncio.wait_for(proc.communicate(), 30)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


def sasl_config(path: Path, certs: Certs, mechanism: str, password: str) -> Path:
    module = (
        SCRAM
        if mechanism.startswith("SCRAM")
        else SCRAM.replace("scram.ScramLoginModule", "plain.PlainLoginModule")
    )
    path.write_text(
        "# as kafka-consumer-groups --command-config reads it\n"
        "security.protocol=SASL_SSL\n"
        f"sasl.mechanism={mechanism}\n"
        f"sasl.jaas.config={module} required \\\n"
        f'    username="{USER}" password="{password}";\n'
        "ssl.truststore.type=PEM\n"
        f"ssl.truststore.location={certs.ca}\n"
        # the SASL_SSL listener also asks for a client certificate (client auth required)
        "ssl.keystore.type=PEM\n"
        f"ssl.keystore.location={keystore(certs)}\n"
    )
    return path


def keystore(certs: Certs) -> Path:
    """A PEM keystore as Kafka reads one: the private key and the certificate, one file."""
    path = certs.ca.parent / "client-keystore.pem"
    path.write_bytes(certs.client_key.read_bytes() + certs.client_cert.read_bytes())
    return path


async def test_sasl_ssl_scram_sha_512_and_a_wrong_password(
    server: KafkaServer, certs: Certs, tmp_path: Path
) -> None:
    bootstrap = address(server, "SASL_SSL")
    good = sasl_config(tmp_path / "good.properties", certs, "SCRAM-SHA-512", PASSWORD)
    common = ("--bootstrap-server", bootstrap, "--command-config", str(good))
    code, out, err = await run_cli("topics", "create", "secure", "--partitions", "2", *common)
    assert code == 0, err
    code, out, err = await run_cli("topics", "list", *common, "--output", "json")
    assert code == 0 and json.loads(out) == ["secure"], err
    code, out, err = await run_cli("groups", "list", *common, "--output", "json")
    assert code == 0 and json.loads(out) == [], err

    bad = sasl_config(tmp_path / "bad.properties", certs, "SCRAM-SHA-512", "wrong")
    code, out, err = await run_cli(
        "topics", "list", "--bootstrap-server", bootstrap, "--command-config", str(bad)
    )
    assert code == 1, err
    assert "SASL_AUTHENTICATION_FAILED" in err and out == ""


async def test_plain_and_mutual_tls(server: KafkaServer, certs: Certs, tmp_path: Path) -> None:
    plain = sasl_config(tmp_path / "plain.properties", certs, "PLAIN", PASSWORD)
    code, out, err = await run_cli(
        "topics",
        "list",
        "--bootstrap-server",
        address(server, "SASL_SSL"),
        "--command-config",
        str(plain),
    )
    assert (code, out) == (0, ""), err  # no topics yet
    mtls = tmp_path / "mtls.properties"
    mtls.write_text(
        "security.protocol=SSL\nssl.truststore.type=PEM\n"
        f"ssl.truststore.location={certs.ca}\n"
        f"ssl.keystore.type=PEM\nssl.keystore.location={keystore(certs)}\n"
    )
    ssl_bootstrap = address(server, "SSL")
    code, _out, err = await run_cli(
        "topics",
        "create",
        "mtls",
        "--bootstrap-server",
        ssl_bootstrap,
        "--command-config",
        str(mtls),
    )
    assert code == 0, err
    # without the keystore the broker (client auth required) refuses the handshake: exit 1
    no_cert = tmp_path / "nocert.properties"
    no_cert.write_text(
        f"security.protocol=SSL\nssl.truststore.type=PEM\nssl.truststore.location={certs.ca}\n"
    )
    code, _, err = await run_cli(
        "topics", "list", "--bootstrap-server", ssl_bootstrap, "--command-config", str(no_cert)
    )
    assert code == 1 and "Error:" in err


def test_properties_format() -> None:
    props = parse_properties(
        "# comment\n! also a comment\n"
        "security.protocol = SASL_SSL\n"
        "sasl.mechanism:SCRAM-SHA-256\n"
        f"sasl.jaas.config={SCRAM} required \\\n"
        '   username="a\\\\b" \\\n   password="p=w;d";\n'
        "ssl.endpoint.identification.algorithm=\n"
    )
    assert props["security.protocol"] == "SASL_SSL"
    assert props["sasl.mechanism"] == "SCRAM-SHA-256"
    assert props["ssl.endpoint.identification.algorithm"] == ""
    settings = settings_from(props)
    assert (settings.sasl_mechanism, settings.username, settings.password) == (
        "SCRAM-SHA-256",
        "a\\b",
        "p=w;d",
    )
    assert settings.check_hostname is False and settings.tls and settings.sasl


@pytest.mark.parametrize(
    ("props", "words"),
    [
        ({"sasl.kerberos.service.name": "kafka"}, "sasl.kerberos.service.name"),
        ({"security.protocol": "SSLv3"}, "security.protocol"),
        (
            {
                "security.protocol": "SASL_SSL",
                "sasl.mechanism": "GSSAPI",
                "sasl.jaas.config": f'{SCRAM} required username="a" password="b";',
            },
            "GSSAPI",
        ),
        ({"security.protocol": "SSL", "ssl.truststore.type": "JKS"}, "only PEM"),
        ({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN"}, "sasl.jaas.config"),
        (
            {
                "security.protocol": "SASL_PLAINTEXT",
                "sasl.mechanism": "PLAIN",
                "sasl.jaas.config": f'{SCRAM} required username="a" password="b";',
            },
            "cannot do PLAIN",
        ),
    ],
)
def test_unsupported_settings_are_refused(props: dict[str, str], words: str) -> None:
    with pytest.raises(UsageError, match=words):
        settings_from(props)
