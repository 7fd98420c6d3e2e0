"""Sans-IO Kafka framing: int32 size-prefixed frames, request headers v1/v2, response headers.

Nothing here touches sockets or asyncio: bytes go in, frames and headers come out.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from kgroupd.protocol.codec import DecodeError, Frame
from kgroupd.protocol.codec import read_uvarint as _read_uvarint

_INT32 = struct.Struct(">i")
_HEADER_FIXED = struct.Struct(">hhi")  # api_key, api_version, correlation_id
_INT16 = struct.Struct(">h")
# A frame this large read into the buffer is handed over, not copied out of it (see ``feed``):
# a copy of 100 MB holds the event loop for tens of milliseconds.
HAND_OVER = 1024 * 1024


class FrameError(Exception):
    """The byte stream cannot be framed: the connection must be closed."""


class FrameTooLarge(FrameError):
    """A size prefix above the configured maximum, rejected before buffering."""


class MalformedHeader(FrameError):
    """A frame too short or inconsistent to hold a request header."""


class FrameDecoder:
    """Splits a byte stream into complete frames (the bytes after each size prefix).

    A frame whose announced size is negative or above ``max_frame_bytes`` raises before
    any of it is buffered, so a hostile size cannot make us allocate.
    """

    __slots__ = ("_buf", "_max", "_need", "error")

    def __init__(self, max_frame_bytes: int) -> None:
        self._buf = bytearray()
        self._max = max_frame_bytes
        self._need = -1  # size of the frame being collected, -1 while reading a prefix
        # Set once the stream cannot be framed any further; frames before it are still good.
        self.error: FrameError | None = None

    @property
    def buffered(self) -> int:
        return len(self._buf)

    @property
    def pending(self) -> int:
        """The bytes the frame being read will take (its announced size), or the bytes of a
        size prefix not yet whole."""
        return self._need if self._need >= 0 else len(self._buf)

    def set_limit(self, max_frame_bytes: int) -> None:
        """The largest frame accepted from the next size prefix on (a SASL connection's is
        ``sasl.server.max.receive.size`` until it authenticates)."""
        self._max = max_frame_bytes

    def feed(self, data: bytes) -> list[Frame]:
        """Complete frames so far. After a bad size prefix, ``error`` is set and the frames
        that came before it are still returned; nothing after it is.

        Each frame's bytes are copied once: out of ``data`` when a read starts with a frame
        (nothing buffered), else out of the buffer through a view. A frame of ``HAND_OVER``
        bytes or more that was read into the buffer is not copied at all: the buffer itself
        becomes the frame (a bytearray), and what follows it moves to a new buffer."""
        if self.error is not None:
            return []
        buf = self._buf
        src: bytes | bytearray = data
        if buf or type(data) is not bytes:
            buf += data
            src = buf
        frames: list[Frame] = []
        pos = 0
        end = len(src)
        view = memoryview(src) if src is buf else None
        try:
            while True:
                if self._need < 0:
                    if end - pos < 4:
                        break
                    (size,) = _INT32.unpack_from(src, pos)
                    if size < 0:
                        self.error = FrameError(f"negative frame size {size}")
                    elif size > self._max:
                        self.error = FrameTooLarge(
                            f"frame of {size} bytes exceeds the limit of {self._max}"
                        )
                    if self.error is not None:
                        break
                    self._need = size
                    pos += 4
                need = self._need
                if end - pos < need:
                    break
                self._need = -1
                if view is None:
                    frames.append(data[pos : pos + need])
                elif need >= HAND_OVER:
                    view.release()  # the buffer is cut below
                    frames.append(self._hand_over(pos, need))
                    src = buf = self._buf
                    pos, end = 0, len(buf)
                    view = memoryview(buf)
                    continue
                else:
                    frames.append(view[pos : pos + need].tobytes())
                pos += need
        finally:
            if view is not None:
                view.release()  # the buffer may be resized again
        if self.error is not None:
            buf.clear()
        elif src is buf:
            if pos:
                del buf[:pos]
        elif pos < end:
            with memoryview(data) as rest:
                buf += rest[pos:]
        return frames

    def _hand_over(self, pos: int, size: int) -> bytearray:
        """The buffer as the frame at ``pos`` (``size`` bytes), what follows it in a new
        buffer. Cutting the ends of a bytearray moves no bytes of the frame (CPython moves the
        start of a bytearray's bytes on a deletion at the front, and shrinks its allocation in
        place, by a little); what is copied is what came after the frame in the last read."""
        frame = self._buf
        self._buf = frame[pos + size :]
        del frame[pos + size :]
        del frame[:pos]
        return frame


@dataclass(slots=True)
class RequestHeader:
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    body_offset: int


def peek_api(frame: Frame) -> tuple[int, int, int]:
    """api_key, api_version and correlation_id: the part common to every header version."""
    if len(frame) < 8:
        raise MalformedHeader(f"frame of {len(frame)} bytes is too short for a request header")
    return _HEADER_FIXED.unpack_from(frame, 0)


def parse_request_header(frame: Frame, flexible: bool) -> RequestHeader:
    """Decode request header v1 (``flexible`` False) or v2 (tagged fields after client id)."""
    api_key, api_version, correlation_id = peek_api(frame)
    pos = 8
    if len(frame) < pos + 2:
        raise MalformedHeader("request header ends before its client id")
    (n,) = _INT16.unpack_from(frame, pos)
    pos += 2
    client_id: str | None
    if n < 0:
        client_id = None
    else:
        if len(frame) < pos + n:
            raise MalformedHeader("client id runs past the end of the frame")
        try:
            client_id = frame[pos : pos + n].decode("utf-8")
        except UnicodeDecodeError as exc:
            raise MalformedHeader("client id is not UTF-8") from exc
        pos += n
    if flexible:
        if pos < len(frame) and frame[pos] == 0:  # no tagged fields (every client, today)
            return RequestHeader(api_key, api_version, correlation_id, client_id, pos + 1)
        count, pos = read_uvarint(frame, pos)
        for _ in range(count):
            _tag, pos = read_uvarint(frame, pos)
            size, pos = read_uvarint(frame, pos)
            pos += size
        if pos > len(frame):
            raise MalformedHeader("tagged fields run past the end of the frame")
    return RequestHeader(api_key, api_version, correlation_id, client_id, pos)


def read_uvarint(data: Frame, pos: int) -> tuple[int, int]:
    try:
        return _read_uvarint(data, pos)
    except DecodeError as exc:
        raise MalformedHeader(str(exc)) from None


def encode_response(correlation_id: int, body: bytes, header_v1: bool) -> bytes:
    """A size-prefixed response frame: header v0 (correlation id) or v1 (plus empty tags)."""
    if header_v1:
        return _INT32.pack(len(body) + 5) + _INT32.pack(correlation_id) + b"\x00" + body
    return _INT32.pack(len(body) + 4) + _INT32.pack(correlation_id) + body


def response_header(correlation_id: int, body_size: int, header_v1: bool) -> bytes:
    """Size prefix and response header for a body written separately."""
    if header_v1:
        return _INT32.pack(body_size + 5) + _INT32.pack(correlation_id) + b"\x00"
    return _INT32.pack(body_size + 4) + _INT32.pack(correlation_id)
