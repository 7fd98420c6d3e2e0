"""A small asyncio Kafka admin client on the project's own codec (``kgroupd.protocol.messages``).

It speaks to any broker (kgroupd or Apache Kafka): every connection asks ApiVersions first
and each request goes out at the newest version both sides know; TLS through ``ssl``;
SASL PLAIN and SCRAM (``scramp``) after SaslHandshake v1. Requests go where Kafka's Admin
sends them: group requests to the group's coordinator (FindCoordinator), ListOffsets to the
partition's leader, ListGroups to every broker.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import struct
from collections.abc import Mapping
from typing import Any

from kgroupd.protocol.errors import ErrorCode
from kgroupd.protocol.framing import read_uvarint
from kgroupd.protocol.messages import lookup, served_range

from .properties import ClientSettings, UsageError

_INT32 = struct.Struct(">i")
_HEADER = struct.Struct(">hhih")  # api_key, api_version, correlation_id, client_id length

API_VERSIONS, SASL_HANDSHAKE, SASL_AUTHENTICATE = 18, 17, 36
METADATA, FIND_COORDINATOR = 3, 10

# The newest version this client asks for, per API (fields it reads exist there); the
# oldest is the codec's oldest unless listed in CLIENT_MIN.
CLIENT_MAX = {
    2: 9,  # ListOffsets (v10 only adds a timeout)
    3: 12,  # Metadata
    8: 9,  # OffsetCommit (v10 names topics by id)
    9: 9,  # OffsetFetch (v10 names topics by id)
    10: 6,  # FindCoordinator
    15: 5,  # DescribeGroups
    16: 5,  # ListGroups
    17: 1,  # SaslHandshake
    18: 3,  # ApiVersions
    19: 7,  # CreateTopics
    20: 6,  # DeleteTopics
    36: 2,  # SaslAuthenticate
    42: 2,  # DeleteGroups
    47: 0,  # OffsetDelete
    32: 4,  # DescribeConfigs
    69: 1,  # ConsumerGroupDescribe
}
CLIENT_MIN = {2: 1, 3: 1, 9: 2, 17: 1}
# An answer's size above this is no Kafka answer (an admin answer is far smaller): the 4 bytes
# read as its size were text ("HTTP" is 1,213,486,160), a TLS record, ...
_MAX_ANSWER = 256 * 1024 * 1024


def error_name(code: int) -> str:
    try:
        return ErrorCode(code).name
    except ValueError:
        return f"UNKNOWN_ERROR_CODE_{code}"


class KafkaError(Exception):
    """A Kafka error answered by the broker (exit code 1; its name is printed)."""

    def __init__(self, code: int, message: str | None = None) -> None:
        self.code = code
        self.name = error_name(code)
        self.detail = message
        super().__init__(f"{self.name}: {message}" if message else self.name)


class ConnectError(Exception):
    """The broker cannot be reached or the connection broke (exit code 1)."""


def check(code: int, message: str | None = None) -> None:
    if code != 0:
        raise KafkaError(code, message)


def split_address(address: str) -> tuple[str, int]:
    host, sep, port = address.strip().rpartition(":")
    if not sep or not port.isdigit():
        raise UsageError(f"{address!r} is not HOST:PORT")
    return host.strip("[]") or "127.0.0.1", int(port)


class Connection:
    """One authenticated connection; requests one at a time."""

    def __init__(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        settings: ClientSettings,
        address: str,
    ) -> None:
        self.reader, self.writer, self.settings, self.address = reader, writer, settings, address
        self.versions: dict[int, tuple[int, int]] = {}
        self._corr = itertools.count(1)
        self._lock = asyncio.Lock()

    @classmethod
    async def open(cls, host: str, port: int, settings: ClientSettings) -> Connection:
        address = f"{host}:{port}"
        context = settings.ssl_context() if settings.tls else None
        try:
            reader, writer = await asyncio.wait_for(
                asyncio.open_connection(
                    host, port, ssl=context, server_hostname=host if context else None
                ),
                settings.request_timeout_s,
            )
        except TimeoutError:
            raise ConnectError(f"cannot connect to {address}: timed out") from None
        except OSError as exc:
            raise ConnectError(f"cannot connect to {address}: {exc.strerror or exc}") from None
        conn = cls(reader, writer, settings, address)
        try:
            await conn._api_versions()
            if settings.sasl:
                await conn._authenticate()
        except BaseException:
            await conn.close()
            raise
        return conn

    # --- framing ------------------------------------------------------------------------
    async def _exchange(self, api_key: int, version: int, body: Mapping[str, Any]) -> bytes:
        spec = lookup(api_key, version)
        assert spec is not None, (api_key, version)
        corr = next(self._corr)
        cid = self.settings.client_id.encode()
        header = _HEADER.pack(api_key, version, corr, len(cid)) + cid
        if spec.flexible:
            header += b"\x00"  # request header v2: no tagged fields
        frame = header + spec.encode_request(body)
        timeout = self.settings.request_timeout_s
        first = corr == 1  # ApiVersions: what answers tells whether this is Kafka at all
        try:
            async with self._lock:
                self.writer.write(_INT32.pack(len(frame)) + frame)
                await self.writer.drain()
                head = await asyncio.wait_for(self.reader.readexactly(4), timeout)
                (size,) = _INT32.unpack(head)
                if not 4 <= size <= _MAX_ANSWER:
                    raise ConnectError(await self._not_kafka(head))
                payload = await asyncio.wait_for(self.reader.readexactly(size), timeout)
        except TimeoutError:
            raise ConnectError(f"{self.address}: no answer within {timeout:g}s") from None
        except asyncio.IncompleteReadError as exc:
            if first and not exc.partial:
                raise ConnectError(self._closed_unanswered()) from None
            if first:
                raise ConnectError(await self._not_kafka(exc.partial, more=False)) from None
            raise ConnectError(f"{self.address}: connection lost ({exc})") from None
        except OSError as exc:
            raise ConnectError(f"{self.address}: connection lost ({exc})") from None
        (got,) = _INT32.unpack_from(payload, 0)
        if got != corr:
            if first:
                raise ConnectError(await self._not_kafka(head + payload, more=False))
            raise ConnectError(f"{self.address}: answer to request {got}, expected {corr}")
        return payload

    async def _not_kafka(self, head: bytes, more: bool = True) -> str:
        """What to say when the first bytes answered are not a Kafka answer's: what the
        other side seems to be (an HTTP server, a TLS listener...) and what it said."""
        if more:
            with contextlib.suppress(OSError, TimeoutError):
                head += await asyncio.wait_for(self.reader.read(200), 1)
        said = head.split(b"\r\n", 1)[0].split(b"\n", 1)[0][:80]
        if head.startswith(b"HTTP/"):
            what = f"an HTTP server? it said {said.decode('latin-1')!r}"
        elif head.startswith(b"SSH-"):
            what = f"an SSH server? it said {said.decode('latin-1')!r}"
        elif head[:1] in (b"\x15", b"\x16") and head[1:2] == b"\x03":
            what = (
                "a TLS listener? set security.protocol=SSL or SASL_SSL in --command-config"
                if not self.settings.tls
                else "TLS where a Kafka answer was expected"
            )
        else:
            what = f"its first bytes: {head[:16]!r}"
        return (
            f"{self.address} answered something that is not the Kafka protocol ({what}); "
            "is it a Kafka listener's address?"
        )

    def _closed_unanswered(self) -> str:
        hint = (
            "is it a Kafka listener's address, or one that wants TLS (security.protocol=SSL "
            "or SASL_SSL in --command-config)?"
            if not self.settings.tls
            else "is it a Kafka listener's address?"
        )
        return f"{self.address} closed the connection without answering ApiVersions: {hint}"

    def _decode(self, api_key: int, version: int, payload: bytes) -> dict[str, Any]:
        spec = lookup(api_key, version)
        assert spec is not None
        pos = 4
        if spec.response_header_v1:
            count, pos = read_uvarint(payload, pos)
            for _ in range(count):
                _tag, pos = read_uvarint(payload, pos)
                size, pos = read_uvarint(payload, pos)
                pos += size
        return spec.decode_response(payload, pos)

    def version(self, api_key: int) -> int:
        """The newest version of ``api_key`` both sides know (UNSUPPORTED_VERSION if none)."""
        broker = self.versions.get(api_key)
        ours = served_range(api_key)
        if broker is None or ours is None:
            raise KafkaError(
                ErrorCode.UNSUPPORTED_VERSION, f"{self.address} does not serve API {api_key}"
            )
        lo = max(broker[0], ours[0], CLIENT_MIN.get(api_key, 0))
        hi = min(broker[1], ours[1], CLIENT_MAX.get(api_key, ours[1]))
        if lo > hi:
            raise KafkaError(
                ErrorCode.UNSUPPORTED_VERSION,
                f"{self.address} serves API {api_key} v{broker[0]}-{broker[1]}, "
                f"this client v{max(ours[0], CLIENT_MIN.get(api_key, 0))}-{hi}",
            )
        return hi

    def supports(self, api_key: int) -> bool:
        try:
            self.version(api_key)
        except KafkaError:
            return False
        return True

    async def request(
        self, api_key: int, body: Mapping[str, Any], version: int | None = None
    ) -> tuple[int, dict[str, Any]]:
        """(version used, decoded response)."""
        v = self.version(api_key) if version is None else version
        return v, self._decode(api_key, v, await self._exchange(api_key, v, body))

    # --- start-up -----------------------------------------------------------------------
    async def _api_versions(self) -> None:
        body = {"client_software_name": "kgroupd-admin", "client_software_version": "1"}
        payload = await self._exchange(API_VERSIONS, 3, body)
        # a broker without v3 answers UNSUPPORTED_VERSION in v0's shape
        (code,) = struct.unpack_from(">h", payload, 4)
        version = 3 if code != ErrorCode.UNSUPPORTED_VERSION else 0
        if version == 0:
            payload = await self._exchange(API_VERSIONS, 0, {})
        resp = self._decode(API_VERSIONS, version, payload)
        check(resp["error_code"])
        self.versions = {
            k["api_key"]: (k["min_version"], k["max_version"]) for k in resp["api_keys"]
        }

    async def _authenticate(self) -> None:
        s = self.settings
        assert s.sasl_mechanism is not None and s.username is not None
        assert s.password is not None
        _, hs = await self.request(SASL_HANDSHAKE, {"mechanism": s.sasl_mechanism})
        if hs["error_code"] != 0:
            raise KafkaError(
                hs["error_code"],
                f"{s.sasl_mechanism} is not enabled on {self.address} "
                f"(it offers {', '.join(hs['mechanisms']) or 'none'})",
            )
        if s.sasl_mechanism == "PLAIN":
            await self._sasl_step(b"\0" + s.username.encode() + b"\0" + s.password.encode())
            return
        from scramp import ScramClient, ScramException

        scram = ScramClient([s.sasl_mechanism], s.username, s.password)
        server_first = await self._sasl_step(scram.get_client_first().encode())
        try:
            scram.set_server_first(server_first.decode())
            server_final = await self._sasl_step(scram.get_client_final().encode())
            scram.set_server_final(server_final.decode())
        except ScramException as exc:
            raise KafkaError(ErrorCode.SASL_AUTHENTICATION_FAILED, str(exc)) from None

    async def _sasl_step(self, data: bytes) -> bytes:
        _, resp = await self.request(SASL_AUTHENTICATE, {"auth_bytes": data})
        check(resp["error_code"], resp.get("error_message"))
        return bytes(resp["auth_bytes"])

    async def close(self) -> None:
        self.writer.close()
        with contextlib.suppress(ConnectionError, OSError, asyncio.TimeoutError):
            await asyncio.wait_for(self.writer.wait_closed(), 2)


_RETRIABLE = {
    ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
    ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_COORDINATOR,
}


class AdminClient:
    """Connections to one cluster, opened as needed and closed together."""

    def __init__(self, bootstrap: str, settings: ClientSettings) -> None:
        self.bootstrap = bootstrap
        self.settings = settings
        self._conns: dict[tuple[str, int], Connection] = {}
        self.brokers: dict[int, tuple[str, int]] = {}
        self.controller_id = -1

    async def __aenter__(self) -> AdminClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def connect(self, host: str, port: int) -> Connection:
        conn = self._conns.get((host, port))
        if conn is None:
            conn = self._conns[(host, port)] = await Connection.open(host, port, self.settings)
        return conn

    async def any(self) -> Connection:
        """The bootstrap connection (the first address of --bootstrap-server that answers)."""
        last: Exception | None = None
        for address in self.bootstrap.split(","):
            try:
                return await self.connect(*split_address(address))
            except ConnectError as exc:
                last = exc
        assert last is not None
        raise last

    async def node(self, node_id: int) -> Connection:
        if node_id not in self.brokers:
            await self.metadata([])
        if node_id not in self.brokers:
            raise KafkaError(ErrorCode.LEADER_NOT_AVAILABLE, f"no broker with id {node_id}")
        return await self.connect(*self.brokers[node_id])

    async def all_nodes(self) -> list[Connection]:
        if not self.brokers:
            await self.metadata([])
        return [await self.connect(*addr) for addr in self.brokers.values()]

    async def metadata(self, topics: list[str] | None) -> dict[str, Any]:
        """Metadata for ``topics`` (None: all); remembers the brokers."""
        conn = await self.any()
        body = {
            "topics": None if topics is None else [{"name": t} for t in topics],
            "allow_auto_topic_creation": False,
        }
        _, resp = await conn.request(METADATA, body)
        self.brokers = {b["node_id"]: (b["host"], b["port"]) for b in resp["brokers"]}
        self.controller_id = resp["controller_id"]
        return resp

    async def controller(self) -> Connection:
        await self.metadata([])
        if self.controller_id in self.brokers:
            return await self.node(self.controller_id)
        return await self.any()

    async def coordinator(self, group: str) -> Connection:
        for attempt in itertools.count():
            conn = await self.any()
            version, resp = await conn.request(
                FIND_COORDINATOR, {"key": group, "key_type": 0, "coordinator_keys": [group]}
            )
            found = resp["coordinators"][0] if version >= 4 else resp
            code = found["error_code"]
            if code in _RETRIABLE and attempt < 20:
                await asyncio.sleep(0.1 * min(attempt + 1, 5))
                continue
            check(code, found.get("error_message"))
            return await self.connect(found["host"], found["port"])
        raise AssertionError("unreachable")

    async def group_request(
        self, group: str, api_key: int, body: Mapping[str, Any], error_of: Any
    ) -> tuple[int, dict[str, Any]]:
        """A request to ``group``'s coordinator, found again (and the request retried) while
        ``error_of(version, response)`` is a coordinator error."""
        for attempt in itertools.count():
            conn = await self.coordinator(group)
            version, resp = await conn.request(api_key, body)
            if error_of(version, resp) in _RETRIABLE and attempt < 20:
                await asyncio.sleep(0.1 * min(attempt + 1, 5))
                continue
            return version, resp
        raise AssertionError("unreachable")

    async def close(self) -> None:
        conns, self._conns = list(self._conns.values()), {}
        for conn in conns:
            await conn.close()
