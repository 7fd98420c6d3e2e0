"""Topic data for the segment-file tests, as pre-encoded raw Produce frames.

Every batch is one ~1 KiB record (``BATCH`` bytes a batch) whose value starts with its own
offset as 8 digits, so a reader checks each fetched batch where it is. A batch is made from
one encoded template by patching the value and redoing the CRC-32C (the trick of
``bench/bench_segments.py``): the client does little per batch.

    await produce_raw(port, "t", 1000)                    # offsets 0..999, 256 in flight
    assert await read_all(port, "t", 0, 1000, value_at()) == 1000
    await produce_many(port, ["t"], 4, 10**6)             # a million, several partitions
    await walk(port, "t", 0, 0, 10**6)                    # every batch header checked
"""

from __future__ import annotations

import asyncio
import struct
from pathlib import Path

from crc32c import crc32c

from tests.support.kafka_wire import (
    WireClient,
    build_batch,
    decode_response,
    encode_request,
    fetch_request,
    produce_request,
)

VALUE = 1000  # bytes of each record's value
MiB = 1024 * 1024
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_MARKER = b"\xab" * 8


def template(value: int = VALUE) -> tuple[bytearray, int]:
    """One batch (of one record with a ``value``-byte value) and where in it its value
    starts (patched per batch, CRC redone)."""
    batch = bytearray(build_batch([(None, _MARKER + b"v" * (value - 8), [])]))
    return batch, batch.index(_MARKER)


def value_at() -> int:
    """Where a batch's value starts (its first 8 bytes are its offset)."""
    return template()[1]


BATCH = len(template()[0])


def batches(n: int, first: int = 0) -> list[bytes]:
    batch, at = template()
    out = []
    for i in range(first, first + n):
        batch[at : at + 8] = b"%08d" % i
        struct.pack_into(">I", batch, 17, crc32c(bytes(batch[21:])))
        out.append(bytes(batch))
    return out


def produce_base_offset(frame: bytes) -> int:
    """The base offset a one-partition Produce v8 answer gives (its error must be NONE)."""
    _corr, body = decode_response(0, 8, frame)
    (part,) = body["responses"][0]["partition_responses"]
    assert part["error_code"] == 0, part
    return int(part["base_offset"])


async def produce_raw(port: int, topic: str, n: int, first: int = 0, window: int = 256) -> int:
    """Produce ``n`` batches as raw frames, ``window`` in flight, to partition 0 of a topic
    whose high watermark is ``first``; returns the last offset."""
    frames = [
        encode_request(0, 8, i, produce_request(topic, 0, b, acks=1), "raw")
        for i, b in enumerate(batches(n, first))
    ]
    last = -1
    async with await WireClient.connect(port) as wire:
        for start in range(0, n, window):
            chunk = frames[start : start + window]
            wire.writer.write(b"".join(chunk))
            await wire.writer.drain()
            for _ in chunk:
                frame = await wire.read_frame()
            resp = produce_base_offset(frame)
            assert resp == first + start + len(chunk) - 1, (resp, start)
            last = resp
    return last


class ProduceFrames:
    """Produce v8 frames (acks=1) of ``per_request`` batches, one to each of ``partitions``
    partitions of ``topic`` (batch ``i`` to partition ``i % partitions``), from one template
    frame: each frame patches the values (their batch's index in its partition) and CRCs."""

    def __init__(self, topic: str, partitions: int, value: int = VALUE) -> None:
        batch, at = template(value)
        self.batch_size = len(batch)
        body = {
            "transactional_id": None,
            "acks": 1,
            "timeout_ms": 30_000,
            "topic_data": [
                {
                    "name": topic,
                    "partition_data": [
                        {"index": p, "records": bytes(batch)} for p in range(partitions)
                    ],
                }
            ],
        }
        self.frame = bytearray(encode_request(0, 8, 0x5EED5EED, body, "raw"))
        self.corr_at = self.frame.index(_I32.pack(0x5EED5EED))
        self.starts = []
        pos = 0
        for _ in range(partitions):
            pos = self.frame.index(bytes(batch), pos)
            self.starts.append(pos)
            pos += len(batch)
        self.value_at = at

    def make(self, corr: int, index: int) -> bytes:
        """The frame with correlation id ``corr`` whose batches are each partition's
        ``index``-th (their values start with ``index``)."""
        frame = self.frame
        digits = b"%08d" % index
        for start in self.starts:
            frame[start + self.value_at : start + self.value_at + 8] = digits
            end = start + self.batch_size
            struct.pack_into(">I", frame, start + 17, crc32c(bytes(frame[start + 21 : end])))
        _I32.pack_into(frame, self.corr_at, corr)
        return bytes(frame)


