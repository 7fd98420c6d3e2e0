"""The record batch compression codecs, bounded: what produce's validation
(``kgroupd.broker.log.validate``) and the log cleaner need to read the records of a compressed
batch, and the cleaner to write the kept ones back with the batch's own codec. Data that a
consumer's decoder would refuse (aiokafka's, kafka-python's, Java's: a checksum, trailing
bytes) is refused here too.

Codecs are Kafka's (the batch attribute's low three bits): 1 gzip, 2 snappy, 3 lz4, 4 zstd.
Decompression never yields more than ``limit`` bytes (a batch claiming more raises
``TooLarge`` before that much memory is taken); damaged data raises ``BadCompression``.
Compression writes what Kafka's Java producer and broker write:

* gzip: a gzip member (Java's GZIPOutputStream; level 6, Deflater's default);
* snappy: xerial framing (Java's SnappyOutputStream: the ``\\x82SNAPPY\\x00`` header, versions
  1 and 1, then blocks of at most 32 KiB, each a 4-byte length and a raw snappy block); raw
  snappy without the header (librdkafka's) is read too, as Java reads it;
* lz4: an LZ4 frame as Kafka's KafkaLZ4BlockOutputStream writes it (independent blocks of at
  most 64 KiB, no block or content checksum, no content size);
* zstd: a zstd frame (level 3, Kafka's default).
"""

from __future__ import annotations

import struct
import zlib

# cramjam (snappy, lz4, zstd) is imported by the functions that use it: only a compressed
# batch of a compacted topic (or a key check of one) needs it
GZIP, SNAPPY, LZ4, ZSTD = 1, 2, 3, 4
NAMES = {0: "none", GZIP: "gzip", SNAPPY: "snappy", LZ4: "lz4", ZSTD: "zstd"}

_XERIAL = b"\x82SNAPPY\x00"
_XERIAL_HEADER = _XERIAL + struct.pack(">ii", 1, 1)
_XERIAL_BLOCK = 32 * 1024
_LZ4_MAGIC = b"\x04\x22\x4d\x18"
_LZ4_HEADER = _LZ4_MAGIC + b"\x60\x40\x82"  # FLG: version 1, independent blocks; BD: 64 KiB
_LZ4_BLOCK = 64 * 1024
_LZ4_MAX_BLOCK = {4: 64 * 1024, 5: 256 * 1024, 6: 1024 * 1024, 7: 4 * 1024 * 1024}
_U32 = struct.Struct("<I")
_BE32 = struct.Struct(">i")


class BadCompression(Exception):
    """The data is not what its codec says (or the codec is unknown)."""


class TooLarge(BadCompression):
    """The data decompresses to more than the limit."""


def decompress(codec: int, data: bytes | memoryview, limit: int) -> bytes:
    """``data`` decompressed with ``codec``, at most ``limit`` bytes."""
    import cramjam

    try:
        if codec == GZIP:
            return _gunzip(data, limit)
        if codec == SNAPPY:
            return _unsnappy(bytes(data), limit)
        if codec == LZ4:
            return _unlz4(bytes(data), limit)
        if codec == ZSTD:
            return _unzstd(data, limit)
    except (cramjam.DecompressionError, zlib.error, struct.error, ValueError) as exc:
        raise BadCompression(f"{NAMES.get(codec)}: {exc}") from None
    raise BadCompression(f"unknown compression codec {codec}")


def compress(codec: int, data: bytes) -> bytes:
    import cramjam

    if codec == GZIP:
        c = zlib.compressobj(6, zlib.DEFLATED, 31)
        return c.compress(data) + c.flush()
    if codec == SNAPPY:
        parts = [_XERIAL_HEADER]
        for at in range(0, len(data), _XERIAL_BLOCK):
            block = bytes(cramjam.snappy.compress_raw(data[at : at + _XERIAL_BLOCK]))
            parts.append(_BE32.pack(len(block)))
            parts.append(block)
        return b"".join(parts)
    if codec == LZ4:
        parts = [_LZ4_HEADER]
        for at in range(0, len(data), _LZ4_BLOCK):
            raw = data[at : at + _LZ4_BLOCK]
            block = bytes(cramjam.lz4.compress_block(raw, store_size=False))
            if len(block) >= len(raw):  # stored uncompressed: the size's high bit
                parts.append(_U32.pack(len(raw) | 0x80000000))
                parts.append(raw)
            else:
                parts.append(_U32.pack(len(block)))
                parts.append(block)
        parts.append(b"\0\0\0\0")  # end mark
        return b"".join(parts)
    if codec == ZSTD:
        return bytes(cramjam.zstd.compress(data, level=3))
    raise BadCompression(f"unknown compression codec {codec}")


