"""SASL as Kafka's SaslServerAuthenticator runs it, request by request on real sockets, and the
SCRAM credential admin APIs (issue 15).

- Before authentication only ApiVersions and the SASL requests are served; anything else
  closes the connection. SaslHandshake on a listener without SASL is ILLEGAL_SASL_STATE.
- SaslHandshake v0 is followed by raw, unframed tokens; v1 by SaslAuthenticate.
- A refused mechanism or a failed exchange is answered, then the connection closes.
- ``--connections-max-reauth-ms`` (KIP-368): the session lifetime is announced, the client
  re-authenticates on the connection as the same user, and a request after the session ends
  closes the connection.
- DescribeUserScramCredentials / AlterUserScramCredentials with Kafka's per-user errors; users
  stored under ``--data-dir`` survive a restart, and ``--sasl-users`` wins over them.
- Garbage in the SASL exchange and the TLS handshake, fuzzed and bounded, never authenticates
  and never disturbs another client.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import os
import random
import ssl
import struct
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
import scramp
from aiokafka import AIOKafkaProducer

from kgroupd.broker.net.server import KafkaServer
from kgroupd.broker.testing import running_server
from tests.support.certs import Certs, make_certs
from tests.support.kafka_wire import WireClient

USER, PASSWORD = "alice", "alice-secret"
METADATA_V12: dict[str, Any] = {
    "topics": [],
    "allow_auto_topic_creation": False,
    "include_cluster_authorized_operations": False,
    "include_topic_authorized_operations": False,
}
ILLEGAL_SASL_STATE, UNSUPPORTED_SASL_MECHANISM, SASL_AUTHENTICATION_FAILED = 34, 33, 58
RESOURCE_NOT_FOUND, DUPLICATE_RESOURCE, UNACCEPTABLE_CREDENTIAL = 91, 92, 93
SHA256, SHA512 = 1, 2


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    return make_certs(tmp_path_factory.mktemp("certs"))


@pytest.fixture
def users_file(tmp_path: Path) -> Path:
    path = tmp_path / "users.txt"
    path.write_text(f"{USER}:{PASSWORD}\n")
    return path


def settings(users_file: Path, **more: Any) -> dict[str, Any]:
    return {
        "log_level": "warning",
        "listeners": "SASL_PLAINTEXT://127.0.0.1:0,PLAINTEXT://127.0.0.1:0",
        "sasl_users": str(users_file),
        **more,
    }


@pytest_asyncio.fixture
async def server(users_file: Path) -> AsyncIterator[KafkaServer]:
    async with running_server(**settings(users_file, connections_max_reauth_ms=400)) as srv:
        yield srv


@pytest_asyncio.fixture
async def closes_at_once(users_file: Path) -> AsyncIterator[KafkaServer]:
    """A failed authentication closes without Kafka's delay (for tests that fail many)."""
    overrides = settings(users_file, connection_failed_authentication_delay_ms=0)
    async with running_server(**overrides) as srv:
        yield srv


def port_of(server: KafkaServer, name: str) -> int:
    return next(p for listener, p, _ in server.bound if listener.name == name)


async def closed(wire: WireClient) -> bool:
    """The broker closed the connection (EOF or reset) without another answer."""
    try:
        data = await asyncio.wait_for(wire.reader.read(1), 5)
    except (ConnectionError, OSError):
        return True
    return data == b""


async def handshake(wire: WireClient, mechanism: str, version: int = 1) -> dict[str, Any]:
    return await wire.request(17, version, {"mechanism": mechanism})


async def authenticate(wire: WireClient, token: bytes) -> dict[str, Any]:
    return await wire.request(36, 2, {"auth_bytes": token})


async def scram_login(wire: WireClient, mechanism: str, user: str, password: str) -> int:
    """A SCRAM exchange over SaslAuthenticate v2; the session lifetime it was given."""
    assert (await handshake(wire, mechanism))["error_code"] == 0
    client = scramp.ScramClient([mechanism], user, password)
    first = await authenticate(wire, client.get_client_first().encode())
    assert first["error_code"] == 0, first
    client.set_server_first(first["auth_bytes"].decode())
    final = await authenticate(wire, client.get_client_final().encode())
    assert final["error_code"] == 0, final
    client.set_server_final(final["auth_bytes"].decode())  # the server proved itself too
    return int(final["session_lifetime_ms"])


