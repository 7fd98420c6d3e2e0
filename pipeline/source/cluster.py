"""Which log the offsets refer to: the broker's cluster id and the topics' ids.

aiokafka reads Metadata at v5 at most and drops the cluster id; topic ids came in v10. This
module asks any broker directly: ApiVersions v0 to learn the newest Metadata version it
serves (up to v12), then one Metadata request, both encoded with kgroupd's own message
definitions (``protocol``). A broker too old for a field simply gives no value for it, and
the checks that need it are skipped.

It connects as the source's other clients do (``Security``): TLS with the options' SSL
context, then SASL as Kafka's clients run it, SaslHandshake v1 and SaslAuthenticate
(PLAIN, or SCRAM-SHA-256/512 through ``scramp``), before Metadata."""

from __future__ import annotations

import asyncio
import struct
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field

import scramp

from kgroupd.pipeline.source.security import Security
from kgroupd.protocol.codec import read_uvarint
from kgroupd.protocol.messages import MessageSpec, lookup

API_VERSIONS = 18
METADATA = 3
SASL_HANDSHAKE = 17
SASL_AUTHENTICATE = 36
NEWEST_SASL_AUTHENTICATE = 2
NEWEST_METADATA = 12  # v10 added topic ids; v12 is the newest whose topics are named
_HEADER = struct.Struct(">hhih")  # api key, version, correlation id, client id length
_CLIENT_ID = b"kgroupd-source"
ZERO_UUID = uuid.UUID(int=0)


@dataclass(frozen=True)
class ClusterFacts:
    """The cluster id (None if the broker does not say) and the id of each topic asked for
    (topics the broker gave no id are absent)."""

    cluster_id: str | None
    topic_ids: dict[str, str] = field(default_factory=dict)


class AuthenticationError(ConnectionError):
    """The broker refused the SASL exchange (the message is the broker's, never a secret)."""


class _Connection:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.correlation = 0

    async def request(self, spec: MessageSpec, body: dict[str, object]) -> dict[str, object]:
        self.correlation += 1
        header = _HEADER.pack(spec.api_key, spec.version, self.correlation, len(_CLIENT_ID))
        header += _CLIENT_ID + (b"\x00" if spec.flexible else b"")  # header v2: no tags
        frame = header + spec.encode_request(body)
        self.writer.write(struct.pack(">i", len(frame)) + frame)
        await self.writer.drain()
        (size,) = struct.unpack(">i", await self.reader.readexactly(4))
        data = await self.reader.readexactly(size)
        (correlation,) = struct.unpack_from(">i", data)
        if correlation != self.correlation:
            raise ConnectionError(f"correlation id {correlation}, expected {self.correlation}")
        pos = 4
        if spec.response_header_v1:
            count, pos = read_uvarint(data, pos)
            for _ in range(count):  # tagged header fields: none is defined; skip them
                _tag, pos = read_uvarint(data, pos)
                length, pos = read_uvarint(data, pos)
                pos += length
        return spec.decode_response(data, pos)


def _spec(api_key: int, version: int) -> MessageSpec:
    spec = lookup(api_key, version)
    assert spec is not None, (api_key, version)
    return spec


def _newest(versions: dict[str, object], api_key: int) -> int | None:
    """The newest version of ``api_key`` an ApiVersions answer lists, None if absent."""
    return next(
        (int(k["max_version"]) for k in versions["api_keys"] if k["api_key"] == api_key),  # type: ignore[attr-defined]
        None,
    )


