"""Kafka's LogValidator: what the log takes of a batch a client produces.

A batch whose CRC-32C is right may still lie: a record's length past its fields, fewer
records than its count, a compressed body that does not decompress. Stored, it would fail
every consumer of the partition at that offset, so it is refused here, checked in Kafka's
order (UnifiedLog.analyzeAndValidateRecords, then LogValidator.validateBatch and its record
walk), each fault with Kafka's code:

* a base offset other than 0: INVALID_RECORD;
* a CRC-32C that does not match: CORRUPT_MESSAGE;
* a record count of 0 or less, or one that disagrees with the last offset delta; a control
  batch (only the broker writes transaction markers); an idempotent batch without a base
  sequence: INVALID_RECORD;
* records that do not walk exactly to the end of the batch, in the number its header says,
  with offset deltas 0, 1, 2, ... (``check_records``): INVALID_RECORD. A compressed batch is
  decompressed for it, as Kafka does, at most ``EXPANDED_LIMIT`` bytes (the claimed sizes
  checked before anything is allocated: ``codecs``);
* a compressed body that does not decompress, or an unknown codec: CORRUPT_MESSAGE (Kafka's
  decompression fails with a KafkaException: UNKNOWN_SERVER_ERROR, an internal error here);
  one that decompresses to more than the bound: MESSAGE_TOO_LARGE (a Java producer splits
  the batch and sends it again);
* records without a key in a compacted topic: INVALID_RECORD, with a record error for each
  and Kafka's message naming the first three.

Kafka answers the first faults with no error message (only its record errors carry one);
kgroupd says what was wrong in ``error_message`` for each.
"""

from __future__ import annotations

from kgroupd.broker.log.codecs import NAMES, BadCompression, TooLarge, decompress
from kgroupd.broker.log.compaction import EXPANDED_LIMIT
from kgroupd.protocol.errors import ErrorCode
from kgroupd.protocol.records import (
    COMPRESSION_MASK,
    CONTROL_BIT,
    HEADER_SIZE,
    BatchHeader,
    Buffer,
    CorruptBatch,
    InvalidRecords,
    check_crc,
    check_records,
)

__all__ = ["INLINE_EXPANDED", "OffLoop", "Refused", "validate_batch"]

# The most a compressed batch may decompress to on the event loop (about a millisecond of
# decompressing and checking): past it, ``validate_batch(..., inline=...)`` raises ``OffLoop``
# and produce validates the batch on a worker thread.
INLINE_EXPANDED = 1 << 20


class OffLoop(Exception):
    """The batch decompresses to more than the caller lets the event loop handle."""


class Refused(Exception):
    """The batch is refused with ``code``; ``record_errors`` are (batch index, message)."""

    def __init__(
        self, code: ErrorCode, message: str, record_errors: list[tuple[int, str]] | None = None
    ) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.record_errors = record_errors or []


def validate_batch(
    data: Buffer,
    header: BatchHeader,
    topic: str,
    partition: int,
    compacted: bool = False,
    limit: int = EXPANDED_LIMIT,
    inline: int | None = None,
) -> bytes | None:
    """Raise ``Refused`` unless ``data`` (one whole batch, ``header`` its header) may be
    appended to ``topic``-``partition``; ``OffLoop`` if it is compressed and decompresses to
    more than ``inline`` bytes (when given, below ``limit``): nothing decided yet. Returns a
    compressed batch's records decompressed (for the timestamp check: read once), else None."""
    if header.base_offset != 0:
        raise Refused(
            ErrorCode.INVALID_RECORD,
            f"The baseOffset of the record batch in the append to {topic}-{partition} should "
            f"be 0, but it is {header.base_offset}",
        )
    try:
        check_crc(data, 0, header)
    except CorruptBatch as exc:
        raise Refused(ErrorCode.CORRUPT_MESSAGE, str(exc)) from None
    count = header.record_count
    last = header.last_offset_delta
    if last < 0:
        raise Refused(
            ErrorCode.INVALID_RECORD,
            f"Batch has an invalid offset range: [0, {last}] in topic partition "
            f"{topic}-{partition}",
        )
    if count <= 0:
        raise Refused(
            ErrorCode.INVALID_RECORD,
            f"Invalid reported count for record batch: {count} in topic partition "
            f"{topic}-{partition}",
        )
    if count != last + 1:
        raise Refused(
            ErrorCode.INVALID_RECORD,
            f"Inconsistent batch offset range [0, {last}] and count of records {count} in "
            f"topic partition {topic}-{partition}",
        )
    if header.attributes & CONTROL_BIT:
        raise Refused(
            ErrorCode.INVALID_RECORD,
            f"Clients are not allowed to write control records in topic partition "
            f"{topic}-{partition}",
        )
    if header.producer_id >= 0 and header.base_sequence < 0:
        raise Refused(
            ErrorCode.INVALID_RECORD,
            f"Invalid sequence number {header.base_sequence} in record batch with producerId "
            f"{header.producer_id} in topic partition {topic}-{partition}",
        )
    keyless: list[int] | None = [] if compacted else None
    codec = header.attributes & COMPRESSION_MASK
    body = None
    try:
        if codec:
            if inline is not None and inline < limit:
                try:
                    body = _decompress(codec, data, inline)
                except Refused as exc:
                    if exc.code is ErrorCode.MESSAGE_TOO_LARGE:
                        raise OffLoop from None
                    raise
            else:
                body = _decompress(codec, data, limit)
            check_records(body, 0, len(body), count, keyless)
        else:
            check_records(data, HEADER_SIZE, len(data), count, keyless)
    except InvalidRecords as exc:
        where = f" ({NAMES[codec]}-compressed)" if codec else ""
        raise Refused(
            ErrorCode.INVALID_RECORD, f"{exc} in topic partition {topic}-{partition}{where}"
        ) from None
    if keyless:
        message = (
            "Compacted topic cannot accept message without key in topic partition "
            f"{topic}-{partition}"
        )
        errors = [(i, message) for i in keyless]
        shown = ", ".join(f"RecordError(batchIndex={i}, message='{m}')" for i, m in errors[:3])
        raise Refused(
            ErrorCode.INVALID_RECORD,
            f"One or more records have been rejected due to {len(errors)} record errors in "
            f"total, and only showing the first three errors at most: [{shown}]",
            errors,
        )
    return body


def _decompress(codec: int, data: Buffer, limit: int) -> bytes:
    if codec not in NAMES:
        raise Refused(ErrorCode.CORRUPT_MESSAGE, f"unknown compression codec {codec}")
    try:
        return decompress(codec, memoryview(data)[HEADER_SIZE:], limit)
    except TooLarge:
        raise Refused(
            ErrorCode.MESSAGE_TOO_LARGE,
            f"the {NAMES[codec]}-compressed records decompress to more than {limit} bytes",
        ) from None
    except BadCompression as exc:
        raise Refused(
            ErrorCode.CORRUPT_MESSAGE, f"the compressed records do not decompress: {exc}"
        ) from None
