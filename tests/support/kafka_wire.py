"""A small raw Kafka wire client for tests: one socket, request structs in, dicts out.

    async with await WireClient.connect(port) as wire:
        resp = await wire.request(0, 8, produce_request("t", 0, build_batch([(b"k", b"v")])))
        assert resp["responses"][0]["partition_responses"][0]["error_code"] == 0

Requests are framed with an int32 size prefix and request header v1 (api_key, api_version,
correlation_id, client_id), or v2 (plus empty tagged fields) for flexible versions. The body
is a request struct instance (``lookup(api_key, version).request(...)``) or a dict of its
fields (nested dicts and lists of dicts for structs and arrays of structs). Responses are
read back with response header v0 (the correlation id; v1 adds tagged fields, which are
skipped) and decoded with ``lookup(api_key, version).response`` into plain dicts.

Several requests may be in flight on one connection (``send`` then ``receive``): the broker
answers in request order, and ``receive`` checks the correlation id.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import struct
from collections.abc import Iterable, Iterator, Mapping, Sequence
from types import TracebackType
from typing import Any

from aiokafka.protocol.struct import Struct
from aiokafka.record.default_records import DefaultRecordBatchBuilder
from aiokafka.record.memory_records import MemoryRecords

from kgroupd.protocol.framing import read_uvarint
from kgroupd.protocol.messages import MessageSpec, lookup

_INT32 = struct.Struct(">i")
_HEADER_V1 = struct.Struct(">hhih")  # api_key, api_version, correlation_id, client_id length

# (key, value, headers) or (key, value, headers, timestamp_ms)
RecordSpec = tuple[Any, ...]


def spec_for(api_key: int, version: int) -> MessageSpec:
    spec = lookup(api_key, version)
    if spec is None:
        raise ValueError(f"no message definition for api key {api_key} v{version}")
    return spec


def encode_request(
    api_key: int,
    version: int,
    correlation_id: int,
    body: Struct | Mapping[str, Any],
    client_id: str | None = "kafka-wire",
) -> bytes:
    """One size-prefixed request frame."""
    spec = spec_for(api_key, version)
    payload = body.encode() if isinstance(body, Struct) else spec.encode_request(body)
    cid = b"" if client_id is None else client_id.encode()
    header = _HEADER_V1.pack(
        api_key, version, correlation_id, -1 if client_id is None else len(cid)
    )
    header += cid
    if spec.flexible:
        header += b"\x00"  # request header v2: no tagged fields
    frame = header + payload
    return _INT32.pack(len(frame)) + frame


def decode_response(api_key: int, version: int, payload: bytes) -> tuple[int, dict[str, Any]]:
    """(correlation id, body as a dict) from a response frame without its size prefix."""
    spec = spec_for(api_key, version)
    (corr,) = _INT32.unpack_from(payload, 0)
    pos = 4
    if spec.response_header_v1:
        count, pos = read_uvarint(payload, pos)
        for _ in range(count):
            _tag, pos = read_uvarint(payload, pos)
            size, pos = read_uvarint(payload, pos)
            pos += size
    return corr, spec.decode_response(payload, pos)


class WireClient:
    """A raw connection to a broker."""

    def __init__(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        client_id: str | None = "kafka-wire",
        timeout: float = 10.0,
    ) -> None:
        self.reader = reader
        self.writer = writer
        self.client_id = client_id
        self.timeout = timeout
        self._corr = itertools.count(1)

    @classmethod
    async def connect(
        cls, port: int, host: str = "127.0.0.1", client_id: str | None = "kafka-wire"
    ) -> WireClient:
        reader, writer = await asyncio.open_connection(host, port)
        return cls(reader, writer, client_id)

    async def send(self, api_key: int, version: int, body: Struct | Mapping[str, Any]) -> int:
        """Write one request; returns its correlation id."""
        corr = next(self._corr)
        self.writer.write(encode_request(api_key, version, corr, body, self.client_id))
        await self.writer.drain()
        return corr

    async def send_many(
        self, requests: Sequence[tuple[int, int, Struct | Mapping[str, Any]]]
    ) -> list[int]:
        """Write several (api_key, version, body) requests in one write; their correlation
        ids. The broker reads them together and answers them in order."""
        corrs = [next(self._corr) for _ in requests]
        self.writer.write(
            b"".join(
                encode_request(key, version, corr, body, self.client_id)
                for corr, (key, version, body) in zip(corrs, requests, strict=True)
            )
        )
        await self.writer.drain()
        return corrs

    async def read_frame(self) -> bytes:
        """The next response frame (without its size prefix)."""
        (size,) = _INT32.unpack(await asyncio.wait_for(self.reader.readexactly(4), self.timeout))
        return await asyncio.wait_for(self.reader.readexactly(size), self.timeout)

    async def receive(self, api_key: int, version: int, corr: int) -> dict[str, Any]:
        """Read the next response, which must answer request ``corr``, and decode it."""
        got, body = decode_response(api_key, version, await self.read_frame())
        if got != corr:
            raise AssertionError(f"response for correlation id {got}, expected {corr}")
        return body

    async def request(
        self, api_key: int, version: int, body: Struct | Mapping[str, Any]
    ) -> dict[str, Any]:
        """Send one request and return its decoded response."""
        corr = await self.send(api_key, version, body)
        return await self.receive(api_key, version, corr)

    async def close(self) -> None:
        self.writer.close()
        with contextlib.suppress(ConnectionError, OSError):
            await self.writer.wait_closed()

    async def __aenter__(self) -> WireClient:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()


# Record batches ----------------------------------------------------------------------------


def build_batch(
    records: Iterable[RecordSpec],
    *,
    compression: int = 0,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    timestamp_ms: int | None = None,
) -> bytes:
    """A magic-2 record batch (base offset 0) built by aiokafka's builder.

    Each record is (key, value, headers) or (key, value, headers, timestamp_ms); headers are
    (str, bytes) pairs. ``timestamp_ms`` is the default record timestamp (None: now).
    """
    builder = DefaultRecordBatchBuilder(
        2, compression, 0, producer_id, producer_epoch, base_sequence, 1 << 30
    )
    for offset, rec in enumerate(records):
        key, value, headers = rec[0], rec[1], list(rec[2])
        ts = rec[3] if len(rec) > 3 else timestamp_ms
        if builder.append(offset, ts, key, value, headers) is None:
            raise ValueError("record does not fit the batch")
    return bytes(builder.build())


def iter_records(data: bytes) -> Iterator[Any]:
    """Every record in a record set (as returned by Fetch), with its batch's offsets."""
    records = MemoryRecords(data)
    while records.has_next():
        batch = records.next_batch()
        if batch is None:
            break
        yield from batch