def _gunzip(data: bytes | memoryview, limit: int) -> bytes:
    d = zlib.decompressobj(47)  # gzip or zlib header
    out = d.decompress(data, limit + 1)
    if len(out) > limit:
        raise TooLarge(f"gzip: more than {limit} bytes")
    if not d.eof:
        raise BadCompression("gzip: data cut short")
    if d.unused_data:  # Python's gzip (aiokafka's, kafka-python's) reads them as a member
        raise BadCompression("gzip: bytes after the data")
    return out


def _unsnappy(data: bytes, limit: int) -> bytes:
    if not data.startswith(_XERIAL_HEADER):  # versions 1 and 1, or raw as a consumer reads it
        return _raw_snappy(data, limit)
    pos = len(_XERIAL_HEADER)
    if len(data) < pos:
        raise BadCompression("snappy: xerial header cut short")
    parts: list[bytes] = []
    total = 0
    while pos < len(data):
        (length,) = _BE32.unpack_from(data, pos)
        pos += 4
        if length < 0 or pos + length > len(data):
            raise BadCompression("snappy: xerial block past the data")
        block = _raw_snappy(data[pos : pos + length], limit - total)
        total += len(block)
        parts.append(block)
        pos += length
    return b"".join(parts)


def _raw_snappy(data: bytes, limit: int) -> bytes:
    import cramjam

    if cramjam.snappy.decompress_raw_len(data) > limit:
        raise TooLarge(f"snappy: more than {limit} bytes")
    return bytes(cramjam.snappy.decompress_raw(data))


def _unlz4(data: bytes, limit: int) -> bytes:
    """An LZ4 frame (any a producer writes: linked or independent blocks, checksums, content
    size), read by lz4's own frame decoder, so that every check a consumer's makes is made:
    the descriptor's and each block's checksum, the reserved bits, the end mark (a frame a
    consumer cannot read is BadCompression here, not a batch that fails it later)."""
    import cramjam

    if data[:4] != _LZ4_MAGIC or len(data) < 7:
        raise BadCompression("lz4: not an LZ4 frame")
    flg, bd = data[4], data[5]
    if flg >> 6 != 1 or (bd >> 4) & 7 not in _LZ4_MAX_BLOCK:
        raise BadCompression("lz4: unsupported frame descriptor")
    if flg & 0x08 and struct.unpack_from("<Q", data, 6)[0] > limit:  # its content size
        raise TooLarge(f"lz4: more than {limit} bytes")
    return _bounded_into(cramjam.lz4.decompress_into, data, limit, "lz4")


def _unzstd(data: bytes | memoryview, limit: int) -> bytes:
    import cramjam

    return _bounded_into(cramjam.zstd.decompress_into, data, limit, "zstd")


def _bounded_into(into: object, data: bytes | memoryview, limit: int, name: str) -> bytes:
    """``into(data, buffer)`` with a buffer grown (doubled) until it holds the output, at most
    ``limit + 1`` bytes: cramjam fails "failed to write whole buffer" while it is short."""
    import cramjam

    size = min(limit + 1, max(64 * 1024, 4 * len(data)))
    while True:
        out = bytearray(size)
        try:
            n = into(data, out)  # type: ignore[operator]
        except cramjam.DecompressionError as exc:
            if "whole buffer" not in str(exc):
                raise
            if size > limit:
                raise TooLarge(f"{name}: more than {limit} bytes") from None
            size = min(limit + 1, size * 2)
            continue
        if n > limit:
            raise TooLarge(f"{name}: more than {limit} bytes")
        return bytes(out[:n])
