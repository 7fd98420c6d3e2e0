"""bench_groups.py's wire: request frames encoded with ``kgroupd.protocol.messages`` (header
v1, per-round fields patched into the bytes), the few answers it decodes by hand, and the raw
asyncio connection every client of it is built on."""

from __future__ import annotations

import asyncio
import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import _harness as h

_SIZE = struct.Struct(">i")
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_HDR = struct.Struct(">ihhih")  # size, api key, version, correlation id, client id length
CLIENT = b"bench"
PROTOCOL = "range"
TOPIC = "bench-groups-topic"

# error codes the set-up state machine understands
NONE, ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID, REBALANCE_IN_PROGRESS, MEMBER_ID_REQUIRED = (
    0,
    22,
    25,
    27,
    79,
)


# ---------------------------------------------------------------------------------------
# frames


def _str(s: str) -> bytes:
    b = s.encode()
    return _I16.pack(len(b)) + b


def subscription(topic: str, tag: bytes) -> bytes:
    """ConsumerProtocolSubscription v0: [topic], user data ``tag`` (changed per round)."""
    return _I16.pack(0) + _I32.pack(1) + _str(topic) + _I32.pack(len(tag)) + tag


def assignment(topic: str, partitions: Sequence[int]) -> bytes:
    """ConsumerProtocolAssignment v0: one topic, these partitions, no user data."""
    parts = b"".join(_I32.pack(p) for p in partitions)
    return (
        _I16.pack(0)
        + _I32.pack(1)
        + _str(topic)
        + _I32.pack(len(partitions))
        + parts
        + (_I32.pack(-1))
    )


def join_frame(group: str, member_id: str, metadata: bytes, session_ms: int) -> bytes:
    return h.request_frame(
        11,
        1,
        1,
        {
            "group_id": group,
            "session_timeout_ms": session_ms,
            "rebalance_timeout_ms": session_ms,
            "member_id": member_id,
            "protocol_type": "consumer",
            "protocols": [{"name": PROTOCOL, "metadata": metadata}],
        },
    )


def sync_frame(
    group: str, generation: int, member_id: str, assignments: Sequence[tuple[str, bytes]]
) -> bytes:
    return h.request_frame(
        14,
        1,
        2,
        {
            "group_id": group,
            "generation_id": generation,
            "member_id": member_id,
            "assignments": [{"member_id": m, "assignment": a} for m, a in assignments],
        },
    )


def sync_frame_fast(
    group: bytes, generation: int, member_id: str, assignments: Sequence[tuple[str, bytes]]
) -> bytes:
    """The same bytes as ``sync_frame`` (checked at start), built with struct: for the many
    groups case, where each sync needs the member id the join just returned."""
    body = [
        _I16.pack(len(group)),
        group,
        _I32.pack(generation),
        _str(member_id),
        _I32.pack(len(assignments)),
    ]
    for m, a in assignments:
        body += [_str(m), _I32.pack(len(a)), a]
    payload = b"".join(body)
    return _HDR.pack(10 + len(CLIENT) + len(payload), 14, 1, 2, len(CLIENT)) + CLIENT + payload


def heartbeat_frame(group: str, generation: int, member_id: str) -> bytes:
    return h.request_frame(
        12, 1, 3, {"group_id": group, "generation_id": generation, "member_id": member_id}
    )


def commit_frame(group: str, topic: str, partitions: int, offset: int) -> bytes:
    return h.request_frame(
        8,
        2,
        4,
        {
            "group_id": group,
            "generation_id_or_member_epoch": -1,
            "member_id": "",
            "retention_time_ms": -1,
            "topics": [
                {
                    "name": topic,
                    "partitions": [
                        {"partition_index": p, "committed_offset": offset + p}
                        for p in range(partitions)
                    ],
                }
            ],
        },
    )


def generation_at(group: str) -> int:
    """Byte offset of the generation in a SyncGroup/Heartbeat v1 frame (after the group)."""
    return 4 + 10 + len(CLIENT) + 2 + len(group.encode())


def with_generation(frame: bytes, at: int, generation: int) -> bytes:
    return frame[:at] + _I32.pack(generation) + frame[at + 4 :]


def _read_str(b: bytes, pos: int) -> tuple[str, int]:
    (n,) = _I16.unpack_from(b, pos)
    if n < 0:
        return "", pos + 2
    return b[pos + 2 : pos + 2 + n].decode(), pos + 2 + n


@dataclass
class JoinAnswer:
    error: int
    generation: int
    leader: str
    member_id: str
    members: int
    member_ids: list[str]


def parse_join(body: bytes, with_members: bool) -> JoinAnswer:
    """JoinGroup v1 response (after the size prefix; correlation id first)."""
    (error,) = _I16.unpack_from(body, 4)
    (generation,) = _I32.unpack_from(body, 6)
    _protocol, pos = _read_str(body, 10)
    leader, pos = _read_str(body, pos)
    member_id, pos = _read_str(body, pos)
    (count,) = _I32.unpack_from(body, pos)
    ids = []
    if with_members:
        pos += 4
        for _ in range(max(count, 0)):
            mid, pos = _read_str(body, pos)
            ids.append(mid)
            (n,) = _I32.unpack_from(body, pos)
            pos += 4 + max(n, 0)
    return JoinAnswer(error, generation, leader, member_id, count, ids)


def sync_error(body: bytes) -> int:
    """SyncGroup v1 / Heartbeat v1 response: correlation id, throttle time, error code."""
    return int(_I16.unpack_from(body, 8)[0])


# ---------------------------------------------------------------------------------------
# connections


class Conn(asyncio.Protocol):
    """Frames responses and hands each body (correlation id first) to ``on_frame``."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.buf = bytearray()
        self.lost: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.closing = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.lost.done():
            self.lost.set_result(None)
        if not self.closing:
            self.on_lost(exc)

    def on_lost(self, exc: Exception | None) -> None:
        pass

    def data_received(self, data: bytes) -> None:
        buf = self.buf
        buf += data
        pos = 0
        end = len(buf)
        while end - pos >= 4:
            (size,) = _SIZE.unpack_from(buf, pos)
            if end - pos - 4 < size:
                break
            self.on_frame(bytes(buf[pos + 4 : pos + 4 + size]))
            pos += 4 + size
        del buf[:pos]

    def on_frame(self, body: bytes) -> None:
        raise NotImplementedError

    def close(self) -> None:
        self.closing = True
        if self.transport is not None:
            self.transport.close()


async def connect_all(port: int, factories: Sequence[Callable[[], Conn]], limit: int = 64) -> list:
    """Open many connections, at most ``limit`` connects at a time (the listen backlog)."""
    loop = asyncio.get_running_loop()
    sem = asyncio.Semaphore(limit)

    async def one(factory: Callable[[], Conn]) -> Conn:
        async with sem:
            _, proto = await loop.create_connection(factory, "127.0.0.1", port)
            return proto

    return list(await asyncio.gather(*(one(f) for f in factories)))


class Failure(Exception):
    pass
