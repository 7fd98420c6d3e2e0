"""Hostile clients before authentication (issue 27, items 1 and 2), on real sockets.

- ``--sasl-server-max-receive-size`` (Kafka's ``sasl.server.max.receive.size``, 512 KiB): a
  frame over it before authentication fails the authentication by its size prefix alone,
  unread, with one log line, and the connection closes; after authentication the usual
  ``--max-request-bytes`` applies. A 4 MiB SCRAM token and a 50 MB PLAIN token are refused
  so while a bystander keeps being answered.
- Fields are bounded before any work: a SCRAM user name over 1024 bytes never reaches
  scramp's SASLprep; a PLAIN field over it fails with a message.
- ``--connection-failed-authentication-delay-ms`` (Kafka's
  ``connection.failed.authentication.delay.ms``, 100 ms): a failed authentication is answered
  that much later, then closed; others are served meanwhile, and many failing at once add no
  task each.
- An unknown user fails as a wrong password does: SCRAM answers with a mock salt of the same
  length and the same iterations, stable across attempts (and restarts, with ``--data-dir``),
  and PLAIN verifies the password against a mock credential, as for a real one.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import struct
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
import scramp
import scramp.core
from structlog.testing import capture_logs

from kgroupd.broker.security import credentials
from kgroupd.broker.testing import running_server
from tests.integration.test_security_wire import (
    METADATA_V12,
    PASSWORD,
    SASL_AUTHENTICATION_FAILED,
    UNSUPPORTED_SASL_MECHANISM,
    USER,
    authenticate,
    closed,
    handshake,
    port_of,
    settings,
)
from tests.support.kafka_wire import WireClient, encode_request

MiB = 1024 * 1024


@pytest.fixture
def users_file(tmp_path: Path) -> Path:
    path = tmp_path / "users.txt"
    path.write_text(f"{USER}:{PASSWORD}\n")
    return path


class Bystander:
    """An authenticated client that keeps asking for Metadata, counting the answers."""

    def __init__(self, wire: WireClient) -> None:
        self.wire = wire
        self.answers = 0
        self.stop = False

    async def run(self) -> None:
        while not self.stop:  # not cancelled: wait_for (3.11) may swallow a cancellation
            assert (await self.wire.request(3, 12, METADATA_V12))["brokers"]
            self.answers += 1


@contextlib.asynccontextmanager
async def bystander(port: int) -> AsyncIterator[Bystander]:
    async with await WireClient.connect(port) as wire:
        assert (await handshake(wire, "PLAIN"))["error_code"] == 0
        assert (await authenticate(wire, f"\0{USER}\0{PASSWORD}".encode()))["error_code"] == 0
        by = Bystander(wire)
        task = asyncio.create_task(by.run())
        try:
            while not by.answers:
                await asyncio.sleep(0.001)
            yield by
        finally:
            by.stop = True
            await task


async def write_all(wire: WireClient, data: bytes) -> None:
    """Write until done or until the broker closes on us."""
    with contextlib.suppress(ConnectionError, OSError):
        wire.writer.write(data)
        await wire.writer.drain()


@pytest.fixture
def logs() -> Iterator[list[dict[str, Any]]]:
    with capture_logs() as captured:
        yield captured


def warnings_of(logs: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """(event, reason) of every warning logged."""
    return [(e["event"], e.get("reason", "")) for e in logs if e["log_level"] == "warning"]


# --- sasl.server.max.receive.size ------------------------------------------------------------


async def test_a_4_mib_scram_token_is_refused_unread_while_a_bystander_is_served(
    users_file: Path, logs: list[dict[str, Any]]
) -> None:
    overrides = settings(users_file, connection_failed_authentication_delay_ms=500)
    async with running_server(**overrides) as srv:
        port = port_of(srv, "SASL_PLAINTEXT")
        async with bystander(port) as by, await WireClient.connect(port) as wire:
            assert (await handshake(wire, "SCRAM-SHA-512"))["error_code"] == 0
            before = by.answers
            # before the fix: buffered whole, then 12-15 s of SASLprep on the event loop
            token = b"n,,n=" + b"u" * (4 * MiB) + b",r=nonce"
            frame = _authenticate_frame(token)
            await write_all(wire, frame)
            assert await closed(wire)  # no answer: refused by its size alone
            assert by.answers > before  # served while the attacker was refused
    [(event, reason)] = warnings_of(logs)  # one line, and no other
    assert event == "sasl_authentication_failed"
    assert reason == (
        "sasl.server.max.receive.size: frame of 4194343 bytes exceeds the limit of 524288"
    )


async def test_a_50_mb_plain_token_is_refused_at_its_size_prefix(
    users_file: Path, logs: list[dict[str, Any]]
) -> None:
    overrides = settings(users_file, connection_failed_authentication_delay_ms=500)
    async with running_server(**overrides) as srv:
        port = port_of(srv, "SASL_PLAINTEXT")
        async with bystander(port) as by, await WireClient.connect(port) as wire:
            assert (await handshake(wire, "PLAIN", version=0))["error_code"] == 0
            before = by.answers
            size = 50_000_000
            wire.writer.write(struct.pack(">i", size) + f"\0{USER}\0".encode())
            sent, chunk = 0, b"p" * MiB
            with contextlib.suppress(ConnectionError, OSError):
                while sent < size - MiB:  # the broker stops reading, then closes on us
                    wire.writer.write(chunk)
                    await wire.writer.drain()
                    sent += len(chunk)
            assert await closed(wire)
            assert sent < size - MiB  # not read: before the fix all 50 MB were buffered
            assert by.answers > before
    [(event, reason)] = warnings_of(logs)
    assert event == "sasl_authentication_failed"
    assert reason.endswith("frame of 50000000 bytes exceeds the limit of 524288")


async def test_the_limit_holds_before_authentication_only(
    users_file: Path, logs: list[dict[str, Any]]
) -> None:
    big_versions = {"client_software_name": "x" * 3000, "client_software_version": "1"}
    async with running_server(**settings(users_file, sasl_server_max_receive_size=2000)) as srv:
        port = port_of(srv, "SASL_PLAINTEXT")
        async with await WireClient.connect(port) as wire:
            assert (await wire.request(18, 3, {"client_software_name": "t"}))["error_code"] == 0
            await wire.send(18, 3, big_versions)  # a frame of 3 KB before authenticating
            assert await closed(wire)
        [(event, reason)] = warnings_of(logs)
        assert event == "sasl_authentication_failed" and reason.endswith("the limit of 2000")
        async with await WireClient.connect(port) as wire:
            assert (await handshake(wire, "PLAIN"))["error_code"] == 0
            done = await authenticate(wire, f"\0{USER}\0{PASSWORD}".encode())
            assert done["error_code"] == 0
            # authenticated: --max-request-bytes (100 MiB) applies
            assert (await wire.request(18, 3, big_versions))["error_code"] == 0
        assert len(warnings_of(logs)) == 1


# --- field bounds ----------------------------------------------------------------------------


async def test_a_long_scram_user_name_fails_before_saslprep(
    users_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    prepped: list[int] = []
    real = scramp.core.saslprep

    def spy(text: str) -> str:
        prepped.append(len(text))
        return real(text)

    monkeypatch.setattr(scramp.core, "saslprep", spy)
    async with running_server(**settings(users_file)) as srv:
        port = port_of(srv, "SASL_PLAINTEXT")
        prepped.clear()  # the users file's passwords
        async with await WireClient.connect(port) as wire:
            assert (await handshake(wire, "SCRAM-SHA-256"))["error_code"] == 0
            answer = await authenticate(wire, b"n,,n=" + b"u" * 1100 + b",r=abcdefgh")
            assert answer["error_code"] == SASL_AUTHENTICATION_FAILED
            assert await closed(wire)
        assert prepped == []  # refused on its length, never normalized
        async with await WireClient.connect(port) as wire:
            assert (await handshake(wire, "SCRAM-SHA-256"))["error_code"] == 0
            answer = await authenticate(wire, b"n,,n=" + b"u" * 1000 + b",r=abcdefgh")
            assert answer["error_code"] == 0  # within the bound: a (mock) server-first
        assert 1000 in prepped


async def test_a_long_plain_field_fails_with_a_message(users_file: Path) -> None:
    async with (
        running_server(**settings(users_file)) as srv,
        await WireClient.connect(port_of(srv, "SASL_PLAINTEXT")) as wire,
    ):
        assert (await handshake(wire, "PLAIN"))["error_code"] == 0
        answer = await authenticate(wire, f"\0{USER}\0{'p' * 1025}".encode())
        assert answer["error_code"] == SASL_AUTHENTICATION_FAILED
        assert answer["error_message"] == (
            "Invalid SASL/PLAIN response: a field is longer than 1024 bytes"
        )
        assert await closed(wire)


# --- connection.failed.authentication.delay.ms ----------------------------------------------


async def test_a_failed_authentication_is_answered_after_the_delay(users_file: Path) -> None:
    overrides = settings(users_file, connection_failed_authentication_delay_ms=1000)
    async with running_server(**overrides) as srv:
        port = port_of(srv, "SASL_PLAINTEXT")
        async with bystander(port) as by, await WireClient.connect(port) as wire:
            assert (await handshake(wire, "SCRAM-SHA-512"))["error_code"] == 0
            client = scramp.ScramClient(["SCRAM-SHA-512"], USER, "wrong")
            first = await authenticate(wire, client.get_client_first().encode())
            client.set_server_first(first["auth_bytes"].decode())
            before = by.answers
            started = time.monotonic()
            answer = await authenticate(wire, client.get_client_final().encode())
            waited = time.monotonic() - started
            assert answer["error_code"] == SASL_AUTHENTICATION_FAILED
            assert waited >= 1.0  # a lower bound: connection.failed.authentication.delay.ms
            assert by.answers > before  # the others are served meanwhile
            assert await closed(wire)


async def test_many_failing_at_once_wait_without_a_task_each(users_file: Path) -> None:
    overrides = settings(users_file, connection_failed_authentication_delay_ms=1500)
    async with running_server(**overrides) as srv:
        port = port_of(srv, "SASL_PLAINTEXT")
        async with bystander(port) as by:
            tasks_before = len(asyncio.all_tasks())
            wires = [await WireClient.connect(port) for _ in range(200)]
            corrs = [await wire.send(17, 1, {"mechanism": "GSSAPI"}) for wire in wires]
            for _ in range(1000):  # all of them wait out the delay together
                if len(srv.failed_auth) == len(wires):
                    break
                await asyncio.sleep(0.01)
            assert len(srv.failed_auth) == len(wires)
            assert len(asyncio.all_tasks()) <= tasks_before + 5
            before = by.answers
            for wire, corr in zip(wires, corrs, strict=True):
                answer = await wire.receive(17, 1, corr)
                assert answer["error_code"] == UNSUPPORTED_SASL_MECHANISM
                assert await closed(wire)
                await wire.close()
            assert by.answers > before


# --- unknown users -----------------------------------------------------------------------------


async def server_first(port: int, user: str) -> dict[str, str]:
    """The attributes of the server-first message a SCRAM login as ``user`` gets."""
    async with await WireClient.connect(port) as wire:
        assert (await handshake(wire, "SCRAM-SHA-512"))["error_code"] == 0
        client = scramp.ScramClient(["SCRAM-SHA-512"], user, "wrong")
        first = await authenticate(wire, client.get_client_first().encode())
        assert first["error_code"] == 0
        client.set_server_first(first["auth_bytes"].decode())
        final = await authenticate(wire, client.get_client_final().encode())
        assert (final["error_code"], final["error_message"]) == (
            SASL_AUTHENTICATION_FAILED,
            "Authentication failed during authentication due to invalid credentials with "
            "SASL mechanism SCRAM-SHA-512",
        )
    return dict(kv.split("=", 1) for kv in first["auth_bytes"].decode().split(","))


async def test_an_unknown_users_server_first_looks_like_a_known_users(
    users_file: Path, tmp_path: Path
) -> None:
    data = tmp_path / "data"
    overrides = settings(
        users_file, data_dir=str(data), connection_failed_authentication_delay_ms=0
    )
    async with running_server(**overrides) as srv:
        port = port_of(srv, "SASL_PLAINTEXT")
        known = await server_first(port, USER)
        unknown = await server_first(port, "mallory")
        again = await server_first(port, "mallory")
        other = await server_first(port, "trudy")
    assert len(base64.b64decode(unknown["s"])) == len(base64.b64decode(known["s"]))
    assert unknown["i"] == known["i"] == "4096"
    assert again["s"] == unknown["s"]  # stable: retrying tells nothing
    assert other["s"] != unknown["s"]
    async with running_server(**overrides) as srv:  # the broker's secret is kept
        assert (await server_first(port_of(srv, "SASL_PLAINTEXT"), "mallory"))["s"] == unknown["s"]


async def test_plain_verifies_an_unknown_users_password_as_a_known_ones(
    users_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    checked: list[tuple[str, int, int]] = []
    real = credentials.verify_password

    def spy(mechanism: str, cred: credentials.ScramCredential, password: str) -> bool:
        checked.append((mechanism, len(cred.salt), cred.iterations))
        return real(mechanism, cred, password)

    monkeypatch.setattr(credentials, "verify_password", spy)
    answers: list[Any] = []
    overrides = settings(users_file, connection_failed_authentication_delay_ms=0)
    async with running_server(**overrides) as srv:
        for user in (USER, "mallory"):
            async with await WireClient.connect(port_of(srv, "SASL_PLAINTEXT")) as wire:
                assert (await handshake(wire, "PLAIN"))["error_code"] == 0
                answer = await authenticate(wire, f"\0{user}\0wrong".encode())
                answers.append((answer["error_code"], answer["error_message"]))
    assert (
        answers[0]
        == answers[1]
        == (
            SASL_AUTHENTICATION_FAILED,
            "Authentication failed: Invalid username or password",
        )
    )
    assert checked == [("SCRAM-SHA-512", 32, 4096)] * 2  # the same work for both


def _authenticate_frame(token: bytes) -> bytes:
    """SaslAuthenticate v2 with ``token``, framed (built directly: the token may be large)."""
    empty = encode_request(36, 2, 99, {"auth_bytes": b""})
    head = empty[4:-2]  # the header; then auth_bytes (compact: length + 1) and tagged fields
    size = len(token) + 1
    varint = bytearray()
    while size >= 0x80:
        varint.append(size & 0x7F | 0x80)
        size >>= 7
    varint.append(size)
    body = head + bytes(varint) + token + b"\x00"
    return struct.pack(">i", len(body)) + body