async def _authenticate(
    conn: _Connection, security: Security, versions: dict[str, object], timeout_s: float
) -> None:
    """SaslHandshake v1, then the mechanism's tokens in SaslAuthenticate requests."""
    mechanism, user, password = security.mechanism, security.username, security.password
    assert mechanism is not None and user is not None and password is not None
    if (_newest(versions, SASL_HANDSHAKE) or 0) < 1 or _newest(versions, SASL_AUTHENTICATE) is None:
        raise AuthenticationError("the broker has no SaslHandshake v1 and SaslAuthenticate")
    handshake = _spec(SASL_HANDSHAKE, 1)
    answer = await asyncio.wait_for(conn.request(handshake, {"mechanism": mechanism}), timeout_s)
    if answer["error_code"] != 0:
        raise AuthenticationError(
            f"the broker does not enable SASL mechanism {mechanism} (error "
            f"{answer['error_code']}; it offers {answer['mechanisms']})"
        )
    version = min(_newest(versions, SASL_AUTHENTICATE) or 0, NEWEST_SASL_AUTHENTICATE)
    authenticate = _spec(SASL_AUTHENTICATE, version)

    async def step(token: bytes) -> bytes:
        reply = await asyncio.wait_for(conn.request(authenticate, {"auth_bytes": token}), timeout_s)
        if reply["error_code"] != 0:
            raise AuthenticationError(
                f"SASL {mechanism} authentication of user {user!r} failed (error "
                f"{reply['error_code']}): {reply['error_message']}"
            )
        auth_bytes = reply["auth_bytes"]
        assert isinstance(auth_bytes, bytes)
        return auth_bytes

    if mechanism == "PLAIN":
        await step(b"\0" + user.encode() + b"\0" + password.encode())
        return
    client = scramp.ScramClient([mechanism], user, password)
    try:
        server_first = await step(client.get_client_first().encode())
        client.set_server_first(server_first.decode())
        server_final = await step(client.get_client_final().encode())
        client.set_server_final(server_final.decode())
    except (scramp.ScramException, UnicodeDecodeError) as exc:
        raise AuthenticationError(
            f"SASL {mechanism} exchange with the broker failed: {exc}"  # scramp's: no secret
        ) from None


async def describe(
    address: str,
    topics: Sequence[str],
    timeout_s: float = 10.0,
    security: Security | None = None,
) -> ClusterFacts:
    """The cluster id and topic ids as the broker at ``host:port`` reports them, connecting
    with ``security`` (plaintext when None)."""
    security = security or Security()
    host, _, port = address.strip().rpartition(":")
    host = host.strip("[]")
    context = security.ssl_context() if security.tls else None
    reader, writer = await asyncio.wait_for(
        asyncio.open_connection(
            host, int(port), ssl=context, server_hostname=host if context else None
        ),
        timeout_s,
    )
    try:
        conn = _Connection(reader, writer)
        versions = await asyncio.wait_for(conn.request(_spec(API_VERSIONS, 0), {}), timeout_s)
        if security.sasl:
            await _authenticate(conn, security, versions, timeout_s)
        version = min(_newest(versions, METADATA) or 0, NEWEST_METADATA)
        if version < 2:
            return ClusterFacts(None)
        if version >= 10:
            wanted: list[dict[str, object]] = [
                {"topic_id": ZERO_UUID, "name": name} for name in topics
            ]
        else:
            wanted = [{"name": name} for name in topics]
        body = {"topics": wanted, "allow_auto_topic_creation": False}
        answer = await asyncio.wait_for(conn.request(_spec(METADATA, version), body), timeout_s)
    finally:
        writer.close()
    ids = {}
    for topic in answer["topics"]:  # type: ignore[attr-defined]
        topic_id = topic.get("topic_id", ZERO_UUID)
        if topic["error_code"] == 0 and topic["name"] and topic_id != ZERO_UUID:
            ids[topic["name"]] = str(topic_id)
    cluster_id = answer["cluster_id"]
    return ClusterFacts(str(cluster_id) if cluster_id is not None else None, ids)


async def describe_any(
    bootstrap_servers: str,
    topics: Sequence[str],
    timeout_s: float = 10.0,
    security: Security | None = None,
) -> ClusterFacts:
    """``describe`` through the first bootstrap address that answers."""
    problems = []
    for address in (a for a in bootstrap_servers.split(",") if a.strip()):
        try:
            return await describe(address, topics, timeout_s, security)
        except (TimeoutError, OSError, asyncio.IncompleteReadError, ValueError) as exc:
            problems.append(f"{address.strip()}: {exc or type(exc).__name__}")
    raise ConnectionError("no bootstrap server answered Metadata: " + "; ".join(problems))