# Request bodies ----------------------------------------------------------------------------


def produce_request(
    topic: str, partition: int, batch: bytes, acks: int = -1, timeout_ms: int = 10_000
) -> dict[str, Any]:
    """A Produce body for one batch to one partition (by name: v3-v12)."""
    return {
        "transactional_id": None,
        "acks": acks,
        "timeout_ms": timeout_ms,
        "topic_data": [{"name": topic, "partition_data": [{"index": partition, "records": batch}]}],
    }


def fetch_request(
    topic: str,
    partition: int,
    offset: int,
    *,
    max_wait_ms: int = 0,
    min_bytes: int = 1,
    max_bytes: int = 1 << 20,
    partition_max_bytes: int = 1 << 20,
    current_leader_epoch: int = -1,
) -> dict[str, Any]:
    """A Fetch body for one partition (by name: v4-v12); fields a version lacks are ignored."""
    return {
        "replica_id": -1,
        "max_wait_ms": max_wait_ms,
        "min_bytes": min_bytes,
        "max_bytes": max_bytes,
        "isolation_level": 0,
        "session_id": 0,
        "session_epoch": -1,
        "topics": [
            {
                "topic": topic,
                "partitions": [
                    {
                        "partition": partition,
                        "current_leader_epoch": current_leader_epoch,
                        "fetch_offset": offset,
                        "log_start_offset": -1,
                        "partition_max_bytes": partition_max_bytes,
                    }
                ],
            }
        ],
        "forgotten_topics_data": [],
        "rack_id": "",
    }


def list_offsets_request(
    topic: str, partitions: Sequence[int], timestamp: int, current_leader_epoch: int = -1
) -> dict[str, Any]:
    """A ListOffsets body: one timestamp (-2 earliest, -1 latest) for each partition."""
    return {
        "replica_id": -1,
        "isolation_level": 0,
        "topics": [
            {
                "name": topic,
                "partitions": [
                    {
                        "partition_index": p,
                        "current_leader_epoch": current_leader_epoch,
                        "timestamp": timestamp,
                        "max_num_offsets": 1,
                    }
                    for p in partitions
                ],
            }
        ],
    }


def create_topics_request(
    topic: str, partitions: int = 1, configs: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """A CreateTopics body for one topic."""
    return {
        "topics": [
            {
                "name": topic,
                "num_partitions": partitions,
                "replication_factor": 1,
                "assignments": [],
                "configs": [{"name": k, "value": v} for k, v in (configs or {}).items()],
            }
        ],
        "timeout_ms": 10_000,
        "validate_only": False,
    }


async def create_topic(
    wire: WireClient, name: str, partitions: int = 1, configs: Mapping[str, str] | None = None
) -> None:
    """CreateTopics (v2) for one topic; fails unless the broker answers NONE."""
    resp = await wire.request(19, 2, create_topics_request(name, partitions, configs))
    (result,) = resp["topics"]
    if result["error_code"] != 0:
        raise AssertionError(f"CreateTopics {name!r}: {result}")


def only_partition(response: Mapping[str, Any]) -> dict[str, Any]:
    """The single partition answer of a one-topic, one-partition Produce/Fetch/ListOffsets."""
    (topic,) = response["responses"] if "responses" in response else response["topics"]
    (part,) = (
        topic["partition_responses"] if "partition_responses" in topic else topic["partitions"]
    )
    return dict(part)