async def test_only_api_versions_and_sasl_before_authentication(server: KafkaServer) -> None:
    async with await WireClient.connect(port_of(server, "SASL_PLAINTEXT")) as wire:
        versions = await wire.request(18, 3, {"client_software_name": "t"})
        assert versions["error_code"] == 0
        await wire.send(3, 12, METADATA_V12)
        assert await closed(wire)


async def test_handshake_v1_then_plain_then_every_api(server: KafkaServer) -> None:
    async with await WireClient.connect(port_of(server, "SASL_PLAINTEXT")) as wire:
        answer = await handshake(wire, "PLAIN")
        assert answer == {
            "error_code": 0,
            "mechanisms": ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"],
        }
        done = await authenticate(wire, f"\0{USER}\0{PASSWORD}".encode())
        assert (done["error_code"], done["error_message"], done["auth_bytes"]) == (0, None, b"")
        assert done["session_lifetime_ms"] == 400
        assert (await wire.request(3, 12, METADATA_V12))["brokers"]


async def test_handshake_v0_then_raw_unframed_tokens(server: KafkaServer) -> None:
    async with await WireClient.connect(port_of(server, "SASL_PLAINTEXT")) as wire:
        assert (await handshake(wire, "SCRAM-SHA-256", version=0))["error_code"] == 0
        client = scramp.ScramClient(["SCRAM-SHA-256"], USER, PASSWORD)

        async def raw(token: bytes) -> bytes:
            wire.writer.write(struct.pack(">i", len(token)) + token)
            return await wire.read_frame()  # the answer: a bare size-prefixed token

        client.set_server_first((await raw(client.get_client_first().encode())).decode())
        client.set_server_final((await raw(client.get_client_final().encode())).decode())
        assert (await wire.request(3, 12, METADATA_V12))["brokers"]


async def test_a_raw_v0_token_with_a_wrong_password_closes_the_connection(
    server: KafkaServer,
) -> None:
    async with await WireClient.connect(port_of(server, "SASL_PLAINTEXT")) as wire:
        assert (await handshake(wire, "PLAIN", version=0))["error_code"] == 0
        token = f"\0{USER}\0nope".encode()
        wire.writer.write(struct.pack(">i", len(token)) + token)
        assert await closed(wire)


async def test_a_wrong_password_is_answered_then_the_connection_closes(
    server: KafkaServer,
) -> None:
    async with await WireClient.connect(port_of(server, "SASL_PLAINTEXT")) as wire:
        assert (await handshake(wire, "PLAIN"))["error_code"] == 0
        answer = await authenticate(wire, f"\0{USER}\0nope".encode())
        assert answer["error_code"] == SASL_AUTHENTICATION_FAILED
        assert answer["error_message"] == "Authentication failed: Invalid username or password"
        assert await closed(wire)


async def test_an_unknown_user_fails_scram_like_a_wrong_password(server: KafkaServer) -> None:
    async with await WireClient.connect(port_of(server, "SASL_PLAINTEXT")) as wire:
        assert (await handshake(wire, "SCRAM-SHA-512"))["error_code"] == 0
        client = scramp.ScramClient(["SCRAM-SHA-512"], "mallory", "x")
        first = await authenticate(wire, client.get_client_first().encode())
        assert first["error_code"] == 0  # a server-first, as for a user who exists
        client.set_server_first(first["auth_bytes"].decode())
        answer = await authenticate(wire, client.get_client_final().encode())
        assert answer["error_code"] == SASL_AUTHENTICATION_FAILED
        assert "SCRAM-SHA-512" in answer["error_message"]
        assert await closed(wire)


