"""Compressed batches that decompress to more than a MiB are validated on a worker thread
(issue 26), with the same outcome as on the loop: a good one is appended at the next offset,
one whose records lie is refused with Kafka's code and nothing stored, keyless records in a
compacted topic get their record errors, and acks=0 gets no answer while the batch is kept.
The connection answers its requests in order meanwhile. A topic's timestamp bounds (KIP-937)
are checked in the same worker pass, with the answer a small batch gets."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from kgroupd.broker.log import codecs, compaction, validate
from kgroupd.broker.log.validate import INLINE_EXPANDED, OffLoop, validate_batch
from kgroupd.broker.net.server import KafkaServer
from kgroupd.protocol.errors import ErrorCode
from kgroupd.protocol.records import parse_header
from tests.integration.test_produce_validation import (
    CODECS,
    header_set,
    latest,
    produce,
)
from tests.support.kafka_wire import (
    WireClient,
    build_batch,
    create_topic,
    only_partition,
    produce_request,
)

RECORDS = 2000  # of 1 KiB: about 2 MiB once decompressed


def big(codec: int, keyless: bool = False) -> bytes:
    keys = [None if keyless and i % 500 == 7 else b"k%d" % i for i in range(RECORDS)]
    return build_batch([(key, bytes(1024), []) for key in keys], compression=codec)


def test_such_a_batch_is_one_the_loop_hands_off() -> None:
    batch = big(CODECS["zstd"])
    with pytest.raises(OffLoop):
        validate_batch(batch, parse_header(batch), "t", 0, inline=INLINE_EXPANDED)
    validate_batch(batch, parse_header(batch), "t", 0)


@pytest.mark.parametrize("name", ["gzip", "lz4", "zstd", "snappy"])
async def test_big_compressed_batches_are_validated_off_the_loop_as_on_it(
    server: KafkaServer, name: str
) -> None:
    async with await WireClient.connect(server.port) as wire:
        await _check(wire, CODECS[name])


async def _check(wire: WireClient, codec: int) -> None:
    await create_topic(wire, "off", 1)
    good = big(codec)
    got = await produce(wire, "off", good)
    assert (got["error_code"], got["base_offset"]) == (0, 0)
    # one record more than the batch holds: refused, the log unmoved
    lie = header_set(good, count=RECORDS + 1, last_delta=RECORDS)
    got = await produce(wire, "off", lie)
    assert got["error_code"] == ErrorCode.INVALID_RECORD and got["error_message"]
    assert await latest(wire, "off") == RECORDS
    # pipelined behind a small batch and ahead of another: answered in order, appended in order
    small = build_batch([(b"k", b"v", [])])
    corrs = await wire.send_many(
        [(0, 8, produce_request("off", 0, b)) for b in (small, good, small)]
    )
    offsets = []
    for corr in corrs:
        part = only_partition(await wire.receive(0, 8, corr))
        assert part["error_code"] == 0
        offsets.append(part["base_offset"])
    assert offsets == [RECORDS, RECORDS + 1, 2 * RECORDS + 1]
    # acks=0: no answer, the batch kept
    await wire.send(0, 8, produce_request("off", 0, good, acks=0))
    assert await latest(wire, "off") == 3 * RECORDS + 2
    # keyless records in a compacted topic: the record errors, as on the loop
    await create_topic(wire, "off-compacted", 1, {"cleanup.policy": "compact"})
    got = await produce(wire, "off-compacted", big(codec, keyless=True))
    assert got["error_code"] == ErrorCode.INVALID_RECORD
    assert [e["batch_index"] for e in got["record_errors"]] == [7, 507, 1007, 1507]
    assert await latest(wire, "off-compacted") == 0


HOUR_MS = 3_600_000
BOUNDS = {"message.timestamp.before.max.ms": "60000", "message.timestamp.after.max.ms": "60000"}


def stamped(codec: int, value: bytes, now: int, bad: bool = True) -> bytes:
    """RECORDS records at ``now``, but (if ``bad``) record 3 two minutes before, 1500 two hours
    after."""
    off = {3: now - 120_000, 1500: now + 2 * HOUR_MS} if bad else {}
    specs = [(b"k%d" % i, value, [], off.get(i, now)) for i in range(RECORDS)]
    return build_batch(specs, compression=codec)


def _answer(part: dict) -> tuple:
    """A refusal without the bounds of its record errors' messages (they move with the clock)."""
    errors = [
        (e["batch_index"], e["batch_index_error_message"].split(" The timestamp should")[0])
        for e in part["record_errors"]
    ]
    fields = ("error_code", "error_message", "base_offset", "log_start_offset")
    return tuple(part[f] for f in fields), errors


@pytest.mark.parametrize("name", ["gzip", "lz4", "zstd", "snappy"])
async def test_timestamp_bounds_are_checked_off_the_loop_as_on_it(
    server: KafkaServer, name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    codec = CODECS[name]
    # each decompression of a produced batch: (on the loop's thread?, the most it may give)
    seen: list[tuple[bool, int]] = []

    def watched(codec: int, data: Any, limit: int) -> bytes:
        seen.append((threading.current_thread() is threading.main_thread(), limit))
        return codecs.decompress(codec, data, limit)

    monkeypatch.setattr(validate, "decompress", watched)
    monkeypatch.setattr(compaction, "decompress", watched)
    now = int(time.time() * 1000)
    bad, small_bad = stamped(codec, bytes(1024), now), stamped(codec, b"v", now)
    with pytest.raises(OffLoop):  # the big one goes to the worker, the small one stays
        validate_batch(bad, parse_header(bad), "t", 0, inline=INLINE_EXPANDED)
    validate_batch(small_bad, parse_header(small_bad), "t", 0, inline=INLINE_EXPANDED)
    seen.clear()
    async with (
        await WireClient.connect(server.port) as wire,
        await WireClient.connect(server.port) as bystander,
    ):
        await create_topic(wire, "ts-off", 1, BOUNDS)
        corr = await wire.send(0, 9, produce_request("ts-off", 0, bad))
        assert await latest(bystander, "ts-off") == 0  # served while the batch is checked
        big = only_partition(await wire.receive(0, 9, corr))
        # a MiB tried on the loop, then decompressed once, on the worker, for both checks
        assert seen == [(True, INLINE_EXPANDED), (False, compaction.EXPANDED_LIMIT)]
        small = await produce(wire, "ts-off", small_bad, version=9)
        assert seen[2:] == [(True, INLINE_EXPANDED)]  # once, on the loop
        assert await latest(wire, "ts-off") == 0  # neither kept
        fresh = stamped(codec, bytes(1024), int(time.time() * 1000), bad=False)
        good = await produce(wire, "ts-off", fresh)
        assert (good["error_code"], good["base_offset"]) == (0, 0)
        assert await latest(wire, "ts-off") == RECORDS
    assert big["error_code"] == ErrorCode.INVALID_TIMESTAMP
    assert _answer(big) == _answer(small)
    assert [i for i, _ in _answer(big)[1]] == [3, 1500]
    assert _answer(big)[1][1][1] == (
        f"Timestamp {now + 2 * HOUR_MS} of message with offset 1500 is out of range."
    )
    for e in big["record_errors"]:
        low, high = e["batch_index_error_message"].split("within [")[1].rstrip("]").split(", ")
        assert int(high) - int(low) == 120_000
