"""Compressed batches that decompress to more than a MiB are validated on a worker thread
(issue 26), with the same outcome as on the loop: a good one is appended at the next offset,
one whose records lie is refused with Kafka's code and nothing stored, keyless records in a
compacted topic get their record errors, and acks=0 gets no answer while the batch is kept.
The connection answers its requests in order meanwhile."""

from __future__ import annotations

import pytest

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