async def test_a_mechanism_not_enabled_is_refused_and_the_connection_closes(
    users_file: Path,
) -> None:
    overrides = settings(users_file, sasl_enabled_mechanisms="SCRAM-SHA-512")
    async with running_server(**overrides) as srv:
        wire = await WireClient.connect(port_of(srv, "SASL_PLAINTEXT"))
        answer = await handshake(wire, "PLAIN")
        assert answer == {"error_code": UNSUPPORTED_SASL_MECHANISM, "mechanisms": ["SCRAM-SHA-512"]}
        assert await closed(wire)
        await wire.close()


async def test_sasl_on_a_listener_without_sasl_is_an_illegal_state(server: KafkaServer) -> None:
    async with await WireClient.connect(port_of(server, "PLAINTEXT")) as wire:
        answer = await handshake(wire, "PLAIN")
        assert answer == {"error_code": ILLEGAL_SASL_STATE, "mechanisms": []}
        assert (await wire.request(3, 12, METADATA_V12))["brokers"]  # still served


async def test_reauthentication_extends_the_session_and_expiry_closes(
    server: KafkaServer,
) -> None:
    async with await WireClient.connect(port_of(server, "SASL_PLAINTEXT")) as wire:
        assert await scram_login(wire, "SCRAM-SHA-512", USER, PASSWORD) == 400
        await asyncio.sleep(0.25)
        # KIP-368: the client re-authenticates on the same connection before the end
        assert await scram_login(wire, "SCRAM-SHA-512", USER, PASSWORD) == 400
        await asyncio.sleep(0.25)  # 500 ms after the first login, within the second
        assert (await wire.request(3, 12, METADATA_V12))["brokers"]
        await asyncio.sleep(0.3)  # now past the second session's end
        await wire.send(3, 12, METADATA_V12)
        assert await closed(wire)


async def test_reauthentication_may_not_change_the_principal(
    server: KafkaServer, users_file: Path
) -> None:
    async with await WireClient.connect(port_of(server, "PLAINTEXT")) as admin:
        await upsert(admin, "bob", SHA512, "bob-secret")
    async with await WireClient.connect(port_of(server, "SASL_PLAINTEXT")) as wire:
        await scram_login(wire, "SCRAM-SHA-512", USER, PASSWORD)
        assert (await handshake(wire, "SCRAM-SHA-512"))["error_code"] == 0
        client = scramp.ScramClient(["SCRAM-SHA-512"], "bob", "bob-secret")
        first = await authenticate(wire, client.get_client_first().encode())
        client.set_server_first(first["auth_bytes"].decode())
        answer = await authenticate(wire, client.get_client_final().encode())
        assert answer["error_code"] == SASL_AUTHENTICATION_FAILED
        assert "Cannot change principals" in answer["error_message"]
        assert await closed(wire)


# --- SCRAM credential administration ---------------------------------------------------------


def upsertion(user: str, mechanism: int, password: str, iterations: int = 4096) -> dict[str, Any]:
    """What a client sends: the password salted and iterated on the client side."""
    salt = os.urandom(16)
    name = "sha256" if mechanism == SHA256 else "sha512"
    salted = hashlib.pbkdf2_hmac(name, password.encode(), salt, iterations)
    return {
        "name": user,
        "mechanism": mechanism,
        "iterations": iterations,
        "salt": salt,
        "salted_password": salted,
    }


async def upsert(wire: WireClient, user: str, mechanism: int, password: str) -> None:
    answer = await wire.request(
        51, 0, {"deletions": [], "upsertions": [upsertion(user, mechanism, password)]}
    )
    assert answer["results"] == [{"user": user, "error_code": 0, "error_message": None}]


async def describe(wire: WireClient, users: list[str] | None) -> list[dict[str, Any]]:
    body = {"users": None if users is None else [{"name": u} for u in users]}
    answer = await wire.request(50, 0, body)
    assert answer["error_code"] == 0
    return list(answer["results"])


