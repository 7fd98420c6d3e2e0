"""The record walk in bulk: records that share one layout are checked column by column in C.

A producer's batch is mostly runs of records that look alike: the same key and value lengths,
the same widths of timestamp and offset deltas, the same headers. ``verified_prefix`` reads
one record in Python with every check of the walk (``records.check_records``), then checks
that the records after it repeat its layout: a bytes slice with a step (``data[a:b:stride]``)
takes one byte of every record of the run, and one C call checks that column, so a run of a
thousand records costs a few dozen calls instead of a thousand turns of a Python loop:

* the bytes the layout depends on (the record's length, the key and value lengths, the header
  count, each header key's and value's length) equal the first record's (``bytes.count``): so
  each record has the first one's size, and the next one starts where the walk expects it;
* the attributes byte, the timestamp delta's last byte and each header key's bytes are below
  0x80 (``isascii``: attributes aiokafka reads, a varint that ends there, a key that is UTF-8),
  the timestamp delta's other bytes at or above it (the varint goes on);
* the offset deltas are 0, 1, 2, ... as one width of varint writes them (a table's slice).

A layout met lately (``_LAYOUTS``, by its record's first 8 bytes) is tried first on the next
batch, from its first record on: a layout read from any well-formed record vouches for every
record that repeats it, so a producer's batches after its first are checked with no record
read in Python at all.

What it does not recognise (a varint wider than its shortest form, a null key where keyless
records are refused, a non-ASCII header key, a layout that changes every few records) ends it,
and the walk goes on in Python from the first record not verified: what is refused, and why,
is the walk's alone. The bulk check only ever takes records the walk would take.
"""

from __future__ import annotations

from typing import Protocol

Buffer = bytes | bytearray | memoryview

MIN_RUN = 4  # fewer alike records than this: the records vary, the walk does the rest
_FLIP = bytes(b ^ 0x80 for b in range(256))  # high bit set <-> the flipped byte is ASCII
# The offset delta of record i is the zigzag varint 2 * i: one byte below 64, two below 8192,
# three below 2**20 (tables up to TABLE_LIMIT records, built on first use)
_WIDTHS = ((64, 1), (8192, 2), (1 << 17, 3))
TABLE_LIMIT = _WIDTHS[-1][0]
_tables: dict[int, tuple[bytes, ...]] = {}
_ONE_BYTE = bytes(range(0, 128, 2))  # the offset deltas of records 0-63


def _offset_tables(width: int) -> tuple[bytes, ...]:
    """Byte j of the offset delta of record i, at [j][i], for the records of ``width``: built
    with bytes repeats (a loop over 131,072 records would hold the event loop 40 ms)."""
    found = _tables.get(width)
    if found is None:
        top = dict((w, n) for n, w in _WIDTHS)[width]
        found = tuple(_offset_column(j, width, top) for j in range(width))
        _tables[width] = found
    return found


