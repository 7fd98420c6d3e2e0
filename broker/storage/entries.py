"""Length-prefixed, CRC-32C-checked entries in a versioned file.

A file starts with ``MAGIC`` (4 bytes), the format version (uint16) and the file kind
(uint16). Each entry is ``uint32 length | uint32 crc32c(payload) | payload``.

Format versions: 1, entries are JSON (``record_to_dict``); 2, entries are binary records
(``encode_record``) and snapshots hold packed offset blocks (``coordinator_format``). Both
are read; files are written in ``FORMAT_VERSION``.

Reading tells a torn tail (the last entry incomplete or failing its CRC with nothing valid
after it: a crash mid-write) from corruption (a damaged entry followed by more data).
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass, field

from kgroupd.protocol.crc import crc32c

MAGIC = b"KGRD"
FORMAT_VERSION = 2
OLDEST_FORMAT_VERSION = 1
KIND_RECORD_LOG = 1
KIND_SNAPSHOT = 2
FILE_HEADER = struct.Struct(">4sHH")
ENTRY_HEADER = struct.Struct(">II")
MAX_ENTRY = 64 * 1024 * 1024


class StorageError(Exception):
    """A data file cannot be used as it is; the message names the file and the offset."""


def file_header(kind: int) -> bytes:
    return FILE_HEADER.pack(MAGIC, FORMAT_VERSION, kind)


def entry(payload: bytes) -> bytes:
    return ENTRY_HEADER.pack(len(payload), crc32c(payload)) + payload


@dataclass
class ScanResult:
    payloads: list[bytes] = field(default_factory=list)
    valid_end: int = 0  # offset just past the last good entry
    torn_at: int | None = None  # a torn tail starts here (cut it off)
    corrupt_at: int | None = None  # damage with data after it starts here
    dropped_bytes: int = 0  # bytes after valid_end
    version: int = FORMAT_VERSION  # the file's format version

    @property
    def bad_at(self) -> int | None:
        """Where the damage starts (torn or corrupt), if any."""
        return self.corrupt_at if self.corrupt_at is not None else self.torn_at


def scan(path: str, data: bytes, kind: int) -> ScanResult:
    """Read every entry. Raises ``StorageError`` for a bad header or a future version."""
    result = ScanResult()
    result.payloads = [payload for _pos, payload in iter_entries(path, data, kind, result)]
    return result


def iter_entries(
    path: str, data: bytes, kind: int, result: ScanResult
) -> Iterator[tuple[int, bytes]]:
    """Yield ``(offset, payload)`` of every good entry, in order, then fill ``result`` (valid
    end, torn or corrupt, dropped bytes; ``payloads`` is left alone). Raises ``StorageError``
    for a bad file header or a future version, before yielding anything."""
    if len(data) < FILE_HEADER.size:
        # A file cut inside its own header was never written past it: a torn tail.
        result.valid_end, result.torn_at, result.dropped_bytes = 0, 0, len(data)
        return
    magic, version, file_kind = FILE_HEADER.unpack_from(data, 0)
    if magic != MAGIC:
        raise StorageError(f"{path}: not a kgroupd data file (magic {magic!r})")
    if version > FORMAT_VERSION:
        raise StorageError(
            f"{path}: format version {version} is newer than this kgroupd reads "
            f"({FORMAT_VERSION}); upgrade kgroupd"
        )
    if file_kind != kind:
        raise StorageError(f"{path}: file kind {file_kind}, expected {kind}")
    if version < OLDEST_FORMAT_VERSION:
        raise StorageError(f"{path}: unknown format version {version}")
    result.version = version
    pos = FILE_HEADER.size
    end = len(data)
    while pos < end:
        if end - pos < ENTRY_HEADER.size:
            result.torn_at = pos
            break
        length, crc = ENTRY_HEADER.unpack_from(data, pos)
        start = pos + ENTRY_HEADER.size
        if length > MAX_ENTRY or start + length > end:
            # Runs past the end. A crash mid-write leaves a final entry cut short; a damaged
            # length in the middle of the file leaves good entries after it.
            if _good_entry_after(data, pos + 1, end):
                result.corrupt_at = pos
            else:
                result.torn_at = pos
            break
        payload = data[start : start + length]
        if crc32c(payload) != crc:
            if start + length == end or not _good_entry_after(data, pos + 1, end):
                result.torn_at = pos  # the last entry, half written
            else:
                result.corrupt_at = pos
            break
        yield pos, payload
        pos = start + length
    result.valid_end = pos  # a damaged entry stops the scan where it starts
    result.dropped_bytes = end - result.valid_end


def _good_entry_after(data: bytes, pos: int, end: int) -> bool:
    """Whether a complete entry with a matching CRC starts anywhere in ``data[pos:end]``."""
    header = ENTRY_HEADER.size
    for at in range(pos, end - header + 1):
        length, crc = ENTRY_HEADER.unpack_from(data, at)
        stop = at + header + length
        if length and stop <= end and crc32c(data[at + header : stop]) == crc:
            return True
    return False