async def test_alter_and_describe_user_scram_credentials_with_kafkas_errors(
    server: KafkaServer,
) -> None:
    async with await WireClient.connect(port_of(server, "PLAINTEXT")) as wire:
        await upsert(wire, "dave", SHA256, "dave-secret")
        listed = {r["user"]: r for r in await describe(wire, None)}
        assert sorted(listed) == ["alice", "dave"]
        assert listed["dave"]["credential_infos"] == [{"mechanism": SHA256, "iterations": 4096}]
        assert [i["mechanism"] for i in listed["alice"]["credential_infos"]] == [SHA256, SHA512]
        results = await describe(wire, ["dave", "nobody", "alice", "alice"])
        codes = {r["user"]: r["error_code"] for r in results}
        assert codes == {"dave": 0, "nobody": RESOURCE_NOT_FOUND, "alice": DUPLICATE_RESOURCE}
        answer = await wire.request(
            51,
            0,
            {
                "deletions": [{"name": "ghost", "mechanism": SHA512}],
                "upsertions": [
                    upsertion("weak", SHA256, "x", iterations=100),
                    upsertion("twice", SHA256, "a"),
                    upsertion("twice", SHA256, "b"),
                    upsertion("", SHA256, "a"),
                    {**upsertion("odd", SHA256, "a"), "mechanism": 9},
                ],
            },
        )
        codes = {r["user"]: r["error_code"] for r in answer["results"]}
        assert codes == {
            "ghost": RESOURCE_NOT_FOUND,
            "weak": UNACCEPTABLE_CREDENTIAL,
            "twice": DUPLICATE_RESOURCE,
            "": UNACCEPTABLE_CREDENTIAL,
            "odd": UNSUPPORTED_SASL_MECHANISM,
        }
        assert sorted(r["user"] for r in await describe(wire, None)) == ["alice", "dave"]
    # the new user logs in with the mechanism it was given, and not with another
    async with await WireClient.connect(port_of(server, "SASL_PLAINTEXT")) as wire:
        await scram_login(wire, "SCRAM-SHA-256", "dave", "dave-secret")
    async with await WireClient.connect(port_of(server, "PLAINTEXT")) as wire:
        answer = await wire.request(
            51, 0, {"deletions": [{"name": "dave", "mechanism": SHA256}], "upsertions": []}
        )
        assert answer["results"][0]["error_code"] == 0
        assert [r["user"] for r in await describe(wire, None)] == ["alice"]


async def test_stored_users_survive_a_restart_and_the_users_file_wins(
    users_file: Path, tmp_path: Path
) -> None:
    overrides = settings(users_file, data_dir=str(tmp_path / "data"))
    async with running_server(**overrides) as srv:
        wire = await WireClient.connect(port_of(srv, "PLAINTEXT"))
        await upsert(wire, "erin", SHA512, "erin-secret")
        await upsert(wire, USER, SHA512, "changed-at-runtime")
        await wire.close()
    async with running_server(**overrides) as srv:
        async with await WireClient.connect(port_of(srv, "SASL_PLAINTEXT")) as wire:
            await scram_login(wire, "SCRAM-SHA-512", "erin", "erin-secret")
        async with await WireClient.connect(port_of(srv, "SASL_PLAINTEXT")) as wire:
            # --sasl-users is applied at every start and wins over the stored credential
            await scram_login(wire, "SCRAM-SHA-512", USER, PASSWORD)
    stored = (tmp_path / "data" / "scram-credentials.json").read_text()
    assert "erin" in stored and PASSWORD not in stored and "erin-secret" not in stored


# --- garbage ---------------------------------------------------------------------------------


