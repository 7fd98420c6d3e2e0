"""Helpers for the consumer-group tests: a raw Kafka-protocol connection, a DescribeGroups view,
and a bounded poll for conditions no client offers an event for.

The raw connection speaks request header v1 (int16 api_key, int16 api_version, int32
correlation id, int16-length client id) and reads response header v0 (int32 correlation
id); bodies are encoded and decoded with the broker's own message registry
(``kgroupd.protocol.messages.lookup``), so only the non-flexible versions the broker serves are
usable, which covers every group API version it serves today.
"""

from __future__ import annotations

import asyncio
import struct
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from aiokafka.coordinator.protocol import ConsumerProtocolMemberAssignment

from kgroupd.protocol.messages import lookup

# Kafka API keys used by the group tests.
FIND_COORDINATOR = 10
JOIN_GROUP = 11
HEARTBEAT = 12
LEAVE_GROUP = 13
SYNC_GROUP = 14
DESCRIBE_GROUPS = 15
LIST_GROUPS = 16
OFFSET_COMMIT = 8
OFFSET_FETCH = 9
DELETE_GROUPS = 42
OFFSET_DELETE = 47


class RawConnection:
    """One TCP connection to the broker; ``call`` sends a request and awaits its answer."""

    def __init__(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, client_id: str
    ) -> None:
        self.reader = reader
        self.writer = writer
        self.client_id = client_id
        self._corr = 0

    @classmethod
    async def open(cls, bootstrap: str, client_id: str = "raw-test") -> RawConnection:
        host, _, port = bootstrap.rpartition(":")
        reader, writer = await asyncio.open_connection(host, int(port))
        return cls(reader, writer, client_id)

    async def close(self) -> None:
        self.writer.close()
        await self.writer.wait_closed()

    async def __aenter__(self) -> RawConnection:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def frame(self, api_key: int, version: int, **fields: Any) -> tuple[int, bytes]:
        """(correlation id, the framed request) for ``fields``."""
        spec = lookup(api_key, version)
        assert spec is not None, f"api key {api_key} v{version} is not served"
        assert not spec.flexible, "the raw helper only speaks request header v1"
        self._corr += 1
        client = self.client_id.encode()
        header = struct.pack(">hhih", api_key, version, self._corr, len(client)) + client
        payload = header + spec.encode_request(fields)
        return self._corr, struct.pack(">i", len(payload)) + payload

    async def read_frame(self, timeout: float = 10.0) -> tuple[int, bytes]:
        size = struct.unpack(">i", await asyncio.wait_for(self.reader.readexactly(4), timeout))[0]
        data = await asyncio.wait_for(self.reader.readexactly(size), timeout)
        return struct.unpack(">i", data[:4])[0], data[4:]

    async def call(
        self, api_key: int, version: int, timeout: float = 10.0, **fields: Any
    ) -> dict[str, Any]:
        """Send one request, await its response, decode it into a dict of its fields."""
        corr, data = self.frame(api_key, version, **fields)
        self.writer.write(data)
        await self.writer.drain()
        got, body = await self.read_frame(timeout)
        assert got == corr, f"correlation id {got}, expected {corr}"
        return decode_response(api_key, version, body)


def decode_response(api_key: int, version: int, body: bytes) -> dict[str, Any]:
    spec = lookup(api_key, version)
    assert spec is not None
    return spec.decode_response(body)


def decode_assignment(data: bytes | None) -> dict[str, list[int]]:
    """A consumer-protocol assignment as {topic: sorted partitions} (empty bytes: {})."""
    if not data:
        return {}
    parsed = ConsumerProtocolMemberAssignment.decode(data)
    return {topic: sorted(parts) for topic, parts in parsed.assignment if parts}


@dataclass(frozen=True)
class MemberView:
    member_id: str
    group_instance_id: str | None
    client_id: str
    assignment: dict[str, list[int]]


@dataclass(frozen=True)
class GroupView:
    error_code: int
    state: str
    protocol_type: str
    protocol: str
    members: dict[str, MemberView]

    def partitions(self, topic: str) -> list[int]:
        """Every partition of ``topic`` assigned to some member (with repeats, sorted)."""
        return sorted(p for m in self.members.values() for p in m.assignment.get(topic, []))


async def describe_group(conn: RawConnection, group: str) -> GroupView:
    """DescribeGroups v4 of one group, decoded (consumer-protocol assignments parsed)."""
    resp = await conn.call(DESCRIBE_GROUPS, 4, groups=[group], include_authorized_operations=False)
    (g,) = resp["groups"]
    assert g["group_id"] == group
    consumer = g["protocol_type"] == "consumer"
    members = {
        m["member_id"]: MemberView(
            m["member_id"],
            m["group_instance_id"],
            m["client_id"],
            decode_assignment(m["member_assignment"]) if consumer else {},
        )
        for m in g["members"]
    }
    return GroupView(
        g["error_code"], g["group_state"], g["protocol_type"], g["protocol_data"], members
    )


async def wait_until(
    check: Callable[[], Awaitable[bool]] | Callable[[], bool],
    timeout: float,
    what: str,
    interval: float = 0.05,
) -> float:
    """Poll ``check`` until it holds; fail after ``timeout`` seconds. Returns the time taken.

    For conditions no client signals with an event (a consumer's assignment, a group's
    state as DescribeGroups reports it).
    """
    loop = asyncio.get_running_loop()
    start = loop.time()
    deadline = start + timeout
    while True:
        result = check()
        if not isinstance(result, bool):
            result = await result
        if result:
            return loop.time() - start
        if loop.time() >= deadline:
            raise AssertionError(f"timed out after {timeout:.1f} s waiting for {what}")
        await asyncio.sleep(interval)


def struct_to_dict(resp: Any) -> dict[str, Any]:
    """An aiokafka client's response object as a dict of its (aiokafka-named) fields."""
    return _struct_values(type(resp).SCHEMA, tuple(resp.get_item(n) for n in resp.SCHEMA.names))


def _struct_values(schema: Any, values: tuple[Any, ...]) -> dict[str, Any]:
    from aiokafka.protocol.types import Array, Schema

    out: dict[str, Any] = {}
    for name, field, value in zip(schema.names, schema.fields, values, strict=True):
        if isinstance(field, Schema):
            value = _struct_values(field, value)
        elif isinstance(field, Array) and isinstance(field.array_of, Schema) and value is not None:
            value = [_struct_values(field.array_of, item) for item in value]
        out[name] = value
    return out
