"""``check_records``, the record walk produce runs on every batch, on hand-made records: what
Kafka's DefaultRecord.readFrom takes it takes (any varint width Java reads, headers, nulls),
what it refuses it refuses (a varint longer than Java reads or past 32 bits, lengths that do
not add up), and what clients' parsers fail on though Kafka takes it."""

from __future__ import annotations

import pytest

from kgroupd.protocol.records import InvalidRecords, check_records, zigzag


def uvarint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    return bytes(out + bytes([value]))


def record(
    index: int,
    key: bytes | None = b"k",
    value: bytes | None = b"v",
    headers: list[tuple[bytes, bytes | None]] | None = None,
    ts_delta: bytes | None = None,
    attributes: int = 0,
) -> bytes:
    body = bytes([attributes]) + (ts_delta if ts_delta is not None else zigzag(0))
    body += zigzag(index)
    for part in (key, value):
        body += zigzag(-1) if part is None else zigzag(len(part)) + part
    hs = headers or []
    body += zigzag(len(hs))
    for k, v in hs:
        body += zigzag(len(k)) + k + (zigzag(-1) if v is None else zigzag(len(v)) + v)
    return zigzag(len(body)) + body


def check(data: bytes, count: int, keyless: list[int] | None = None) -> None:
    check_records(data, 0, len(data), count, keyless)


def test_records_of_every_width_are_taken() -> None:
    records = [
        record(0, None, None),
        record(1, b"k" * 300, b"v" * 20_000),  # two- and three-byte lengths
        record(2, b"", b"", [(b"h", b"1"), (b"", None)]),
        record(3, ts_delta=zigzag(-(2**40))),  # a long varlong
    ] + [record(i) for i in range(4, 200)]  # two-byte offset deltas
    data = b"".join(records)
    keyless: list[int] = []
    check(data, len(records), keyless)
    assert keyless == [0]


def test_a_varint_written_wider_than_needed_is_taken_up_to_five_bytes() -> None:
    body = record(0)[1:]  # its length written as five bytes: Java reads it
    wide = bytes([(len(body) << 1) | 0x80, 0x80, 0x80, 0x80, 0x00])
    check(wide + body, 1)
    with pytest.raises(InvalidRecords, match="longer than 5 bytes"):
        check(bytes([(len(body) << 1) | 0x80, 0x80, 0x80, 0x80, 0x80, 0x00]) + body, 1)
    with pytest.raises(InvalidRecords, match="out of range"):  # past 32 bits: Java drops them
        check(bytes([(len(body) << 1) | 0x80, 0x80, 0x80, 0x80, 0x7F]) + body, 1)


@pytest.mark.parametrize(
    ("data", "count", "why"),
    [
        (record(0)[:-1], 1, r"premature EOF|Invalid record size"),
        (record(0) + b"\x00", 1, "records still remaining"),
        (record(0), 2, "premature EOF"),
        (record(0) + record(1), 1, "records still remaining"),
        (record(1), 1, "offset delta 1"),
        (record(0) + record(2), 2, "offset delta 2"),
        (zigzag(0) + record(0)[1:], 1, "claims 0 bytes"),
        (zigzag(-3) + record(0)[1:], 1, "claims -3 bytes"),
        (zigzag(len(record(0)) + 5) + record(0)[1:], 1, "claims"),
        (record(0, attributes=0x80), 1, "attributes 0x80"),
        (record(0, headers=[(b"\xff\xfe", b"v")]), 1, "not UTF-8"),
        (record(0, ts_delta=b"\x80" * 10 + b"\x00"), 1, "longer than 10 bytes"),
    ],
)
def test_records_that_lie_are_refused(data: bytes, count: int, why: str) -> None:
    with pytest.raises(InvalidRecords, match=why):
        check(data, count)


def test_fields_that_do_not_fill_the_record_are_refused() -> None:
    good = record(0, b"key", b"value")
    # the key's length one more, then one less, than it is: the record's length is right
    at = good.index(b"key") - 1
    for lie in (4, 2):
        bad = bytearray(good)
        bad[at] = zigzag(lie)[0]
        with pytest.raises(InvalidRecords, match=r"Invalid record size|premature EOF"):
            check(bytes(bad), 1)
    # a negative header count, a negative header key length
    with pytest.raises(InvalidRecords, match="number of record headers -1"):
        check(good[:-1] + zigzag(-1), 1)
    hdr = record(0, headers=[(b"h", b"1")])
    at = hdr.rindex(b"h\x021") - 1  # the header key's length
    bad = bytearray(hdr)
    bad[at] = zigzag(-2)[0]
    with pytest.raises(InvalidRecords, match="negative header key size -2"):
        check(bytes(bad), 1)
