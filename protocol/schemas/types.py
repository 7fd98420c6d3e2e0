"""Wire types that aiokafka 0.14 lacks or gets wrong for a *server*.

aiokafka's ``TaggedFields.encode`` writes ``<count><tag><value>`` with no
``<size>`` varint before each value, and refuses tag 0.  Decoding is fine
(it is what a client needs), but a broker encoding a response with any tagged
field would emit garbage.  Our flexible schemas use :class:`TaggedFields`
below, which encodes per KIP-482: ``count, (tag, size, bytes)*`` with tags in
strictly increasing order.
"""

from __future__ import annotations

from io import BytesIO

from aiokafka.protocol.types import TaggedFields as _AioTaggedFields
from aiokafka.protocol.types import UnsignedVarInt32


class TaggedFields(_AioTaggedFields):
    """Raw tagged-field buffer: ``{tag: already-encoded value bytes}``.

    ``None`` encodes as an empty buffer (a single ``0x00``), so handlers may
    pass ``None`` or ``{}`` when they have no tagged fields to send.
    """

    @classmethod
    def encode(cls, value: dict[int, bytes] | None) -> bytes:
        if not value:
            return b"\x00"
        parts = [UnsignedVarInt32.encode(len(value))]
        for tag in sorted(value):
            raw = value[tag]
            if not isinstance(tag, int) or tag < 0:
                raise ValueError(f"tagged field tag must be a non-negative int, got {tag!r}")
            if not isinstance(raw, bytes | bytearray | memoryview):
                raise TypeError(f"tagged field {tag} value must be bytes, got {type(raw)!r}")
            raw = bytes(raw)
            parts.append(UnsignedVarInt32.encode(tag))
            parts.append(UnsignedVarInt32.encode(len(raw)))
            parts.append(raw)
        return b"".join(parts)

    @classmethod
    def decode(cls, data: BytesIO) -> dict[int, bytes]:
        num_fields = UnsignedVarInt32.decode(data)
        ret: dict[int, bytes] = {}
        prev_tag = -1
        for _ in range(num_fields):
            tag = UnsignedVarInt32.decode(data)
            if tag <= prev_tag:
                raise ValueError(f"Invalid or out-of-order tag {tag}")
            prev_tag = tag
            size = UnsignedVarInt32.decode(data)
            raw = data.read(size)
            if len(raw) != size:
                raise ValueError(f"Buffer underrun decoding tagged field {tag}")
            ret[tag] = raw
        return ret
