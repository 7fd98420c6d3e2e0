"""The record walk's bulk check (``protocol.record_bulk``): runs of alike records are taken
without the Python walk, and a lie anywhere in a run is refused exactly as the walk refuses
it (the same message), since the bulk check hands every record it does not vouch for back to
the walk."""

from __future__ import annotations

import pytest

from kgroupd.protocol import records
from kgroupd.protocol.record_bulk import verified_prefix
from kgroupd.protocol.records import InvalidRecords, check_records, zigzag
from tests.protocol.test_check_records import record


def walked(data: bytes | memoryview, count: int, keyless: list[int] | None = None) -> str:
    """What the walk (or the walk after the bulk check) says of the records: "" if taken."""
    try:
        check_records(data, 0, len(data), count, keyless)
    except InvalidRecords as exc:
        return str(exc)
    return ""


def walk_only(
    monkeypatch: pytest.MonkeyPatch, data: bytes, count: int, keyless: list[int] | None = None
) -> str:
    with monkeypatch.context() as m:
        m.setattr(records, "verified_prefix", lambda _d, pos, _e, _c, _k: (0, pos))
        return walked(data, count, keyless)


def alike(count: int, value: bytes = b"v" * 300, **kw: object) -> bytes:
    return b"".join(record(i, b"key", value, **kw) for i in range(count))  # type: ignore[arg-type]


@pytest.mark.parametrize("form", [bytes, memoryview])
def test_alike_records_are_taken_in_bulk(form: type) -> None:
    # offset deltas one byte wide to 64, two to 8192, three beyond: a run per width
    for count in (4, 15, 64, 65, 200, 8300):
        data = alike(count)
        assert verified_prefix(form(data), 0, len(data), count, []) == (count, len(data))
        assert walked(form(data), count) == ""
    with_headers = alike(100, headers=[(b"traceparent", b"00-abc")], ts_delta=zigzag(70))
    assert verified_prefix(with_headers, 0, len(with_headers), 100, None)[0] == 100


def test_a_timestamp_delta_that_widens_midway_ends_one_run_and_starts_another() -> None:
    recs = [record(i, b"k", b"v" * 50, ts_delta=zigzag(i)) for i in range(200)]
    data = b"".join(recs)  # the delta takes two bytes from record 64 (zigzag 128)
    assert verified_prefix(data, 0, len(data), 200, None) == (200, len(data))


def test_records_that_vary_are_left_to_the_walk() -> None:
    data = b"".join(record(i, b"k", b"v" * (i % 7)) for i in range(100))
    index, _ = verified_prefix(data, 0, len(data), 100, None)
    assert index < 100
    assert walked(data, 100) == ""


def test_a_keyless_record_where_keys_are_required_is_left_to_the_walk() -> None:
    data = b"".join(record(i, None if i == 50 else b"k") for i in range(100))
    keyless: list[int] = []
    assert walked(data, 100, keyless) == ""
    assert keyless == [50]
    data = b"".join(record(i, None) for i in range(10))
    keyless = []
    assert walked(data, 10, keyless) == ""
    assert keyless == list(range(10))


def test_a_lie_anywhere_in_a_run_is_refused_as_the_walk_refuses_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    good = alike(70, value=b"v" * 20, headers=[(b"h", b"1")], ts_delta=zigzag(-1000))
    assert walked(good, 70) == ""
    size = len(good) // 70
    refused = 0
    # every byte of a record in the middle of the run, and of the last one, set to each of a
    # few values that break varints, lengths, attributes, UTF-8 and offsets
    for base in (30 * size, 69 * size):
        for at in range(base, base + size):
            for value in (0x00, 0x01, 0x02, 0x7F, 0x80, 0xFF, good[at] ^ 0x02):
                if value == good[at]:
                    continue
                bad = bytearray(good)
                bad[at] = value
                expected = walk_only(monkeypatch, bytes(bad), 70)
                assert walked(bytes(bad), 70) == expected, (at - base, value)
                refused += bool(expected)
    assert refused > 100  # the lies were lies
    for count in (69, 71):
        assert walked(good, count) == walk_only(monkeypatch, good, count) != ""
