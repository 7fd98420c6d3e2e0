"""The entry format of coordinator logs and snapshots: torn tails versus corruption."""

from __future__ import annotations

import struct

import pytest

from kgroupd.broker.storage.entries import (
    FILE_HEADER,
    KIND_RECORD_LOG,
    KIND_SNAPSHOT,
    MAGIC,
    StorageError,
    entry,
    file_header,
    scan,
)


def log_of(*payloads: bytes) -> bytes:
    return file_header(KIND_RECORD_LOG) + b"".join(entry(p) for p in payloads)


def test_round_trip() -> None:
    r = scan("f", log_of(b"a", b"", b"ccc"), KIND_RECORD_LOG)
    assert r.payloads == [b"a", b"", b"ccc"]
    assert (r.torn_at, r.corrupt_at, r.dropped_bytes) == (None, None, 0)


@pytest.mark.parametrize("cut", [1, 4, 8, 9])
def test_a_cut_last_entry_is_a_torn_tail(cut: int) -> None:
    data = log_of(b"first", b"second")
    whole = len(data)
    r = scan("f", data[: whole - cut], KIND_RECORD_LOG)
    assert r.payloads == [b"first"]
    assert r.torn_at == r.valid_end == len(log_of(b"first"))
    assert r.corrupt_at is None


def test_a_bad_crc_on_the_last_entry_is_a_torn_tail() -> None:
    data = bytearray(log_of(b"first", b"second"))
    data[-1] ^= 0xFF
    r = scan("f", bytes(data), KIND_RECORD_LOG)
    assert r.payloads == [b"first"] and r.torn_at is not None and r.corrupt_at is None


def test_damage_followed_by_data_is_corruption() -> None:
    data = bytearray(log_of(b"first", b"second", b"third"))
    data[FILE_HEADER.size + 8] ^= 0xFF  # inside the first payload
    r = scan("f", bytes(data), KIND_RECORD_LOG)
    assert r.payloads == []
    assert r.corrupt_at == FILE_HEADER.size
    assert r.dropped_bytes == len(data) - FILE_HEADER.size


def test_future_format_version_and_wrong_kind_and_magic_are_refused() -> None:
    with pytest.raises(StorageError, match="newer"):
        scan("f", struct.pack(">4sHH", MAGIC, 99, KIND_SNAPSHOT), KIND_SNAPSHOT)
    with pytest.raises(StorageError, match="kind"):
        scan("f", file_header(KIND_SNAPSHOT), KIND_RECORD_LOG)
    with pytest.raises(StorageError, match="not a kgroupd"):
        scan("f", b"XXXX\x00\x01\x00\x01", KIND_RECORD_LOG)