async def test_garbage_in_the_sasl_exchange_never_authenticates(
    closes_at_once: KafkaServer, caplog: pytest.LogCaptureFixture
) -> None:
    rng = random.Random(15)
    port = port_of(closes_at_once, "SASL_PLAINTEXT")
    for i in range(120):
        mechanism = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")[i % 3]
        token = bytes(rng.randrange(256) for _ in range(rng.randrange(0, 300)))
        if i % 4 == 0:
            token = b"n,,n=alice,r=" + token  # a SCRAM client-first with a garbled nonce
        async with await WireClient.connect(port) as wire:
            raw = i % 5 == 0
            assert (await handshake(wire, mechanism, 0 if raw else 1))["error_code"] == 0
            if raw:
                wire.writer.write(struct.pack(">i", len(token)) + token)
            else:
                await wire.send(36, 2, {"auth_bytes": token})
            # a Metadata request after the garbage must never be answered
            corr = await wire.send(3, 12, METADATA_V12)
            answered = []
            try:
                while True:
                    answered.append(struct.unpack_from(">i", await wire.read_frame())[0])
            except (asyncio.IncompleteReadError, ConnectionError, OSError):
                pass
            assert corr not in answered, f"Metadata answered after garbage {token!r}"
    bystander = AIOKafkaProducer(
        bootstrap_servers=f"127.0.0.1:{port}",
        security_protocol="SASL_PLAINTEXT",
        sasl_mechanism="PLAIN",
        sasl_plain_username=USER,
        sasl_plain_password=PASSWORD,
    )
    await bystander.start()
    try:
        await bystander.send_and_wait("after-garbage", b"ok")
    finally:
        await bystander.stop()
    assert not [r for r in caplog.records if r.levelname in ("ERROR", "CRITICAL")]
    assert "handler_failed" not in caplog.text


async def test_garbage_in_the_tls_handshake_is_refused(certs: Certs, tmp_path: Path) -> None:
    async with running_server(
        log_level="warning",
        listeners="SSL://127.0.0.1:0",
        ssl_certfile=str(certs.server_cert),
        ssl_keyfile=str(certs.server_key),
    ) as srv:
        port = port_of(srv, "SSL")
        rng = random.Random(16)
        hello = _client_hello(certs)
        for i in range(80):
            data = bytearray(hello)
            for _ in range(rng.randrange(1, 8)):
                data[rng.randrange(len(data))] = rng.randrange(256)
            if i % 3 == 0:
                data = bytearray(rng.randbytes(rng.randrange(1, 600)))
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(bytes(data))
            with contextlib.suppress(ConnectionError, OSError):
                await asyncio.wait_for(reader.read(65536), 5)
            writer.close()
            assert not srv.connections, "a garbled handshake made a Kafka connection"
        # and a proper TLS client is served
        producer = AIOKafkaProducer(
            bootstrap_servers=f"127.0.0.1:{port}",
            security_protocol="SSL",
            ssl_context=ssl.create_default_context(cafile=str(certs.ca)),
        )
        await producer.start()
        try:
            await producer.send_and_wait("after-tls-garbage", b"ok")
        finally:
            await producer.stop()


def _client_hello(certs: Certs) -> bytes:
    """The first flight of a real TLS client (a ClientHello), to mutate."""
    context = ssl.create_default_context(cafile=str(certs.ca))
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    obj = context.wrap_bio(incoming, outgoing, server_hostname="localhost")
    with contextlib.suppress(ssl.SSLWantReadError):
        obj.do_handshake()
    return outgoing.read()


async def test_unusable_tls_files_stop_start_up_with_one_line(tmp_path: Path) -> None:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "kgroupd.broker",
        "--http-port",
        "0",
        "--listeners",
        "SSL://127.0.0.1:0",
        "--ssl-certfile",
        str(tmp_path / "missing.pem"),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    _out, err = await asyncio.wait_for(proc.communicate(), 30)
    assert proc.returncode == 2
    lines = err.decode().strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("kgroupd: error: cannot use the TLS files")
    assert "missing.pem" in lines[0]


async def test_an_unreadable_users_file_stops_start_up_with_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "users.txt"
    bad.write_text("alice-without-a-password\n")
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "kgroupd.broker",
        "--http-port",
        "0",
        "--listeners",
        "SASL_PLAINTEXT://127.0.0.1:0",
        "--sasl-users",
        str(bad),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    _out, err = await asyncio.wait_for(proc.communicate(), 30)
    assert proc.returncode == 2
    # one line of error, and nothing before it: in memory, the users are read before any
    # listener (Kafka's, then HTTP's) is up
    *logged, line = err.decode().strip().splitlines()
    assert line == f"kgroupd: error: --sasl-users {bad}, line 1: not USER:PASSWORD"
    assert [json.loads(x)["event"] for x in logged] == []