def _offset_column(j: int, width: int, top: int) -> bytes:
    """Byte j of the varint 2 * i for i below ``top``: ``(i >> (7j - 1)) & 0x7F`` (j > 0) is
    each of 128 values in runs of 2 ** (7j - 1), byte 0 a cycle of 64."""
    more = 0x80 if j < width - 1 else 0
    if j == 0:
        period = bytes(((i << 1) & 0x7F) | more for i in range(64))
    else:
        run = 1 << (7 * j - 1)
        period = b"".join(bytes([k | more]) * run for k in range(min(128, -(-top // run))))
    return (period * -(-top // len(period)))[:top]


def _width_until(index: int) -> tuple[int, int]:
    """(width of record ``index``'s offset delta, the first index of another width)."""
    for top, width in _WIDTHS:
        if index < top:
            return width, top
    return 0, index


class _Layout:
    """Where a record's checked bytes lie, from its start."""

    __slots__ = ("equal", "high", "low", "null_key", "offset_at", "stride", "width")

    def __init__(self) -> None:
        self.stride = 0
        self.width = 1  # of the offset delta
        self.null_key = False
        self.equal: list[tuple[int, int]] = []  # (offset, the byte every record has there)
        self.high: list[int] = []  # bytes at or above 0x80
        self.low: list[int] = []  # bytes below 0x80
        self.offset_at = 0  # where the offset delta starts


def _uvarint(data: Buffer, at: int, equal: list[tuple[int, int]], start: int) -> int:
    """The raw (zigzag) varint at ``at`` in its shortest form, as Java reads it (at most 5
    bytes, within 32 bits), its bytes added to ``equal``; -1 if otherwise. Its end is
    ``equal[-1][0] + 1 + start``."""
    value = shift = 0
    for i in range(at, at + 5):
        b = data[i]
        equal.append((i - start, b))
        value |= (b & 0x7F) << shift
        if b < 0x80:
            if (b == 0 and i != at) or value >> 32:
                return -1
            return value
        shift += 7
    return -1


def _layout(data: Buffer, pos: int, end: int, index: int, keyed: bool) -> _Layout | None:
    """Record ``index`` at ``pos`` read with the walk's checks, and its layout; None if the
    walk should read it (whatever it finds)."""
    out = _Layout()
    equal = out.equal
    try:
        b = data[pos]  # the record's length: one or two bytes inline (nearly all)
        if b < 0x80:
            size, at = b, pos + 1
            equal.append((0, b))
        elif data[pos + 1] < 0x80 and data[pos + 1]:
            size, at = (b & 0x7F) | (data[pos + 1] << 7), pos + 2
            equal.append((0, b))
            equal.append((1, data[pos + 1]))
        else:
            size = _uvarint(data, pos, equal, pos)
            at = pos + 1 + equal[-1][0]
        stop = at + (size >> 1)
        if size & 1 or size <= 0 or stop > end or data[at] >= 0x80:
            return None
        low = out.low
        low.append(at - pos)  # the attributes
        at += 1
        if data[at] < 0x80:  # the timestamp delta: any value, of this width (at most 9 bytes)
            low.append(at - pos)
            at += 1
        else:
            first = at
            while data[at] >= 0x80:
                at += 1
                if at - first >= 9:
                    return None
            out.high.extend(range(first - pos, at - pos))
            low.append(at - pos)
            at += 1
        out.offset_at = at - pos
        if index < 64:  # the offset delta
            if data[at] != index << 1:
                return None
            at += 1
        else:
            width, _ = _width_until(index)
            if not width:
                return None
            tables = _offset_tables(width)
            for j in range(width):
                if data[at + j] != tables[j][index]:
                    return None
            at += width
            out.width = width
        for field in range(2):  # the key, then the value
            b = data[at]
            if b < 0x80:
                equal.append((at - pos, b))
                at += 1
            else:
                b = _uvarint(data, at, equal, pos)
                if b < 0:
                    return None
                at = pos + 1 + equal[-1][0]
            if b & 1:  # null (any negative length)
                if not field:
                    if keyed:
                        return None
                    out.null_key = True
            else:
                at += b >> 1
        b = data[at]  # the header count
        if b == 0 and at + 1 == stop:  # none (nearly all)
            equal.append((at - pos, 0))
            at += 1
        elif not _headers(data, pos, at, stop, out):
            return None
        else:
            at = stop
        if at != stop:
            return None
    except IndexError:
        return None
    out.stride = stop - pos
    return out


def _headers(data: Buffer, pos: int, at: int, stop: int, out: _Layout) -> bool:
    """The headers from ``at`` fill the record to ``stop``, their keys ASCII."""
    equal = out.equal
    count = _uvarint(data, at, equal, pos)
    if count < 0 or count & 1:
        return False
    at = pos + 1 + equal[-1][0]
    for _ in range(count >> 1):
        size = _uvarint(data, at, equal, pos)  # the key's length, then its bytes
        if size < 0 or size & 1:
            return False
        at = pos + 1 + equal[-1][0]
        size >>= 1
        if at + size > stop or not bytes(data[at : at + size]).isascii():
            return False
        out.low.extend(range(at - pos, at + size - pos))
        size = _uvarint(data, at + size, equal, pos)  # the value's length (odd: null)
        if size < 0:
            return False
        at = pos + 1 + equal[-1][0] + (0 if size & 1 else size >> 1)
        if at > stop:
            return False
    return at == stop


def _alike(data: _Slicer, layout: _Layout, start: int, index: int, n: int) -> bool:
    """The ``n`` records from ``start`` repeat ``layout``, their offset deltas those of
    records ``index``, ``index + 1``, ... (``data[a:b:step]`` are bytes)."""
    stride = layout.stride
    stop = start + n * stride
    for offset, value in layout.equal:
        if data[start + offset : stop : stride].count(value) != n:
            return False
    for offset in layout.low:
        if not data[start + offset : stop : stride].isascii():
            return False
    for offset in layout.high:
        if not data[start + offset : stop : stride].translate(_FLIP).isascii():
            return False
    at = start + layout.offset_at
    if index + n <= 64:
        return data[at:stop:stride] == _ONE_BYTE[index : index + n]
    width, _ = _width_until(index)
    for j, table in enumerate(_offset_tables(width)):
        if data[at + j : stop : stride] != table[index : index + n]:
            return False
    return True


class _Slicer(Protocol):
    def __getitem__(self, key: slice, /) -> bytes: ...


class _ViewSlicer:
    """A memoryview's slices as bytes (a view's have no ``count`` or ``isascii``)."""

    __slots__ = ("view",)

    def __init__(self, view: memoryview) -> None:
        self.view = view

    def __getitem__(self, key: slice, /) -> bytes:
        return self.view[key].tobytes()


# Layouts met lately, by their record's first 8 bytes. Any layout read from a well-formed
# record vouches for every record that repeats it (whichever record it was read from): the
# key only says which one to try.
_LAYOUTS: dict[bytes, _Layout] = {}


def verified_prefix(
    data: Buffer, pos: int, end: int, count: int, keyless: list[int] | None
) -> tuple[int, int]:
    """(i, where record i starts): the first ``i`` of the ``count`` records from ``pos`` are
    well formed as ``check_records`` reads them (none keyless where ``keyless`` is given);
    the walk goes on from there."""
    index = 0
    if count < MIN_RUN:
        return index, pos
    slicer: _Slicer
    if isinstance(data, memoryview):
        if data.ndim != 1 or data.itemsize != 1:
            return index, pos
        slicer = _ViewSlicer(data)
    else:
        slicer = data  # type: ignore[assignment]  # a bytearray's slices: alike enough
    keyed = keyless is not None
    while index < count:
        # a layout seen before (the last batch of this producer, most likely) checks the
        # records from this one on, this one included
        width, top = _width_until(index)
        seen = _LAYOUTS.get(key := bytes(slicer[pos : pos + 8]))
        if seen is not None and seen.width == width and not (keyed and seen.null_key):
            n = min(min(count, top) - index, (end - pos) // seen.stride)
            if n > 0 and _alike(slicer, seen, pos, index, n):
                index += n
                pos += n * seen.stride
                continue
        layout = _layout(data, pos, end, index, keyed)
        if layout is None:
            break
        if len(_LAYOUTS) >= 256:
            _LAYOUTS.clear()
        _LAYOUTS[key] = layout
        stride = layout.stride
        _, top = _width_until(index + 1)
        most = min(count, top) - index - 1  # after this record, of its offset width
        n = min(most, (end - pos) // stride - 1)
        start = pos + stride
        if n > 0 and not _alike(slicer, layout, start, index + 1, n):
            if n < 2 * MIN_RUN or not _alike(slicer, layout, start, index + 1, MIN_RUN):
                n = 0
            else:  # alike for a while (a timestamp delta widens): how long
                lo, hi = MIN_RUN, n
                while hi - lo > 1:
                    mid = (lo + hi) // 2
                    if _alike(slicer, layout, start, index + 1, mid):
                        lo = mid
                    else:
                        hi = mid
                n = lo
        index += 1 + n
        pos += (1 + n) * stride
        if n < MIN_RUN and index + MIN_RUN <= count and index < top:
            break  # records that vary: the walk reads them
    return index, pos