async def produce_many(
    port: int,
    topic: str,
    partitions: int,
    per_partition: int,
    value: int = VALUE,
    window: int = 64,
) -> None:
    """``per_partition`` batches to each of ``partitions`` partitions, one batch to each
    partition a request, ``window`` requests in flight; every answer must be NONE and give
    the offsets in order."""
    frames = ProduceFrames(topic, partitions, value)
    async with await WireClient.connect(port) as wire:
        sent = answered = 0
        while answered < per_partition:
            burst = []
            while sent < per_partition and sent - answered < window:
                burst.append(frames.make(sent, sent))
                sent += 1
            if burst:
                wire.writer.write(b"".join(burst))
                await wire.writer.drain()
            for _ in range(min(sent - answered, window // 2) if sent < per_partition else 1):
                check_produce_answer(await wire.read_frame(), topic, partitions, answered)
                answered += 1


_PART_ANSWER = struct.Struct(">ihqqqih")  # Produce v8: a partition's answer, no record errors


def check_produce_answer(frame: bytes, topic: str, partitions: int, offset: int) -> None:
    """A Produce v8 answer (read by hand: cheaper than decoding a million of them) to request
    ``offset`` of ``produce_many``: every partition NONE at base offset ``offset``."""
    name = topic.encode()
    head = struct.pack(">iih", offset, 1, len(name)) + name + struct.pack(">i", partitions)
    assert frame.startswith(head), (frame[: len(head)], head)
    at = len(head)
    for p in range(partitions):
        index, code, base, _append, _start, errors, message = _PART_ANSWER.unpack_from(frame, at)
        assert (index, code, base, errors, message) == (p, 0, offset, 0, -1), (p, code, base)
        at += _PART_ANSWER.size
    assert len(frame) == at + 4  # throttle time


async def read_all(port: int, topic: str, start: int, end: int, value_at: int) -> int:
    """Fetch [start, end) of partition 0 and check every batch: contiguous offsets, each
    value its offset. Returns how many batches came back."""
    return await walk(port, topic, 0, start, end, value_at)


async def walk(
    port: int,
    topic: str,
    partition: int,
    start: int,
    end: int,
    value_at: int | None = None,
    max_bytes: int = 8 * MiB,
) -> int:
    """Fetch [start, end) of a partition by walking batch headers: offsets contiguous, one
    record a batch, and (``value_at``) each value starting with its offset. Returns how many
    batches came back."""
    offset = start
    seen = 0
    async with await WireClient.connect(port) as wire:
        while offset < end:
            req = fetch_request(
                topic, partition, offset, max_bytes=max_bytes, partition_max_bytes=max_bytes
            )
            resp = await wire.request(1, 11, req)
            ((part,),) = [t["partitions"] for t in resp["responses"]]
            assert part["error_code"] == 0, part
            data = part["records"] or b""
            assert data, f"nothing at {offset} below {end}"
            pos = 0
            while pos < len(data):
                base = _I64.unpack_from(data, pos)[0]
                length = _I32.unpack_from(data, pos + 8)[0] + 12
                records = _I32.unpack_from(data, pos + 57)[0]
                if base >= end:
                    break
                if base >= offset:  # the first batch may start before the offset asked
                    assert base == offset, (base, offset)
                    assert records == 1, (base, records)
                    if value_at is not None:
                        assert data[pos + value_at : pos + value_at + 8] == b"%08d" % base
                    offset = base + 1
                    seen += 1
                pos += length
    return seen


def rss(pid: int) -> int:
    """VmRSS of a process, in bytes."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


class RssSampler:
    """The largest VmRSS of a process, sampled every ``every`` seconds while in use."""

    def __init__(self, pid: int, every: float = 0.2) -> None:
        self.pid = pid
        self.every = every
        self.peak = 0
        self._task: asyncio.Task[None] | None = None

    async def _run(self) -> None:
        while True:
            self.peak = max(self.peak, rss(self.pid))
            await asyncio.sleep(self.every)

    async def __aenter__(self) -> RssSampler:
        self._task = asyncio.create_task(self._run())
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._task is not None
        self._task.cancel()
        self.peak = max(self.peak, rss(self.pid))
